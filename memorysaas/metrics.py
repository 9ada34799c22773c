"""/metrics: the Prometheus exposition, answered beside Django (memorysaas/asgi.py) (docs/observability.md lists every series).

What processes record as they work (memorysaas/kernel/metrics.py) is read from this process, or,
with PROMETHEUS_MULTIPROC_DIR set, added up over every process that writes there. What the
database knows — queue lanes, the embedding backlog — is read at each scrape, so any web process
answers the same. Loopback callers are served; others need METRICS_TOKEN as a bearer token.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import os

from django.conf import settings
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily

from apps.memories.models import EmbeddingStatus, Memory
from memorysaas.kernel.queuestats import lane_stats
from memorysaas.probes import off_request_thread, respond

logger = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
FORBIDDEN = "Metrics are served to loopback addresses, or with METRICS_TOKEN as a bearer token."


class DatabaseCollector:
    """Figures read from the database at scrape time. A collector that fails reports `up` 0 and
    leaves its series out, so the process's own figures are still served."""

    def collect(self):
        up = GaugeMetricFamily(
            "memorysaas_metrics_collector_up",
            "Whether the scrape could read this collector's figures (1) or not (0).",
            labels=["collector"],
        )
        for name, families in (("queue", self._queues), ("embedding", self._embedding)):
            try:
                yield from families()
                up.add_metric([name], 1)
            except Exception:  # a scrape reports what it could not read; it does not fail
                logger.warning("metrics: the %s collector failed", name, exc_info=True)
                up.add_metric([name], 0)
        yield up

    def _queues(self):
        queued = GaugeMetricFamily(
            "memorysaas_queue_depth", "Tasks waiting in a queue lane (not yet taken).", labels=["lane"]
        )
        in_flight = GaugeMetricFamily(
            "memorysaas_queue_in_flight", "Tasks a worker has taken and not yet finished.", labels=["lane"]
        )
        oldest = GaugeMetricFamily(
            "memorysaas_queue_oldest_task_age_seconds",
            "How long the oldest waiting task of a lane has waited (0 when none waits).",
            labels=["lane"],
        )
        for stats in lane_stats():
            queued.add_metric([stats.lane], stats.queued)
            in_flight.add_metric([stats.lane], stats.in_flight)
            oldest.add_metric([stats.lane], stats.oldest_age_seconds)
        return [queued, in_flight, oldest]

    def _embedding(self):
        pending = Memory.objects.filter(embedding_status=EmbeddingStatus.PENDING)
        count = pending.count()
        oldest = pending.order_by("created_at").values_list("created_at", flat=True).first()
        age = (timezone.now() - oldest).total_seconds() if oldest else 0.0
        return [
            GaugeMetricFamily(
                "memorysaas_embedding_backlog", "Memories waiting for their vectors.", value=count
            ),
            GaugeMetricFamily(
                "memorysaas_embedding_backlog_oldest_age_seconds",
                "How long the oldest memory waiting for its vectors has waited.",
                value=max(0.0, age),
            ),
        ]


def allowed(scope) -> bool:
    """A loopback caller, or one that sends METRICS_TOKEN as its bearer token."""
    token = settings.METRICS_TOKEN
    if token:
        sent = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
        if sent[:7].lower() == "bearer " and hmac.compare_digest(sent[7:].strip(), token):
            return True
    if not settings.METRICS_ALLOW_LOOPBACK:
        return False
    try:
        return ipaddress.ip_address((scope.get("client") or ("",))[0]).is_loopback
    except ValueError:
        return False


def exposition() -> bytes:
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        processes = CollectorRegistry()
        multiprocess.MultiProcessCollector(processes)
    else:
        processes = REGISTRY
    scraped = CollectorRegistry()
    scraped.register(DatabaseCollector())
    return generate_latest(processes) + generate_latest(scraped)


async def metrics(scope, receive, send) -> None:
    if not allowed(scope):
        body = {"error": {"code": "forbidden", "message": FORBIDDEN, "details": None}}
        await respond(send, 403, json.dumps(body).encode())
        return
    await respond(send, 200, await off_request_thread(exposition), CONTENT_TYPE_LATEST.encode())
