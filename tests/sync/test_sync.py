"""Device sync: the change feed (pull) and offline work coming back (push).

These tests commit (transactional_db): the feed's guarantee is about committed transactions.
"""

from __future__ import annotations

import base64
import json
import re

import psycopg
import pytest
from django.db import connection, transaction

from apps.memories.models import Memory
from apps.memories.services import memory_delete, memory_update
from apps.sync.feed import CURSOR_PATTERN, Cursor
from apps.sync.models import MemoryChange
from apps.sync.selectors import changes_since
from apps.tenants import services as tenant_services
from apps.tenants.models import Device
from apps.tenants.principal import Principal
from apps.tenants.roles import Role
from tests.memories.factories import make_memory
from tests.processes import Worker, wait_until_another_session_waits_for_a_lock

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384


def pull(client, project, cursor=None, **params):
    query = {"project_id": str(project.id), **params}
    if cursor:
        query["cursor"] = cursor
    response = client.get("sync/pull", query)
    assert response.status_code == 200, response.content
    return response.json()


def connect(dbname=None):
    """Another session on the test database's server (`dbname`: another database on it)."""
    db = connection.settings_dict
    # A socket directory given as `?host=` in DATABASE_URL lands in OPTIONS, not HOST.
    host = db["HOST"] or db.get("OPTIONS", {}).get("host")
    return psycopg.connect(
        dbname=dbname or db["NAME"], user=db["USER"], host=host, port=db.get("PORT") or None
    )


def push(client, project, changes, status=200):
    response = client.post("sync/push", {"project_id": str(project.id), "changes": changes})
    assert response.status_code == status, response.content
    return response.json()


def test_pull_returns_creates_updates_and_deletes_in_order_then_nothing(alice, api_client):
    client = api_client(alice.key)
    empty = pull(client, alice.project)
    assert empty["changes"] == [] and not empty["has_more"]

    first = make_memory(alice, content="Run the linter before committing.", type="preference")
    second = make_memory(alice, content="The cache key includes the tenant id.", type="gotcha")
    got = pull(client, alice.project, empty["cursor"])
    assert [c["memory"]["id"] for c in got["changes"]] == [str(first.id), str(second.id)]
    upsert = got["changes"][0]["memory"]
    assert upsert["content"] == "Run the linter before committing."
    assert len(upsert["embedding"]) == 384 and upsert["embedding_model"]
    assert pull(client, alice.project, got["cursor"])["changes"] == []

    memory_update(memory=Memory.objects.get(id=first.id), actor=alice.principal, changes={"tags": ["lint"]})
    memory_delete(memory=Memory.objects.get(id=second.id), actor=alice.principal)
    later = pull(client, alice.project, got["cursor"])
    assert later["changes"] == [
        {"op": "upsert", "memory": later["changes"][0]["memory"]},
        {"op": "delete", "id": str(second.id)},
    ]
    assert later["changes"][0]["memory"]["tags"] == ["lint"]
    assert later["changes"][0]["memory"]["version"] == 2


def test_pull_pages_with_has_more(alice, api_client):
    for n in range(5):
        make_memory(alice, content=f"Fact number {n} about the build.", type="module_insight")
    client, cursor, seen = api_client(alice.key), None, []
    while True:
        page = pull(client, alice.project, cursor, limit=2)
        seen += [c["memory"]["content"] for c in page["changes"]]
        cursor = page["cursor"]
        if not page["has_more"]:
            break
    assert seen == [f"Fact number {n} about the build." for n in range(5)]


def test_a_slow_transaction_is_never_skipped_by_the_cursor(alice, api_client):
    """A change made by a transaction that commits late must still reach a device whose cursor
    moved on meanwhile — the classic hole in sequence-number feeds."""
    client = api_client(alice.key)
    early = make_memory(alice, content="Slow transaction target.", type="gotcha")
    cursor = pull(client, alice.project)["cursor"]
    slow = connect()
    try:
        slow.execute(
            "UPDATE memories_memory SET version = version + 1, content = 'edited late' WHERE id = %s",
            [early.id],
        )
        later = make_memory(alice, content="Committed while the slow one runs.", type="gotcha")
        while_open = pull(client, alice.project, cursor)
        assert while_open["changes"] == []  # held back: an older transaction is still running
        slow.commit()
    finally:
        slow.close()
    after = pull(client, alice.project, while_open["cursor"])
    assert [c["memory"]["id"] for c in after["changes"]] == [str(early.id), str(later.id)]
    assert after["changes"][0]["memory"]["content"] == "edited late"


