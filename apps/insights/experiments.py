"""A project's A/B experiment: its current split, and the admin's change that starts a new period.

A project that nobody configured runs the default split (5 % control, 10 % passive, 85 % full)
in a first period opened when its first session is assigned.
"""

from __future__ import annotations

from uuid import UUID

from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.insights import ab
from apps.insights.models import ExperimentPeriod
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from apps.tenants.services import audit_record
from memorysaas.kernel.errors import Invalid


def experiment_current(*, project: Project) -> ExperimentPeriod:
    """The project's open period, opened with the default split if it has none."""
    period = ExperimentPeriod.objects.filter(project=project, ended_at__isnull=True).first()
    if period is not None:
        return period
    try:
        with transaction.atomic():
            return ExperimentPeriod.objects.create(
                organization_id=project.organization_id,
                project=project,
                started_at=project.created_at or timezone.now(),
                changed_by_label="default",
            )
    except IntegrityError:  # (another session opened it at the same moment)
        return ExperimentPeriod.objects.get(project=project, ended_at__isnull=True)


def split_of(period: ExperimentPeriod) -> ab.Split:
    return ab.Split(enabled=period.enabled, control_pct=period.control_pct, passive_pct=period.passive_pct)


def session_group(session_id: UUID, project: Project) -> str:
    """The assigner the observer calls when a session opens."""
    return ab.assign(session_id, project.pk, split_of(experiment_current(project=project)))


@transaction.atomic
def experiment_configure(
    *, project: Project, actor: Principal, enabled: bool, control_pct: int, passive_pct: int, reason: str = ""
) -> ExperimentPeriod:
    """Change the split: the open period ends now and a new one starts (a comparison never mixes
    two). Setting what is already set changes nothing."""
    if not (0 <= control_pct <= 100 and 0 <= passive_pct <= 100 and control_pct + passive_pct <= 100):
        raise Invalid(
            "control_pct and passive_pct are 0–100 and add up to at most 100.",
            details={"field": "control_pct"},
        )
    current = experiment_current(project=project)
    current = ExperimentPeriod.objects.select_for_update().get(pk=current.pk)
    if (current.enabled, current.control_pct, current.passive_pct) == (enabled, control_pct, passive_pct):
        return current
    now = timezone.now()
    current.ended_at = now
    current.save(update_fields=["ended_at"])
    period = ExperimentPeriod.objects.create(
        organization_id=project.organization_id,
        project=project,
        enabled=enabled,
        control_pct=control_pct,
        passive_pct=passive_pct,
        started_at=now,
        changed_by=actor.user if actor.user is not None and actor.user.pk else None,
        changed_by_label=actor.label,
        reason=reason[:500],
    )
    audit_record(
        actor=actor,
        action="insights.experiment_changed",
        organization=project.organization,
        target=period,
        metadata={
            "before": {"enabled": current.enabled, "control_pct": current.control_pct,
                       "passive_pct": current.passive_pct},
            "after": {"enabled": enabled, "control_pct": control_pct, "passive_pct": passive_pct},
        },
    )  # fmt: skip
    return period


def periods_of(*, project: Project) -> list[ExperimentPeriod]:
    return list(ExperimentPeriod.objects.filter(project=project).order_by("-started_at"))
