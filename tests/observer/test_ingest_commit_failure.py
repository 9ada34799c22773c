"""Two web processes on the test database and a commit that fails once.

A process that kept the scratchpad of a write whose commit then failed answered the client's
retry of that write from its stale copy once the other process had moved the session on: a
retried batch came back as `{"accepted": 0, "duplicates": 100}` with a 200, and its events were
never stored. Here a deferred constraint trigger makes one commit fail (a sequence counts its
firings: it outlives the rollback, so the trigger fires once), the other process writes next,
and the client retries: every event is stored once and the finalized session is the one a
single process makes of the same requests.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.db import connection

from apps.memories.models import Memory
from apps.observer import services
from apps.observer.models import EventBatch, Session
from apps.observer.traces import Trace
from tests.e2e.conftest import daphne_env, start_daphne, stop
from tests.processes import database_url, free_port

pytestmark = pytest.mark.django_db(transaction=True)

# Raises at COMMIT the first time it runs, whatever the trigger's condition picked.
_FAIL_ONCE_FUNCTION = """
CREATE FUNCTION commit_fails_once() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF nextval(TG_ARGV[0]::regclass) = 1 THEN
        RAISE EXCEPTION 'this commit fails once (a test''s deferred trigger)';
    END IF;
    RETURN NULL;
END $$
"""


@pytest.fixture(scope="module")
def web(django_db_setup, django_db_blocker) -> Iterator[tuple[str, str]]:
    """Two daphne processes serving the test database, as nginx's two upstreams would."""
    with django_db_blocker.unblock():
        url = database_url()
    env = daphne_env(url, EMBEDDING_PROVIDER="hashing")
    ports = [free_port(), free_port()]
    processes = []
    try:
        for port in ports:
            processes.append(start_daphne(port, env))
        yield tuple(f"http://127.0.0.1:{port}/api/v1/" for port in ports)
    finally:
        for process in processes:
            stop(process)


