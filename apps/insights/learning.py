"""Phase-weight learning: which memory types go with QA passing first time, per phase, and the
weights that would follow. A proposal is only a report until a steward or an admin applies it;
applying records the weights before and after, and retrieval then reads the project's weights.

The rule, per (phase, memory type) with at least MIN_EACH validated sessions with and without
that type injected: lift = first-pass rate with − without (Newcombe 95 % interval). Where the
interval excludes 0 the proposed weight is the current one × (1 + lift), kept within
[MIN_WEIGHT, MAX_WEIGHT]; elsewhere the weight stays.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.insights import stats
from apps.insights.models import PhaseWeightProposal, ProjectPhaseWeights, ProposalStatus, SessionMetrics
from apps.memories.kinds import PHASE_WEIGHTS
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from apps.tenants.services import audit_record
from memorysaas.kernel.errors import Conflict, NotFound

MIN_SESSIONS = 30
MIN_EACH = 5
MIN_WEIGHT, MAX_WEIGHT = 0.3, 2.5


def weights_of(project_id) -> dict[str, dict[str, float]]:
    """The phase weights retrieval uses for the project: the defaults, with what a steward applied."""
    applied = (
        ProjectPhaseWeights.objects.filter(project_id=project_id).values_list("weights", flat=True).first()
    )
    if not applied:
        return PHASE_WEIGHTS
    return {
        phase: {**PHASE_WEIGHTS.get(phase, {}), **applied.get(phase, {})}
        for phase in {*PHASE_WEIGHTS, *applied}
    }


def _evidence(project: Project) -> tuple[int, dict[str, dict[str, dict[str, list[int]]]]]:
    """(validated sessions, phase -> type -> {"with": [passed, n], "without": [passed, n]})."""
    rows = SessionMetrics.objects.filter(project=project, qa_first_pass__isnull=False).values_list(
        "phase", "qa_first_pass", "injected_types"
    )
    by_phase: dict[str, list[tuple[bool, set[str]]]] = defaultdict(list)
    total = 0
    for phase, passed, types in rows:
        by_phase[phase or "explore"].append((passed, set((types or {}).keys())))
        total += 1
    out: dict[str, dict[str, dict[str, list[int]]]] = {}
    for phase, sessions in by_phase.items():
        seen_types = set().union(*(t for _, t in sessions)) | set(PHASE_WEIGHTS.get(phase, {}))
        for memory_type in seen_types:
            split = {"with": [0, 0], "without": [0, 0]}
            for passed, types in sessions:
                side = split["with" if memory_type in types else "without"]
                side[0] += int(passed)
                side[1] += 1
            out.setdefault(phase, {})[memory_type] = split
    return total, out


def proposal_build(*, project: Project) -> PhaseWeightProposal | None:
    """A new proposal from the project's sessions so far (None below MIN_SESSIONS validated
    sessions, or when nothing would change)."""
    total, evidence = _evidence(project)
    if total < MIN_SESSIONS:
        return None
    current = weights_of(project.pk)
    report: dict[str, dict[str, Any]] = {}
    for phase, types in evidence.items():
        for memory_type, split in types.items():
            (p_with, n_with), (p_without, n_without) = split["with"], split["without"]
            if n_with < MIN_EACH or n_without < MIN_EACH:
                continue
            lift, (lo, hi) = stats.rate_difference(
                stats.Moments(n_with, p_with), stats.Moments(n_without, p_without)
            )  # type: ignore[misc]
            before = current.get(phase, {}).get(memory_type, 1.0)
            proposed = before
            if lo > 0 or hi < 0:
                proposed = round(min(MAX_WEIGHT, max(MIN_WEIGHT, before * (1 + lift))), 2)
            report.setdefault(phase, {})[memory_type] = {
                "before": before, "proposed": proposed, "lift": round(lift, 4), "interval": [round(lo, 4), round(hi, 4)],
                "n_with": n_with, "n_without": n_without,
            }  # fmt: skip
    if not any(v["before"] != v["proposed"] for types in report.values() for v in types.values()):
        return None
    return PhaseWeightProposal.objects.create(
        organization_id=project.organization_id, project=project, sessions=total, report=report
    )


def proposals_of(*, project: Project) -> list[dict[str, Any]]:
    return [
        {"id": p.pk, "status": p.status, "sessions": p.sessions, "created_at": p.created_at,
         "decided_at": p.decided_at, "decided_by": p.decided_by_label, "report": p.report}
        for p in PhaseWeightProposal.objects.filter(project=project)[:20]
    ]  # fmt: skip


@transaction.atomic
def proposal_apply(*, project: Project, actor: Principal, proposal_id: int) -> dict[str, Any]:
    proposal = PhaseWeightProposal.objects.select_for_update().filter(project=project, pk=proposal_id).first()
    if proposal is None:
        raise NotFound("No such proposal.")
    if proposal.status != ProposalStatus.PROPOSED:
        raise Conflict(f"This proposal is already {proposal.status}.")
    before = weights_of(project.pk)
    changed = {
        phase: {t: v["proposed"] for t, v in types.items() if v["proposed"] != v["before"]}
        for phase, types in proposal.report.items()
    }
    applied = ProjectPhaseWeights.objects.select_for_update().filter(project=project).first()
    weights = {phase: dict(types) for phase, types in (applied.weights if applied else {}).items()}
    for phase, types in changed.items():
        weights.setdefault(phase, {}).update(types)
    ProjectPhaseWeights.objects.update_or_create(
        project=project,
        defaults={"organization_id": project.organization_id, "weights": weights, "proposal": proposal},
    )
    proposal.status = ProposalStatus.APPLIED
    proposal.decided_at = timezone.now()
    proposal.decided_by = actor.user if actor.user is not None and actor.user.pk else None
    proposal.decided_by_label = actor.label
    proposal.save(update_fields=["status", "decided_at", "decided_by", "decided_by_label"])
    after = weights_of(project.pk)
    audit_record(
        actor=actor, action="insights.phase_weights_applied", organization=project.organization, target=proposal,
        metadata={"before": {p: {t: before.get(p, {}).get(t, 1.0) for t in ts} for p, ts in changed.items()},
                  "after": {p: {t: after[p][t] for t in ts} for p, ts in changed.items()}},
    )  # fmt: skip
    return {"id": proposal.pk, "status": proposal.status, "applied": changed}
