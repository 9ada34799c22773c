"""Search's parallel reads have a bounded capacity (apps/memories/concurrent_reads.py): a read goes to a
worker only when one is free at that moment, and otherwise runs in the calling thread at once,
never waiting in line behind other requests' reads."""

from __future__ import annotations

import threading

import pytest

from apps.memories import concurrent_reads

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def one_worker(settings):
    settings.SEARCH_CONCURRENT = True
    settings.SEARCH_CONCURRENT_WORKERS = 1
    concurrent_reads.close_connections()  # (workers made under other settings start again under these)
    yield
    concurrent_reads.close_connections()


def _thread() -> str:
    return threading.current_thread().name


def test_a_read_started_while_every_worker_is_busy_runs_in_the_calling_thread(one_worker):
    inside, release = threading.Event(), threading.Event()

    def blocking() -> str:
        inside.set()
        assert release.wait(timeout=30)
        return _thread()

    busy = concurrent_reads.start(blocking)
    assert inside.wait(timeout=30)
    safety = threading.Timer(30, release.set)  # (a read queued behind the busy one would hang)
    safety.start()
    try:
        assert concurrent_reads.start(_thread)() == _thread()  # answered here, not waiting for the worker
    finally:
        release.set()
        safety.cancel()
    assert busy().startswith("search-beside")


def test_a_worker_is_free_again_after_its_read_failed(one_worker):
    def broken() -> None:
        raise ValueError("no such thing")

    with pytest.raises(ValueError, match="no such thing"):
        concurrent_reads.start(broken)()
    assert concurrent_reads.start(_thread)().startswith("search-beside")