def test_a_transaction_in_another_database_does_not_hold_the_feed_back(alice, api_client):
    """Only this database's transactions can add to its feed: another database on the same server
    (another tenant, a parallel test run) may keep a transaction open as long as it likes."""
    client = api_client(alice.key)
    cursor = pull(client, alice.project)["cursor"]
    elsewhere = connect("postgres")
    try:
        elsewhere_xid = int(elsewhere.execute("SELECT pg_current_xact_id()").fetchone()[0])
        memory = make_memory(alice, content="Committed while another database works.", type="gotcha")
        assert int(MemoryChange.objects.get(memory_id=memory.id).xid) > elsewhere_xid
        got = pull(client, alice.project, cursor)
    finally:
        elsewhere.close()
    assert [c["memory"]["id"] for c in got["changes"]] == [str(memory.id)]


def test_the_pulling_transactions_own_uncommitted_changes_wait_for_its_commit(alice, api_client):
    cursor = pull(api_client(alice.key), alice.project)["cursor"]
    with transaction.atomic():
        memory = make_memory(alice, content="Written in the pulling transaction.", type="gotcha")
        inside = changes_since(principal=alice.principal, project=alice.project, cursor=Cursor.decode(cursor))
        assert inside.changes == [] and inside.cursor == Cursor.decode(cursor)
    after = pull(api_client(alice.key), alice.project, cursor)
    assert [c["memory"]["id"] for c in after["changes"]] == [str(memory.id)]


def test_others_personal_memories_never_sync_and_turn_into_deletes_when_hidden(alice, bob, api_client):
    secret = make_memory(bob, content="Bob's own shortcut.", type="preference", scope="personal")
    shared = make_memory(bob, content="Shared build rule.", type="requirement")
    client = api_client(alice.key)
    got = pull(client, alice.project)
    assert [c["memory"]["id"] for c in got["changes"]] == [str(shared.id)]
    assert str(secret.id) not in str(got)
    memory_update(memory=Memory.objects.get(id=shared.id), actor=bob.principal, changes={"scope": "personal"})
    assert pull(client, alice.project, got["cursor"])["changes"] == [{"op": "delete", "id": str(shared.id)}]


def test_push_creates_once_per_ref_and_applies_current_edits(alice, api_client):
    client = api_client(alice.key)
    create = {"op": "create", "ref": "laptop-1", "memory": {"type": "gotcha", "content": "Offline insight."}}
    first = push(client, alice.project, [create])["results"][0]
    again = push(client, alice.project, [create])["results"][0]
    assert first["status"] == again["status"] == "applied" and first["id"] == again["id"]
    assert Memory.objects.filter(content="Offline insight.").count() == 1

    edit = {
        "op": "update",
        "id": first["id"],
        "base_version": 1,
        "fields": {"content": "Offline insight, refined."},
    }
    result = push(client, alice.project, [edit])["results"][0]
    assert result == {"status": "applied", "id": first["id"], "version": 2}
    assert Memory.objects.get(id=first["id"]).content == "Offline insight, refined."


def test_stale_edits_merge_lists_and_untouched_fields(alice, api_client):
    memory = make_memory(alice, content="Original text.", type="gotcha", tags=["a"])
    memory_update(
        memory=Memory.objects.get(id=memory.id), actor=alice.principal, changes={"tags": ["a", "server"]}
    )
    stale = {
        "op": "update",
        "id": str(memory.id),
        "base_version": 1,
        "fields": {"tags": ["a", "device"], "content": "Text edited on the plane."},
    }
    result = push(api_client(alice.key), alice.project, [stale])["results"][0]
    assert result["status"] == "merged" and result["merged"] == ["content", "tags"]
    memory.refresh_from_db()
    assert memory.tags == ["a", "server", "device"]
    assert memory.content == "Text edited on the plane."


