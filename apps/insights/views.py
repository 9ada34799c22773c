"""The Insights page: whether memory helps (the A/B comparison), and the project's memory over
time, as charts with a data table beside each for screen readers and for reading exact values."""

from __future__ import annotations

from datetime import date, datetime, time
from typing import Any

from django.contrib import messages
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods

from apps.insights import charts, weekly
from apps.insights.selectors import project_insights
from apps.tenants.dashboard import project_page
from apps.tenants.roles import Perm

RANGES = (7, 30, 90)
DEFAULT_RANGE = 30


def _range(request) -> int:
    try:
        days = int(request.GET.get("days", DEFAULT_RANGE))
    except ValueError:
        return DEFAULT_RANGE
    return days if days in RANGES else DEFAULT_RANGE


def _epochs(days: list[date]) -> list[int]:
    return [int(timezone.make_aware(datetime.combine(d, time.min)).timestamp()) for d in days]


def series_chart(
    key: str,
    title: str,
    window: charts.Window,
    series: list[tuple],
    *,
    unit: str,
    summary: str,
    kind: str = "line",
) -> dict[str, Any]:
    """A time-series chart: the spec static/js/charts.js draws, and the same numbers as rows."""
    spec = {
        "kind": kind,
        "unit": unit,
        "x": _epochs(window.days),
        "series": [
            {"label": s[0], "values": s[1], "color": s[2], **({"axis": s[3]} if len(s) > 3 else {})}
            for s in series
        ],
    }
    rows = [(day, [s[1][i] for s in series]) for i, day in enumerate(window.days)]
    return {
        "key": key,
        "title": title,
        "spec": spec,
        "columns": [s[0] for s in series],
        "rows": rows,
        "summary": summary,
        "has_data": any(v not in (None, 0) for s in series for v in s[1]),
    }


def _last(values: list) -> Any:
    return next((v for v in reversed(values) if v is not None), None)


def effect_text(value: float, metric: dict[str, Any]) -> str:
    """A relative effect as a percentage; an absolute one in points (rates) or in its unit."""
    if metric.get("effect_kind") != "absolute":
        return f"{value:+.1%}"
    if metric.get("unit") == "rate":
        return f"{value * 100:+.1f} pts"
    return f"{value:+.2f} {metric.get('unit', '')}".rstrip()


def forest_rows(metrics: list[dict[str, Any]], *, width: int = 320) -> list[dict[str, Any]]:
    """Each compared metric's effect and interval as x positions on its own symmetric scale
    around 0. A metric with no comparison (the graph boost rate, measured in full memory only)
    shows its value and interval as text."""
    out = []
    for metric in metrics:
        row = {**metric, "width": width, "zero": width / 2, "compared": metric.get("effect") is not None}
        if metric.get("enough") and row["compared"] and metric.get("interval"):
            lo, hi = metric["interval"]
            reach = max(abs(lo), abs(hi), abs(metric["effect"]), 0.05) * 1.15
            scale = lambda v, r=reach: round(width / 2 + v / r * (width / 2 - 8), 1)  # noqa: E731
            better = (metric["effect"] > 0) == metric["higher_is_better"]
            row.update(
                x=scale(metric["effect"]),
                x_lo=scale(lo),
                x_hi=scale(hi),
                tone=("ok" if better else "danger") if metric["significant"] else "muted",
                verdict=("better" if better else "worse") if metric["significant"] else "no clear difference",
                effect_text=effect_text(metric["effect"], metric),
                lo_text=effect_text(lo, metric),
                hi_text=effect_text(hi, metric),
            )
        out.append(row)
    return out


