"""Secrets are redacted in every stored field, relation targets respect what the caller may
read, and the daily decay job keeps the version history whole."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.memories import services
from apps.memories.models import Memory, MemoryFeedback, MemoryRelation, MemoryVersion
from apps.tenants.principal import Principal
from apps.tenants.services import api_key_create
from tests.factories import ProjectFactory
from tests.memories.factories import make_memory
from tests.tables import tables_holding

pytestmark = pytest.mark.django_db

# The shape of a real Anthropic key: fits `session_id` (100 characters); its first 40 fit `methodology`.
SECRET = "sk-ant-api03-" + "Qm7vX2pLk9RtY4wZ8nBc3HdJf6GsA1eU5oIyT0rNq" * 2
MARKER = "[REDACTED:anthropic_key]"


def _everywhere() -> dict:
    """A memory with the secret in every free-text field a client may send."""
    return {
        "type": "gotcha",
        "content": f"Deploys need {SECRET} in the environment.",
        "tags": [SECRET],
        "related_files": [f"config/{SECRET}.env"],
        "related_modules": [SECRET],
        "payload": {"note": SECRET},
        "context_prefix": SECRET,
        "session_id": SECRET,
        "provenance_session_ids": [SECRET],
        "methodology": SECRET[:40],
        "commit_sha": SECRET[:64],
        "work_unit_ref": {"methodology": SECRET[:40], "hierarchy": [SECRET], "label": SECRET},
        "target_node_id": SECRET,
        "impacted_node_ids": [SECRET],
        "relations": [{"relation_type": "required_with", "target_file_path": f"config/{SECRET}.env"}],
    }


def test_a_secret_in_any_field_never_reaches_any_table(alice, api_client):
    client = api_client(alice.key)
    url = f"projects/{alice.project.id}/memories"
    one = client.post(url, _everywhere())
    assert one.status_code == 201, one.content
    batch = client.post(url, {"memories": [_everywhere(), _everywhere()]})
    assert batch.status_code == 201, batch.content
    memory_id = one.json()["id"]
    patched = client.patch(
        f"memories/{memory_id}",
        {
            "methodology": SECRET[:40],
            "commit_sha": SECRET[:64],
            "work_unit_ref": {"methodology": SECRET[:40], "hierarchy": [SECRET], "label": SECRET},
        },
    )
    assert patched.status_code == 200, patched.content
    for kind in ("flag", "correct"):
        feedback = {"kind": kind, "note": SECRET, "session_id": SECRET, "content": f"Now {SECRET}."}
        response = client.post(f"memories/{memory_id}/feedback", feedback)
        assert response.status_code == 200, response.content

    # the random part of the key: also caught if only a cut of it were stored
    assert tables_holding(SECRET[13:40]) == []
    for body in [patched.json(), *batch.json()["memories"]]:
        assert body["secrets_redacted"] and "anthropic_key" in body["secret_kinds"]
        assert body["methodology"] == body["commit_sha"] == MARKER
        assert body["work_unit_ref"] == {"methodology": MARKER, "hierarchy": [MARKER], "label": MARKER}
        assert body["session_id"] == MARKER and body["provenance_session_ids"] == [MARKER]
        assert body["relations"][0]["target_file_path"] == f"config/{MARKER}.env"
    stored = Memory.objects.get(id=memory_id)
    assert stored.target_node_id == MARKER and stored.impacted_node_ids == [MARKER]
    assert set(MemoryFeedback.objects.filter(memory=stored).values_list("note", "session_id")) == {
        (MARKER, MARKER)
    }


def test_a_relation_to_an_unseen_memory_is_refused_like_a_missing_one(alice, bob, org_a, api_client):
    bobs_own = make_memory(bob, content="bob's private note", scope="personal")
    elsewhere = make_memory(alice, project=ProjectFactory(organization=org_a), content="another project")
    _, limited_key = api_key_create(
        organization=org_a,
        actor=alice.principal,
        name="acme-api only",
        scopes=alice.api_key.scopes,
        project=alice.project,
    )
    url = f"projects/{alice.project.id}/memories"

    def link(key: str, target_id) -> dict:
        relation = {"relation_type": "conflicts_with", "target_memory_id": str(target_id)}
        response = api_client(key).post(url, {"type": "gotcha", "content": "linked", "relations": [relation]})
        assert response.status_code == 404, response.content
        return response.json()["error"]

    missing = link(alice.key, "00000000-0000-4000-8000-000000000000")
    assert link(alice.key, bobs_own.id)["message"] == missing["message"]
    assert link(limited_key, elsewhere.id)["message"] == missing["message"]
    assert not MemoryRelation.objects.exists()
    assert not Memory.objects.filter(content="linked").exists()
    linked = api_client(alice.key).post(
        url,
        {
            "type": "gotcha",
            "content": "linked",
            "relations": [{"relation_type": "validates", "target_memory_id": str(elsewhere.id)}],
        },
    )
    assert linked.status_code == 201  # alice herself sees the other project


def test_the_decay_job_keeps_a_version_for_each_memory_it_deprecates(alice):
    now = timezone.now()
    unused = make_memory(alice, content="Never used since it was written.")
    Memory.objects.filter(id=unused.id).update(
        created_at=now - timedelta(days=3 * unused.decay_half_life_days + 1)
    )

    assert services.memories_decay_and_prune(now=now)["deprecated"] == 1

    unused.refresh_from_db()
    assert unused.deprecated and unused.version == 2
    latest = MemoryVersion.objects.filter(memory=unused).first()
    assert (latest.version, latest.change, latest.changed_by) == (
        unused.version,
        "deprecated",
        Principal().label,
    )
    assert latest.content == unused.content


def test_the_system_links_memories_across_the_organization(alice):
    from apps.memories.validation import RelationDraft
    from apps.tenants.principal import SYSTEM

    target = make_memory(alice, scope="personal")
    linked = make_memory(
        alice,
        principal=SYSTEM,
        relations=[RelationDraft(relation_type="derived_from", target_memory_id=target.id)],
    )
    assert [r.target_memory_id for r in linked.relations.all()] == [target.id]


def test_a_secret_in_a_payload_key_is_redacted_too(alice, api_client):
    client = api_client(alice.key)
    body = {
        "type": "gotcha",
        "content": "Keys as keys.",
        "payload": {SECRET: 1, "nested": {SECRET: [SECRET]}},
    }
    response = client.post(f"projects/{alice.project.id}/memories", body)
    assert response.status_code == 201, response.content
    assert response.json()["payload"] == {MARKER: 1, "nested": {MARKER: [MARKER]}}
    patched = client.patch(f"memories/{response.json()['id']}", {"payload": {f"k {SECRET}": "v"}})
    assert patched.status_code == 200 and patched.json()["payload"] == {f"k {MARKER}": "v"}
    assert tables_holding(SECRET[13:40]) == []


def test_two_secret_keys_keep_two_entries(alice, api_client):
    other = SECRET[:-4] + "ZZZZ"
    body = {"type": "gotcha", "content": "Two keys.", "payload": {SECRET: "prod", other: "staging"}}
    response = api_client(alice.key).post(f"projects/{alice.project.id}/memories", body)
    assert response.status_code == 201, response.content
    assert sorted(response.json()["payload"].values()) == ["prod", "staging"]


def test_an_old_marker_carried_along_finds_nothing_new(alice):
    memory = make_memory(alice, content=f"Deploys read {SECRET} at start.")
    assert memory.secrets_redacted and memory.needs_review
    memory = services.memory_update(memory=memory, actor=alice.principal, changes={"needs_review": False})
    edited = services.memory_update(
        memory=memory, actor=alice.principal, changes={"content": memory.content + " Rotate it monthly."}
    )
    assert MARKER in edited.content and not edited.needs_review  # the marker was already known
    corrected = services.memory_feedback(
        memory=edited,
        actor=alice.principal,
        kind="correct",
        content=edited.content.replace("monthly", "weekly"),
    )
    assert corrected.user_verified and not corrected.needs_review
    note = make_memory(alice, content=f"From a note: {MARKER} is the deploy key.")  # redacted on its way in
    assert note.secrets_redacted and note.needs_review


def test_a_redaction_that_lengthens_content_keeps_the_memory_editable(alice, api_client):
    client = api_client(alice.key)
    content = "x" * 3980 + " pwd=ab12cd34"  # its marker is longer than `ab12cd34`
    response = client.post(f"projects/{alice.project.id}/memories", {"type": "gotcha", "content": content})
    assert response.status_code == 201, response.content
    memory = Memory.objects.get(id=response.json()["id"])
    assert memory.secrets_redacted and len(memory.content) <= 4000 and "ab12cd34" not in memory.content
    patched = client.patch(f"memories/{memory.id}", {"confidence": 0.7, "tags": ["deploy"]})
    assert patched.status_code == 200, patched.content  # was a 422: the stored memory was too long


def test_a_tag_longer_than_its_column_is_a_clear_422(alice, api_client):
    response = api_client(alice.key).post(
        f"projects/{alice.project.id}/memories", {"type": "gotcha", "content": "x", "tags": ["t" * 101]}
    )
    assert response.status_code == 422
    assert "at most 100 characters" in response.content.decode()
    assert not Memory.objects.filter(project=alice.project).exists()


def test_a_redaction_longer_than_its_column_is_cut_to_fit(alice, api_client):
    """`[REDACTED:password_assignment]` is longer than `api_key=Zx9Kq2Lm`; the 40-character
    methodology column must still take it (it was a 500)."""
    client = api_client(alice.key)
    body = {
        "type": "gotcha",
        "content": "x",
        "methodology": "my_api_key=Zx9Kq2Lm",
        "session_id": "s " + "pwd=ab12cd " * 9,
    }
    response = client.post(f"projects/{alice.project.id}/memories", body)
    assert response.status_code == 201, response.content
    memory = Memory.objects.get(id=response.json()["id"])
    assert len(memory.methodology) <= 40 and memory.methodology.startswith("my_api_key=[REDACTED:")
    assert len(memory.session_id) <= 100 and "ab12cd" not in memory.session_id
    patched = client.patch(f"memories/{memory.id}", {"methodology": "x api_key=Qw3Er5Ty7"})
    assert patched.status_code == 200, patched.content
    memory.refresh_from_db()
    assert "Qw3Er5Ty7" not in memory.methodology and len(memory.methodology) <= 40


def test_a_bare_aws_secret_key_and_a_password_in_prose_never_reach_a_table(alice, api_client):
    """An agent's tool output and reasoning hold them as people write them: a key on a line of
    its own (`cat` of a credentials note), a password in a sentence. Nor does a note promoted
    from them carry either."""
    aws_secret, password = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "ufUxbvJDCT9!"
    client = api_client(alice.key)
    session = client.post(f"projects/{alice.project.id}/sessions", {"session_type": "build"}).json()
    events = [
        {"seq": 1, "type": "tool_call", "step": 1, "tool": "Bash", "args": {"command": "cat notes/aws.txt"}},
        {"seq": 2, "type": "tool_result", "step": 1, "tool": "Bash", "result": f"prod:\n{aws_secret}\n"},
        {"seq": 3, "type": "reasoning", "step": 1, "text": f"The staging db password is {password} per the notes."},
        {"seq": 4, "type": "record_memory", "step": 1,
         "memory": {"type": "gotcha", "content": f"The staging db password is {password}, not the prod one."}},
    ]  # fmt: skip
    stored = client.post(f"sessions/{session['id']}/events", {"events": events})
    assert stored.status_code == 200 and stored.json()["accepted"] == 4, stored.content
    assert client.post(f"sessions/{session['id']}/validation", {"passed": True}).status_code == 200
    assert client.post(f"sessions/{session['id']}/complete", {"outcome": "success"}).status_code == 200
    assert Memory.objects.filter(project=alice.project, content__contains="[REDACTED:").exists()
    assert tables_holding(aws_secret[:30]) == []
    assert tables_holding("ufUxbvJDCT9") == []
