"""Phase-weight learning on a population where gotchas injected while coding drive QA success."""

from __future__ import annotations

import pytest

from apps.insights import learning, rollups, tasks
from apps.insights.models import PhaseWeightProposal, ProjectPhaseWeights
from apps.memories.kinds import PHASE_WEIGHTS
from apps.memories.phase_weights import phase_weights_for
from apps.tenants.models import AuditLog
from tests.insights.population import populate
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db(transaction=False)
FILLER = " It matters whenever this code changes, so read it before editing anything nearby." * 2


def test_gotchas_that_drive_qa_success_in_coding_get_a_higher_weight_once_applied(
    ab_agent, alice, bob, api_client
):
    make_memory(alice, type="gotcha", content="Invoice rounding: billing totals round half-even." + FILLER)
    make_memory(alice, type="pattern", content="Report charts: layouts use a twelve-column grid." + FILLER)
    given: dict[str, set[str]] = {}

    def ask_context(session):
        task = "invoice rounding billing totals" if session["index"] % 2 else "report charts layouts grid"
        body = {
            "phase": "implement",
            "task": task,
            "session_id": session["id"],
            "token_budget": 100,
        }  # (room for one)
        context = ab_agent.client.post(f"projects/{alice.project.id}/context", body).json()
        given[session["id"]] = {m["type"] for m in context["memories"]}

    populate(
        ab_agent, 40, tool_call_ratio=1.0, phase="implement", before_events=ask_context,
        passed=lambda session: "gotcha" in given[session["id"]],
    )  # fmt: skip
    assert sum("gotcha" in t for t in given.values()) >= 10  # (the evidence is there)
    rollups.rollup_run()
    assert tasks.learning_task()["proposals"] == 1

    proposal = PhaseWeightProposal.objects.get(project=alice.project)
    gotcha = proposal.report["implement"]["gotcha"]
    assert gotcha["before"] == PHASE_WEIGHTS["implement"]["gotcha"] and gotcha["proposed"] > gotcha["before"]
    assert gotcha["lift"] > 0 and gotcha["interval"][0] > 0
    # Nothing changes until a steward applies it.
    assert phase_weights_for(alice.project.id)["implement"]["gotcha"] == gotcha["before"]
    assert not ProjectPhaseWeights.objects.exists()

    url = f"projects/{alice.project.id}/insights/phase-weights/{proposal.pk}/apply"
    assert api_client(bob.key).post(url, {}).status_code == 403  # (a member is not a steward)
    applied = ab_agent.client.post(url, {})
    assert applied.status_code == 200, applied.content
    assert phase_weights_for(alice.project.id)["implement"]["gotcha"] == gotcha["proposed"]
    audit = AuditLog.objects.get(action="insights.phase_weights_applied")
    assert audit.metadata["before"]["implement"]["gotcha"] == gotcha["before"]
    assert audit.metadata["after"]["implement"]["gotcha"] == gotcha["proposed"]
    assert ab_agent.client.post(url, {}).status_code == 409  # (applied once)
    # The sessions given the pattern instead failed QA: its weight went down with the same apply.
    assert (
        learning.weights_of(alice.project.id)["implement"]["pattern"] < PHASE_WEIGHTS["implement"]["pattern"]
    )
    assert (
        learning.weights_of(alice.project.id)["validate"] == PHASE_WEIGHTS["validate"]
    )  # (other phases kept)
