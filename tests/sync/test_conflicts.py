"""Sync conflicts decided by a person: an offline edit the server could not merge waits with
both versions and their base; the memory's owner, the device's person and the stewards hear of
it; deciding it (keep mine, keep theirs, a merge) is a new version every replica converges on.
And the losses that used to be silent: a removed tag or file stays removed, and an edit to a
memory deleted elsewhere comes back as a rejection the person sees."""

from __future__ import annotations

import httpx
import pytest
from django.core.wsgi import get_wsgi_application
from memorysaas_client.replica import Replica, SyncClient

from apps.governance.models import Notification
from apps.memories.models import Memory, MemoryVersion
from apps.memories.services import memory_delete, memory_update
from apps.sync.models import SyncConflict
from apps.sync.services import set_merge
from apps.tenants.models import AuditLog
from apps.tenants.roles import Role
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384


def _device(person, tmp_path, name):
    client = SyncClient(
        "http://testserver", person.key, transport=httpx.WSGITransport(app=get_wsgi_application())
    )
    return Replica(str(tmp_path / f"{name}.db"), project_id=str(person.project.id)), client


def _server_edit(memory, person, **changes):
    return memory_update(memory=Memory.objects.get(id=memory.id), actor=person.principal, changes=changes)


def test_set_merge_keeps_a_removal_and_both_sides_additions():
    assert set_merge(["a", "b"], ["b", "d"], ["a", "b", "c"]) == ["b", "c", "d"]
    assert set_merge(["a"], ["a"], []) == []  # (removed on the server, untouched on the device)
    assert set_merge(None, ["x"], ["y"]) == ["y", "x"]  # no base: nothing is known removed


def test_a_tag_and_a_file_removed_offline_stay_removed_when_the_server_moved_on(alice, tmp_path):
    replica, client = _device(alice, tmp_path, "laptop")
    memory = make_memory(
        alice, content="Retry with jitter.", tags=["retry", "http"], related_files=["a.py", "b.py"]
    )
    replica.sync(client)
    replica.edit(str(memory.id), tags=["retry"], related_files=["a.py"])
    _server_edit(memory, alice, tags=["retry", "http", "backoff"], content="Retry with full jitter.")

    report = replica.sync(client)
    assert (report.merged, report.conflicts, report.rejected) == (1, 0, 0)
    stored = Memory.objects.get(id=memory.id)
    assert (stored.tags, stored.related_files) == (["retry", "backoff"], ["a.py"])
    assert stored.content == "Retry with full jitter."
    assert replica.get(str(memory.id))["tags"] == ["retry", "backoff"]


def test_an_edit_to_a_memory_deleted_elsewhere_is_a_rejection_the_person_sees(alice, tmp_path):
    replica, client = _device(alice, tmp_path, "laptop")
    memory = make_memory(alice, content="Old build flag.")
    replica.sync(client)
    replica.edit(str(memory.id), content="Old build flag, now -O2.")
    memory_delete(memory=Memory.objects.get(id=memory.id), actor=alice.principal)

    report = replica.sync(client)
    assert (report.pushed, report.applied, report.rejected) == (1, 0, 1)
    [rejected] = replica.rejected()
    assert rejected["reason"]["details"]["status"] == "not_found"
    assert "deleted on the server" in rejected["reason"]["message"]
    assert rejected["reason"]["details"]["local"]["content"] == "Old build flag, now -O2."
    assert replica.get(str(memory.id)) is None


def _conflict(alice, bob, tmp_path):
    """Bob edits alice's memory offline while alice edits it on the server."""
    memory = make_memory(alice, content="Deploys run at 10:00.", tags=["deploy"])
    laptop, client = _device(bob, tmp_path, "bob-laptop")
    laptop.sync(client)
    laptop.edit(str(memory.id), content="Deploys run at 11:00.", tags=["deploy", "ops"])
    _server_edit(memory, alice, content="Deploys run at 09:30.")
    report = laptop.sync(client)
    assert report.conflicts == 1
    return memory, laptop, client, SyncConflict.objects.get(memory_id=memory.id)


def test_a_conflict_waits_with_both_versions_and_the_people_concerned_hear_of_it(
    alice, bob, person_with_role, tmp_path
):
    steward = person_with_role(Role.STEWARD)
    memory, laptop, _client, conflict = _conflict(alice, bob, tmp_path)
    assert conflict.status == "open" and conflict.fields == ["content"]
    assert conflict.base["content"] == "Deploys run at 10:00."
    assert conflict.mine == {"content": "Deploys run at 11:00.", "tags": ["deploy", "ops"]}
    assert conflict.theirs["content"] == "Deploys run at 09:30." and conflict.author == bob.user
    [local] = laptop.conflicts()
    assert local["conflict_id"] == str(conflict.id)
    told = set(Notification.objects.filter(kind="sync_conflict").values_list("user__email", flat=True))
    assert {alice.user.email, bob.user.email, steward.user.email} <= told
    assert AuditLog.objects.filter(action="sync.conflict_recorded").count() == 1


