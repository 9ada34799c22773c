"""One client flooding search cannot take the service down.

A real daphne serves the test database as production runs: search's parallel paths on, request
connections from the pool, the admission gate in front. `manage.py bench_flood` floods it from
one tenant (32 searches in flight for a few seconds) while another tenant searches, then hangs
up the flood's requests all at once. The latency figures are the benchmark's to print; this
asserts what must hold: no 5xx and no request left unanswered, for either tenant; the service
answering normally again afterwards; and every database connection the server held given back
(its pool is as small as the requests it lets in at once, so one missing would show).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction

from apps.memories.models import Memory
from tests.memories.factories import make_memory
from tests.processes import database_url, free_port, log_tail, popen_server

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.django_db(transaction=True)

POOL = 4


def _start_daphne(port: int) -> subprocess.Popen:
    env = {
        **os.environ,
        # The test settings keep search on one connection; the development settings do not.
        "DJANGO_SETTINGS_MODULE": "memorysaas.settings.local",
        "DATABASE_URL": database_url(),
        "SECRET_KEY": settings.SECRET_KEY,
        "DEBUG": "0",
        "SEARCH_CONCURRENT": "1",
        "EMBEDDING_PROVIDER": "hashing",
        "MODELS_WARM_AT_START": "0",
        "RATE_LIMIT_ENABLED": "0",  # what is tested is the sharing out, not the rate limits
        "REDIS_URL": "",  # no shared Redis queue or cache: this server's work stays its own
        # A pool no larger than the requests let in at once, and one client may fill it: a
        # connection that a hung-up request failed to give back would leave a request without one.
        "DB_POOL_MAX": str(POOL),
        "WEB_CONCURRENT_REQUESTS": str(POOL),
        "WEB_CLIENT_CONCURRENT_REQUESTS": str(POOL),
    }
    return popen_server(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "memorysaas.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )


def _poll(condition, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while time.monotonic() < deadline:
        if condition():
            return
        pause.wait(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s")


@pytest.fixture
def server(transactional_db):
    port = free_port()
    process = _start_daphne(port)
    url = f"http://127.0.0.1:{port}"

    def serving() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"daphne exited: {log_tail(process.log, 3000)}")
        try:
            return httpx.get(f"{url}/api/v1/health", timeout=2).status_code in (200, 503)
        except httpx.HTTPError:
            return False

    try:
        _poll(serving, timeout=120, what="daphne serving")
        yield url, process
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _sessions_waiting_for_a_lock() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def _every_pooled_connection_serves(url: str, person) -> None:
    """POOL requests at once, each holding its pooled connection: they all wait on a row this
    test has locked, then all succeed once it lets go. A connection missing from the pool would
    leave one of them without (a 503 after the pool's timeout)."""
    memory = make_memory(person, content="Locked while the pool is counted.")
    with ThreadPoolExecutor(max_workers=POOL) as pool:
        with transaction.atomic():
            Memory.objects.select_for_update().get(pk=memory.pk)
            answers = [
                pool.submit(
                    httpx.patch,
                    f"{url}/api/v1/memories/{memory.id}",
                    json={"tags": [f"t{n}"]},
                    headers={"Authorization": f"Bearer {person.key}"},
                    timeout=60,
                )
                for n in range(POOL)
            ]
            _poll(lambda: _sessions_waiting_for_a_lock() == POOL, timeout=30, what=f"{POOL} requests waiting")
        statuses = [answer.result().status_code for answer in answers]
    assert statuses == [200] * POOL


def _busy_server_backends() -> list[tuple[str, str]]:
    """The other sessions on the test database that are doing something (or hold a transaction)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT state, left(query, 80) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid() AND backend_type = 'client backend' AND state <> 'idle'"
        )
        return cursor.fetchall()


def test_a_search_flood_from_one_tenant_leaves_the_other_served_and_the_service_recovers(server, alice):
    url, process = server
    out = io.StringIO()
    call_command(
        "bench_flood",
        url=url,
        provider="hashing",
        memories=60,
        quiet=1.0,
        interval=0.25,
        concurrency=32,
        duration=4.0,
        timeout=60.0,
        recovery_timeout=60.0,
        normal_ms=60_000,  # any answer counts: how fast is the benchmark's to report
        json=True,
        stdout=out,
    )
    result = json.loads(out.getvalue().splitlines()[-1])

    assert result["count_5xx"] == 0, result
    assert result["other_errors"] == {} and set(result["other_statuses"]) == {"200"}, result
    assert result["other_searches"] >= 8, result  # it kept searching through the flood
    assert result["flood_errors"] == {} and set(result["flood_statuses"]) == {"200"}, result
    assert result["recovery_s"] is not None, result
    assert process.poll() is None
    # The flood's abandoned requests gave their connections back.
    _poll(lambda: not _busy_server_backends(), timeout=30, what="every server connection idle")
    _every_pooled_connection_serves(url, alice)
