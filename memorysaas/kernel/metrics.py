"""The Prometheus metrics the code records as it works, and the calls that record them.

Scraped at /metrics (memorysaas/metrics.py, docs/observability.md). Where several processes of
one deployment share a machine (`make run`'s daphne and workers), PROMETHEUS_MULTIPROC_DIR names
a folder where each process writes its figures and the scrape adds them up; prometheus_client
reads it when this module is imported, so it is set before the processes start
(memorysaas/run.py). Labels take only values from a small, known set (a URL pattern, not a
path; an event name this service knows, else "other"), so a client cannot grow the series.
"""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import Counter, Histogram

# Seconds. Search stages are milliseconds each; a request can wait seconds behind a busy server.
REQUEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
STAGE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

request_duration = Histogram(
    "memorysaas_http_request_duration_seconds",
    "Time Django took to answer a request, by URL pattern, method and status.",
    ["route", "method", "status"],
    buckets=REQUEST_BUCKETS,
)

search_stage_duration = Histogram(
    "memorysaas_search_stage_duration_seconds",
    "Time each stage of the search pipeline took, by caller (search, context) and stage.",
    ["endpoint", "stage"],
    buckets=STAGE_BUCKETS,
)

hook_deliveries = Counter(
    "memorysaas_hook_deliveries_total",
    "Agent hook deliveries received, by hook, event and outcome.",
    ["hook", "event", "outcome"],
)


def observe_search_stages(endpoint: str, timings_ms: Mapping[str, float]) -> None:
    """Record a search's per-stage timings (its response's `timings_ms`)."""
    for stage, milliseconds in timings_ms.items():
        search_stage_duration.labels(endpoint, stage).observe(milliseconds / 1000)


def count_hook_delivery(*, hook: str, event: str, outcome: str, known_events: frozenset[str]) -> None:
    hook_deliveries.labels(hook, event if event in known_events else "other", outcome).inc()
