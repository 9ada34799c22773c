"""Convergence under random offline work: several device replicas and the server edit, tag,
untag, create and delete the same memories; devices go offline for rounds, sync in a random
order, and some pushes are sent twice (the answer to the first lost). For every seed:

- every pushed change ends applied, merged as the device meant it (what it added is there, what
  it removed is gone, its text is the memory's), or as a conflict or a rejection the person sees
  (in the replica's `conflicts()`/`rejected()`, the conflict kept on the server) — nothing is lost
  without a word, and each sync's report accounts for every change it pushed;
- once the waiting conflicts are decided, every replica holds exactly the server's memories.

CONVERGENCE_SEEDS (default 4) sets how many seeds run; the test prints what happened in total.
"""

from __future__ import annotations

import os
import random
from collections import Counter

import httpx
import pytest
from django.core.wsgi import get_wsgi_application
from memorysaas_client.replica import Replica, SyncClient

from apps.memories.models import Memory, MemoryVersion
from apps.memories.services import memory_delete, memory_update
from apps.sync.conflicts import conflict_resolve
from apps.sync.models import SyncConflict
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db(transaction=True)
SEEDS = int(os.environ.get("CONVERGENCE_SEEDS", "4"))
ROUNDS = 4
TAGS = ["auth", "db", "cache", "ops", "ui", "perf"]
FILES = ["a.py", "b.py", "c.py", "d.py"]


@pytest.fixture(autouse=True)
def _hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384


class Recording(SyncClient):
    """A device's sync calls, recording each pushed change with its answer and the server's
    state right after; some pushes are sent twice, as a retry after a lost answer would."""

    def __init__(self, key: str, rng: random.Random, log: list) -> None:
        super().__init__("http://testserver", key, transport=httpx.WSGITransport(app=get_wsgi_application()))
        self.rng, self.log = rng, log

    def push(self, project_id, changes):
        if self.rng.random() < 0.25:
            super().push(project_id, changes)  # (its answer is lost; the device sends it again)
        results = super().push(project_id, changes)
        for change, result in zip(changes, results, strict=True):
            self.log.append((change, result, _server_state(change, result)))
        return results


def _server_state(change, result):
    memory_id = result.get("id") or change.get("id")
    memory = Memory.objects.filter(id=memory_id).first() if memory_id else None
    return None if memory is None else {"content": memory.content, "tags": list(memory.tags),
                                        "related_files": list(memory.related_files)}  # fmt: skip


def _offline_work(rng: random.Random, replica: Replica) -> None:
    memories = replica.all()
    for _ in range(rng.randint(1, 3)):
        if not memories or rng.random() < 0.12:
            replica.remember(type="gotcha", content=f"note {rng.random():.6f}", tags=rng.sample(TAGS, 2))
            continue
        memory = rng.choice(memories)
        current = replica.get(memory["id"])
        if current is None:
            continue
        roll = rng.random()
        if roll < 0.3:
            replica.edit(memory["id"], content=f"text {rng.random():.6f}")
        elif roll < 0.5:
            replica.edit(memory["id"], tags=[*current["tags"], rng.choice(TAGS)][:30])
        elif roll < 0.7 and current["tags"]:
            gone = rng.choice(current["tags"])
            replica.edit(memory["id"], tags=[t for t in current["tags"] if t != gone])
        elif roll < 0.85:
            files = current["related_files"]
            if files and rng.random() < 0.5:
                replica.edit(memory["id"], related_files=files[1:])
            else:
                replica.edit(memory["id"], related_files=list(dict.fromkeys([*files, rng.choice(FILES)])))
        elif roll < 0.93:
            replica.forget(memory["id"])


def _server_work(rng: random.Random, alice, project) -> None:
    memories = list(Memory.objects.filter(project=project))
    for _ in range(rng.randint(0, 2)):
        if not memories or rng.random() < 0.1:
            memories.append(
                make_memory(alice, content=f"server {rng.random():.6f}", tags=rng.sample(TAGS, 2))
            )
            continue
        memory = Memory.objects.filter(id=rng.choice(memories).id).first()
        if memory is None:
            continue
        roll = rng.random()
        if roll < 0.4:
            memory_update(
                memory=memory, actor=alice.principal, changes={"content": f"srv {rng.random():.6f}"}
            )
        elif roll < 0.75:
            tags = [t for t in memory.tags if rng.random() < 0.7] + [rng.choice(TAGS)]
            memory_update(memory=memory, actor=alice.principal, changes={"tags": list(dict.fromkeys(tags))})
        elif roll < 0.9:
            memory_update(
                memory=memory, actor=alice.principal, changes={"related_files": [rng.choice(FILES)]}
            )
        else:
            memory_delete(memory=memory, actor=alice.principal)