def test_content_edited_on_both_sides_is_a_conflict_and_nothing_applies(alice, api_client):
    memory = make_memory(alice, content="Original text.", type="gotcha")
    memory_update(
        memory=Memory.objects.get(id=memory.id), actor=alice.principal, changes={"content": "Server text."}
    )
    stale = {
        "op": "update",
        "id": str(memory.id),
        "base_version": 1,
        "fields": {"content": "Device text.", "tags": ["x"]},
    }
    result = push(api_client(alice.key), alice.project, [stale])["results"][0]
    assert result["status"] == "conflict" and result["conflicts"] == ["content"]
    assert result["server"]["content"] == "Server text." and result["server"]["version"] == 2
    memory.refresh_from_db()
    assert (memory.content, memory.tags) == ("Server text.", [])


def test_deletes_need_the_current_version_and_the_right_to_delete(alice, bob, api_client):
    memory = make_memory(alice, content="To be removed.", type="gotcha")
    as_bob = push(
        api_client(bob.key), alice.project, [{"op": "delete", "id": str(memory.id), "base_version": 1}]
    )
    assert as_bob["results"][0]["status"] == "forbidden"
    memory_update(memory=Memory.objects.get(id=memory.id), actor=alice.principal, changes={"tags": ["t"]})
    client = api_client(alice.key)
    stale = push(client, alice.project, [{"op": "delete", "id": str(memory.id), "base_version": 1}])[
        "results"
    ][0]
    assert stale["status"] == "conflict" and Memory.objects.filter(id=memory.id).exists()
    done = push(client, alice.project, [{"op": "delete", "id": str(memory.id), "base_version": 2}])[
        "results"
    ][0]
    assert done["status"] == "applied" and not Memory.objects.filter(id=memory.id).exists()
    gone = push(client, alice.project, [{"op": "delete", "id": str(memory.id), "base_version": 2}])[
        "results"
    ][0]
    assert gone["status"] == "gone"


def test_a_delete_on_its_own_answers_with_the_memorys_id(alice, api_client):
    memory = make_memory(alice, content="Removed from the laptop.", type="gotcha")
    delete = {"op": "delete", "id": str(memory.id), "base_version": 1}
    (result,) = push(api_client(alice.key), alice.project, [delete])["results"]
    assert result == {"status": "applied", "id": str(memory.id)}


def test_a_push_applies_in_order_each_change_seeing_the_ones_before(alice, api_client):
    memory = make_memory(alice, content="Edited, then removed, offline.", type="gotcha")
    changes = [
        {"op": "update", "id": str(memory.id), "base_version": 1, "fields": {"tags": ["offline"]}},
        {"op": "delete", "id": str(memory.id), "base_version": 2},
        {"op": "update", "id": str(memory.id), "base_version": 2, "fields": {"tags": ["late"]}},
        {"op": "delete", "id": str(memory.id), "base_version": 2},
    ]
    results = push(api_client(alice.key), alice.project, changes)["results"]
    assert results == [
        {"status": "applied", "id": str(memory.id), "version": 2},
        {"status": "applied", "id": str(memory.id)},
        {"status": "not_found", "id": str(memory.id)},
        {"status": "gone", "id": str(memory.id)},
    ]
    assert not Memory.objects.filter(id=memory.id).exists()


def test_a_device_that_edits_then_deletes_in_one_push_may_send_the_version_it_saw(alice, api_client):
    """A device cannot know the version its own edit will get: a later change to the memory in
    the same push carrying the version it saw counts as based on what its edit produced."""
    memory = make_memory(alice, content="Edited, then forgotten, offline.", type="gotcha")
    changes = [
        {"op": "update", "id": str(memory.id), "base_version": 1, "fields": {"tags": ["offline"]}},
        {"op": "update", "id": str(memory.id), "base_version": 1, "fields": {"tags": ["offline", "twice"]}},
        {"op": "delete", "id": str(memory.id), "base_version": 1},
    ]
    results = push(api_client(alice.key), alice.project, changes)["results"]
    assert [r["status"] for r in results] == ["applied", "applied", "applied"]
    assert [r.get("version") for r in results] == [2, 3, None]
    assert not Memory.objects.filter(id=memory.id).exists()