def insights_context(request, project, days: int) -> dict[str, Any]:
    window = charts.Window.last(days)
    report = project_insights(project=project, date_from=window.start, date_to=window.end)
    health = charts.health_history(project, window)
    activity = charts.activity(project, window)
    precision = charts.precision(project, window)
    latency = charts.latency_history(project, window)
    backlog = charts.backlog_ages(project)
    top = charts.top_memories(principal=request.principal, project=project)
    largest_top = max((m["injections"] for m in top), default=0)
    largest_bucket = max((b["count"] for b in backlog), default=0)
    health_chart = series_chart(
        "health",
        "Memory health over time",
        window,
        [(charts.HEALTH_LABELS[k], health[k], i + 1) for i, k in enumerate(charts.HEALTH_SERIES)],
        unit="memories",
        summary=(
            f"Now {_last(health['total']) or 0} memories: {_last(health['ready']) or 0} ready, "
            f"{_last(health['needs_review']) or 0} need review, {_last(health['disputed']) or 0} disputed, "
            f"{_last(health['stale']) or 0} stale, {_last(health['deprecated']) or 0} deprecated."
        ),
    )
    backlog_chart = series_chart(
        "backlog",
        "Review backlog over time",
        window,
        [
            ("Waiting for review", health["needs_review"], 3),
            ("Oldest wait (days)", health["review_oldest_days"], 4, "right"),
            ("Median wait (days)", health["review_median_days"], 5, "right"),
        ],
        unit="memories",
        summary=(
            f"{_last(health['needs_review']) or 0} memories wait for review; the oldest has waited "
            f"{_last(health['review_oldest_days']) or 0} days."
        ),
    )
    activity_chart = series_chart(
        "activity",
        "Injections and uses per day",
        window,
        [("Injected", activity["injections"], 1), ("Used or helpful", activity["uses"], 2)],
        unit="per day",
        kind="bars",
        summary=(
            f"{sum(activity['injections'])} injections and {sum(activity['uses'])} reported uses in the last {days} days."
        ),
    )
    precision_chart = series_chart(
        "precision",
        "Feedback precision",
        window,
        [
            ("Helpful + used", precision["positive"], 1),
            ("Flagged + corrected", precision["negative"], 6),
            ("Precision (share)", precision["precision"], 2, "right"),
        ],
        unit="feedback",
        summary=(
            f"{precision['positive_total']} helpful or used against {precision['negative_total']} flagged or corrected"
            + (f": precision {precision['overall']:.0%}." if precision["overall"] is not None else ".")
        ),
    )
    latency_chart = series_chart(
        "latency",
        "Retrieval latency",
        window,
        [("p50", latency["p50"], 2), ("p95", latency["p95"], 4), ("p99", latency["p99"], 6)],
        unit="ms",
        summary=(
            f"{sum(latency['count'])} searches measured; latest day p50 {_last(latency['p50']) or '–'} ms, "
            f"p95 {_last(latency['p95']) or '–'} ms, p99 {_last(latency['p99']) or '–'} ms."
        ),
    )
    return {
        "project": project,
        "days": days,
        "ranges": RANGES,
        "window": window,
        "report": report,
        "forest": forest_rows(report["metrics"]),
        "charts": [health_chart, backlog_chart, activity_chart, precision_chart, latency_chart],
        "health_chart": health_chart,
        "backlog_chart": backlog_chart,
        "activity_chart": activity_chart,
        "precision_chart": precision_chart,
        "latency_chart": latency_chart,
        "backlog": [(b, charts_width(b["count"], largest_bucket)) for b in backlog],
        "top": [(m, charts_width(m["injections"], largest_top)) for m in top],
        "synthesis": weekly.latest(project),
    }


def charts_width(value: int, largest: int) -> int:
    if largest <= 0 or value <= 0:
        return 0
    return max(2, round(100 * value / largest))


def health_page_charts(project, *, days: int = 30) -> dict[str, Any]:
    """The charts the project's health page shows (apps/review): health and activity over time."""
    window = charts.Window.last(days)
    health = charts.health_history(project, window)
    activity = charts.activity(project, window)
    return {
        "health_charts": [
            series_chart(
                "health",
                "Memory health over time",
                window,
                [(charts.HEALTH_LABELS[k], health[k], i + 1) for i, k in enumerate(charts.HEALTH_SERIES)],
                unit="memories",
                summary=f"Memories by state over the last {days} days (Insights has more).",
            ),
            series_chart(
                "activity",
                "Injections and uses per day",
                window,
                [("Injected", activity["injections"], 1), ("Used or helpful", activity["uses"], 2)],
                unit="per day",
                kind="bars",
                summary=f"{sum(activity['injections'])} injections and {sum(activity['uses'])} reported uses in the last {days} days.",
            ),
        ]
    }


@project_page(Perm.MEMORIES_READ)
@require_GET
def insights(request, project):
    return render(request, "insights/page.html", insights_context(request, project, _range(request)))


@project_page(Perm.MEMORIES_READ)
@require_GET
def weekly_history(request, project):
    return render(
        request,
        "insights/weekly.html",
        {
            "project": project,
            "weeks": list(
                weekly.WeeklySynthesis.objects.filter(project=project).order_by("-week_start")[:52]
            ),
            "opted_out": weekly.opted_out(organization_id=project.organization_id, user=request.user),
            "recipient": request.user in weekly.project_stewards(project),
        },
    )


@project_page(Perm.MEMORIES_READ)
@require_http_methods(["GET", "POST"])
def weekly_opt_out(request, project):
    """GET (the email's link) shows the choice; POST sets it. Per organization."""
    if request.method == "POST":
        out = request.POST.get("email") != "on"
        weekly.opt_out(organization_id=project.organization_id, user=request.user, out=out)
        messages.success(
            request,
            "You will not get the weekly synthesis by email."
            if out
            else "The weekly synthesis will be emailed to you.",
        )
    return redirect("weekly_history", project.organization.slug, project.slug)
