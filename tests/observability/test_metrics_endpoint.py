"""/metrics over HTTP from a real daphne on the test database: after requests, their latency by
route and status, the hook deliveries, the search stages and the database's figures (queue lanes,
embedding backlog) are in the exposition; the request id goes out as it came in, or is made, and
is on the request's JSON log line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.conftest import stop, wait_until_serving
from tests.processes import database_url, free_port

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
SEARCH_ROUTE = "api/v1/projects/<project_id>/search"


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker):
    """daphne with JSON logs into a file the tests read."""
    with django_db_blocker.unblock():
        url = database_url()
    port = free_port()
    log_fd, log_path = tempfile.mkstemp(prefix="observability-", suffix=".log")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memorysaas.settings.test",
        "DATABASE_URL": url,
        "SECRET_KEY": settings.SECRET_KEY,
        "DB_CONN_MAX_AGE": "0",
        "EMBEDDING_PROVIDER": "hashing",
        "LOG_FORMAT": "json",
        "ACCESS_LOG": "1",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "memorysaas.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log_fd,
    )
    os.close(log_fd)
    try:
        with open(log_path, "rb") as process.stderr:  # (what wait_until_serving shows if it dies)
            wait_until_serving(port, process)
        yield f"http://127.0.0.1:{port}", Path(log_path)
    finally:
        stop(process)
        Path(log_path).unlink(missing_ok=True)


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    response = httpx.get(f"{url}/metrics", timeout=30)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_requests_hooks_and_searches_show_in_the_metrics(server, alice):
    url, _ = server
    headers = {"Authorization": f"Bearer {alice.key}"}
    before = scrape(url)
    assert httpx.get(f"{url}/api/v1/health", timeout=30).status_code == 200
    assert httpx.get(f"{url}/api/v1/no/such/thing", timeout=30).status_code == 404
    hook = httpx.post(
        f"{url}/api/v1/hooks/claude-code?project={alice.project.id}",
        json={"session_id": "metrics-1", "hook_event_name": "SessionStart", "cwd": "/w", "source": "startup"},
        headers=headers,
        timeout=60,
    )
    assert hook.status_code == 200, hook.text
    odd = httpx.post(
        f"{url}/api/v1/hooks/claude-code?project={alice.project.id}",
        json={"session_id": "metrics-1", "hook_event_name": "SomethingNew"},
        headers=headers,
        timeout=60,
    )
    assert odd.status_code == 200, odd.text
    search = httpx.post(
        f"{url}/api/v1/projects/{alice.project.id}/search",
        json={"query": "where do orders send email"},
        headers=headers,
        timeout=60,
    )
    assert search.status_code == 200, search.text

    after = scrape(url)
    duration = "memorysaas_http_request_duration_seconds_count"
    health = {"route": "api/v1/health", "method": "GET", "status": "200"}
    assert value(after, duration, **health) == value(before, duration, **health) + 1
    searched = {"route": SEARCH_ROUTE, "method": "POST", "status": "200"}
    assert value(after, duration, **searched) == value(before, duration, **searched) + 1
    # An unknown path is its pattern too, never the raw path.
    assert not any("no/such/thing" in str(labels) for _, labels in after)

    hooks = "memorysaas_hook_deliveries_total"
    for event in ("SessionStart", "other"):
        labels = {"hook": "claude-code", "event": event, "outcome": "recorded"}
        assert value(after, hooks, **labels) == value(before, hooks, **labels) + 1, event
    stage = "memorysaas_search_stage_duration_seconds_count"
    for name in ("total", "keyword", "rerank"):
        labels = {"endpoint": "search", "stage": name}
        assert value(after, stage, **labels) == value(before, stage, **labels) + 1, name

    up = "memorysaas_metrics_collector_up"
    assert value(after, up, collector="queue") == 1
    assert value(after, up, collector="embedding") == 1
    for lane in ("interactive", "bulk"):  # (settings.QUEUE_LANES)
        assert ("memorysaas_queue_depth", (("lane", lane),)) in after
        assert ("memorysaas_queue_oldest_task_age_seconds", (("lane", lane),)) in after
    assert ("memorysaas_embedding_backlog", ()) in after


def test_the_request_id_round_trips_and_is_on_the_json_log_line(server):
    url, log = server
    sent = httpx.get(f"{url}/api/v1/health", headers={"X-Request-ID": "trace-abc.123"}, timeout=30)
    assert sent.headers["X-Request-ID"] == "trace-abc.123"
    made = httpx.get(f"{url}/api/v1/health", timeout=30).headers["X-Request-ID"]
    forged = httpx.get(f"{url}/api/v1/health", headers={"X-Request-ID": "a b\tc"}, timeout=30)
    assert len(made) == 32 and made != "trace-abc.123"
    assert forged.headers["X-Request-ID"] not in ("a b\tc", made)

    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    ours = [line for line in lines if line.get("request_id") == "trace-abc.123"]
    assert ours, lines[-5:]
    (access,) = [line for line in ours if line["logger"] == "memorysaas.access"]
    assert access["route"] == "api/v1/health"
    assert access["status"] == 200 and access["level"] == "INFO"
    assert any(line.get("request_id") == made for line in lines)


def test_probes_answer(server):
    url, _ = server
    assert httpx.get(f"{url}/livez", timeout=30).json() == {"status": "alive"}
    ready = httpx.get(f"{url}/readyz", timeout=30)
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"]["database"]["ok"] is True
