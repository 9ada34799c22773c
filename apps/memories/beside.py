"""Run one read on a second database connection while the calling thread does another.

The retrieval pipeline's dense and graph paths do not depend on its keyword path, and each is
mostly time spent waiting for PostgreSQL; on their own connections they run at once, so a
search costs about the slower of the two instead of their sum.

A worker thread keeps its own Django connection between searches, checked the way Django
checks a request's connection (`close_old_connections`: age and health). The read runs in the
calling thread instead when concurrency is off (`SEARCH_CONCURRENT=0`), when that thread
has a transaction open (another connection could not see what the transaction wrote), or
when it is itself a worker (waiting on a read queued behind its own could deadlock).
A worker whose connection fails hands the read back to the calling thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

logger = logging.getLogger(__name__)

T = TypeVar("T")

_lock = threading.Lock()
_executor: ThreadPoolExecutor | None = None
_worker = threading.local()  # set in the workers: a read they start runs in place (no nesting)


def _pool() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(
                max_workers=settings.SEARCH_CONCURRENT_WORKERS, thread_name_prefix="search-beside"
            )
        return _executor


def _in_worker(fn: Callable[[], T]) -> T:
    _worker.active = True
    close_old_connections()
    try:
        return fn()
    except DatabaseError:
        connection.close()  # this worker's; the next read reconnects
        raise


def can_run_beside() -> bool:
    return (
        bool(settings.SEARCH_CONCURRENT)
        and not connection.in_atomic_block
        and not getattr(_worker, "active", False)
    )


def start(fn: Callable[[], T]) -> Callable[[], T]:
    """Start `fn` (a read) beside the calling thread when it can; returns a function that
    waits for and returns its result, re-raising what `fn` raised."""
    if not can_run_beside():
        result = fn()
        return lambda: result
    future = _pool().submit(_in_worker, fn)

    def result() -> T:
        try:
            return future.result()
        except DatabaseError:
            logger.warning(
                "Concurrent search read failed on its own connection; running it here", exc_info=True
            )
            return fn()

    return result


def close_connections() -> None:
    """Close every worker thread's connection and stop the workers (tests do this before their
    database is dropped). Each worker takes one closing job: they all wait at a barrier."""
    global _executor
    with _lock:
        executor, _executor = _executor, None
    if executor is None:
        return
    workers = settings.SEARCH_CONCURRENT_WORKERS
    barrier = threading.Barrier(workers)

    def close() -> None:
        barrier.wait(timeout=10)
        connection.close()

    for done in [executor.submit(close) for _ in range(workers)]:
        done.result()
    executor.shutdown(wait=True)