def test_keeping_mine_is_a_new_version_every_replica_converges_on(alice, bob, api_client, tmp_path):
    memory, laptop, client, conflict = _conflict(alice, bob, tmp_path)
    desktop, desktop_client = _device(alice, tmp_path, "alice-desktop")
    desktop.sync(desktop_client)
    api = api_client(bob.key)
    listed = api.get(f"projects/{alice.project.id}/sync/conflicts").json()
    assert [c["id"] for c in listed] == [str(conflict.id)]
    current = listed[0]["current_version"]

    resolved = api.post(f"sync/conflicts/{conflict.id}/resolve", {"keep": "mine", "base_version": current})
    assert resolved.status_code == 200, resolved.content
    body = resolved.json()
    assert (body["status"], body["resolution"], body["result_version"]) == ("resolved", "mine", current + 1)
    stored = Memory.objects.get(id=memory.id)
    assert (stored.content, stored.tags, stored.version) == (
        "Deploys run at 11:00.",
        ["deploy", "ops"],
        current + 1,
    )
    assert MemoryVersion.objects.filter(memory=stored, change="conflict_resolved").count() == 1

    again = api.post(f"sync/conflicts/{conflict.id}/resolve", {"keep": "theirs", "base_version": current + 1})
    assert again.status_code == 409 and again.json()["error"]["code"] == "already_resolved"

    laptop.sync(client)
    desktop.sync(desktop_client)
    assert laptop.conflicts() == []
    for replica in (laptop, desktop):
        assert replica.get(str(memory.id))["content"] == "Deploys run at 11:00."
        assert replica.get(str(memory.id))["version"] == current + 1


def test_a_merge_and_keeping_theirs(alice, bob, api_client, tmp_path):
    memory, laptop, client, conflict = _conflict(alice, bob, tmp_path)
    version = Memory.objects.get(id=memory.id).version
    merged = api_client(alice.key).post(
        f"sync/conflicts/{conflict.id}/resolve",
        {
            "keep": "merge",
            "base_version": version,
            "fields": {"content": "Deploys run at 09:30 or 11:00.", "tags": ["deploy"]},
        },
    )
    assert merged.status_code == 200 and merged.json()["resolution"] == "merge"
    assert Memory.objects.get(id=memory.id).content == "Deploys run at 09:30 or 11:00."

    laptop.edit(str(memory.id), content="Deploys run at noon.")
    _server_edit(memory, alice, content="Deploys run at 08:00.")
    laptop.sync(client)
    second = SyncConflict.objects.get(memory_id=memory.id, status="open")
    now = Memory.objects.get(id=memory.id).version
    kept = api_client(bob.key).post(
        f"sync/conflicts/{second.id}/resolve", {"keep": "theirs", "base_version": now}
    )
    assert kept.status_code == 200 and kept.json()["result_version"] == now
    assert Memory.objects.get(id=memory.id).content == "Deploys run at 08:00."
    laptop.sync(client)
    assert laptop.conflicts() == [] and laptop.get(str(memory.id))["content"] == "Deploys run at 08:00."


def test_a_stale_base_a_viewer_an_outsider_and_a_bad_merge_are_refused(
    alice, bob, charlie, person_with_role, api_client, tmp_path
):
    memory, _laptop, _client, conflict = _conflict(alice, bob, tmp_path)
    version = Memory.objects.get(id=memory.id).version
    path = f"sync/conflicts/{conflict.id}/resolve"

    stale = api_client(bob.key).post(path, {"keep": "mine", "base_version": version - 1})
    assert stale.status_code == 409
    assert stale.json()["error"]["code"] == "stale_base"
    assert stale.json()["error"]["details"]["current_version"] == version

    viewer = person_with_role(Role.VIEWER)
    assert api_client(viewer.key).get(f"sync/conflicts/{conflict.id}").status_code == 200
    refused = api_client(viewer.key).post(path, {"keep": "mine", "base_version": version})
    assert refused.status_code == 403
    other_member = person_with_role(Role.MEMBER)
    assert (
        api_client(other_member.key).post(path, {"keep": "mine", "base_version": version}).status_code == 403
    )
    assert api_client(charlie.key).post(path, {"keep": "mine", "base_version": version}).status_code == 404
    unknown = api_client(bob.key).post(path, {"keep": "both", "base_version": version})
    assert unknown.status_code == 422
    assert SyncConflict.objects.get(pk=conflict.pk).status == "open"
    assert Memory.objects.get(id=memory.id).content == "Deploys run at 09:30."


def test_a_device_that_deleted_what_the_server_edited_can_keep_its_delete(alice, bob, api_client, tmp_path):
    memory = make_memory(alice, content="Feature flag: new-billing.")
    laptop, client = _device(alice, tmp_path, "laptop")
    laptop.sync(client)
    laptop.forget(str(memory.id))
    _server_edit(memory, alice, content="Feature flag: new-billing (on for 10 %).")
    assert laptop.sync(client).conflicts == 1
    conflict = SyncConflict.objects.get(memory_id=memory.id)
    assert conflict.kind == "delete"
    version = Memory.objects.get(id=memory.id).version
    done = api_client(alice.key).post(
        f"sync/conflicts/{conflict.id}/resolve", {"keep": "mine", "base_version": version}
    )
    assert done.status_code == 200, done.content
    assert done.json()["result_version"] is None
    assert not Memory.objects.filter(id=memory.id).exists()
    laptop.sync(client)
    assert laptop.conflicts() == [] and laptop.get(str(memory.id)) is None
