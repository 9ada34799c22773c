"""Search runs its dense and graph paths on a second connection beside the keyword path
(apps/memories/concurrent_reads.py). These tests commit their data (a second connection cannot see an
open transaction's rows) and close the worker connections before the database goes."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from apps.memories import concurrent_reads, neighbours
from apps.memories.neighbours import (
    file_neighbours,
    register_neighbour_provider,
    unregister_neighbour_provider,
)
from apps.memories.search import SearchRequest, search
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def concurrent(settings):
    settings.SEARCH_CONCURRENT = True
    yield
    concurrent_reads.close_connections()


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def test_a_read_started_beside_runs_on_another_connection(concurrent):
    here = _backend_pid()
    assert concurrent_reads.start(_backend_pid)() != here


def test_inside_a_transaction_the_read_stays_on_the_callers_connection(concurrent):
    with transaction.atomic():
        here = _backend_pid()
        assert concurrent_reads.start(_backend_pid)() == here


def test_switched_off_the_read_stays_on_the_callers_connection(settings):
    settings.SEARCH_CONCURRENT = False
    assert concurrent_reads.start(_backend_pid)() == _backend_pid()


def test_an_error_in_the_read_reaches_the_caller(concurrent):
    def broken() -> None:
        raise ValueError("no such thing")

    waiting = concurrent_reads.start(broken)
    with pytest.raises(ValueError, match="no such thing"):
        waiting()


def test_concurrent_search_ranks_exactly_as_the_sequential_one(alice, concurrent, settings):
    for n in range(12):
        make_memory(
            alice,
            content=f"verifyJwt step {n} rejects tokens whose clock skew exceeds {n} seconds.",
            related_files=[f"auth/tokens_{n % 3}.ts"],
        )
    make_memory(
        alice, content="The paginator raises EmptyPage past the end.", related_files=["core/paginator.py"]
    )
    asks = [
        {"query": "verifyJwt clock skew", "files": ["auth/tokens_1.ts"]},
        {"query": "why does the paginator raise", "files": []},
    ]
    for ask in asks:
        settings.SEARCH_CONCURRENT = False
        sequential = search(SearchRequest(principal=alice.principal, project=alice.project, limit=8, **ask))
        settings.SEARCH_CONCURRENT = True
        concurrent_result = search(
            SearchRequest(principal=alice.principal, project=alice.project, limit=8, **ask)
        )
        assert [h.memory.id for h in concurrent_result.hits] == [h.memory.id for h in sequential.hits]
        assert [h.ranks for h in concurrent_result.hits] == [h.ranks for h in sequential.hits]
        assert concurrent_result.hits, ask
        assert {"paths", "dense", "keyword"} <= set(concurrent_result.timings_ms)


def test_neighbour_providers_run_beside_and_a_failing_one_is_skipped(alice, concurrent, monkeypatch):
    threads: dict[str, str] = {}

    def imports(project_id, files):
        threads["imports"] = threading.current_thread().name
        return {"views/list.py": 1.0, "core/pages.py": 0.4}

    def broken(project_id, files):
        threads["broken"] = threading.current_thread().name
        raise RuntimeError("provider down")

    register_neighbour_provider(broken)
    register_neighbour_provider(imports)
    # The provider that has been slowest runs in place while the others run beside it.
    monkeypatch.setitem(neighbours._COST, neighbours._name(broken), 1e6)
    monkeypatch.setitem(neighbours._COST, neighbours._name(imports), 0.0)
    try:
        merged, origin = file_neighbours(alice.project.id, ["core/paginator.py"])
    finally:
        unregister_neighbour_provider(imports)
        unregister_neighbour_provider(broken)
    assert merged["views/list.py"] == 1.0 and origin["views/list.py"] == "imports"
    assert threads["imports"].startswith("search-beside")  # a quick one: beside
    assert threads["broken"] == threading.current_thread().name  # the slowest: in place
    assert neighbours._COST[neighbours._name(broken)] < 1e6  # its time this call counts in
