"""Daily health snapshots and retrieval latency samples: the history the charts draw.

The hourly job rewrites today's snapshot of every project (counts as they are now, the review
backlog's age, today's latency percentiles so far) and completes yesterday's percentiles; samples
older than RETRIEVAL_SAMPLE_DAYS are dropped. Counts leave out personal memories: a snapshot is
the project's, seen by everyone who may read it.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta
from typing import Any
from uuid import UUID

from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone

from apps.insights.history import HealthSnapshot, RetrievalSample
from apps.memories import selectors as memory_selectors
from apps.memories.models import MemoryScope
from apps.tenants.models import Project
from memorysaas.kernel.latency import Sample

RETRIEVAL_SAMPLE_DAYS = 14


def store_samples(batch: list[Sample]) -> None:
    """memorysaas.kernel.latency's sink: one INSERT for the whole batch."""
    RetrievalSample.objects.bulk_create(
        RetrievalSample(project_id=UUID(project_id), kind=kind, ms=ms, at=at)
        for project_id, kind, ms, at in batch
    )


def day_bounds(day: date) -> tuple[datetime, datetime]:
    start = timezone.make_aware(datetime.combine(day, time.min))
    return start, start + timedelta(days=1)


def latency_percentiles(project_id: UUID, start: datetime, end: datetime) -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT count(*), percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY ms)
            FROM insights_retrievalsample WHERE project_id = %s AND at >= %s AND at < %s
            """,
            [str(project_id), start, end],
        )
        count, values = cursor.fetchone()
    p50, p95, p99 = values if count else (None, None, None)
    return {"search_count": count, "search_p50_ms": p50, "search_p95_ms": p95, "search_p99_ms": p99}


def project_memories(project: Project):
    return memory_selectors.memories_of_project(project=project).exclude(scope=MemoryScope.PERSONAL)


def health_counts(project: Project, *, now: datetime | None = None) -> dict[str, Any]:
    """The project's memory health now: counts by state and the review backlog's age in days."""
    now = now or timezone.now()
    live = Q(deprecated=False)
    row = (
        project_memories(project)
        .filter(created_at__lte=now)
        .aggregate(
            total=Count("id", filter=live),
            ready=Count("id", filter=live & Q(needs_review=False, disputed=False, stale_at__isnull=True)),
            needs_review=Count("id", filter=live & Q(needs_review=True)),
            disputed=Count("id", filter=live & Q(disputed=True)),
            stale=Count("id", filter=live & Q(stale_at__isnull=False)),
            deprecated=Count("id", filter=Q(deprecated=True)),
        )
    )
    ages = review_ages(project, now=now)
    row["review_oldest_days"] = round(max(ages), 2) if ages else None
    row["review_median_days"] = round(sorted(ages)[len(ages) // 2], 2) if ages else None
    return row


def review_ages(project: Project, *, now: datetime | None = None) -> list[float]:
    """How long, in days, each memory waiting for review has waited (since it was written)."""
    now = now or timezone.now()
    created = (
        project_memories(project)
        .filter(deprecated=False, needs_review=True)
        .values_list("created_at", flat=True)
    )
    return [(now - at).total_seconds() / 86400 for at in created]


def snapshot_project(project: Project, *, now: datetime | None = None) -> HealthSnapshot:
    """Write today's snapshot (again) and complete yesterday's latency percentiles."""
    now = now or timezone.now()
    today = timezone.localdate(now)
    values = {**health_counts(project, now=now), **latency_percentiles(project.id, *day_bounds(today))}
    snapshot, _ = HealthSnapshot.objects.update_or_create(
        project=project, day=today, defaults={"organization_id": project.organization_id, **values}
    )
    yesterday = today - timedelta(days=1)
    HealthSnapshot.objects.filter(project=project, day=yesterday).update(
        **latency_percentiles(project.id, *day_bounds(yesterday))
    )
    return snapshot


def snapshot_all(*, now: datetime | None = None) -> int:
    now = now or timezone.now()
    count = 0
    for project in Project.objects.all().only("id", "organization_id").iterator():
        snapshot_project(project, now=now)
        count += 1
    RetrievalSample.objects.filter(at__lt=now - timedelta(days=RETRIEVAL_SAMPLE_DAYS)).delete()
    return count