def test_a_delete_after_a_merged_edit_is_still_a_conflict(alice, api_client):
    """When the device's edit had to be merged with someone else's, its delete never saw that
    other edit: it waits for a person."""
    memory = make_memory(alice, content="Edited on the server meanwhile.", type="gotcha")
    memory_update(memory=memory, actor=alice.principal, changes={"content": "Edited on the server, v2."})
    changes = [
        {"op": "update", "id": str(memory.id), "base_version": 1, "fields": {"tags": ["offline"]}},
        {"op": "delete", "id": str(memory.id), "base_version": 1},
    ]
    results = push(api_client(alice.key), alice.project, changes)["results"]
    assert [r["status"] for r in results] == ["merged", "conflict"]
    assert results[1]["server"]["version"] == 3 and results[1]["server"]["tags"] == ["offline"]
    assert Memory.objects.filter(id=memory.id).exists()


def _push_while_holding(low, high, person, api_client, changes) -> list:
    """Push `changes` from another thread while this one holds `low`'s row, as another push that
    took it first; once the push waits, `high` must still be free: the push did not take it
    before `low`. Returns what the push answered (or raised)."""
    with transaction.atomic():
        Memory.objects.select_for_update().get(pk=low.pk)
        device = Worker(lambda: push(api_client(person.key), person.project, changes)["results"])
        wait_until_another_session_waits_for_a_lock()
        Memory.objects.select_for_update(nowait=True).get(pk=high.pk)
    return [device.finish()]


def test_a_push_locks_its_memories_in_id_order_so_opposite_pushes_cannot_deadlock(alice, api_client):
    """Another push holds the lower-id memory; a push naming the higher one first must wait for
    the lower one before it touches the higher, or each would hold what the other waits for."""
    low, high = sorted(
        (make_memory(alice, content=f"Shared offline memory {n}.", type="gotcha") for n in (1, 2)),
        key=lambda m: m.pk,
    )
    changes = [
        {"op": "update", "id": str(m.id), "base_version": 1, "fields": {"tags": ["device"]}}
        for m in (high, low)
    ]
    outcome = _push_while_holding(low, high, alice, api_client, changes)
    assert [[r["status"] for r in results] for results in outcome] == [["applied", "applied"]]


def test_a_push_locks_the_memories_its_creates_relate_to_in_the_same_order(alice, api_client):
    """A create's relation makes PostgreSQL check its target under a lock: the target is locked
    up front with the rest, or a push editing one memory and relating to another deadlocks with
    a push doing the opposite."""
    low, high = sorted(
        (make_memory(alice, content=f"Related offline memory {n}.", type="gotcha") for n in (1, 2)),
        key=lambda m: m.pk,
    )
    related = {"relation_type": "required_with", "target_memory_id": str(low.id)}
    changes = [
        {"op": "update", "id": str(high.id), "base_version": 1, "fields": {"tags": ["device"]}},
        {
            "op": "create",
            "ref": "rel-1",
            "memory": {"type": "gotcha", "content": "Needs it.", "relations": [related]},
        },
    ]
    outcome = _push_while_holding(low, high, alice, api_client, changes)
    assert [[r["status"] for r in results] for results in outcome] == [["applied", "applied"]]


def test_pinning_and_deprecating_from_a_device_need_a_steward(alice, bob, api_client):
    memory = make_memory(alice, content="Keep the cache warm.", type="gotcha")
    as_bob = api_client(bob.key)
    changes = [
        {"op": "update", "id": str(memory.id), "base_version": 1, "fields": {"pinned": True}},
        {
            "op": "update",
            "id": str(memory.id),
            "base_version": 1,
            "fields": {"deprecated": True, "tags": ["cache"]},
        },
        {
            "op": "create",
            "ref": "p",
            "memory": {"type": "gotcha", "content": "Pinned offline.", "pinned": True},
        },
    ]
    results = push(as_bob, alice.project, changes)["results"]
    assert [r["status"] for r in results] == ["forbidden", "applied", "applied"]
    assert results[0]["server"]["pinned"] is False and results[0]["server"]["version"] == 1
    assert results[1]["refused"] == ["deprecated"] and results[2]["refused"] == ["pinned"]
    memory.refresh_from_db()
    assert (memory.pinned, memory.deprecated, memory.tags, memory.version) == (False, False, ["cache"], 2)
    assert not Memory.objects.get(content="Pinned offline.").pinned  # created, unpinned
    # unpinning what is not pinned changes nothing: no steward needed
    unpin = {
        "op": "update",
        "id": str(memory.id),
        "base_version": 2,
        "fields": {"pinned": False, "tags": ["warm"]},
    }
    (result,) = push(as_bob, alice.project, [unpin])["results"]
    assert result["status"] == "applied" and "refused" not in result
    assert Memory.objects.get(id=memory.id).tags == ["warm"]


