"""`make run`: database, migrations, demo credentials, then daphne and a django-q2 cluster per
queue lane (interactive and bulk, settings.QUEUE_LANES).

Ctrl-C (or SIGTERM) stops the web server, the worker and — if this run started it — the
embedded PostgreSQL. Running it again reuses the data under .data/ (MEMORYSAAS_DATA_DIR).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from memorysaas.kernel.embedded_db import DATA_DIR

BASE_DIR = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# One worker cluster per queue lane (memorysaas.kernel.queue): a backlog of embeddings on the bulk
# lane never delays a finalize or a graph index on the interactive one.
LANES = ("interactive", "bulk")


def _shown(path: Path) -> str:
    """`path` as the user would type it: relative to the checkout when it lies inside it."""
    return str(path.relative_to(BASE_DIR)) if path.is_relative_to(BASE_DIR) else str(path)


def _manage(*args: str, capture: bool = False) -> str:
    result = subprocess.run(
        [PYTHON, "manage.py", *args], cwd=BASE_DIR, check=True, text=True, capture_output=capture
    )
    return result.stdout if capture else ""


def _embedded_running() -> bool:
    from memorysaas.kernel.embedded_db import PG_DIR

    pid_file = PG_DIR / "postmaster.pid"
    if not pid_file.exists():
        return False
    try:
        os.kill(int(pid_file.read_text().splitlines()[0]), 0)
    except (ValueError, ProcessLookupError, PermissionError, IndexError):
        return False
    return True


def _share_metrics_between_processes() -> None:
    """The web server and the workers write their Prometheus figures into one folder, which
    /metrics adds up (memorysaas/kernel/metrics.py); emptied at each start, as
    prometheus_client asks, so a previous run's processes are not counted."""
    folder = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or DATA_DIR / "prometheus")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(folder)


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memorysaas.settings.local")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    host = os.environ.get("HOST", "127.0.0.1")
    port = os.environ.get("PORT", "8000")
    # Links in emails (invitations, disputes) point where this server listens unless told otherwise.
    os.environ.setdefault("SITE_URL", f"http://{host}:{port}")
    embedded = not os.environ.get("DATABASE_URL")
    started_db = False
    if embedded:
        from memorysaas.kernel.embedded_db import PG_DIR, embedded_database

        started_db = not _embedded_running()
        print(
            f"• Starting embedded PostgreSQL 18 + pgvector ({_shown(PG_DIR)})…"
            if started_db
            else "• Reusing the running embedded PostgreSQL"
        )
        embedded_database()

    _share_metrics_between_processes()
    children: list[subprocess.Popen] = []

    def stop(*_):
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for child in children:
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
        if started_db:
            from memorysaas.kernel.embedded_db import stop_embedded_database

            print("• Stopping embedded PostgreSQL")
            stop_embedded_database()

    try:
        print("• Migrating")
        _manage("migrate", "--noinput", "-v", "0")
        demo = _manage("bootstrap_demo", "--key-file", str(DATA_DIR / "demo_api_key"), capture=True)
        print("\n─── demo credentials ───────────────────────────────")
        print(demo.strip())
        print("────────────────────────────────────────────────────")
        print(f"Dashboard: http://{host}:{port}/   API: http://{host}:{port}/api/v1/docs\n")
        # Children get their own session: Ctrl-C reaches only this process, which stops them in order.
        for lane in LANES:
            children.append(
                subprocess.Popen(
                    [PYTHON, "manage.py", "qcluster"],
                    cwd=BASE_DIR,
                    env={**os.environ, "Q_LANE": lane},
                    start_new_session=True,
                )
            )
        children.append(
            subprocess.Popen(
                [PYTHON, "-m", "daphne", "-b", host, "-p", port, "memorysaas.asgi:application"],
                cwd=BASE_DIR,
                start_new_session=True,
            )
        )
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
        # A shell without job control starts background commands with SIGINT ignored, and Python
        # then keeps it ignored: restore Ctrl-C's KeyboardInterrupt however we were started.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        while all(child.poll() is None for child in children):
            time.sleep(0.5)
        print("A server process exited; stopping the others.")
        return 1
    except KeyboardInterrupt:
        print("\n• Stopping")
        return 0
    finally:
        stop()


if __name__ == "__main__":
    sys.exit(main())
