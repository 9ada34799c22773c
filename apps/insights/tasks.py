"""The insights app's background jobs (django-q2 schedules); thin over the services."""

from __future__ import annotations

from apps.insights import learning, rollups, telemetry
from apps.insights.models import SessionMetrics
from apps.tenants.models import Project
from memorysaas.kernel.queue import retry_on_database_error


@retry_on_database_error
def rollup_task() -> dict[str, int]:
    return rollups.rollup_run().as_dict()


@retry_on_database_error
def learning_task() -> dict[str, int]:
    """Daily: a phase-weight proposal for each project with enough validated sessions, and the
    tightening of signal classes reviewers reject too often."""
    proposed = tightened = 0
    project_ids = SessionMetrics.objects.values_list("project_id", flat=True).distinct()
    for project in Project.objects.filter(id__in=project_ids):
        proposed += learning.proposal_build(project=project) is not None
        tightened += len(telemetry.thresholds_tighten(project=project))
    return {"proposals": proposed, "tightened": tightened}