@pytest.mark.parametrize(
    "bad",
    [
        {"op": "rename", "id": "x"},
        {"op": "update", "id": "00000000-0000-0000-0000-000000000000", "base_version": 1, "fields": {}},
        {"op": "create", "ref": "r", "memory": {"type": "no-such-type", "content": "x"}},
        {"op": "create", "ref": "r", "memory": {"type": "gotcha", "content": "nul \u0000 inside"}},
        {"op": "create", "ref": "r", "memory": {"type": "gotcha", "content": "lone \ud800 inside"}},
        {"op": "create", "ref": "r", "memory": {"type": "gotcha", "content": "Tagged.", "tags": ["\udfff"]}},
        {
            "op": "update",
            "id": "00000000-0000-0000-0000-000000000000",
            "base_version": 1,
            "fields": {"owner": 1},
        },
        "not a change",
    ],
)
def test_an_invalid_change_comes_back_invalid_and_the_rest_of_the_push_applies(alice, api_client, bad):
    before = {"op": "create", "ref": "ok", "memory": {"type": "gotcha", "content": "Valid one."}}
    after = {"op": "create", "ref": "ok2", "memory": {"type": "gotcha", "content": "Valid two."}}
    results = push(api_client(alice.key), alice.project, [before, bad, after])["results"]
    assert [r["status"] for r in results] == ["applied", "invalid", "applied"]
    assert results[1]["message"] and results[1]["details"]
    if "\ud800" in json.dumps(bad) or "\udfff" in json.dumps(bad):
        assert "lone surrogate" in json.dumps(results[1]), results[1]
    assert Memory.objects.filter(content__in=["Valid one.", "Valid two."]).count() == 2


def test_a_change_the_services_refuse_is_undone_alone_with_the_reason_and_the_servers_copy(alice, api_client):
    recipe = make_memory(
        alice,
        content="Release: tag, then publish.",
        type="workflow_recipe",
        payload={"task_pattern": "release", "steps": [{"order": 1, "description": "tag"}]},
    )
    other = make_memory(alice, content="Keep the changelog short.", type="preference")
    changes = [
        {"op": "update", "id": str(other.id), "base_version": 1, "fields": {"tags": ["docs"]}},
        # a recipe's payload needs its steps: the services refuse it once the edit is merged
        {
            "op": "update",
            "id": str(recipe.id),
            "base_version": 1,
            "fields": {"payload": {"task_pattern": "x"}},
        },
        {"op": "update", "id": str(other.id), "base_version": 1, "fields": {"type": "no-such-type"}},
        # the project has no team
        {"op": "create", "ref": "t", "memory": {"type": "gotcha", "content": "Team note.", "scope": "team"}},
        {
            "op": "update",
            "id": str(other.id),
            "base_version": 1,
            "fields": {"content": "Keep it very short."},
        },
    ]
    results = push(api_client(alice.key), alice.project, changes)["results"]
    assert [r["status"] for r in results] == ["applied", "invalid", "invalid", "invalid", "applied"]
    assert results[1]["id"] == str(recipe.id) and "does not fit" in results[1]["message"]
    assert results[1]["server"]["payload"]["task_pattern"] == "release"
    assert results[2]["server"]["version"] == 3  # as the push left it
    assert results[3]["ref"] == "t" and results[3]["details"] == {"field": "scope"}
    recipe.refresh_from_db()
    other.refresh_from_db()
    assert (recipe.version, recipe.payload["task_pattern"]) == (1, "release")
    assert (other.type, other.tags, other.content) == ("preference", ["docs"], "Keep it very short.")
    assert not Memory.objects.filter(content="Team note.").exists()


def test_a_push_of_more_than_max_push_changes_is_refused_whole(alice, api_client):
    from apps.sync.api import MAX_PUSH

    changes = [
        {"op": "create", "ref": f"r{i}", "memory": {"type": "gotcha", "content": f"Note {i}."}}
        for i in range(MAX_PUSH + 1)
    ]
    push(api_client(alice.key), alice.project, changes, status=422)
    assert not Memory.objects.filter(content="Note 0.").exists()


