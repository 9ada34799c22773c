"""What the dashboard's charts draw, read for one project and a range of days.

Every series is aligned on the same list of days (a day without data is None, so a line breaks
rather than dropping to zero). Today's point of the health and latency series is computed live,
so the page follows the data between the hourly snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from django.db.models import Count, F, Q
from django.db.models.functions import TruncDate
from django.utils import timezone

from apps.insights import snapshots
from apps.insights.history import HealthSnapshot
from apps.memories import selectors as memory_selectors
from apps.memories.models import FeedbackKind
from apps.memories.selectors import memories_visible
from apps.observer.models import Session
from apps.tenants.models import Project
from apps.tenants.principal import Principal

HEALTH_SERIES = ("total", "ready", "needs_review", "disputed", "stale", "deprecated")
HEALTH_LABELS = {
    "total": "Total",
    "ready": "Ready",
    "needs_review": "Needs review",
    "disputed": "Disputed",
    "stale": "Stale",
    "deprecated": "Deprecated",
}
POSITIVE = (FeedbackKind.HELPFUL, FeedbackKind.USED)
NEGATIVE = (FeedbackKind.FLAG, FeedbackKind.CORRECT)
# Review backlog age buckets: (label, upper bound in days).
AGE_BUCKETS: tuple[tuple[str, float], ...] = (
    ("under 1 day", 1),
    ("1–3 days", 3),
    ("3–7 days", 7),
    ("1–4 weeks", 28),
    ("over 4 weeks", float("inf")),
)


@dataclass(frozen=True)
class Window:
    start: date
    end: date  # inclusive

    @classmethod
    def last(cls, days: int, *, today: date | None = None) -> Window:
        today = today or timezone.localdate()
        return cls(today - timedelta(days=days - 1), today)

    @property
    def days(self) -> list[date]:
        return [self.start + timedelta(days=i) for i in range((self.end - self.start).days + 1)]

    def bounds(self):
        return snapshots.day_bounds(self.start)[0], snapshots.day_bounds(self.end)[1]


def _aligned(window: Window, by_day: dict[date, Any]) -> list[Any]:
    return [by_day.get(day) for day in window.days]


def health_history(project: Project, window: Window) -> dict[str, list]:
    rows = {
        s.day: s
        for s in HealthSnapshot.objects.filter(project=project, day__range=(window.start, window.end))
    }
    today = timezone.localdate()
    live = snapshots.health_counts(project) if window.start <= today <= window.end else None
    series: dict[str, list] = {}
    for key in (*HEALTH_SERIES, "review_oldest_days", "review_median_days"):
        by_day = {day: getattr(s, key) for day, s in rows.items()}
        if live is not None:
            by_day[today] = live[key]
        series[key] = _aligned(window, by_day)
    return series


def latency_history(project: Project, window: Window) -> dict[str, list]:
    rows = {
        s.day: s
        for s in HealthSnapshot.objects.filter(project=project, day__range=(window.start, window.end))
    }
    by_day = {
        day: (s.search_p50_ms, s.search_p95_ms, s.search_p99_ms, s.search_count) for day, s in rows.items()
    }
    today = timezone.localdate()
    if window.start <= today <= window.end:
        now = snapshots.latency_percentiles(project.id, *snapshots.day_bounds(today))
        by_day[today] = (
            now["search_p50_ms"],
            now["search_p95_ms"],
            now["search_p99_ms"],
            now["search_count"],
        )
    aligned = _aligned(window, by_day)
    pick = lambda i: [None if v is None or v[i] is None else round(v[i], 2) for v in aligned]  # noqa: E731
    return {"p50": pick(0), "p95": pick(1), "p99": pick(2), "count": [v[3] if v else 0 for v in aligned]}


def activity(project: Project, window: Window) -> dict[str, list]:
    """Memories injected into sessions started each day, and memories reported used or helpful."""
    start, end = window.bounds()
    injected = {
        row["day"]: row["n"]
        for row in Session.objects.filter(project=project, started_at__gte=start, started_at__lt=end)
        .annotate(day=TruncDate("started_at"))
        .values("day")
        .annotate(n=_cardinality_sum())
    }
    used = {
        row["day"]: row["n"]
        for row in _feedback(project, start, end)
        .filter(kind__in=POSITIVE)
        .values("day")
        .annotate(n=Count("id"))
    }
    return {
        "injections": [injected.get(d) or 0 for d in window.days],
        "uses": [used.get(d, 0) for d in window.days],
    }


def _cardinality_sum():
    from django.db.models import Func, IntegerField, Sum

    return Sum(Func(F("injected_memory_ids"), function="cardinality", output_field=IntegerField()))


def _feedback(project: Project, start, end):
    return (
        memory_selectors.feedback_of_project(project=project)
        .filter(created_at__gte=start, created_at__lt=end)
        .annotate(day=TruncDate("created_at"))
    )


def precision(project: Project, window: Window) -> dict[str, Any]:
    """Per day: helpful + used, flagged + corrected, and the share of the first among both."""
    start, end = window.bounds()
    rows = (
        _feedback(project, start, end)
        .filter(kind__in=(*POSITIVE, *NEGATIVE))
        .values("day")
        .annotate(good=Count("id", filter=Q(kind__in=POSITIVE)), bad=Count("id", filter=Q(kind__in=NEGATIVE)))
    )
    by_day = {row["day"]: (row["good"], row["bad"]) for row in rows}
    good = [by_day.get(d, (0, 0))[0] for d in window.days]
    bad = [by_day.get(d, (0, 0))[1] for d in window.days]
    share = [round(g / (g + b), 3) if g + b else None for g, b in zip(good, bad, strict=True)]
    total_good, total_bad = sum(good), sum(bad)
    return {
        "positive": good,
        "negative": bad,
        "precision": share,
        "overall": round(total_good / (total_good + total_bad), 3) if total_good + total_bad else None,
        "positive_total": total_good,
        "negative_total": total_bad,
    }


def backlog_ages(project: Project) -> list[dict[str, Any]]:
    ages = snapshots.review_ages(project)
    buckets, lower = [], 0.0
    for label, upper in AGE_BUCKETS:
        buckets.append({"label": label, "count": sum(1 for a in ages if lower <= a < upper)})
        lower = upper
    return buckets


def top_memories(*, principal: Principal, project: Project, limit: int = 10) -> list[dict[str, Any]]:
    """The memories injected most often (the ones this viewer may see), with their feedback."""
    rows = (
        memories_visible(principal=principal, project=project)
        .filter(deprecated=False, usage_row__access_count__gt=0)
        .order_by("-usage_row__access_count", "-used_count", "id")
        .values(
            "id", "type", "content", "usage_row__access_count", "used_count", "helpful_count", "flag_count"
        )[:limit]
    )
    return [
        {
            "id": row["id"],
            "type": row["type"],
            "text": row["content"][:90],
            "injections": row["usage_row__access_count"],
            "used": row["used_count"],
            "helpful": row["helpful_count"],
            "flagged": row["flag_count"],
        }
        for row in rows
    ]
