"""The insights API: the A/B comparison (JSON or CSV), the project's experiment setting, the
phase-weight proposals and the observer's telemetry."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any, Literal
from uuid import UUID

from django.http import HttpResponse
from django.utils import timezone
from ninja import Field, Query, Router
from pydantic import model_validator

from apps.insights import experiments, export, learning, selectors, telemetry
from apps.tenants.roles import Perm
from apps.tenants.selectors import project_get
from memorysaas.kernel.errors import Forbidden, conflict
from memorysaas.kernel.schemas import InputSchema, OutputSchema, QuerySchema

router = Router(tags=["insights"])
DEFAULT_DAYS = 30
MAX_DAYS = 366


class InsightsQuery(QuerySchema):
    date_from: date | None = Field(None, alias="from", description="First day (default: 30 days ago).")
    date_to: date | None = Field(None, alias="to", description="Last day (default: today).")
    period: int | None = Field(
        None, ge=1, le=2**31 - 1, description="An experiment period's id (default: the newest in the window)."
    )
    format: Literal["json", "csv"] = "json"

    @model_validator(mode="after")
    def _window(self) -> InsightsQuery:
        # A window given back to front is read the right way round: the schema cannot say that
        # one date must precede the other, so a request it allows is answered, not refused.
        if self.date_from and self.date_to and self.date_from > self.date_to:
            self.date_from, self.date_to = self.date_to, self.date_from
        return self


_CSV = {
    "responses": {
        200: {
            "description": "The comparison; `?format=csv` or `Accept: text/csv` gives one row per metric.",
            "content": {
                "application/json": {"schema": {"type": "object", "additionalProperties": True}},
                "text/csv": {"schema": {"type": "string"}},
            },
        }
    }
}


@router.get("/projects/{project_id}/insights", response=dict[str, Any], openapi_extra=_CSV)
def insights_get(request, project_id: UUID, query: Query[InsightsQuery]):
    """Whether memory helps: each A/B metric per group, the effect of full memory against control
    with its 95 % interval and the sessions behind it, tokens saved (an estimate), per day."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    today = timezone.localdate()
    date_to = query.date_to or today
    date_from = query.date_from or min(date_to, today) - timedelta(days=DEFAULT_DAYS - 1)
    # A longer window is cut to its last MAX_DAYS days (the answer's period says which days).
    date_from = max(date_from, date_to - timedelta(days=MAX_DAYS - 1))
    result = selectors.project_insights(
        project=project, date_from=date_from, date_to=date_to, period_id=query.period
    )
    if query.format == "csv" or "text/csv" in request.headers.get("Accept", ""):
        response = HttpResponse(export.insights_csv(result), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = (
            f'attachment; filename="insights-{project.slug}-{date_from}-{date_to}.csv"'
        )
        return response
    return result


class PeriodOut(OutputSchema):
    id: int
    enabled: bool
    control_pct: int
    passive_pct: int
    full_pct: int
    started_at: Any
    ended_at: Any | None
    changed_by: str = Field("", alias="changed_by_label")
    reason: str


class ExperimentOut(OutputSchema):
    current: PeriodOut
    periods: list[PeriodOut]


class ExperimentIn(InputSchema):
    enabled: bool
    # (each at most half: the two together never leave the full group less than nothing)
    control_pct: int = Field(ge=0, le=50)
    passive_pct: int = Field(ge=0, le=50)
    reason: str = Field("", max_length=500)


def _experiment(project) -> dict[str, Any]:
    current = experiments.experiment_current(project=project)
    return {"current": current, "periods": experiments.periods_of(project=project)}


@router.get("/projects/{project_id}/experiment", response=ExperimentOut)
def experiment_get(request, project_id: UUID):
    """The project's A/B split now and every earlier period (newest first)."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    return _experiment(project)


@router.put("/projects/{project_id}/experiment", response=ExperimentOut)
def experiment_put(request, project_id: UUID, payload: ExperimentIn):
    """Change the split (admins): the current period ends and a new one starts, so the
    comparison never mixes sessions assigned under two splits."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.ADMIN)
    experiments.experiment_configure(
        project=project, actor=request.auth, enabled=payload.enabled, control_pct=payload.control_pct,
        passive_pct=payload.passive_pct, reason=payload.reason,
    )  # fmt: skip
    return _experiment(project)


@router.get("/projects/{project_id}/insights/phase-weights", response=list[dict[str, Any]])
def phase_weights_list(request, project_id: UUID):
    """The phase-weight proposals (newest first): per phase and memory type, the weight now, the
    one proposed and the evidence (QA first-pass with and without that type injected)."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    return learning.proposals_of(project=project)


@router.post(
    "/projects/{project_id}/insights/phase-weights/{proposal_id}/apply",
    response=dict[str, Any],
    openapi_extra=conflict("The proposal was already applied (`conflict`)."),
)
def phase_weights_apply(request, project_id: UUID, proposal_id: int):
    """Apply a proposal to the project's retrieval (stewards and admins)."""
    project = project_get(principal=request.auth, project_id=project_id)
    if not any(request.auth.has(project.organization_id, p) for p in (Perm.MEMORIES_REVIEW, Perm.ADMIN)):
        raise Forbidden(f"This needs the '{Perm.MEMORIES_REVIEW}' or the '{Perm.ADMIN}' permission.")
    return learning.proposal_apply(project=project, actor=request.auth, proposal_id=proposal_id)


@router.get("/projects/{project_id}/insights/telemetry", response=dict[str, Any])
def telemetry_get(request, project_id: UUID):
    """The observer's promotions, reinforcements and rejections per signal class and week, and
    the classes whose promotion threshold is tightened for the project."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    return telemetry.project_telemetry(project=project)


@router.post(
    "/projects/{project_id}/insights/thresholds/{adjustment_id}/revert",
    response=dict[str, Any],
    openapi_extra=conflict("The change was already reverted (`conflict`)."),
)
def threshold_revert(request, project_id: UUID, adjustment_id: int):
    """Undo a tightened threshold (admins)."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.ADMIN)
    return telemetry.adjustment_revert(project=project, actor=request.auth, adjustment_id=adjustment_id)