def test_a_foreign_cursor_is_a_422(alice, api_client):
    for cursor in ("garbage", "c1.!!!", "c1.LTE6Mg"):
        response = api_client(alice.key).get(
            "sync/pull", {"project_id": str(alice.project.id), "cursor": cursor}
        )
        assert response.status_code == 422, cursor


def test_any_cursor_of_the_documented_shape_is_a_position_and_an_old_one_is_still_read(alice, api_client):
    """The schema gives the cursor's pattern, so a cursor of that shape is taken (not a 422); a
    device that saved a `c1.` cursor from an earlier version keeps syncing from it."""
    make_memory(alice, content="Synced once.")
    client = api_client(alice.key)
    everything = pull(client, alice.project)
    assert re.fullmatch(CURSOR_PATTERN, everything["cursor"]) and everything["changes"]
    assert pull(client, alice.project, "c2.999999999999999999.0")["changes"] == []
    assert pull(client, alice.project, "c2.0.0")["changes"] == everything["changes"]
    xid, seq = everything["cursor"].removeprefix("c2.").split(".")
    old = "c1." + base64.urlsafe_b64encode(f"{xid}:{seq}".encode()).decode().rstrip("=")
    assert pull(client, alice.project, old)["changes"] == []


def test_outsiders_get_404_for_another_orgs_project(alice, charlie, api_client):
    client = api_client(charlie.key)
    assert client.get("sync/pull", {"project_id": str(alice.project.id)}).status_code == 404
    response = push(client, alice.project, [], status=404)
    assert response["error"]["code"] == "not_found"


def test_scopes_and_roles_gate_sync(alice, person_with_role, api_client):
    no_sync, key = tenant_services.api_key_create(
        organization=alice.org, actor=alice.principal, name="read only", scopes=["memories:read"]
    )
    assert api_client(key).get("sync/pull", {"project_id": str(alice.project.id)}).status_code == 403
    viewer = person_with_role(Role.VIEWER)
    viewer_device_key = tenant_services.api_key_create(
        organization=alice.org,
        actor=Principal(user=viewer.user, roles={alice.org.id: Role.VIEWER}),
        name="viewer sync",
        scopes=["memories:read", "sync"],
        check_permission=False,
    )[1]
    # a viewer may not sync (the role matrix), whatever scopes their key was given
    client = api_client(viewer_device_key)
    assert client.get("sync/pull", {"project_id": str(alice.project.id)}).status_code == 403
    push(client, alice.project, [], status=403)


def test_a_device_pull_records_its_last_sync(alice, api_client):
    device, key = tenant_services.device_register(
        organization=alice.org, actor=alice.principal, name="laptop"
    )
    assert device.last_sync_at is None
    pull(api_client(key), alice.project)
    assert Device.objects.get(id=device.id).last_sync_at is not None


def test_changes_in_another_project_are_not_even_named(alice, api_client):
    from tests.factories import ProjectFactory

    other = ProjectFactory(organization=alice.org, name="Other", slug="other")
    client = api_client(alice.key)
    cursor = pull(client, alice.project)["cursor"]
    elsewhere = make_memory(alice, project=other, content="Only for the other project.", type="gotcha")
    memory_delete(memory=Memory.objects.get(id=elsewhere.id), actor=alice.principal)
    assert pull(client, alice.project, cursor)["changes"] == []


def test_one_ref_in_two_projects_makes_two_memories(alice, api_client):
    """A ref names a memory within its project: the same ref pushed to another project answered
    with the first project's memory and created nothing there."""
    from tests.factories import ProjectFactory

    other = ProjectFactory(organization=alice.org, name="Other", slug="other")
    client = api_client(alice.key)
    create = {"op": "create", "ref": "note-1", "memory": {"type": "gotcha", "content": "Per project."}}
    here = push(client, alice.project, [create])["results"][0]
    there = push(client, other, [create])["results"][0]
    assert here["id"] != there["id"]
    assert Memory.objects.get(id=there["id"]).project_id == other.id
    assert push(client, other, [create])["results"][0]["id"] == there["id"]


