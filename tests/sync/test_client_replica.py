"""The device client end to end: a libSQL replica syncing with the real service (in-process
over WSGI), searching offline, and bringing offline work back — conflicts included."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import libsql
import pytest
from django.core.wsgi import get_wsgi_application
from memorysaas_client.cli import main_args
from memorysaas_client.replica import LOCAL_PREFIX, Replica, SyncClient

from apps.memories.embedding.providers import embed_query
from apps.memories.models import Memory
from apps.memories.services import memory_delete, memory_update
from apps.sync.api import MAX_PUSH
from apps.tenants import services as tenant_services
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384


@pytest.fixture
def device(alice, tmp_path):
    client = SyncClient(
        "http://testserver", alice.key, transport=httpx.WSGITransport(app=get_wsgi_application())
    )
    return Replica(str(tmp_path / "memory.db"), project_id=str(alice.project.id)), client


def test_a_replica_pulls_everything_and_searches_offline(alice, device):
    replica, client = device
    jwt = make_memory(
        alice, content="verify_jwt rejects tokens signed with HS256.", type="gotcha", tags=["auth"]
    )
    make_memory(alice, content="Database migrations run before the seed script.", type="workflow_recipe",
                payload={"task_pattern": "seed", "steps": [{"order": 1, "description": "migrate"}]})  # fmt: skip
    report = replica.sync(client)
    assert (report.pulled, replica.count()) == (2, 2)

    assert replica.search_text("verify_jwt")[0] == str(jwt.id)
    query = embed_query("verify_jwt rejects tokens signed with HS256.")
    ranked = replica.search_vector(query.tolist(), limit=2)
    assert [memory_id for memory_id, _ in ranked][0] == str(jwt.id)
    assert ranked[0][1] < ranked[1][1]

    assert replica.sync(client).pulled == 0  # the cursor was saved
    memory_delete(memory=Memory.objects.get(id=jwt.id), actor=alice.principal)
    assert replica.sync(client).deleted == 1
    assert replica.get(str(jwt.id)) is None and replica.search_text("verify_jwt") == []


def test_offline_work_comes_back_and_conflicts_wait_for_a_person(alice, device):
    replica, client = device
    shared = make_memory(alice, content="Cache keys include the tenant.", type="gotcha")
    replica.sync(client)

    local = replica.remember(type="preference", content="Prefer ripgrep over grep.")
    assert local.startswith(LOCAL_PREFIX) and replica.search_text("ripgrep") == [local]
    replica.edit(str(shared.id), content="Cache keys include the tenant and the locale.")
    # Meanwhile someone edits the same memory's text on the server.
    memory_update(
        memory=Memory.objects.get(id=shared.id), actor=alice.principal, changes={"content": "Server wins?"}
    )

    report = replica.sync(client)
    assert (report.pushed, report.conflicts) == (2, 1)
    created = Memory.objects.get(content="Prefer ripgrep over grep.")
    assert replica.get(str(created.id))["content"] == "Prefer ripgrep over grep."
    assert replica.get(local) is None  # the local id gave way to the server's
    [conflict] = replica.conflicts()
    assert conflict["fields"] == ["content"]
    assert conflict["local"]["content"] == "Cache keys include the tenant and the locale."
    assert conflict["server"]["content"] == "Server wins?"
    assert replica.get(str(shared.id))["content"] == "Server wins?"
    assert Memory.objects.get(id=shared.id).content == "Server wins?"


def test_an_edit_then_forget_offline_deletes_the_memory_on_sync(alice, device):
    replica, client = device
    memory = make_memory(alice, content="Retired offline after one last edit.", type="gotcha")
    replica.sync(client)
    replica.edit(str(memory.id), tags=["retired"])
    replica.forget(str(memory.id))
    report = replica.sync(client)
    assert report.conflicts == 0 and replica.conflicts() == []
    assert not Memory.objects.filter(id=memory.id).exists() and replica.get(str(memory.id)) is None


def test_what_the_server_refuses_gives_way_to_its_copy_and_the_rest_applies(alice, bob, tmp_path):
    pinned_only = make_memory(alice, content="Retry webhooks with backoff.", type="pattern")
    edited = make_memory(alice, content="Invoices are numbered per year.", type="gotcha")
    client = SyncClient(
        "http://testserver", bob.key, transport=httpx.WSGITransport(app=get_wsgi_application())
    )
    replica = Replica(str(tmp_path / "bob.db"), project_id=str(alice.project.id))
    replica.sync(client)
    replica.edit(str(pinned_only.id), pinned=True, tags=[])  # a member may not pin (tags: no change)
    replica.edit(str(edited.id), content="Invoices are numbered per year and per country.", deprecated=True)
    local = replica.remember(type="gotcha", content="Pinned on the train.")
    replica.edit(local, pinned=True)  # folded into its create
    assert replica.get(str(pinned_only.id))["pinned"] and replica.get(str(edited.id))["deprecated"]

    report = replica.sync(client)
    assert (report.pushed, report.forbidden) == (3, 3)
    assert not replica.get(str(pinned_only.id))["pinned"]
    assert not replica.get(str(edited.id))["deprecated"]
    assert replica.get(str(edited.id))["content"].endswith("per country.")  # the offline edit kept
    created = Memory.objects.get(content="Pinned on the train.")
    assert not created.pinned and replica.get(str(created.id))["content"] == "Pinned on the train."
    assert replica.get(local) is None
    assert not Memory.objects.get(id=pinned_only.id).pinned


def test_a_retried_push_after_a_lost_answer_creates_nothing_twice(alice, device, monkeypatch):
    replica, client = device
    replica.remember(type="gotcha", content="Flaky test: order of dict keys.")
    real_push = client.push

    def push_then_lose_the_answer(project_id, changes):
        real_push(project_id, changes)
        raise httpx.ReadTimeout("connection dropped")

    monkeypatch.setattr(client, "push", push_then_lose_the_answer)
    with pytest.raises(httpx.ReadTimeout):
        replica.sync(client)
    monkeypatch.undo()
    replica.sync(client)
    assert Memory.objects.filter(content="Flaky test: order of dict keys.").count() == 1
    assert replica.count() == 1


def test_the_command_line_searches_the_replica(alice, device, tmp_path, capsys):
    replica, client = device
    memory = make_memory(alice, content="Use verify_jwt from auth/tokens.py.", type="gotcha")
    replica.sync(client)
    args = ["--db", str(tmp_path / "memory.db"), "--project", str(alice.project.id)]
    assert main_args([*args, "search", "--offline", "verify_jwt"]) == 0
    assert capsys.readouterr().out.startswith(f"{str(memory.id)[:8]}  gotcha")


def test_offline_search_is_code_aware_like_the_servers(alice, device):
    replica, client = device
    memory = make_memory(
        alice,
        content="Call verifyJwt before trusting a token.",
        type="gotcha",
        related_files=["auth/tokens.ts"],
    )
    make_memory(alice, content="Verify the release checklist.", type="workflow_recipe",
                payload={"task_pattern": "release", "steps": [{"order": 1, "description": "tag"}]})  # fmt: skip
    replica.sync(client)
    for query in ("verify_jwt", "verifyJwt", "VERIFY_JWT", "jwt", "auth/tokens.ts", "tokens.ts", "auth"):
        assert replica.search_text(query)[:1] == [str(memory.id)], query
    assert replica.search_text("verify_jwt")[1:] != []  # the part `verify` finds the other one
    assert replica.search_text("verification_token") == [str(memory.id)]  # `token`, stemmed
    assert replica.search_text("...") == []


def test_a_replica_indexed_before_code_aware_search_is_reindexed_on_open(alice, device, tmp_path):
    replica, client = device
    memory = make_memory(alice, content="Use verifyJwt from auth/tokens.ts.", type="gotcha")
    replica.sync(client)
    path = str(tmp_path / "memory.db")
    old = libsql.connect(path)  # as an earlier client left it: the text itself, no version mark
    old.execute("DROP TABLE memories_fts")
    old.execute("CREATE VIRTUAL TABLE memories_fts USING fts5(id UNINDEXED, content, tags, files)")
    old.execute("INSERT INTO memories_fts VALUES (?, ?, '', '')", (str(memory.id), memory.content))
    old.execute("DELETE FROM meta WHERE key = 'fts_terms'")
    old.commit()
    assert Replica(path, project_id=str(alice.project.id)).search_text("verify_jwt") == [str(memory.id)]


def test_offline_search_finds_a_word_inside_a_chinese_sentence(alice, device, tmp_path):
    replica, client = device
    memory = make_memory(alice, content="缓存键在每次部署时都会变化，请勿硬编码。", type="gotcha")
    make_memory(alice, content="部门的预算每年审核。", type="decision")  # shares only 部
    replica.sync(client)
    assert replica.search_text("部署") == [str(memory.id)]
    # a replica indexed by the previous client (a CJK run one word) is indexed again on open
    path = str(tmp_path / "memory.db")
    old = libsql.connect(path)
    old.execute("UPDATE meta SET value = 'codetokens-1' WHERE key = 'fts_terms'")
    old.execute("UPDATE memories_fts SET content = ? WHERE id = ?", (memory.content, str(memory.id)))
    old.commit()
    assert Replica(path, project_id=str(alice.project.id)).search_text("部署") == [str(memory.id)]


def test_the_client_imports_no_django():
    """A device runs the client without the service's settings: what it shares with the server
    (codetokens, kinds) must stay pure, and nothing of the server's weight comes along."""
    probe = (
        "import sys, memorysaas_client.cli, memorysaas_client.mcp_server;"
        " print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'torch', 'apps', 'memorysaas')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_command_line_finds_a_snake_case_query_in_camel_case_content(alice, device, tmp_path, capsys):
    replica, client = device
    memory = make_memory(alice, content="verifyJwt rejects tokens signed with HS256.", type="gotcha")
    replica.sync(client)
    args = ["--db", str(tmp_path / "memory.db"), "--project", str(alice.project.id), "search", "--offline"]
    assert main_args([*args, "verify_jwt"]) == 0
    assert capsys.readouterr().out.startswith(f"{str(memory.id)[:8]}  gotcha")
    assert main_args([*args, "no_such_thing"]) == 0
    printed = capsys.readouterr()
    assert printed.out == "" and "No memory in" in printed.err


def test_a_memory_forgotten_before_it_ever_synced_never_reaches_the_server(alice, device):
    replica, client = device
    local = replica.remember(type="gotcha", content="Scratch note about zqxjk.")
    replica.edit(local, tags=["scratch"])
    replica.forget(local)
    report = replica.sync(client)
    assert report.pushed == 0 and replica.pending() == 0
    assert not Memory.objects.filter(content__contains="zqxjk").exists()
    assert replica.search_text("zqxjk") == [] and replica.count() == 0


def test_a_create_left_queued_by_an_older_client_after_forget_is_dropped(alice, device):
    replica, client = device
    local = replica.remember(type="gotcha", content="Forgotten under the old client: zqxjk.")
    for table in ("memories", "memories_fts"):  # what its `forget` did
        replica.db.execute(f"DELETE FROM {table} WHERE id = ?", (local,))
    replica.db.commit()
    replica.sync(client)
    assert not Memory.objects.filter(content__contains="zqxjk").exists()
    assert replica.search_text("zqxjk") == [] and replica.pending() == 0


def test_a_write_the_server_would_refuse_is_refused_on_the_device(alice, device):
    replica, client = device
    memory = make_memory(alice, content="Deploys go out on Tuesdays.", type="decision")
    replica.sync(client)
    with pytest.raises(ValueError, match="unknown memory type 'note'"):
        replica.remember(type="note", content="x")
    with pytest.raises(ValueError, match="content"):
        replica.remember(type="gotcha", content="x" * 4001)
    with pytest.raises(ValueError, match="unknown memory type"):
        replica.edit(str(memory.id), type="note")
    with pytest.raises(ValueError, match="cannot edit owner"):
        replica.edit(str(memory.id), owner=1)
    assert replica.pending() == 0 and replica.count() == 1
    local = replica.remember(type="pitfall", content="Aliases are fine.")
    assert replica.get(local)["type"] == "gotcha"
    # a create cannot carry `deprecated`: folded into it, the whole memory came back invalid
    # and the replica dropped it
    with pytest.raises(ValueError, match="not synced yet cannot be deprecated"):
        replica.edit(local, deprecated=True)
    assert replica.sync(client).rejected == 0 and replica.get(local) is None
    assert Memory.objects.filter(content="Aliases are fine.").exists()


def test_a_change_the_server_rejects_is_set_aside_and_everything_else_syncs(alice, device):
    replica, client = device
    dead_end = make_memory(
        alice,
        content="Tried caching sessions in memory.",
        type="dead_end",
        payload={"approach_tried": "in-memory cache", "why_it_failed": "two workers"},
    )
    replica.sync(client)
    # Only the server checks a payload against its type: this one lacks `why_it_failed`.
    replica.edit(str(dead_end.id), payload={"approach_tried": "a dict"})
    replica.remember(type="gotcha", content="Retries need an idempotency key.")
    # What an older client, which did not check types, may have stored and queued.
    old = {"op": "create", "ref": "local:old", "memory": {"type": "note", "content": "Old note."}}
    replica.db.execute("INSERT INTO memories (id, type, content) VALUES ('local:old', 'note', 'Old note.')")
    replica.db.execute("INSERT INTO outbox (change) VALUES (?)", (json.dumps(old),))
    replica.db.commit()
    make_memory(alice, content="Meanwhile on the server.", type="gotcha")

    report = replica.sync(client)
    assert (report.pushed, report.rejected, report.push_error) == (3, 2, None)
    assert Memory.objects.filter(content="Retries need an idempotency key.").exists()
    assert replica.search_text("idempotency") and replica.search_text("Meanwhile")
    assert replica.get(str(dead_end.id))["version"] == 1  # the server's copy is back
    first, second = replica.rejected()
    assert first["change"]["id"] == str(dead_end.id) and "does not fit" in first["reason"]["message"]
    assert second["change"]["ref"] == "local:old" and second["reason"]["details"]
    assert replica.get("local:old") is None  # the server will never have it
    assert replica.pending() == 0
    assert replica.sync(client).pushed == 0  # nothing is wedged, nothing is sent again


def test_more_changes_than_one_push_takes_sync_in_batches(alice, device):
    replica, client = device
    shared = make_memory(alice, content="The queue retries three times.", type="gotcha")
    replica.sync(client)
    replica.edit(str(shared.id), content="The queue retries five times.")
    for i in range(MAX_PUSH + 1):
        replica.remember(type="gotcha", content=f"Offline note {i}.")
    # A second edit of one memory goes with the first, wherever the batches split.
    replica.edit(str(shared.id), content="The queue retries five times, with backoff.")

    report = replica.sync(client)
    assert (report.pushed, report.conflicts, report.rejected) == (MAX_PUSH + 2, 0, 0)
    assert Memory.objects.filter(content__startswith="Offline note").count() == MAX_PUSH + 1
    assert Memory.objects.get(id=shared.id).content == "The queue retries five times, with backoff."
    assert replica.count() == MAX_PUSH + 2 and replica.pending() == 0


def test_a_push_the_server_refuses_whole_keeps_its_changes_and_the_pull_still_runs(alice, tmp_path):
    read_only = tenant_services.api_key_create(
        organization=alice.org, actor=alice.principal, name="laptop", scopes=["memories:read", "sync"]
    )[1]  # no `memories:write`: every push is a 403
    client = SyncClient(
        "http://testserver", read_only, transport=httpx.WSGITransport(app=get_wsgi_application())
    )
    replica = Replica(str(tmp_path / "laptop.db"), project_id=str(alice.project.id))
    replica.remember(type="gotcha", content="Written offline with a read-only key.")
    make_memory(alice, content="Pulled all the same.", type="gotcha")

    report = replica.sync(client)
    assert report.push_error.startswith("403") and report.pulled == 1
    assert replica.search_text("Pulled") and replica.pending() == 1
    assert not Memory.objects.filter(content="Written offline with a read-only key.").exists()


def test_the_client_batches_pushes_by_the_servers_limit():
    from memorysaas_client import replica

    assert replica.PUSH_BATCH == MAX_PUSH


def test_a_pull_after_a_refused_push_keeps_the_devices_own_edits(alice, tmp_path):
    """The pull that runs after a refused push put the server's copy over a memory the device had
    edited (its edit still queued), and brought back one it had deleted."""
    read_only = tenant_services.api_key_create(
        organization=alice.org, actor=alice.principal, name="laptop", scopes=["memories:read", "sync"]
    )[1]
    client = SyncClient(
        "http://testserver", read_only, transport=httpx.WSGITransport(app=get_wsgi_application())
    )
    replica = Replica(str(tmp_path / "laptop.db"), project_id=str(alice.project.id))
    edited = make_memory(alice, content="Backups run nightly.", type="decision")
    deleted = make_memory(alice, content="Logs are kept 30 days.", type="decision")
    replica.sync(client)
    replica.edit(str(edited.id), content="Backups run hourly.")
    replica.forget(str(deleted.id))
    for memory in (edited, deleted):
        memory_update(memory=memory, actor=alice.principal, changes={"tags": ["ops"]})

    report = replica.sync(client)
    assert report.push_error.startswith("403") and report.pulled == 2
    mine = replica.get(str(edited.id))
    assert (mine["content"], mine["tags"]) == ("Backups run hourly.", ["ops"])
    assert replica.get(str(deleted.id)) is None and replica.pending() == 2


def test_an_outbox_an_older_client_wrote_is_folded_before_it_is_split(alice, device, monkeypatch):
    """Two queued edits of one memory (or an edit then its delete), split across two pushes,
    made the device conflict with itself."""
    from memorysaas_client import replica as module

    replica, client = device
    edited = make_memory(alice, content="Tokens last an hour.", type="decision")
    deleted = make_memory(alice, content="Tokens are opaque.", type="decision")
    replica.sync(client)
    for change in (
        {
            "op": "update",
            "id": str(edited.id),
            "base_version": 1,
            "fields": {"content": "Tokens last a day."},
        },
        {"op": "update", "id": str(deleted.id), "base_version": 1, "fields": {"tags": ["auth"]}},
        {"op": "update", "id": str(edited.id), "base_version": 1, "fields": {"tags": ["auth"]}},
        {"op": "delete", "id": str(deleted.id), "base_version": 2},
    ):
        replica.db.execute("INSERT INTO outbox (change) VALUES (?)", (json.dumps(change),))
    replica.db.commit()
    monkeypatch.setattr(module, "PUSH_BATCH", 1)

    report = replica.sync(client)
    assert (report.pushed, report.conflicts, report.rejected) == (2, 0, 0)
    server = Memory.objects.get(id=edited.id)
    assert (server.content, server.tags) == ("Tokens last a day.", ["auth"])
    assert not Memory.objects.filter(id=deleted.id).exists()


def test_offline_search_can_keep_to_some_types(alice, device):
    replica, client = device
    gotcha = make_memory(alice, content="verify_jwt needs the issuer.", type="gotcha")
    decision = make_memory(alice, content="We verify_jwt with RS256 only.", type="decision")
    replica.sync(client)
    assert {m["id"] for m in replica.find("verify_jwt")} == {str(gotcha.id), str(decision.id)}
    assert [m["id"] for m in replica.find("verify_jwt", types=["decision"])] == [str(decision.id)]
    assert replica.find("verify_jwt", types=["dead_end"]) == []
