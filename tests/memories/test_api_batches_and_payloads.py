"""Memories API gaps: per-type payloads, batch all-or-none and limits, aliases, filters, feedback."""

from __future__ import annotations

import uuid

import pytest

from apps.memories.models import Memory, MemoryRelation, MemoryVersion
from apps.tenants.models import AuditLog
from tests.memories.factories import make_memory
from tests.memories.test_kinds import DEX_ALIASES

pytestmark = pytest.mark.django_db

CALIBRATION = {
    "module": "auth",
    "average_actual_steps": 14,
    "average_planned_steps": 10,
    "ratio": 1.4,
    "sample_count": 5,
}


def _body(**fields):
    return {"type": "gotcha", "content": "QuerySet.update() skips save() and signals.", **fields}


def _assert_validation_envelope(response, mentions: str) -> None:
    assert response.status_code == 422, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error" and error["message"]
    assert mentions in str(error["details"])


@pytest.mark.parametrize(
    ("memory_type", "payload", "mentions"),
    [
        ("workflow_recipe", {"task_pattern": "add an API endpoint"}, "steps"),
        ("workflow_recipe", {"task_pattern": "add an API endpoint", "steps": []}, "steps"),
        ("task_calibration", {**CALIBRATION, "ratio": "fast"}, "ratio"),
        ("dead_end", {"approach_tried": "retry harder"}, "why_it_failed"),
    ],
)
def test_a_bad_per_type_payload_is_422_and_stores_nothing(alice, api_client, memory_type, payload, mentions):
    response = api_client(alice.key).post(
        f"projects/{alice.project.id}/memories", _body(type=memory_type, payload=payload)
    )
    _assert_validation_envelope(response, mentions)
    assert not Memory.objects.filter(project=alice.project).exists()


def test_a_good_per_type_payload_is_stored_normalised(alice, api_client):
    response = api_client(alice.key).post(
        f"projects/{alice.project.id}/memories",
        _body(type="task_calibration", content="Auth tasks take 40% more steps.", payload=CALIBRATION),
    )
    assert response.status_code == 201, response.content
    assert response.json()["payload"] == {**CALIBRATION, "methodology": "native"}


def test_a_batch_whose_relation_points_nowhere_stores_none_of_it(alice, api_client):
    client = api_client(alice.key)
    url = f"projects/{alice.project.id}/memories"
    missing = str(uuid.uuid4())
    batch = [
        _body(content="first fine memory"),
        _body(
            content="second, related", relations=[{"relation_type": "validates", "target_memory_id": missing}]
        ),
    ]
    response = client.post(url, {"memories": batch})
    assert response.status_code == 404, response.content  # (a memory the body names, not there)
    assert response.json()["error"]["details"] == {"index": 1, "target_memory_id": missing}
    assert not Memory.objects.filter(project=alice.project).exists()
    assert not MemoryVersion.objects.exists() and not MemoryRelation.objects.exists()
    assert not AuditLog.objects.filter(action__startswith="memory.").exists()


def test_a_batch_cannot_relate_to_another_organizations_memory(alice, charlie, api_client):
    foreign = make_memory(charlie, content="Borg's own fact.")
    response = api_client(alice.key).post(
        f"projects/{alice.project.id}/memories",
        {
            "memories": [
                _body(content="points abroad", relations=[{"relation_type": "validates", "target_memory_id": str(foreign.id)}])
            ]
        },
    )  # fmt: skip
    assert response.status_code == 404, response.content  # (as one that does not exist)
    assert not Memory.objects.filter(project=alice.project).exists()


def test_a_batch_of_500_is_accepted_and_501_is_not(alice, api_client):
    client = api_client(alice.key)
    url = f"projects/{alice.project.id}/memories"
    too_many = client.post(url, {"memories": [_body(content=f"fact {i}") for i in range(501)]})
    _assert_validation_envelope(too_many, "memories")
    assert not Memory.objects.filter(project=alice.project).exists()
    response = client.post(url, {"memories": [_body(content=f"fact {i}") for i in range(500)]})
    assert response.status_code == 201, response.content
    assert response.json()["count"] == 500
    assert Memory.objects.filter(project=alice.project).count() == 500