def test_two_pushes_of_one_new_ref_at_once_create_it_once(alice, api_client):
    """A retry racing the original: the second push found no ref (the first had not committed),
    created a second memory, then failed on the ref's unique constraint with a 500."""
    from apps.memories.validation import MemoryDraft
    from apps.sync.services import push_apply

    draft = {"type": "gotcha", "content": "Pushed twice."}
    create = {"op": "create", "ref": "race-1", "memory": draft}
    with transaction.atomic():
        (first,) = push_apply(
            project=alice.project,
            actor=Principal.for_api_key(alice.api_key),
            changes=[{**create, "memory": MemoryDraft.model_validate(draft)}],
            memories={},
        )
        retry = Worker(lambda: push(api_client(alice.key), alice.project, [create])["results"])
        wait_until_another_session_waits_for_a_lock()
    (second,) = retry.finish()
    assert second == first
    assert Memory.objects.filter(content="Pushed twice.").count() == 1


def test_a_push_takes_its_new_refs_in_order_so_opposite_pushes_cannot_deadlock(alice, api_client):
    """Each create took its ref's lock as it was reached: pushes of [a, b] and [b, a] at once each
    held one and waited for the other (a deadlock, and a 500). Another push holds ref a; a push of
    [b, a] must wait for a before it takes b."""
    from apps.memories.validation import MemoryDraft
    from apps.sync.services import _ref_lock, _ref_owner, push_apply

    def create(ref):
        return {"op": "create", "ref": ref, "memory": {"type": "gotcha", "content": f"Ref {ref}."}}

    actor = Principal.for_api_key(alice.api_key)
    with transaction.atomic():
        push_apply(
            project=alice.project,
            actor=actor,
            changes=[{**create("a"), "memory": MemoryDraft.model_validate(create("a")["memory"])}],
            memories={},
        )
        device = Worker(
            lambda: push(api_client(alice.key), alice.project, [create("b"), create("a")])["results"]
        )
        wait_until_another_session_waits_for_a_lock()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_try_advisory_xact_lock(hashtextextended(%s, 0))",
                [_ref_lock(_ref_owner(alice.project, actor, "b"))],
            )
            assert cursor.fetchone()[0] is True, "the push took ref b before ref a"
    results = device.finish()
    assert [r["status"] for r in results] == ["applied", "applied"]
    assert Memory.objects.filter(content__startswith="Ref ").count() == 2


def test_a_stale_edit_whose_merged_tags_overflow_is_a_conflict_and_the_rest_applies(alice, api_client):
    """Both sides added tags, together more than a memory holds: the whole push was a 422 and the
    device's outbox never drained."""
    memory = make_memory(alice, content="Tagged on both sides.", type="gotcha")
    server_tags = [f"server-{n}" for n in range(20)]
    memory_update(
        memory=Memory.objects.get(id=memory.id), actor=alice.principal, changes={"tags": server_tags}
    )
    changes = [
        {
            "op": "update",
            "id": str(memory.id),
            "base_version": 1,
            "fields": {"tags": [f"d-{n}" for n in range(20)]},
        },
        {"op": "create", "ref": "after-1", "memory": {"type": "gotcha", "content": "Still applied."}},
    ]
    results = push(api_client(alice.key), alice.project, changes)["results"]
    assert [r["status"] for r in results] == ["conflict", "applied"]
    assert results[0]["conflicts"] == ["tags"] and results[0]["server"]["tags"] == server_tags
    assert Memory.objects.get(id=memory.id).tags == server_tags


def test_an_org_memory_narrowed_to_its_project_is_deleted_from_other_projects_replicas(alice, api_client):
    from tests.factories import ProjectFactory

    other = ProjectFactory(organization=alice.org, name="Other", slug="other")
    memory = make_memory(alice, project=other, content="Org-wide at first.", type="gotcha", scope="org")
    client = api_client(alice.key)
    got = pull(client, alice.project)
    assert [c["memory"]["id"] for c in got["changes"]] == [str(memory.id)]
    memory_update(
        memory=Memory.objects.get(id=memory.id), actor=alice.principal, changes={"scope": "project"}
    )
    assert pull(client, alice.project, got["cursor"])["changes"] == [{"op": "delete", "id": str(memory.id)}]
