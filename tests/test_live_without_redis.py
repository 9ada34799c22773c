"""Without REDIS_URL (`make run`'s default), what a worker process publishes reaches the sockets a
daphne process holds — through PostgreSQL's LISTEN/NOTIFY (memorysaas.kernel.pglayer) — and
every process shares one cache (the database's). Real processes: a daphne and a qcluster per lane
on the test database, no Redis."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from tests.live_stack import ROOT, LiveStack, default_env

pytestmark = pytest.mark.django_db(transaction=True)

MODULE = "def total(items):\n    return sum(item.price for item in items)\n"


@pytest.fixture
def stack(transactional_db):
    live = LiveStack(default_env())
    try:
        yield live.start()
    finally:
        live.stop()


def test_progress_a_worker_publishes_reaches_a_websocket_on_daphne(alice, stack):
    from django_q.models import Success
    from websockets.sync.client import connect

    auth = {"Authorization": f"Bearer {alice.key}"}
    ws_url = stack.url.replace("http://", "ws://") + f"/ws/projects/{alice.project.id}/"
    with connect(ws_url, additional_headers={**auth, "Origin": "http://127.0.0.1"}) as socket:
        hello = json.loads(socket.recv(timeout=30))
        assert hello["event"] == "hello"
        response = httpx.post(
            f"{stack.url}/api/v1/projects/{alice.project.id}/graph/index",
            json={"files": [{"path": "shop/totals.py", "content": MODULE}]},
            headers=auth,
            timeout=30,
        )
        assert response.status_code == 202, response.text
        job = response.json()["id"]
        received = []
        while not received or received[-1]["data"].get("status") not in ("done", "failed"):
            message = json.loads(socket.recv(timeout=60))
            if message["event"] == "graph.progress":
                received.append(message)
    assert received[-1]["data"] == {"job": job, "status": "done", "progress": 100}
    # Numbered after the hello, with nothing missed in between.
    assert received[0]["seq"] > hello["seq"]
    # The index ran in the interactive lane's worker (its cluster records the success once the
    # task has returned, a moment after the last event), not in daphne.
    recorded = Success.objects.filter(func="apps.graph.tasks.index_job_task", args=(job,))
    deadline = time.monotonic() + 60
    while not recorded.exists():
        assert time.monotonic() < deadline, stack.tail("qcluster-interactive")
        time.sleep(0.1)  # (the pause between two polls)
    assert recorded.get().cluster == stack.env["Q_PREFIX"]  # the interactive lane's cluster


def test_the_cache_is_one_for_every_process(transactional_db):
    env = default_env()
    script = (
        "import django; django.setup(); from django.core.cache import cache; import sys; "
        "print(cache.get('shared-key')) if sys.argv[1] == 'get' else cache.set('shared-key', 'from-another', 60)"
    )

    def run(action: str) -> str:
        result = subprocess.run(
            [sys.executable, "-c", script, action],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout.strip()

    assert run("get") == "None"
    run("set")
    assert run("get") == "from-another"


def test_a_listener_whose_connection_was_cut_listens_again(transactional_db):
    """The listening connection ended by the server (as a database restart ends it): messages
    sent after it reconnected arrive."""
    import asyncio
    import uuid

    from django.db import connection

    from memorysaas.kernel.pglayer import PostgresChannelLayer

    layer = PostgresChannelLayer(prefix=f"test-{uuid.uuid4().hex[:8]}")

    def cut_listener() -> int:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name = 'channel-layer-listen' AND datname = current_database()"
            )
            return cursor.fetchone()[0]

    async def scenario() -> list[dict]:
        channel = await layer.new_channel()
        await layer.group_add("project.cut", channel)
        await layer.group_send("project.cut", {"type": "before"})
        received = [await asyncio.wait_for(layer.receive(channel), 30)]
        assert await asyncio.to_thread(cut_listener) == 1
        # Until it listens again, a message is lost (at most once, as with Redis): send until one
        # arrives.
        for n in range(300):
            await layer.group_send("project.cut", {"type": "after", "n": n})
            try:
                received.append(await asyncio.wait_for(layer.receive(channel), 0.1))
                break
            except TimeoutError:
                continue
        await layer.close()
        return received

    received = asyncio.run(scenario())
    assert received[0] == {"type": "before"}
    assert received[1]["type"] == "after"