@contextlib.contextmanager
def commit_fails_once(table: str, when: str) -> Iterator[None]:
    """The first transaction that writes a row of `table` matching `when` (a trigger's WHEN
    condition on NEW) fails at COMMIT; later ones commit."""
    name = f"commit_fails_once_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute("DROP FUNCTION IF EXISTS commit_fails_once() CASCADE")
        cursor.execute(_FAIL_ONCE_FUNCTION)
        cursor.execute(f"CREATE SEQUENCE {name}")
        cursor.execute(
            f"CREATE CONSTRAINT TRIGGER {name} AFTER INSERT OR UPDATE ON {table}"
            f" DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN ({when})"
            f" EXECUTE FUNCTION commit_fails_once('{name}')"
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP FUNCTION commit_fails_once() CASCADE")  # (and the trigger)
            cursor.execute(f"DROP SEQUENCE {name}")


class Agent:
    """An agent client whose requests the test sends to one web process or the other."""

    def __init__(self, person, bases: tuple[str, ...]) -> None:
        headers = {"Authorization": f"Bearer {person.key}"}
        self.clients = [httpx.Client(base_url=base, headers=headers, timeout=120) for base in bases]
        self.project_id = str(person.project.id)
        self.session_id = ""

    def open(self) -> None:
        response = self.clients[0].post(
            f"projects/{self.project_id}/sessions", json={"session_type": "build", "task": "add refunds"}
        )
        assert response.status_code == 201, response.text
        self.session_id = response.json()["id"]

    def send(self, process: int, events: list[dict[str, Any]]) -> httpx.Response:
        return self.clients[process].post(f"sessions/{self.session_id}/events", json={"events": events})

    def validate(self, process: int, report: str) -> httpx.Response:
        body = {"passed": True, "work_unit": "", "report": report}
        return self.clients[process].post(f"sessions/{self.session_id}/validation", json=body)

    def complete(self, process: int) -> dict[str, Any]:
        response = self.clients[process].post(
            f"sessions/{self.session_id}/complete", json={"outcome": "success"}
        )
        assert response.status_code == 200, response.text  # (finalized inline: the test settings)
        return response.json()


NOTES = (
    "Order totals are rounded once, in shop/orders/totals.py",
    "Refunds are stored in cents to avoid rounding drift",
    "The payment gateway retries webhooks for a day",
)


def _batches() -> list[list[dict[str, Any]]]:
    """Three batches of one session, each with a note that promotion turns into a memory."""
    trace = Trace(tokens=1200)
    trace.plan(40)
    for i in range(10):
        trace.read(f"shop/orders/view_{i}.py").edit(f"shop/orders/view_{i}.py")
    trace.note("gotcha", NOTES[0], ["shop/orders/totals.py"])
    first = len(trace.events)
    for i in range(10):
        trace.read(f"shop/refunds/service_{i}.py").grep("refund")
    trace.bash("pytest tests/refunds -q", "AssertionError: 3 != 4", error=True)
    trace.think("Actually, refunds are computed in cents, not in euros.")
    trace.note("decision", NOTES[1], ["shop/refunds/models.py"])
    second = len(trace.events)
    for i in range(10):
        trace.read(f"shop/payments/gateway_{i}.py").edit(f"shop/payments/gateway_{i}.py")
    trace.bash("pytest tests/refunds -q", "12 passed")
    trace.note("gotcha", NOTES[2], ["shop/payments/webhooks.py"])
    events = trace.events
    return [events[:first], events[first:second], events[second:]]


def _outcome(session_id: str) -> dict[str, Any]:
    """What a session left: its counters, every stored seq, its scratchpad (as stored and as
    rebuilt from the log), its report and the memories it promoted."""
    session = Session.objects.get(id=session_id)
    seqs = [event["seq"] for events in EventBatch.objects.filter(session=session).values_list("events", flat=True)
            for event in events]  # fmt: skip
    services.forget(session.id)
    memories = Memory.objects.filter(id__in=session.promoted_memory_ids)
    return {
        "status": session.status,
        "event_count": session.event_count,
        "seqs": sorted(seqs),
        "scratchpad": session.scratchpad,
        "rebuilt": services.load_scratchpad(session).to_dict(),
        "report": {
            **session.report,
            "candidates": [  # (ids aside: two sessions make two memories)
                {k: v for k, v in c.items() if k != "memory_id"} for c in session.report["candidates"]
            ],
        },
        "memories": sorted((m.type, m.content) for m in memories),
    }


def test_a_batch_whose_commit_failed_is_taken_when_retried_after_the_other_process_wrote(web, alice, charlie):
    batches = _batches()
    seq = batches[1][0]["seq"]
    agent = Agent(alice, web)
    agent.open()
    with commit_fails_once("observer_eventbatch", f"NEW.first_seq = {seq} AND NEW.count > 0"):
        assert agent.send(0, batches[0]).json()["accepted"] == len(batches[0])
        failed = agent.send(0, batches[1])
        assert failed.status_code == 503, failed.text
        assert failed.json()["error"]["code"] == "commit_failed"
        third = agent.send(1, batches[2])  # the other process moves the session on
        assert third.status_code == 200 and third.json()["accepted"] == len(batches[2])
        retried = agent.send(0, batches[1])
    assert retried.status_code == 200, retried.text
    assert (retried.json()["accepted"], retried.json()["duplicates"]) == (len(batches[1]), 0)
    assert agent.validate(1, "all green").json()["validations"] == 1
    finished = agent.complete(0)

    single = Agent(charlie, web[:1])  # the same requests, one process, no failure
    single.open()
    for batch in (batches[0], batches[2], batches[1]):
        assert single.send(0, batch).status_code == 200
    assert single.validate(0, "all green").status_code == 200
    single.complete(0)

    got, expected = _outcome(agent.session_id), _outcome(single.session_id)
    total = sum(len(batch) for batch in batches)
    assert got["seqs"] == list(range(1, total + 1))  # each event stored once
    assert got["event_count"] == total and got["status"] == "completed"
    promoted = " | ".join(content for _, content in got["memories"])
    assert all(note in promoted for note in NOTES)  # the notes of all three batches, the retried one too
    assert sorted(finished["promoted_memory_ids"]) == sorted(
        str(i) for i in Session.objects.get(id=agent.session_id).promoted_memory_ids
    )
    assert got == expected


def test_a_validation_whose_commit_failed_is_recorded_once_over_the_other_process_batch(web, alice, charlie):
    batches = _batches()
    agent = Agent(alice, web)
    agent.open()
    failing = "NEW.scratchpad->'validations' @> '[{\"report\": \"the retried one\"}]'"
    with commit_fails_once("observer_session", failing):
        assert agent.send(0, batches[0]).status_code == 200
        failed = agent.validate(0, "the retried one")
        assert failed.status_code == 503, failed.text
        assert failed.json()["error"]["code"] == "commit_failed"
        assert agent.send(1, batches[1]).json()["accepted"] == len(batches[1])
        retried = agent.validate(0, "the retried one")
    assert retried.status_code == 200, retried.text
    assert retried.json()["validations"] == 1
    assert agent.send(0, batches[2]).json()["accepted"] == len(batches[2])
    agent.complete(1)

    single = Agent(charlie, web[:1])
    single.open()
    single.send(0, batches[0])
    single.send(0, batches[1])
    single.validate(0, "the retried one")
    single.send(0, batches[2])
    single.complete(0)

    got, expected = _outcome(agent.session_id), _outcome(single.session_id)
    assert [v["report"] for v in got["rebuilt"]["validations"]] == ["the retried one"]
    assert "shop/refunds/service_0.py" in got["rebuilt"]["files"]  # the other process's batch
    assert got == expected
