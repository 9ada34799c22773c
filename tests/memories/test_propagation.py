"""Confidence propagation along relations, through the API: confirming a memory (or marking it
helpful) lifts the memories it validates, flagging or disputing it lowers the memories derived
from it; one hop, small bounded steps, each change recorded and applied once per feedback."""

from __future__ import annotations

import pytest

from apps.memories import propagation, services
from apps.memories.models import ConfidencePropagation, Memory, MemoryFeedback, MemoryVersion
from apps.tenants.models import AuditLog

pytestmark = pytest.mark.django_db


class Graph:
    """Alice's memories over the API: `judged` validates `validated`, `derived` derives from
    `judged`, `second_hop` derives from `derived` and is validated by nothing judged."""

    def __init__(self, client, project_id):
        self.client = client
        self.url = f"projects/{project_id}/memories"
        self.validated = self.make("Prices are stored in cents.", confidence=0.6)
        self.judged = self.make(
            "Totals sum integer cents, never floats.",
            confidence=0.8,
            relations=[{"relation_type": "validates", "target_memory_id": self.validated}],
        )
        self.derived = self.make(
            "Refunds are computed in cents too.",
            confidence=0.8,
            relations=[{"relation_type": "derived_from", "target_memory_id": self.judged}],
        )
        self.second_hop = self.make(
            "Partial refunds round down to the cent.",
            confidence=0.8,
            relations=[{"relation_type": "derived_from", "target_memory_id": self.derived}],
        )

    def make(self, content: str, **fields) -> str:
        response = self.client.post(self.url, {"type": "gotcha", "content": content, **fields})
        assert response.status_code == 201, response.content
        return response.json()["id"]

    def feedback(self, memory_id: str, kind: str, client=None):
        response = (client or self.client).post(f"memories/{memory_id}/feedback", {"kind": kind})
        assert response.status_code == 200, response.content
        return response.json()

    def confidence(self, memory_id: str) -> float:
        return self.client.get(f"memories/{memory_id}").json()["confidence"]

    def history(self, memory_id: str, client=None) -> list[dict]:
        response = (client or self.client).get(f"memories/{memory_id}/propagations")
        assert response.status_code == 200, response.content
        return response.json()["items"]


@pytest.fixture
def graph(alice, api_client) -> Graph:
    return Graph(api_client(alice.key), alice.project.id)


def test_confirming_a_memory_lifts_the_ones_it_validates(graph, alice):
    graph.feedback(graph.judged, "confirm")
    assert graph.confidence(graph.validated) == pytest.approx(0.65)
    assert graph.confidence(graph.derived) == pytest.approx(0.8)  # (a confirmation lowers nothing)
    assert graph.confidence(graph.judged) == pytest.approx(0.8)  # (its own confidence: as before)
    (change,) = graph.history(graph.validated)
    assert change["direction"] == "lift" and change["feedback_kind"] == "confirm"
    assert change["relation_type"] == "validates" and change["source_memory_id"] == graph.judged
    assert change["confidence_before"] == pytest.approx(0.6)
    assert change["confidence_after"] == pytest.approx(0.65)
    assert change["actor_label"] == f"api_key:{alice.api_key.prefix}"  # who confirmed
    # a new version of the lifted memory says why, and the audit log says who and from what
    version = MemoryVersion.objects.get(memory_id=graph.validated, version=2)
    assert version.change == "propagated_lift" and version.confidence == pytest.approx(0.65)
    (audit,) = AuditLog.objects.filter(action="memory.confidence_lift", target_id=graph.validated)
    assert audit.metadata["source_memory_id"] == graph.judged and audit.metadata["feedback"] == "confirm"
    assert audit.metadata["feedback_id"] == MemoryFeedback.objects.get(kind="confirm").pk
    assert audit.metadata["from"] == pytest.approx(0.6) and audit.metadata["to"] == pytest.approx(0.65)


