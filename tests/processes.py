"""For tests that start other processes or threads (daphne, a probe script, a second request) on
the test database."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from typing import IO
from urllib.parse import quote

from django.db import connection, connections


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_log() -> IO[bytes]:
    """Where a server a test starts writes its log: a file, never a pipe. Nobody reads a pipe
    while the server runs, so after about 64 KB of access-log lines it fills and every request
    thread blocks in its log call."""
    return tempfile.TemporaryFile()


def log_tail(log: IO[bytes], size: int = 3000) -> str:
    log.seek(0)
    return log.read().decode(errors="replace")[-size:]


def popen_server(args: list[str], **kwargs) -> subprocess.Popen:
    """A server process whose log goes to `server_log()`; `process.log` holds it (log_tail)."""
    log = server_log()
    process = subprocess.Popen(args, stderr=log, **kwargs)
    process.log = log
    return process


def database_url() -> str:
    """The test database as a URL another process can use (a socket directory as the host)."""
    db = connection.settings_dict
    host = quote(db["HOST"], safe="") if db["HOST"].startswith("/") else db["HOST"]
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgresql://{quote(db['USER'], safe='')}{password}@{host}{port}/{db['NAME']}"


def wait_until_another_session_waits_for_a_lock(timeout: float = 30.0) -> None:
    """Ask PostgreSQL, one round trip after another, until some other backend of this database
    waits on a lock (a thread or process the test started has reached the row it holds)."""
    deadline = time.monotonic() + timeout
    with connection.cursor() as cursor:
        while time.monotonic() < deadline:
            cursor.execute("SELECT pg_stat_clear_snapshot()")  # activity is read once a transaction
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
            )
            if cursor.fetchone()[0]:
                return
    raise AssertionError("no other session ever waited for a lock")


class Worker:
    """`work` running on a thread of its own, with its own database connection, from the moment
    this is made; `finish()` waits for it and returns what it returned or the error it raised."""

    def __init__(self, work: Callable[[], object]) -> None:
        self.outcome: list = []
        self._thread = threading.Thread(target=self._run, args=(work,))
        self._thread.start()

    def _run(self, work: Callable[[], object]) -> None:
        try:
            self.outcome.append(work())
        except BaseException as error:  # reported to the test thread
            self.outcome.append(error)
        finally:
            connections.close_all()

    def finish(self, timeout: float = 60.0) -> object:
        self._thread.join(timeout=timeout)
        assert not self._thread.is_alive(), "the worker never finished"
        (result,) = self.outcome
        return result
