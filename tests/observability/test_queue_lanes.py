"""Queue depth and the oldest task's age per lane, read from the broker the clusters use."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signing import SignedPackage

from memorysaas.kernel import queuestats

pytestmark = pytest.mark.django_db


def test_without_lanes_the_one_cluster_is_the_default_lane(settings):
    settings.QUEUE_LANES = None
    assert queuestats.lanes() == {"default": settings.Q_CLUSTER["name"]}
    settings.QUEUE_LANES = {"interactive": "ms-interactive", "bulk": "ms-bulk"}
    assert queuestats.lanes() == {"interactive": "ms-interactive", "bulk": "ms-bulk"}


def test_the_table_broker_counts_waiting_and_taken_tasks_per_lane():
    now = timezone.now()
    OrmQ.objects.create(key="ms-bulk", payload="x", lock=now - timedelta(seconds=90))
    OrmQ.objects.create(key="ms-bulk", payload="x", lock=now - timedelta(seconds=5))
    OrmQ.objects.create(key="ms-bulk", payload="x", lock=now + timedelta(seconds=600))  # taken
    OrmQ.objects.create(key="someone-else", payload="x", lock=now - timedelta(seconds=500))

    bulk, interactive = queuestats._from_table({"bulk": "ms-bulk", "interactive": "ms-interactive"})

    assert (bulk.lane, bulk.queued, bulk.in_flight) == ("bulk", 2, 1)
    assert 90 <= bulk.oldest_age_seconds < 400
    assert (interactive.queued, interactive.in_flight, interactive.oldest_age_seconds) == (0, 0, 0.0)


@pytest.mark.redis
def test_the_redis_broker_reports_its_list_and_the_oldest_task_age():
    if not Conf.REDIS or Conf.ORM:
        pytest.skip("needs the Redis broker (REDIS_URL)")
    broker = get_broker(list_key="ms-lanes-test")
    broker.purge_queue()
    try:
        for age in (120, 3):
            started = timezone.now() - timedelta(seconds=age)
            broker.enqueue(SignedPackage.dumps({"id": f"t{age}", "func": "len", "started": started}))
        stats = queuestats._from_broker("bulk", "ms-lanes-test")
    finally:
        broker.purge_queue()
    assert (stats.lane, stats.queued, stats.in_flight) == ("bulk", 2, 0)
    assert 120 <= stats.oldest_age_seconds < 400
