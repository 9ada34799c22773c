"""When the database cannot be reached, the API says so quickly: a 503 in the error envelope with
Retry-After, not a 500 and not a request hanging for the pool's old 30 s (and a dashboard page
answers a 503 page that retries). A real daphne (its
connections from the pool, as production runs) is pointed at an address where no database
listens."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.processes import free_port, log_tail, popen_server

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def server_without_database():
    port = free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memorysaas.settings.local",
        "DATABASE_URL": f"postgresql://nobody@127.0.0.1:{free_port()}/nothing",
        "DEBUG": "0",
        "DB_POOL_TIMEOUT": "1",
        "MODELS_WARM_AT_START": "0",
        "REDIS_URL": "",
    }
    process = popen_server(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "memorysaas.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    pause = threading.Event()
    try:
        while True:
            if process.poll() is not None:
                raise AssertionError(f"daphne exited: {log_tail(process.log, 3000)}")
            try:
                httpx.get(f"{url}/api/v1/health", timeout=10)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "daphne never served"
                pause.wait(0.05)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_a_request_that_needs_the_database_gets_a_503_envelope_when_it_is_unreachable(
    server_without_database,
):
    for path in ("/api/v1/me", "/api/v1/projects"):
        response = httpx.get(
            f"{server_without_database}{path}",
            headers={"Authorization": "Bearer msk_abcdef_notreal"},
            timeout=30,
        )
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "database_unavailable"
        assert set(response.json()["error"]) == {"code", "message", "details"}
        assert int(response.headers["Retry-After"]) > 0


def test_readiness_fails_and_liveness_holds_when_the_database_is_unreachable(server_without_database):
    ready = httpx.get(f"{server_without_database}/readyz", timeout=30)
    assert ready.status_code == 503, ready.text
    assert ready.json()["status"] == "unready"
    assert ready.json()["checks"]["database"]["ok"] is False
    alive = httpx.get(f"{server_without_database}/livez", timeout=30)
    assert alive.status_code == 200
    assert alive.json() == {"status": "alive"}


def test_a_dashboard_page_says_the_database_is_away_with_a_503_that_retries(server_without_database):
    # (a signed-in browser: its session is looked up in the database)
    response = httpx.get(f"{server_without_database}/", cookies={"sessionid": "x" * 32}, timeout=30)
    assert response.status_code == 503, response.text[:500]
    assert int(response.headers["Retry-After"]) > 0
    assert response.headers["Content-Type"].startswith("text/html")
    assert "cannot reach its database" in response.text
    assert 'http-equiv="refresh"' in response.text
    assert response.headers["X-Request-ID"] in response.text  # (the reference that finds the log lines)


def test_any_other_failure_of_a_dashboard_page_is_a_plain_500_page_with_its_reference(rf):
    from memorysaas.errorpages import server_error
    from memorysaas.kernel import requestid

    token = requestid.current.set("req-1234")
    try:
        try:
            raise ValueError("a bug")
        except ValueError:
            response = server_error(rf.get("/"))
    finally:
        requestid.current.reset(token)
    assert response.status_code == 500
    assert "Something went wrong" in response.content.decode() and "req-1234" in response.content.decode()
    assert not response.has_header("Retry-After")
