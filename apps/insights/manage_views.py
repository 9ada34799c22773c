"""The Insights pages where people act on what the jobs measured: the A/B experiment's split
(admins change it; the change starts a new period), the phase-weight proposals (a steward or an
admin applies one) and the observer's telemetry (an admin reverts a tightened threshold).

Everyone who may read the project sees these pages; the buttons are shown only to whom the
action is allowed, and the POST checks the permission again (a viewer's POST is a 403).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from django import forms
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from apps.insights import experiments, learning, telemetry
from apps.insights.views import series_chart
from apps.tenants.dashboard import project_page
from apps.tenants.roles import Perm
from memorysaas.kernel.errors import ApiError

CHART_COLOURS = 6  # --chart-1 … --chart-6 in static/css/app.css


class ExperimentForm(forms.Form):
    enabled = forms.BooleanField(label="Run the A/B test", required=False)
    # (each at most half, as the API allows: the full-memory group never drops below nothing)
    control_pct = forms.IntegerField(label="Control % (no memory)", min_value=0, max_value=50)
    passive_pct = forms.IntegerField(label="Passive % (session-start memory only)", min_value=0, max_value=50)
    reason = forms.CharField(label="Reason", max_length=500, required=False)


def _may(request, project, *permissions: str) -> bool:
    return any(request.principal.has(project.organization_id, p) for p in permissions)


def _may_review(request, project) -> bool:
    return _may(request, project, Perm.MEMORIES_REVIEW, Perm.ADMIN)


def _experiment_page(request, project, form, *, status: int = 200):
    current = experiments.experiment_current(project=project)
    return render(
        request,
        "insights/experiment.html",
        {
            "project": project,
            "tab": "experiment",
            "current": current,
            "periods": experiments.periods_of(project=project),
            "form": form,
            "may_change": _may(request, project, Perm.ADMIN),
        },
        status=status,
    )


@project_page(Perm.MEMORIES_READ)
@require_http_methods(["GET", "POST"])
def experiment(request, project):
    if request.method == "GET":
        current = experiments.experiment_current(project=project)
        initial = {"enabled": current.enabled, "control_pct": current.control_pct,
                   "passive_pct": current.passive_pct}  # fmt: skip
        return _experiment_page(request, project, ExperimentForm(initial=initial))
    if not _may(request, project, Perm.ADMIN):
        raise PermissionDenied
    form = ExperimentForm(request.POST)
    if not form.is_valid():
        return _experiment_page(request, project, form, status=422)
    before = experiments.experiment_current(project=project).pk
    try:
        period = experiments.experiment_configure(
            project=project, actor=request.principal, **form.cleaned_data
        )
    except ApiError as exc:
        form.add_error(None, exc.message)
        return _experiment_page(request, project, form, status=422)
    if period.pk == before:
        messages.info(request, "That is the split already in force: nothing changed.")
    else:
        messages.success(
            request,
            f"Saved. A new experiment period started: control {period.control_pct} %, "
            f"passive {period.passive_pct} %, full {period.full_pct} %.",
        )
    return redirect("insights_experiment", project.organization.slug, project.slug)


def _points(entry: dict[str, Any]) -> str:
    lo, hi = entry["interval"]
    return f"{entry['lift'] * 100:+.1f} pts ({lo * 100:+.1f} to {hi * 100:+.1f})"


def proposal_rows(proposal: dict[str, Any], in_use: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """A proposal's report as table rows, the changes first, each with the weight in use now."""
    rows = [
        {"phase": phase, "type": memory_type, "now": in_use.get(phase, {}).get(memory_type, 1.0),
         "changed": entry["proposed"] != entry["before"], "lift_text": _points(entry), **entry}
        for phase, types in proposal["report"].items()
        for memory_type, entry in types.items()
    ]  # fmt: skip
    return sorted(rows, key=lambda r: (not r["changed"], r["phase"], r["type"]))


@project_page(Perm.MEMORIES_READ)
@require_GET
def phase_weights(request, project):
    in_use = learning.weights_of(project.pk)
    proposals = [{**p, "rows": proposal_rows(p, in_use)} for p in learning.proposals_of(project=project)]
    return render(
        request,
        "insights/phase_weights.html",
        {
            "project": project,
            "tab": "phase_weights",
            "proposals": proposals,
            "may_apply": _may_review(request, project),
            "min_sessions": learning.MIN_SESSIONS,
        },
    )


@project_page(Perm.MEMORIES_READ)
@require_POST
def phase_weights_apply(request, project, proposal_id: int):
    if not _may_review(request, project):
        raise PermissionDenied
    try:
        applied = learning.proposal_apply(project=project, actor=request.principal, proposal_id=proposal_id)
    except ApiError as exc:
        messages.error(request, exc.message)
    else:
        changed = sum(len(types) for types in applied["applied"].values())
        messages.success(
            request, f"Proposal applied: {changed} weights changed for this project's retrieval."
        )
    return redirect("insights_phase_weights", project.organization.slug, project.slug)


@dataclass(frozen=True)
class Weeks:
    """The x axis of the telemetry charts (series_chart reads `days`): each week's Monday."""

    days: list[date]

    @classmethod
    def last(cls, weeks: int) -> Weeks:
        today = timezone.localdate()
        monday = today - timedelta(days=today.weekday())
        return cls([monday - timedelta(weeks=weeks - 1 - i) for i in range(weeks)])


MEASURES = (
    ("promoted", "Promotions by signal class"),
    ("reinforced", "Reinforcements by signal class"),
    ("rejected", "Rejections by signal class"),
)


def telemetry_charts(weekly: list[dict[str, Any]], weeks: Weeks) -> list[dict[str, Any]]:
    """One chart per measure, a line per signal class, a point per week (0 where none)."""
    index = {week.isoformat(): i for i, week in enumerate(weeks.days)}
    classes = sorted({row["signal_class"] for row in weekly})
    out = []
    for measure, title in MEASURES:
        values = {kind: [0] * len(weeks.days) for kind in classes}
        for row in weekly:
            if row["week"] in index:
                values[row["signal_class"]][index[row["week"]]] += row.get(measure, 0)
        series = [(kind, values[kind], i % CHART_COLOURS + 1) for i, kind in enumerate(classes)]
        total = sum(sum(v) for v in values.values())
        chart = series_chart(
            f"telemetry-{measure}",
            title,
            weeks,  # type: ignore[arg-type]
            series,
            unit="memories",
            summary=f"{total} in the last {len(weeks.days)} weeks across {len(classes)} signal classes.",
        )
        out.append({**chart, "x_label": "Week of", "x_unit": "week"})
    return out


@project_page(Perm.MEMORIES_READ)
@require_GET
def telemetry_page(request, project):
    report = telemetry.project_telemetry(project=project)
    weeks = Weeks.last(telemetry.WEEKS)
    return render(
        request,
        "insights/telemetry.html",
        {
            "project": project,
            "tab": "telemetry",
            "charts": telemetry_charts(report["weekly"], weeks),
            "classes": report["classes"],
            "rejection_limit": report["rejection_limit"],
            "tightened": report["tightened"],
            "may_revert": _may(request, project, Perm.ADMIN),
        },
    )


@project_page(Perm.ADMIN)
@require_POST
def threshold_revert(request, project, adjustment_id: int):
    try:
        reverted = telemetry.adjustment_revert(
            project=project, actor=request.principal, adjustment_id=adjustment_id
        )
    except ApiError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, f"The {reverted['signal_class']} threshold is back to its default.")
    return redirect("insights_telemetry", project.organization.slug, project.slug)
