"""A daphne process of this checkout for the benchmarks that measure over HTTP, serving the
database the command itself uses."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import httpx
from django.conf import settings
from django.core.management.base import CommandError
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


def database_url() -> str:
    """The configured database as a URL the server process can use too (a socket directory as
    the host, as the embedded PostgreSQL has)."""
    db = connection.settings_dict
    host = quote(db["HOST"], safe="") if db["HOST"].startswith("/") else db["HOST"]
    password = f":{quote(db['PASSWORD'], safe='')}" if db.get("PASSWORD") else ""
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgresql://{quote(db['USER'], safe='')}{password}@{host}{port}/{db['NAME']}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """daphne on a free port, its output kept in a log file shown when it fails."""

    def __init__(self, *, settings_module: str, env: dict[str, str], name: str) -> None:
        log_fd, self.log = tempfile.mkstemp(prefix=f"{name}-daphne-", suffix=".log")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                "memorysaas.asgi:application",
            ],
            cwd=ROOT,
            env={
                **os.environ,
                "DJANGO_SETTINGS_MODULE": settings_module,
                "DATABASE_URL": database_url(),
                "SECRET_KEY": settings.SECRET_KEY,
                "DEBUG": "0",
                "PYTHONUNBUFFERED": "1",
                **env,
            },
            stdout=log_fd,
            stderr=subprocess.STDOUT,
        )
        os.close(log_fd)  # (the child has its own copy)

    def wait_until_serving(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise CommandError(f"daphne exited:\n{self.tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/api/v1/health", timeout=2).status_code in (200, 503):
                    return
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=0.2)
        raise CommandError(f"daphne never served:\n{self.tail()}")

    def tail(self) -> str:
        return Path(self.log).read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        Path(self.log).unlink(missing_ok=True)
