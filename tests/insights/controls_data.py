"""Data behind the Insights control pages: a phase-weight proposal made by the real learning job
from validated sessions' metrics, and observer telemetry a real tightening acted on."""

from __future__ import annotations

import uuid
from datetime import timedelta

from django.utils import timezone

from apps.insights import learning, telemetry
from apps.insights.models import PhaseWeightProposal, SessionMetrics, ThresholdAdjustment
from apps.memories.models import Memory
from apps.observer.models import PatternStat, Session
from tests.memories.factories import make_memory


def proposal_where_gotchas_pass_qa(person, *, sessions: int = 40) -> PhaseWeightProposal:
    """Validated implement-phase sessions: those given a gotcha passed QA first time, the others
    did not; the learning job's proposal from them (it raises the gotcha weight)."""
    today = timezone.localdate()
    SessionMetrics.objects.bulk_create(
        SessionMetrics(
            session_id=uuid.uuid4(),
            organization=person.org,
            project=person.project,
            group="full",
            day=today,
            phase="implement",
            finalized_at=timezone.now(),
            qa_first_pass=i % 2 == 0,
            injected_types={"gotcha": 1} if i % 2 == 0 else {"pattern": 1},
        )
        for i in range(sessions)
    )
    proposal = learning.proposal_build(project=person.project)
    assert proposal is not None
    return proposal


def telemetry_with_a_tightened_class(person) -> ThresholdAdjustment:
    """Backtrack promotions over three weeks, half of them rejected by reviewers (so the class is
    tightened), explicit-signal ones all approved, one of them reinforced by a later session."""
    now = timezone.now()
    reinforced = []
    for i in range(10):
        kind = "backtrack" if i < 6 else "explicit_signal"
        memory = make_memory(person, type="gotcha", content=f"Telemetry lesson number {i} about the cart.")
        Memory.objects.filter(pk=memory.pk).update(
            deprecated=kind == "backtrack" and i < 3,
            user_verified=not (kind == "backtrack" and i < 3),
            created_at=now - timedelta(weeks=i % 3),
        )
        PatternStat.objects.create(project=person.project, kind=kind, key=f"k{i}", promoted_memory=memory)
        if kind == "explicit_signal":
            reinforced.append(memory.pk)
    Session.objects.create(
        organization=person.org, project=person.project, status="completed", finalized_at=now,
        reinforced_memory_ids=reinforced,
    )  # fmt: skip
    made = telemetry.thresholds_tighten(project=person.project)
    assert [a.signal_class for a in made] == ["backtrack"]
    return made[0]