def test_flagging_a_memory_lowers_what_derives_from_it_one_hop(graph):
    graph.feedback(graph.judged, "flag")
    assert graph.confidence(graph.judged) == pytest.approx(0.6)  # (the flag's own −0.2)
    assert graph.confidence(graph.derived) == pytest.approx(0.7)
    assert graph.confidence(graph.second_hop) == pytest.approx(0.8)  # one hop, no further
    assert graph.confidence(graph.validated) == pytest.approx(0.6)  # (a flag lifts nothing)
    (change,) = graph.history(graph.derived)
    assert (change["direction"], change["feedback_kind"], change["relation_type"]) == (
        "lower",
        "flag",
        "derived_from",
    )
    assert graph.history(graph.second_hop) == []


def test_a_dispute_lowers_what_derives_from_the_disputed_memory(graph):
    response = graph.client.post(f"memories/{graph.judged}/disputes", {"reason": "Totals use Decimal now."})
    assert response.status_code == 201, response.content
    assert graph.confidence(graph.derived) == pytest.approx(0.7)
    (change,) = graph.history(graph.derived)
    assert change["feedback_kind"] == "dispute" and change["source_memory_id"] == graph.judged


def test_helpful_lifts_too_scaled_by_the_relations_confidence(graph):
    weak = graph.make(
        "Tax is added after discounts.",
        relations=[{"relation_type": "validates", "target_memory_id": graph.validated, "confidence": 0.5}],
    )
    graph.feedback(weak, "helpful")
    assert graph.confidence(graph.validated) == pytest.approx(0.625)  # half a step


def test_one_source_moves_a_memory_at_most_three_steps_each_way(graph):
    for _ in range(6):
        graph.feedback(graph.judged, "helpful")
    assert graph.confidence(graph.validated) == pytest.approx(0.6 + 3 * propagation.LIFT_STEP)
    assert len(graph.history(graph.validated)) == 3
    # another memory that validates it has its own three steps
    other = graph.make(
        "Cents avoid rounding drift.",
        relations=[{"relation_type": "validates", "target_memory_id": graph.validated}],
    )
    graph.feedback(other, "confirm")
    assert graph.confidence(graph.validated) == pytest.approx(0.6 + 4 * propagation.LIFT_STEP)
    for _ in range(5):
        graph.feedback(graph.judged, "flag")
    assert graph.confidence(graph.derived) == pytest.approx(0.8 - 3 * propagation.LOWER_STEP)


def test_lifts_stop_at_the_ceiling_and_drops_at_the_floor(graph):
    near_top = graph.make("Use integer cents.", confidence=0.93)
    source = graph.make(
        "Money is never a float.", relations=[{"relation_type": "validates", "target_memory_id": near_top}]
    )
    near_bottom = graph.make(
        "Exports keep cents.",
        confidence=0.15,
        relations=[{"relation_type": "derived_from", "target_memory_id": source}],
    )
    graph.feedback(source, "confirm")
    assert graph.confidence(near_top) == pytest.approx(propagation.CEILING)
    graph.feedback(source, "confirm")
    assert len(graph.history(near_top)) == 1  # at the ceiling: no move, nothing recorded
    graph.feedback(source, "flag")
    assert graph.confidence(near_bottom) == pytest.approx(propagation.FLOOR)


def test_used_and_corrections_move_nothing_and_deprecated_memories_stay_put(graph, alice):
    graph.feedback(graph.judged, "used")
    response = graph.client.post(
        f"memories/{graph.judged}/feedback", {"kind": "correct", "content": "Totals sum Decimal cents."}
    )
    assert response.status_code == 200
    assert graph.confidence(graph.validated) == pytest.approx(0.6)
    retired = Memory.objects.get(pk=graph.validated)  # (a steward's call: not a key's scope)
    services.memory_update(memory=retired, actor=alice.principal, changes={"deprecated": True})
    graph.feedback(graph.judged, "confirm")
    assert graph.confidence(graph.validated) == pytest.approx(0.6)
    assert ConfidencePropagation.objects.count() == 0


def test_each_feedback_is_applied_once_however_often_its_task_runs(graph):
    graph.feedback(graph.judged, "confirm")
    feedback = MemoryFeedback.objects.get(memory_id=graph.judged, kind="confirm")
    assert not feedback.propagation_pending
    assert services.feedback_propagate(feedback_id=feedback.pk) == []  # a second delivery
    # even if it were marked pending again (a redelivery racing the first run's commit)
    MemoryFeedback.objects.filter(pk=feedback.pk).update(propagation_pending=True)
    assert services.feedback_propagate(feedback_id=feedback.pk) == []
    assert graph.confidence(graph.validated) == pytest.approx(0.65)
    assert ConfidencePropagation.objects.filter(feedback=feedback).count() == 1
    assert services.feedback_propagate(feedback_id=10**9) == []  # gone: nothing to do


