"""The acknowledging Redis broker on a real Redis: a task taken is in flight until acknowledged,
one never acknowledged comes back after the retry time (to the front of the queue), an
unreadable one is dropped, and nothing is lost or duplicated on the way."""

from __future__ import annotations

import os
import uuid

import pytest
from django_q.conf import Conf
from django_q.signing import SignedPackage

from memorysaas.kernel.brokers import AcknowledgedRedis

pytestmark = [
    pytest.mark.redis,
    pytest.mark.skipif(not os.environ.get("REDIS_URL"), reason="needs a real Redis at REDIS_URL"),
]


@pytest.fixture
def broker(monkeypatch):
    monkeypatch.setattr(Conf, "REDIS", os.environ.get("REDIS_URL"))
    made = AcknowledgedRedis(list_key=f"broker-test-{uuid.uuid4().hex}")
    yield made
    made.delete_queue()


def _package(name: str) -> bytes:
    return SignedPackage.dumps(
        {"id": uuid.uuid4().hex, "name": name, "func": "math.floor", "args": (1,)}
    ).encode()


def _names(broker, key: str) -> list[str]:
    return [SignedPackage.loads(p)["name"] for p in broker.connection.lrange(key, 0, -1)]


def test_a_taken_task_is_in_flight_until_acknowledged(broker):
    broker.enqueue(_package("first"))
    broker.enqueue(_package("second"))
    [(ack_id, package)] = broker.dequeue()
    assert SignedPackage.loads(package)["name"] == "first"
    assert (broker.queue_size(), broker.lock_size()) == (1, 1)
    assert broker.connection.zcard(broker.claims_key) == 1
    broker.acknowledge(ack_id)
    assert (broker.queue_size(), broker.lock_size()) == (1, 0)
    assert broker.connection.zcard(broker.claims_key) == 0


def test_an_unacknowledged_task_comes_back_first_after_the_retry_time(broker, monkeypatch):
    broker.enqueue(_package("lost"))
    broker.enqueue(_package("waiting"))
    [(lost, _)] = broker.dequeue()  # ... and its worker is killed
    assert broker.reclaim_expired(force=True) == 0  # not yet: it may still be running
    monkeypatch.setattr(Conf, "RETRY", 0)
    assert broker.reclaim_expired(force=True) == 1
    assert _names(broker, broker.list_key) == ["lost", "waiting"] and broker.lock_size() == 0
    [(again, package)] = broker.dequeue()
    assert again == lost and SignedPackage.loads(package)["name"] == "lost"
    broker.acknowledge(again)
    assert broker.reclaim_expired(force=True) == 0 and _names(broker, broker.list_key) == ["waiting"]


def test_a_claim_its_taker_never_stamped_still_comes_back(broker, monkeypatch):
    """A taker killed between the move and the stamp leaves a package in flight with no claim:
    the reclaim stamps it, and it comes back a retry time later."""
    broker.connection.rpush(broker.inflight_key, _package("orphan"))
    assert broker.reclaim_expired(force=True) == 0
    assert broker.connection.zcard(broker.claims_key) == 1
    monkeypatch.setattr(Conf, "RETRY", 0)
    assert broker.reclaim_expired(force=True) == 1
    assert _names(broker, broker.list_key) == ["orphan"]


def test_a_late_acknowledgement_after_a_reclaim_delivers_it_once_more_at_most(broker, monkeypatch):
    broker.enqueue(_package("slow"))
    [(first, _)] = broker.dequeue()
    monkeypatch.setattr(Conf, "RETRY", 0)
    broker.reclaim_expired(force=True)
    broker.acknowledge(first)  # the slow worker finishes after all: the queued copy stays, once
    assert _names(broker, broker.list_key) == ["slow"] and broker.lock_size() == 0


def test_an_unreadable_task_is_dropped(broker):
    broker.enqueue(b"not a signed package")
    [(ack_id, _)] = broker.dequeue()
    broker.fail(ack_id)
    assert (broker.queue_size(), broker.lock_size()) == (0, 0)


def test_purge_empties_the_queue_and_what_is_in_flight(broker):
    for name in ("a", "b"):
        broker.enqueue(_package(name))
    broker.dequeue()
    broker.purge_queue()
    assert (broker.queue_size(), broker.lock_size(), broker.connection.zcard(broker.claims_key)) == (0, 0, 0)
