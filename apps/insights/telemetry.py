"""The observer's telemetry per project: how many memories each signal class promoted,
reinforced and had rejected, per week; and the tightening of a class whose promotions reviewers
reject too often.

A class's rejection rate is rejected ÷ (approved + rejected) over the memories it promoted:
rejected = retired by a reviewer (deprecated), approved = verified by a person. When it is over
REJECTION_LIMIT with at least MIN_REVIEWED reviewed, the class's minimum sessions before
promotion is multiplied by TIGHTEN_FACTOR for the project, recorded, until an admin reverts it
(a reverted class is not tightened again until REJECTION_LIMIT is crossed by newer reviews).
"""

from __future__ import annotations

from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from apps.insights.models import ThresholdAdjustment
from apps.memories.models import Memory
from apps.observer.models import PatternStat, Session
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from apps.tenants.services import audit_record
from memorysaas.kernel.errors import Conflict, NotFound

REJECTION_LIMIT = 0.30
MIN_REVIEWED = 5
TIGHTEN_FACTOR = 1.2
WEEKS = 12

_BY_CLASS = f"""
    SELECT p.kind, date_trunc('week', m.created_at)::date AS week, count(*),
        count(*) FILTER (WHERE m.deprecated), count(*) FILTER (WHERE m.user_verified AND NOT m.deprecated)
    FROM {PatternStat._meta.db_table} p JOIN {Memory._meta.db_table} m ON m.id = p.promoted_memory_id
    WHERE p.project_id = %s AND p.promoted_memory_id IS NOT NULL
      AND m.created_at >= now() - make_interval(weeks => %s)
    GROUP BY 1, 2 ORDER BY 2, 1
"""
_REINFORCED = f"""
    SELECT p.kind, date_trunc('week', s.finalized_at)::date, count(*)
    FROM {Session._meta.db_table} s CROSS JOIN LATERAL unnest(s.reinforced_memory_ids) AS r(id)
    JOIN {PatternStat._meta.db_table} p ON p.project_id = s.project_id AND p.promoted_memory_id = r.id
    WHERE s.project_id = %s AND s.status = 'completed' AND cardinality(s.reinforced_memory_ids) > 0
      AND s.finalized_at >= now() - make_interval(weeks => %s)
    GROUP BY 1, 2 ORDER BY 2, 1
"""
_TOTALS = f"""
    SELECT p.kind, count(*), count(*) FILTER (WHERE m.deprecated),
        count(*) FILTER (WHERE m.user_verified AND NOT m.deprecated)
    FROM {PatternStat._meta.db_table} p JOIN {Memory._meta.db_table} m ON m.id = p.promoted_memory_id
    WHERE p.project_id = %s AND p.promoted_memory_id IS NOT NULL AND m.created_at >= %s
    GROUP BY 1
"""


def _rows(sql: str, params: list[Any]) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def tightenings_of(project_id) -> dict[str, float]:
    """The observer's lookup: signal class -> factor, for the classes tightened now."""
    return dict(
        ThresholdAdjustment.objects.filter(project_id=project_id, reverted_at__isnull=True).values_list(
            "signal_class", "factor"
        )
    )


def project_telemetry(*, project: Project) -> dict[str, Any]:
    weekly: dict[tuple[str, str], dict[str, Any]] = {}
    for kind, week, promoted, rejected, approved in _rows(_BY_CLASS, [project.pk, WEEKS]):
        weekly[(week.isoformat(), kind)] = {"week": week.isoformat(), "signal_class": kind, "promoted": promoted,
                                            "rejected": rejected, "approved": approved, "reinforced": 0}  # fmt: skip
    for kind, week, reinforced in _rows(_REINFORCED, [project.pk, WEEKS]):
        row = weekly.setdefault((week.isoformat(), kind), {"week": week.isoformat(), "signal_class": kind,
                                                           "promoted": 0, "rejected": 0, "approved": 0})  # fmt: skip
        row["reinforced"] = reinforced
    adjustments = ThresholdAdjustment.objects.filter(project=project)[:50]
    return {
        "weekly": [weekly[k] for k in sorted(weekly)],
        "classes": class_rates(project=project),
        "rejection_limit": REJECTION_LIMIT,
        "tightened": [
            {
                "id": a.pk,
                "signal_class": a.signal_class,
                "factor": a.factor,
                "rejection_rate": round(a.rejection_rate, 4),
                "promoted": a.promoted,
                "rejected": a.rejected,
                "created_at": a.created_at,
                "reverted_at": a.reverted_at,
            }
            for a in adjustments
        ],  # fmt: skip
    }


def class_rates(*, project: Project, since=None) -> list[dict[str, Any]]:
    out = []
    for kind, promoted, rejected, approved in _rows(
        _TOTALS, [project.pk, since or timezone.now().replace(year=1970)]
    ):
        reviewed = rejected + approved
        out.append({"signal_class": kind, "promoted": promoted, "rejected": rejected, "approved": approved,
                    "rejection_rate": round(rejected / reviewed, 4) if reviewed else None})  # fmt: skip
    return out


@transaction.atomic
def thresholds_tighten(*, project: Project) -> list[ThresholdAdjustment]:
    """Tighten each class over the limit (once: a class already tightened is left as it is).
    A class an admin reverted counts only the memories promoted after the revert."""
    active = set(tightenings_of(project.pk))
    reverted = dict(
        ThresholdAdjustment.objects.filter(project=project, reverted_at__isnull=False)
        .order_by("signal_class", "-reverted_at")
        .distinct("signal_class")
        .values_list("signal_class", "reverted_at")
    )
    made = []
    for row in class_rates(project=project):
        kind = row["signal_class"]
        if kind in active:
            continue
        if kind in reverted:
            row = next(
                (r for r in class_rates(project=project, since=reverted[kind]) if r["signal_class"] == kind),
                None,
            )
            if row is None:
                continue
        reviewed = row["rejected"] + row["approved"]
        if reviewed < MIN_REVIEWED or row["rejected"] / reviewed <= REJECTION_LIMIT:
            continue
        made.append(
            ThresholdAdjustment.objects.create(
                organization_id=project.organization_id,
                project=project,
                signal_class=kind,
                factor=TIGHTEN_FACTOR,
                rejection_rate=row["rejected"] / reviewed,
                promoted=row["promoted"],
                rejected=row["rejected"],
            )  # fmt: skip
        )
    return made


@transaction.atomic
def adjustment_revert(*, project: Project, actor: Principal, adjustment_id: int) -> dict[str, Any]:
    adjustment = (
        ThresholdAdjustment.objects.select_for_update().filter(project=project, pk=adjustment_id).first()
    )
    if adjustment is None:
        raise NotFound("No such threshold change.")
    if adjustment.reverted_at is not None:
        raise Conflict("This threshold change is already reverted.")
    adjustment.reverted_at = timezone.now()
    adjustment.reverted_by = actor.user if actor.user is not None and actor.user.pk else None
    adjustment.save(update_fields=["reverted_at", "reverted_by"])
    audit_record(
        actor=actor, action="insights.threshold_reverted", organization=project.organization, target=adjustment,
        metadata={"signal_class": adjustment.signal_class, "factor": adjustment.factor},
    )  # fmt: skip
    return {
        "id": adjustment.pk,
        "signal_class": adjustment.signal_class,
        "reverted_at": adjustment.reverted_at,
    }