def _check_accounted(change, result, after, replica: Replica, outcomes: Counter) -> None:
    """One pushed change ended in a way its person can see, or as they meant it."""
    status = result["status"]
    outcomes[status] += 1
    if status == "conflict":
        assert SyncConflict.objects.filter(id=result["conflict_id"]).exists()
        return
    if status in ("invalid", "not_found"):
        return  # (checked in the replica's `rejected()` after the sync)
    if status in ("forbidden", "gone") or result.get("refused"):
        return
    assert status in ("applied", "merged"), result
    if change["op"] == "delete":
        assert after is None
        return
    if change["op"] == "create":
        assert after is not None and after["content"] == change["memory"]["content"]
        return
    fields = change["fields"]
    if "content" in fields:
        assert after["content"] == fields["content"], "a text edit vanished"
    base = MemoryVersion.objects.filter(memory_id=change["id"], version=change["base_version"]).first()
    for name in ("tags", "related_files"):
        if name not in fields or base is None:
            continue
        before, mine = set(getattr(base, name)), set(fields[name])
        assert mine - before <= set(after[name]), f"an addition to {name} vanished"
        assert not (before - mine) & set(after[name]), f"a removal from {name} came back"


def _sync(replica: Replica, client: Recording, replica_log: list, outcomes: Counter) -> None:
    start = len(client.log)
    report = replica.sync(client)
    pushed = client.log[start:]
    # (a push sent twice is answered twice; the report counts the answer the device acted on)
    assert (
        report.pushed
        == report.applied + report.merged + report.conflicts + report.rejected + report.forbidden
    )
    waiting = {c["conflict_id"] for c in replica.conflicts()}
    rejected = {(r["change"].get("id") or r["change"].get("ref")) for r in replica.rejected()}
    for change, result, after in pushed:
        _check_accounted(change, result, after, replica, outcomes)
        if result["status"] == "conflict" and not report.push_error:
            open_now = SyncConflict.objects.filter(id=result["conflict_id"], status="open").exists()
            assert not open_now or result["conflict_id"] in waiting, "a conflict the person cannot see"
        if result["status"] in ("invalid", "not_found"):
            assert (change.get("id") or change.get("ref")) in rejected, "a rejection the person cannot see"
    replica_log.extend(pushed)


def _decide_everything(rng: random.Random, alice) -> int:
    decided = 0
    for conflict in SyncConflict.objects.filter(status="open").select_related("memory"):
        memory = Memory.objects.filter(id=conflict.memory_id).first()
        if memory is None:
            continue
        keep = rng.choice(["mine", "theirs"])
        conflict_resolve(conflict=conflict, actor=alice.principal, keep=keep, base_version=memory.version)
        decided += 1
    return decided


def _snapshot(memories) -> dict:
    return {
        str(m["id"]): (m["content"], sorted(m["tags"]), sorted(m["related_files"]), m["version"])
        for m in memories
    }


def test_replicas_converge_and_no_edit_is_lost_without_a_word(alice, bob, tmp_path, capsys):
    totals: Counter = Counter()
    for seed in range(SEEDS):
        rng = random.Random(seed)
        Memory.objects.filter(project=alice.project).delete()
        SyncConflict.objects.all().delete()
        for n in range(4):
            make_memory(
                alice, content=f"seed {seed} memory {n}", tags=rng.sample(TAGS, 3), related_files=FILES[:2]
            )
        log: list = []
        devices = [
            (Replica(str(tmp_path / f"{seed}-{name}.db"), project_id=str(alice.project.id)),
             Recording(person.key, rng, log))
            for name, person in (("alice-laptop", alice), ("alice-desktop", alice), ("bob-laptop", bob))
        ]  # fmt: skip
        for replica, client in devices:
            replica.sync(client)
        for _ in range(ROUNDS):
            for replica, _client in devices:
                _offline_work(rng, replica)
            _server_work(rng, alice, alice.project)
            order = devices[:]
            rng.shuffle(order)
            for replica, client in order:
                if rng.random() < 0.75:  # (the others stay offline this round)
                    _sync(replica, client, [], totals)
        for replica, client in devices:
            _sync(replica, client, [], totals)
        totals["decided"] += _decide_everything(rng, alice)
        for _ in range(2):
            for replica, client in devices:
                _sync(replica, client, [], totals)
        server = _snapshot(
            {
                "id": m.id,
                "content": m.content,
                "tags": m.tags,
                "related_files": m.related_files,
                "version": m.version,
            }
            for m in Memory.objects.filter(project=alice.project)
        )
        for replica, _client in devices:
            assert replica.pending() == 0 and replica.conflicts() == []
            assert _snapshot(replica.all()) == server, f"seed {seed}: a replica did not converge"
    with capsys.disabled():
        print(
            f"\nconvergence: {SEEDS} seeds x 3 replicas x {ROUNDS} rounds: "
            + ", ".join(f"{k}={v}" for k, v in sorted(totals.items()))
        )
    assert totals["conflict"] > 0 and totals["merged"] > 0  # (the seeds do exercise both)