def test_feedback_whose_task_was_lost_is_found_by_the_sweep(graph):
    from datetime import timedelta

    from django.utils import timezone

    graph.feedback(graph.judged, "used")  # no propagation: never pending
    row = MemoryFeedback.objects.create(
        organization_id=Memory.objects.get(pk=graph.judged).organization_id,
        memory_id=graph.judged,
        kind="confirm",
        actor_label="user:lost",
        propagation_pending=True,  # as the feedback's transaction left it when its task was lost
    )
    assert services.propagations_stranded() == []  # (too recent: its task may still be on its way)
    later = timezone.now() + services.propagation.STRANDED_AFTER + timedelta(seconds=1)
    assert services.propagations_stranded(now=later) == [row.pk]
    assert graph.confidence(graph.validated) == pytest.approx(0.65)
    assert services.propagations_stranded(now=later) == []


def test_who_may_read_the_history_and_what_it_names(graph, alice, bob, charlie, api_client):
    as_bob = api_client(bob.key)
    # bob's personal memory validates alice's: bob's confirmation lifts it, and alice's history
    # of that lift does not name a memory she may not read
    personal = as_bob.post(
        graph.url,
        {
            "type": "gotcha",
            "content": "My note: cents.",
            "scope": "personal",
            "relations": [{"relation_type": "validates", "target_memory_id": graph.validated}],
        },
    ).json()["id"]
    graph.feedback(personal, "confirm", client=as_bob)
    (change,) = graph.history(graph.validated)
    assert change["source_memory_id"] is None and change["direction"] == "lift"
    assert graph.history(graph.validated, client=as_bob)[0]["source_memory_id"] == personal
    # an outsider: the memory does not exist for them; a bad id is a clear 4xx
    as_charlie = api_client(charlie.key)
    assert as_charlie.get(f"memories/{graph.validated}/propagations").status_code == 404
    missing = graph.client.get("memories/00000000-0000-4000-8000-000000000000/propagations")
    assert missing.status_code == 404 and missing.json()["error"]["code"]
    assert graph.client.get("memories/not-a-uuid/propagations").status_code in (404, 422)


def test_deleting_the_judged_memory_keeps_the_history_it_explains(graph):
    graph.feedback(graph.judged, "confirm")
    assert graph.client.delete(f"memories/{graph.judged}").status_code == 204
    (change,) = graph.history(graph.validated)
    assert change["source_memory_id"] is None and change["confidence_after"] == pytest.approx(0.65)


def test_the_memory_page_says_why_its_confidence_moved(graph, alice, session_client):
    graph.feedback(graph.judged, "flag")
    base = f"/o/{alice.org.slug}/p/{alice.project.slug}"
    browser = session_client(alice).client
    page = browser.get(f"{base}/memories/{graph.derived}/").content.decode()
    assert 'data-testid="propagations"' in page
    judged = Memory.objects.get(pk=graph.judged)
    assert f"{base}/memories/{graph.judged}/" in page and judged.citation_text in page
    assert "0.80 → 0.70" in page and "which this one derives from, was flagged by" in page
    unmoved = browser.get(f"{base}/memories/{graph.second_hop}/").content.decode()
    assert 'data-testid="propagations"' not in unmoved


def test_erasing_the_person_who_judged_leaves_a_pseudonym_in_the_history(graph, bob, api_client):
    from apps.tenants import gdpr

    graph.feedback(graph.judged, "confirm", client=api_client(bob.key))
    (change,) = ConfidencePropagation.objects.all()
    assert change.actor_label == f"api_key:{bob.api_key.prefix}"
    user_id = bob.user.pk
    gdpr.account_hard_delete(user_id)
    change.refresh_from_db()
    assert change.actor_label == gdpr.pseudonym("user", user_id)
    assert graph.history(graph.validated)[0]["confidence_after"] == pytest.approx(0.65)
