"""Commit-time tagging: what a session promotes carries its commit (and each commit is recorded as
a commit_auto memory); a client's `git diff --name-only <commit>..HEAD` then makes the memories
about the changed files stale."""

from __future__ import annotations

import pytest

from apps.memories.models import Memory, MemoryVersion
from apps.observer.traces import Trace
from apps.tenants import services

pytestmark = pytest.mark.django_db(transaction=False)

FIRST = "3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f"
SECOND = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"


def committed_session(agent, *, task="add tax to totals"):
    trace = (
        Trace()
        .read("orders/models.py")
        .edit("orders/models.py")
        .note("gotcha", "Totals are computed in orders/models.py, never in views.", ["orders/models.py"])
        .commit(FIRST, ["orders/models.py", "orders/tax.py"])
        .edit("docs/tax.md")
        .note("decision", "Tax rates live in docs/tax.md for the finance team.", ["docs/tax.md"])
        .note("preference", "Keep commit messages in the imperative mood.", [])
        .commit(SECOND.upper()[:12], ["docs/tax.md"])
    )
    return agent.run(trace, passed=True, task=task)


def by_type(memory_type):
    return Memory.objects.get(type=memory_type)


def test_memories_carry_the_commit_that_changed_their_files_else_the_last(agent):
    committed_session(agent)
    assert by_type("gotcha").commit_sha == FIRST
    assert by_type("decision").commit_sha == SECOND[:12]
    assert by_type("preference").commit_sha == SECOND[:12]  # no file: the commit that closed the session


def test_each_commit_is_recorded_as_a_commit_auto_memory_once(agent):
    committed_session(agent)
    committed_session(agent)  # the same commits reported by a rerun reinforce
    records = Memory.objects.filter(source="commit_auto").order_by("commit_sha")
    assert [(m.type, m.commit_sha, m.related_files) for m in records] == [
        ("module_insight", SECOND[:12], ["docs/tax.md"]),
        ("module_insight", FIRST, ["orders/models.py", "orders/tax.py"]),
    ]
    assert 'for "add tax to totals"' in records[1].content


def test_a_session_whose_commits_git_would_not_name_tags_nothing(agent):
    trace = Trace().edit("a.py").note("gotcha", "Mind a.py", ["a.py"]).commit("not-a-sha", ["a.py"])
    agent.run(trace, passed=True)
    assert [m.commit_sha for m in Memory.objects.all()] == [""]


def test_the_commits_memories_carry_are_listed_for_the_client_to_diff(agent):
    committed_session(agent)
    response = agent.client.get(f"projects/{agent.project_id}/commits")
    assert response.status_code == 200
    counts = {item["commit"]: item["memories"] for item in response.json()["items"]}
    assert counts == {FIRST: 2, SECOND[:12]: 3}


def report(agent, commit, files, expect=200):
    response = agent.client.post(
        f"projects/{agent.project_id}/commits/{commit}/changed-files", {"files": files}
    )
    assert response.status_code == expect, response.content
    return response.json()


def test_files_changed_since_a_commit_make_its_memories_about_them_stale(agent):
    committed_session(agent)
    gotcha, record = by_type("gotcha"), Memory.objects.get(source="commit_auto", commit_sha=FIRST)
    answer = report(agent, FIRST, ["orders/models.py", "README.md"])
    assert sorted(answer["stale"]) == sorted([str(gotcha.id), str(record.id)]) and answer["files"] == 2
    gotcha.refresh_from_db()
    record.refresh_from_db()
    assert gotcha.stale_at is not None and gotcha.confidence == pytest.approx(0.8 * 0.5)  # its only file
    assert record.confidence == pytest.approx(0.6 * 0.75)  # one of its two files
    assert MemoryVersion.objects.filter(memory=gotcha, change="files_changed_since_commit").exists()
    # the decision carries the other commit: untouched
    assert by_type("decision").stale_at is None
    # reported again: nothing more happens
    assert report(agent, FIRST, ["orders/models.py"])["stale"] == []
    gotcha.refresh_from_db()
    assert gotcha.confidence == pytest.approx(0.4)


def test_a_stale_memory_is_no_longer_injected(agent):
    committed_session(agent)
    body = {"task": "totals", "files": ["orders/models.py"], "phase": "implement"}
    before = agent.client.post(f"projects/{agent.project_id}/context", body).json()
    gotcha = by_type("gotcha")
    assert str(gotcha.id) in [m["id"] for m in before["memories"]]
    report(agent, FIRST[:10], ["orders/models.py"])  # an abbreviated sha names the commit too
    after = agent.client.post(f"projects/{agent.project_id}/context", body).json()
    assert str(gotcha.id) not in [m["id"] for m in after["memories"]]


@pytest.mark.parametrize("commit", ["xyz1234", "abc12", "g" * 40, "a" * 65])
def test_a_malformed_commit_is_refused(agent, commit):
    committed_session(agent)
    body = report(agent, commit, ["orders/models.py"], expect=422)
    assert "commit" in str(body["error"]["details"]) and by_type("gotcha").stale_at is None


def test_a_commit_no_memory_carries_is_not_found(agent):
    committed_session(agent)
    assert report(agent, "ab" * 20, ["orders/models.py"], expect=404)["error"]["code"] == "unknown_commit"


@pytest.mark.parametrize(
    "files",
    [["/etc/passwd"], ["../outside.py"], ["orders/../../x.py"], ["~/notes.md"], [""], "orders/models.py"],
)
def test_files_outside_the_repository_are_refused(agent, files):
    committed_session(agent)
    body = report(agent, FIRST, files, expect=422)
    assert "error" in body and by_type("gotcha").stale_at is None


def test_a_read_only_key_cannot_report_and_an_outsider_sees_no_commit(agent, alice, charlie, api_client):
    committed_session(agent)
    _, key = services.api_key_create(
        organization=alice.org, actor=alice.principal, name="read only", scopes=["memories:read"]
    )
    read_only = api_client(key)
    url = f"projects/{agent.project_id}/commits"
    assert read_only.get(url).status_code == 200
    assert read_only.post(f"{url}/{FIRST}/changed-files", {"files": ["a.py"]}).status_code == 403
    outsider = api_client(charlie.key)
    assert outsider.get(url).status_code == 404
    assert outsider.post(f"{url}/{FIRST}/changed-files", {"files": ["orders/models.py"]}).status_code == 404
    assert by_type("gotcha").stale_at is None


def test_a_memory_stale_since_its_commit_stays_stale_when_the_graph_sees_its_file(agent):
    committed_session(agent)
    report(agent, FIRST, ["orders/models.py"])
    gotcha = by_type("gotcha")
    assert gotcha.stale_reason == "changed_since_commit"
    # the changed file indexed: it exists, which says nothing about what changed in it
    body = {"files": [{"path": "orders/models.py", "content": "class Order:\n    pass\n"}]}
    assert agent.client.post(f"projects/{agent.project_id}/graph/index", body).status_code == 202
    gotcha.refresh_from_db()
    assert gotcha.stale_at is not None
    shown = agent.client.get(f"memories/{gotcha.id}").json()
    assert shown["stale_reason"] == "changed_since_commit" and shown["stale_at"] is not None
