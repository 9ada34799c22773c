"""How much work waits in each queue lane, and for how long the oldest task has waited.

A lane is a django-q2 cluster name (settings.QUEUE_LANES: {"interactive": name, "bulk": name});
without that setting the one Q_CLUSTER is the only lane, named "default". Read from the broker
the clusters use: the ORM broker's table (a queued row's `lock` is the moment it was queued, or
when a claim ran out, and is in the past; a claimed row's is in the future), or the Redis lists
(the head of a list is its oldest task, and the task carries the moment it was queued).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Count, Min
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signing import SignedPackage


@dataclass(frozen=True)
class LaneStats:
    lane: str
    queued: int
    in_flight: int
    oldest_age_seconds: float  # 0 when nothing waits


def lanes() -> dict[str, str]:
    """Lane name → cluster name."""
    configured = getattr(settings, "QUEUE_LANES", None)
    return dict(configured) if configured else {"default": settings.Q_CLUSTER["name"]}


def lane_stats() -> list[LaneStats]:
    named = lanes()
    if Conf.ORM and not Conf.BROKER_CLASS:
        return _from_table(named)
    return [_from_broker(lane, cluster) for lane, cluster in named.items()]


def _from_table(named: dict[str, str]) -> list[LaneStats]:
    now = timezone.now()
    rows = OrmQ.objects.using(Conf.ORM).filter(key__in=named.values())
    queued = {
        row["key"]: row
        for row in rows.filter(lock__lte=now).values("key").annotate(n=Count("id"), oldest=Min("lock"))
    }
    claimed = {
        row["key"]: row["n"] for row in rows.filter(lock__gt=now).values("key").annotate(n=Count("id"))
    }
    stats = []
    for lane, cluster in named.items():
        row = queued.get(cluster)
        age = (now - row["oldest"]).total_seconds() if row and row["oldest"] else 0.0
        stats.append(LaneStats(lane, row["n"] if row else 0, claimed.get(cluster, 0), max(0.0, age)))
    return stats


def _from_broker(lane: str, cluster: str) -> LaneStats:
    broker = get_broker(list_key=cluster)
    queued = broker.queue_size()
    in_flight = broker.lock_size() or 0
    age = 0.0
    if queued and hasattr(broker.connection, "lindex"):  # a Redis list: its head is its oldest
        head = broker.connection.lindex(broker.list_key, 0)
        if head is not None:
            age = _age_of(head)
    return LaneStats(lane, queued, in_flight, age)


def _age_of(package: bytes | str) -> float:
    try:
        started = SignedPackage.loads(package).get("started")
    except Exception:  # an unreadable package is the worker's to report; its age is unknown
        return 0.0
    if started is None:
        return 0.0
    return max(0.0, time.time() - started.timestamp())