@pytest.mark.parametrize(("alias", "v5_type"), DEX_ALIASES)
def test_every_dex_alias_is_stored_as_its_v5_type(alice, api_client, alias, v5_type):
    client = api_client(alice.key)
    created = client.post(f"projects/{alice.project.id}/memories", _body(type=alias))
    assert created.status_code == 201, created.content
    assert created.json()["type"] == v5_type
    listed = client.get(f"projects/{alice.project.id}/memories", {"type": alias}).json()["items"]
    assert [m["id"] for m in listed] == [created.json()["id"]]


def test_list_filters_by_scope_and_needs_review(alice, api_client):
    project_fact = make_memory(alice, content="project fact")
    org_fact = make_memory(alice, content="org fact", scope="org")
    personal = make_memory(alice, content="personal fact", scope="personal")
    waiting = make_memory(alice, content="unsure fact", needs_review=True)
    client = api_client(alice.key)
    url = f"projects/{alice.project.id}/memories"

    def ids(**params):
        return {m["id"] for m in client.get(url, params).json()["items"]}

    assert ids(scope="org") == {str(org_fact.id)}
    assert ids(scope="project") == {str(project_fact.id), str(waiting.id)}
    assert ids(scope="personal") == {str(personal.id)}
    assert ids(needs_review="true") == {str(waiting.id)}
    assert str(waiting.id) not in ids(needs_review="false")
    assert ids(needs_review="false", scope="org") == {str(org_fact.id)}
    assert client.get(url, {"scope": "galaxy"}).status_code == 422


def test_used_and_helpful_feedback_count_and_change_nothing_else(alice, api_client):
    memory = make_memory(alice, confidence=0.7)
    client = api_client(alice.key)
    url = f"memories/{memory.id}/feedback"
    client.post(url, {"kind": "used"})
    used = client.post(url, {"kind": "used"}).json()
    assert used["used_count"] == 2 and used["helpful_count"] == 0
    helpful = client.post(url, {"kind": "helpful"}).json()
    assert helpful["used_count"] == 2 and helpful["helpful_count"] == 1
    assert helpful["confidence"] == pytest.approx(0.7) and helpful["version"] == 1
    assert not helpful["user_verified"] and not helpful["needs_review"]


def test_confirm_verifies_and_clears_review(alice, api_client):
    memory = make_memory(alice, needs_review=True, confidence=0.6)
    confirmed = api_client(alice.key).post(f"memories/{memory.id}/feedback", {"kind": "confirm"}).json()
    assert confirmed["user_verified"] and not confirmed["needs_review"]
    assert confirmed["confidence"] == pytest.approx(0.6)
    memory.refresh_from_db()
    assert memory.user_verified and not memory.needs_review


def test_a_patch_that_breaks_the_payload_is_a_conflict_and_changes_nothing(alice, api_client):
    """A payload alone is judged by the memory's type, a type alone by its payload: what the
    patch does not fit is the memory as it is (409), not a schema rule (the schema cannot know
    the memory's type)."""
    recipe = {"task_pattern": "add an endpoint", "steps": [{"order": 1, "description": "add the schema"}]}
    memory = make_memory(alice, type="workflow_recipe", content="How we add endpoints.", payload=recipe)
    client = api_client(alice.key)
    emptied = client.patch(f"memories/{memory.id}", {"payload": {"task_pattern": "x", "steps": []}})
    assert emptied.status_code == 409 and "steps" in str(emptied.json()["error"]["details"])
    retyped = client.patch(f"memories/{memory.id}", {"type": "task_calibration"})
    assert retyped.status_code == 409 and "task_pattern" in str(retyped.json()["error"]["details"])
    both = client.patch(f"memories/{memory.id}", {"type": "workflow_recipe", "payload": {"steps": []}})
    _assert_validation_envelope(both, "steps")  # (wrong in itself: the schema says so too)
    memory.refresh_from_db()
    assert memory.type == "workflow_recipe" and memory.version == 1
    assert memory.payload["steps"] == [{"order": 1, "description": "add the schema"}]


def test_a_chunk_line_past_the_integer_column_is_a_validation_error_naming_it(alice, api_client):
    url = f"projects/{alice.project.id}/memories"
    response = api_client(alice.key).post(url, _body(chunk_start_line=2**31, chunk_end_line=2**31 + 5))
    _assert_validation_envelope(response, "chunk_start_line")
    assert not Memory.objects.exists()
