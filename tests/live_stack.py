"""The default deployment's processes on the test database, for tests of what crosses them: a
daphne and a `manage.py qcluster` per queue lane, as `make run` starts them — no REDIS_URL (CI
exports one; it is taken out here), so the channel layer is PostgreSQL's and the broker the ORM.
Tasks are queued by daphne and run by the workers, not inline."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from django.conf import settings

from tests.processes import database_url, free_port

ROOT = Path(__file__).resolve().parent.parent
LANES = ("interactive", "bulk")


def default_env(**extra: str) -> dict[str, str]:
    """`make run`'s settings without Redis, on the test database, with the hashing embedder (no
    model loads) and queues of their own (nothing another test left is taken)."""
    prefix = f"live-{uuid.uuid4().hex[:8]}"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("REDIS_URL", "Q_BROKER", "DJANGO_ALLOW_ASYNC_UNSAFE", "DB_POOL", "Q_PREFIX", "Q_LANE")
    }
    env.update(
        DJANGO_SETTINGS_MODULE="memorysaas.settings.local",
        DEBUG="0",
        DATABASE_URL=database_url(),
        SECRET_KEY=settings.SECRET_KEY,
        DB_CONN_MAX_AGE="0",
        EMBEDDING_PROVIDER="hashing",
        EMBEDDING_MODE="async",
        MODELS_WARM_AT_START="0",
        PRECISION_MODEL="none",
        Q_PREFIX=prefix,
        CHANNELS_PREFIX=prefix,
        PYTHONUNBUFFERED="1",
        RATE_LIMIT_ENABLED="0",
        **extra,
    )
    return env


class LiveStack:
    """Processes started with `env`; `stop()` ends them all (each is the head of its own group)."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.processes: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        self.url = ""

    def _start(self, name: str, args: list[str], **extra_env: str) -> subprocess.Popen:
        fd, log = tempfile.mkstemp(prefix=f"{name}-", suffix=".log")
        process = subprocess.Popen(
            args,
            cwd=ROOT,
            env={**self.env, **extra_env},
            stdout=fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        os.close(fd)
        self.processes[name], self.logs[name] = process, Path(log)
        return process

    def start_web(self) -> str:
        port = free_port()
        self._start("daphne", [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), _ASGI])
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    def start_worker(self, lane: str, **extra_env: str) -> None:
        self._start(f"qcluster-{lane}", [sys.executable, "manage.py", "qcluster"], Q_LANE=lane, **extra_env)

    def start(self, lanes: tuple[str, ...] = LANES) -> LiveStack:
        self.start_web()
        for lane in lanes:
            self.start_worker(lane)
        self.wait_until_ready()
        return self

    def wait_until_ready(self, timeout: float = 120.0) -> None:
        """Poll until daphne answers its health check and every cluster says it runs."""
        deadline = time.monotonic() + timeout
        pending = set(self.processes)
        while pending:
            for name in list(pending):
                process = self.processes[name]
                if process.poll() is not None:
                    raise AssertionError(f"{name} exited:\n{self.tail(name)}")
                if name == "daphne":
                    with contextlib.suppress(httpx.HTTPError):
                        if httpx.get(f"{self.url}/api/v1/health", timeout=2).status_code in (200, 503):
                            pending.discard(name)
                elif b"running." in self.logs[name].read_bytes():
                    pending.discard(name)
            if time.monotonic() > deadline:
                raise AssertionError(f"not ready after {timeout} s: {sorted(pending)}")
            time.sleep(0.1)  # (the pause between two polls)

    def tail(self, name: str, chars: int = 3000) -> str:
        return self.logs[name].read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
        for name, process in self.processes.items():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            # A cluster's workers are its children, in its group: none may outlive the test.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            self.logs[name].unlink(missing_ok=True)


_ASGI = "memorysaas.asgi:application"
