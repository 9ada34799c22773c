"""The lifecycle endpoints: storage per project, the next prune's preview, prune now, re-index
and clean up; admins only (a member 403, an outsider 404), each project's figures its own."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from apps.memories.models import EmbeddingStatus, Memory, TermStat
from apps.tenants.models import AuditLog
from apps.tenants.roles import Role
from tests.memories.factories import make_memory

CALLS = [
    ("get", "lifecycle", None),
    ("post", "lifecycle/prune", None),
    ("post", "lifecycle/reindex", None),
    ("post", "lifecycle/cleanup", {}),
]


def _url(project, tail: str) -> str:
    return f"projects/{project.id}/{tail}"


def _call(client, project, method, tail, body):
    if method == "get":
        return client.get(_url(project, tail))
    return _post(client, _url(project, tail), body)


def _post(client, url, body=None):
    """A POST as a client sends it, with no body at all where the operation takes none."""
    return client.post(url, body, content_type="application/json")


def _weak(person, content: str, *, days: int = 100) -> Memory:
    memory = make_memory(person, content=content, confidence=0.1)
    Memory.objects.filter(id=memory.id).update(created_at=timezone.now() - timedelta(days=days))
    return memory


def _parts(body) -> dict:
    return {p["name"]: p for p in body["storage"]["parts"]}


def test_storage_counts_each_part_of_the_project_and_only_its_own(alice, charlie, api_client):
    client = api_client(alice.key)
    empty = _parts(client.get(_url(alice.project, "lifecycle")).json())
    assert {name: (p["rows"], p["bytes"]) for name, p in empty.items()} == {
        "memories": (0, 0), "vectors": (0, 0), "graph": (0, 0), "events": (0, 0)
    }  # fmt: skip

    for i in range(3):
        make_memory(alice, content=f"Gotcha number {i}: tokens expire after {i + 1} hours.")
    index = {"files": [{"path": "app/a.py", "content": "import os\n\ndef f():\n    return os.sep\n"}]}
    assert client.post(_url(alice.project, "graph/index"), index).status_code == 202
    session = client.post(_url(alice.project, "sessions"), {"session_type": "build"}).json()
    events = [{"seq": i, "type": "reasoning", "step": i, "text": f"thinking {i}"} for i in range(1, 6)]
    assert client.post(f"sessions/{session['id']}/events", {"events": events}).status_code == 200

    parts = _parts(client.get(_url(alice.project, "lifecycle")).json())
    assert parts["memories"]["rows"] == 3 and parts["memories"]["bytes"] > 0
    assert parts["vectors"]["rows"] == 3 and parts["vectors"]["bytes"] >= 3 * 4 * 384  # float32 × dims
    assert parts["graph"]["rows"] > 0 and parts["graph"]["bytes"] > 0
    assert parts["events"]["rows"] == 5 and parts["events"]["bytes"] > 0

    theirs = _parts(api_client(charlie.key).get(_url(charlie.project, "lifecycle")).json())
    assert all(p["rows"] == 0 and p["bytes"] == 0 for p in theirs.values())


def test_the_preview_shows_what_prune_now_then_retires(alice, api_client):
    client = api_client(alice.key)
    weak = _weak(alice, "Weak and forgotten.")
    make_memory(alice, content="Fresh and fine.")
    preview = client.get(_url(alice.project, "lifecycle")).json()["next_prune"]
    low = next(r for r in preview["rules"] if r["rule"] == "low_confidence")
    assert (preview["retire"], low["count"], [m["id"] for m in low["memories"]]) == (1, 1, [str(weak.id)])

    response = _post(client, _url(alice.project, "lifecycle/prune"))
    assert response.status_code == 202 and response.json() == {"queued": "prune", "lane": "bulk"}
    # (test settings run tasks inline when the request commits)
    assert Memory.objects.get(id=weak.id).deprecated
    assert client.get(_url(alice.project, "lifecycle")).json()["next_prune"]["retire"] == 0
    assert AuditLog.objects.filter(action="project.prune_queued", target_id=str(alice.project.id)).exists()


def test_cleanup_runs_now_and_its_dry_run_changes_nothing(alice, api_client):
    client = api_client(alice.key)
    weak = _weak(alice, "Weak and forgotten.")
    expired = make_memory(alice, content="Retired long ago.")
    Memory.objects.filter(id=expired.id).update(
        deprecated=True, deprecated_at=timezone.now() - timedelta(days=31)
    )

    dry = client.post(_url(alice.project, "lifecycle/cleanup"), {"dry_run": True})
    assert dry.status_code == 200
    assert dry.json() == {
        "dry_run": True, "deprecated": 1, "deleted": 1,
        "rules": {"decayed": 0, "low_confidence": 1, "recipe_unused": 0, "work_unit_closed": 0, "expired": 1,
                  "context_cost_window": 0},
    }  # fmt: skip
    assert not Memory.objects.get(id=weak.id).deprecated and Memory.objects.filter(id=expired.id).exists()

    done = client.post(_url(alice.project, "lifecycle/cleanup"), {})
    assert done.status_code == 200
    assert (done.json()["dry_run"], done.json()["deprecated"], done.json()["deleted"]) == (False, 1, 1)
    assert Memory.objects.get(id=weak.id).deprecated and not Memory.objects.filter(id=expired.id).exists()
    assert AuditLog.objects.filter(action="project.cleanup", target_id=str(alice.project.id)).exists()
    again = client.post(_url(alice.project, "lifecycle/cleanup"), {}).json()
    assert (again["deprecated"], again["deleted"]) == (0, 0)


def test_reindex_rebuilds_keywords_and_re_embeds_what_is_out_of_date(alice, api_client):
    client = api_client(alice.key)
    failed = make_memory(alice, content="verifyJwt rejects a skewed clock.")
    fine = make_memory(alice, content="Cache keys carry the tenant.")
    Memory.objects.filter(id=failed.id).update(
        embedding=None, embedding_status=EmbeddingStatus.FAILED, embedding_error="provider down"
    )
    TermStat.objects.filter(project=alice.project).delete()
    before = Memory.objects.get(id=fine.id).embedded_at

    response = _post(client, _url(alice.project, "lifecycle/reindex"))
    assert response.status_code == 202 and response.json() == {"queued": "reindex", "lane": "bulk"}
    repaired = Memory.objects.get(id=failed.id)
    assert repaired.embedding_status == EmbeddingStatus.READY and repaired.embedding is not None
    assert Memory.objects.get(id=fine.id).embedded_at == before  # up to date: left alone
    assert TermStat.objects.get(project=alice.project, term="").df == 2  # the memory count
    found = client.post(_url(alice.project, "search"), {"query": "verifyJwt"}).json()["results"]
    assert str(failed.id) in {r["memory"]["id"] for r in found}


def test_a_member_or_viewer_gets_403_and_changes_nothing(
    alice, bob, person_with_role, api_client, session_client
):
    weak = _weak(alice, "Weak and forgotten.")
    viewer = person_with_role(Role.VIEWER)
    steward = person_with_role(Role.STEWARD)
    for client in (api_client(bob.key), session_client(bob, enforce_csrf=False), session_client(viewer, enforce_csrf=False),
                   session_client(steward, enforce_csrf=False)):  # fmt: skip
        for method, tail, body in CALLS:
            response = _call(client, alice.project, method, tail, body)
            assert response.status_code == 403, (tail, response.content)
            assert response.json()["error"]["code"] == "forbidden"
    assert not Memory.objects.get(id=weak.id).deprecated


def test_an_outsider_gets_404(alice, charlie, api_client, session_client):
    weak = _weak(alice, "Weak and forgotten.")
    for client in (api_client(charlie.key), session_client(charlie, enforce_csrf=False)):
        for method, tail, body in CALLS:
            response = _call(client, alice.project, method, tail, body)
            assert response.status_code == 404, (tail, response.content)
    assert not Memory.objects.get(id=weak.id).deprecated


@pytest.mark.parametrize(
    ("body", "status"),
    [({"dry_run": "yes"}, 422), ({"dry_run": True, "force": True}, 422), ([], 422), ("{", 400)],
)
def test_cleanup_refuses_a_bad_body(alice, api_client, body, status):
    weak = _weak(alice, "Weak and forgotten.")
    client = api_client(alice.key)
    if isinstance(body, str):
        response = _post(client, _url(alice.project, "lifecycle/cleanup"), body)
    else:
        response = client.post(_url(alice.project, "lifecycle/cleanup"), body)
    assert response.status_code == status, response.content
    assert "error" in response.json()
    assert not Memory.objects.get(id=weak.id).deprecated


def test_cleanup_without_a_body_is_refused_and_with_an_empty_object_runs(alice, api_client):
    weak = _weak(alice, "Weak and forgotten.")
    client = api_client(alice.key)
    refused = _post(client, _url(alice.project, "lifecycle/cleanup"))
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "validation_error"
    assert not Memory.objects.get(id=weak.id).deprecated
    response = _post(client, _url(alice.project, "lifecycle/cleanup"), {})
    assert response.status_code == 200 and response.json()["deprecated"] == 1


def test_prune_and_reindex_go_to_the_bulk_lane(alice, api_client, monkeypatch):
    """On the broker in use, not run inline: the prune is two tasks there (the memories' rules
    and the context-cost window), the re-index two."""
    from django_q.brokers import get_broker
    from django_q.conf import Conf

    monkeypatch.setattr(Conf, "SYNC", False)
    brokers = {lane: get_broker(cluster) for lane, cluster in settings.QUEUE_LANES.items()}
    for broker in brokers.values():
        broker.purge_queue()
    client = api_client(alice.key)
    try:
        assert _post(client, _url(alice.project, "lifecycle/prune")).status_code == 202
        assert {lane: b.queue_size() for lane, b in brokers.items()} == {"interactive": 0, "bulk": 2}
        assert _post(client, _url(alice.project, "lifecycle/reindex")).status_code == 202
        assert {lane: b.queue_size() for lane, b in brokers.items()} == {"interactive": 0, "bulk": 4}
    finally:
        for broker in brokers.values():
            broker.purge_queue()


def test_cleanup_keeps_context_cost_figures_to_the_last_30_sessions_worth(alice, charlie, api_client):
    from apps.observer.models import PatternStat

    def stat(project, module, sessions):
        return PatternStat.objects.create(
            project=project, kind="context_token_spike", key=module, module=module,
            session_count=sessions, total=1000.0 * sessions, total2=sessions / 4,
        )  # fmt: skip

    long_run = stat(alice.project, "app/billing", 120)
    short_run = stat(alice.project, "app/auth", 12)
    theirs = stat(charlie.project, "core/db", 120)
    client = api_client(alice.key)
    assert client.get(_url(alice.project, "lifecycle")).json()["next_prune"]["context_cost_modules"] == 1
    dry = client.post(_url(alice.project, "lifecycle/cleanup"), {"dry_run": True}).json()
    assert dry["rules"]["context_cost_window"] == 1
    assert PatternStat.objects.get(id=long_run.id).session_count == 120

    done = client.post(_url(alice.project, "lifecycle/cleanup"), {}).json()
    assert done["rules"]["context_cost_window"] == 1
    scaled = PatternStat.objects.get(id=long_run.id)
    # the average (1000 tokens a session) and the share of spiking sessions (a quarter) stay
    assert (scaled.session_count, scaled.total, scaled.total2) == (30, 30_000.0, 7.5)
    assert PatternStat.objects.get(id=short_run.id).session_count == 12
    assert PatternStat.objects.get(id=theirs.id).session_count == 120
    assert (
        client.post(_url(alice.project, "lifecycle/cleanup"), {}).json()["rules"]["context_cost_window"] == 0
    )
