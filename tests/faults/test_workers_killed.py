"""Every worker killed with SIGKILL while it embeds memories and finalizes sessions: once workers
run again, every memory is embedded and every session finalized, and nothing was done twice —
for the Redis broker (which, as django-q2 ships it, lost what a killed worker held) and the ORM's.
"""

from __future__ import annotations

import random

from apps.observer.traces import Trace
from tests.faults.conftest import RETRY, Stack, wait_until

BATCHES = 6
PER_BATCH = 50
SESSIONS = 10
WORDS = [
    "ledger",
    "invoice",
    "tenant",
    "cursor",
    "replica",
    "socket",
    "schema",
    "worker",
    "broker",
    "vector",
    "shard",
    "cache",
    "token",
    "webhook",
    "fixture",
    "migration",
    "cluster",
    "sandbox",
    "refund",
    "payout",
    "quota",
    "export",
    "bucket",
    "queue",
    "lease",
]


def _fact(rng: random.Random, n: int) -> str:
    """A sentence of its own: different words, so the observer's novelty check keeps each one."""
    a, b, c, d = rng.sample(WORDS, 4)
    return f"Fault fact {n}: the {a} {b} must start before the {c} {d} ({rng.getrandbits(48):x})."


def _queue_memories(stack: Stack, rng: random.Random) -> list[str]:
    ids = []
    with stack.client() as api:
        for batch in range(BATCHES):
            memories = [
                {"type": "gotcha", "content": _fact(rng, batch * PER_BATCH + i)} for i in range(PER_BATCH)
            ]
            response = api.post(f"projects/{stack.project_id}/memories", json={"memories": memories})
            assert response.status_code == 201, response.text
            ids += [m["id"] for m in response.json()["memories"]]
    return ids


def _complete_sessions(stack: Stack, rng: random.Random) -> dict[str, str]:
    """Sessions that each taught one fact, passed validation and completed: their finalize is
    queued. Returns each session's fact."""
    facts = {}
    with stack.client() as api:
        for n in range(SESSIONS):
            response = api.post(f"projects/{stack.project_id}/sessions", json={"session_type": "build"})
            assert response.status_code == 201, response.text
            session_id = response.json()["id"]
            fact = _fact(rng, 10_000 + n)
            # Each in a module of its own: no module reaches the sessions that start a synthesis.
            module = f"module{n}/payments.py"
            trace = Trace().read(module).note("gotcha", fact, [module])
            for path, body in (
                (f"sessions/{session_id}/events", {"events": trace.events}),
                (f"sessions/{session_id}/validation", {"passed": True}),
                (f"sessions/{session_id}/complete", {"outcome": "success"}),
            ):
                response = api.post(path, json=body)
                assert response.status_code in (200, 202), response.text
            facts[session_id] = fact
    return facts


def _finalized(stack: Stack) -> int:
    return stack.value("SELECT count(*) FROM observer_session WHERE status = 'completed'")


def test_killing_every_worker_mid_work_loses_and_repeats_nothing(stack):
    rng = random.Random(30)
    stack.start_web()
    memory_ids = _queue_memories(stack, rng)
    facts = _complete_sessions(stack, rng)
    total_tasks = BATCHES + SESSIONS
    assert stack.queued() == total_tasks  # all waiting: no worker runs yet

    stack.start_workers()
    # Kill as soon as some work is done: the cluster has taken more tasks than it finished.
    wait_until(
        lambda: stack.embedding_counts().get("ready", 0) or _finalized(stack),
        timeout=60,
        what="the workers made some progress",
    )
    stack.kill_workers()
    held = stack.in_flight()
    assert held > 0, "the kill caught no task in a worker's hands: nothing was tested"
    assert stack.embedding_counts().get("pending", 0) or _finalized(stack) < SESSIONS

    stack.start_workers()  # tasks held by the dead cluster come back RETRY seconds after they were taken
    wait_until(
        lambda: (
            _finalized(stack) == SESSIONS
            and set(stack.embedding_counts()) == {"ready"}
            and stack.queued() == stack.in_flight() == 0
        ),
        timeout=RETRY + 90,
        what="every session finalized and every memory embedded",
        state=lambda: (_finalized(stack), stack.embedding_counts(), stack.queued(), stack.in_flight()),
    )

    # Nothing twice: one memory per fact, each session's memory promoted once.
    rows = stack.rows("SELECT content, session_id::text FROM memories_memory")
    contents = [content for content, _ in rows]
    assert len(contents) == len(set(contents)) == len(memory_ids) + SESSIONS
    from_sessions = {session: content for content, session in rows if session}
    assert from_sessions.keys() == facts.keys()
    for session_id, fact in facts.items():
        assert fact.split(" (")[0].lower() in from_sessions[session_id].lower()
    promoted = stack.rows("SELECT cardinality(promoted_memory_ids) FROM observer_session")
    assert [n for (n,) in promoted] == [1] * SESSIONS
