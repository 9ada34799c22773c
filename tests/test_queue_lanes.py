"""Queue lanes: an interactive task (a graph index) is taken by the interactive lane's worker
while thousands of embedding tasks wait on the bulk lane, and tasks go to the lane their call
site names. The first test runs real `manage.py qcluster` processes (through `bench_lanes`) on
the test database with the ORM broker, no Redis; it asserts what was left, not how long."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from django.conf import settings

from memorysaas.kernel.queue import enqueue, lane_cluster
from memorysaas.kernel.schedules import JOBS, ensure_schedules
from tests.live_stack import ROOT, default_env

BACKLOG = 2000


@pytest.mark.django_db(transaction=True)
def test_an_index_is_taken_while_the_bulk_lane_still_holds_its_backlog():
    result = subprocess.run(
        [sys.executable, "manage.py", "bench_lanes", "--tasks", str(BACKLOG), "--no-compare", "--json"],
        cwd=ROOT,
        env=default_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:] + result.stdout[-2000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])["lanes"]
    # The index started and finished while most of the embeddings queued before it still waited:
    # it was not behind them.
    assert figures["wait_s"] is not None
    assert figures["bulk_left"] > BACKLOG // 2, figures


def test_lanes_are_the_settings_clusters():
    assert {"interactive": settings.Q_PREFIX, "bulk": f"{settings.Q_PREFIX}-bulk"} == settings.QUEUE_LANES
    assert lane_cluster("bulk") == settings.QUEUE_LANES["bulk"]
    with pytest.raises(ValueError):
        lane_cluster("urgent")


@pytest.mark.django_db
def test_each_task_is_queued_on_its_lane(monkeypatch, django_capture_on_commit_callbacks):
    """On the broker in use (Redis where REDIS_URL is set, else the ORM), not run inline."""
    from django_q.brokers import get_broker
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", False)
    brokers = {lane: get_broker(cluster) for lane, cluster in settings.QUEUE_LANES.items()}
    for broker in brokers.values():
        broker.purge_queue()
    try:
        with django_capture_on_commit_callbacks(execute=True):
            enqueue("apps.memories.tasks.embed_memories", ["x"], lane="bulk")
            enqueue("apps.graph.tasks.index_job_task", 1)
            enqueue("apps.graph.tasks.index_job_task", 2)
        assert {lane: broker.queue_size() for lane, broker in brokers.items()} == {
            "interactive": 2,
            "bulk": 1,
        }
    finally:
        for broker in brokers.values():
            broker.purge_queue()


@pytest.mark.django_db
def test_schedules_run_on_their_lanes():
    from django_q.models import Schedule

    ensure_schedules()
    clusters = dict(Schedule.objects.values_list("name", "cluster"))
    assert clusters["memories.embed_stranded"] == settings.QUEUE_LANES["bulk"]
    assert clusters["memories.decay_and_prune"] == settings.QUEUE_LANES["bulk"]
    assert clusters["graph.index_stranded"] == settings.QUEUE_LANES["interactive"]
    assert clusters["observer.finalize_stalled"] == settings.QUEUE_LANES["interactive"]
    assert set(clusters) == set(JOBS)
