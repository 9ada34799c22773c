"""Run one read on a second database connection while the calling thread does another.

The retrieval pipeline's dense and graph paths do not depend on its keyword path, and each is
mostly time spent waiting for PostgreSQL; on their own connections they run at once, so a
search costs about the slower of the two instead of their sum.

Each worker thread has a database connection of its own, opened directly and kept between
searches (checked the way Django checks a request's: age and health), never one from the web
server's pool. The request thread that hands a read over holds a pooled connection while it
waits for the answer; a worker that needed a pooled connection too could wait for the very
connections its callers hold, and with 20 searches in flight every one of them did, until the
pool's timeout.

Nothing queues for a worker: a read is handed over only when a worker is idle at that moment,
and otherwise runs in the calling thread. Under load, search becomes the sequential pipeline
instead of a line of requests waiting for one thread. The read also runs in the calling thread
when concurrency is off (`SEARCH_CONCURRENT=0`), when that thread has a transaction open
(another connection could not see what the transaction wrote), or when it is itself a worker
(waiting on a read queued behind its own could deadlock). A worker whose connection fails hands
the read back to the calling thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError, close_old_connections, connection, connections
from django.db.utils import load_backend

logger = logging.getLogger(__name__)

T = TypeVar("T")

# How long a worker keeps its connection before opening a fresh one (Django's CONN_MAX_AGE).
WORKER_CONNECTION_MAX_AGE = 600

_worker = threading.local()  # set in the workers: a read they start runs in place (no nesting)


@dataclass
class _Workers:
    executor: ThreadPoolExecutor
    idle: threading.Semaphore  # one per worker that has no read: taken to hand one over
    count: int


_lock = threading.Lock()
_workers: _Workers | None = None


def _own_connection() -> None:
    """In each new worker thread: the configured database, opened directly, not from the pool."""
    _worker.active = True
    params = dict(connections.settings[DEFAULT_DB_ALIAS])
    params["OPTIONS"] = {k: v for k, v in params.get("OPTIONS", {}).items() if k != "pool"}
    params["CONN_MAX_AGE"] = WORKER_CONNECTION_MAX_AGE
    params["CONN_HEALTH_CHECKS"] = True
    backend = load_backend(params["ENGINE"])
    connections[DEFAULT_DB_ALIAS] = backend.DatabaseWrapper(params, DEFAULT_DB_ALIAS)


def _current() -> _Workers:
    global _workers
    with _lock:
        if _workers is None:
            count = settings.SEARCH_CONCURRENT_WORKERS
            executor = ThreadPoolExecutor(
                max_workers=count, thread_name_prefix="search-beside", initializer=_own_connection
            )
            _workers = _Workers(executor=executor, idle=threading.Semaphore(count), count=count)
        return _workers


def _in_worker(fn: Callable[[], T], idle: threading.Semaphore) -> T:
    try:
        close_old_connections()
        return fn()
    except DatabaseError:
        connection.close()  # this worker's own; the next read reconnects
        raise
    finally:
        idle.release()


def can_run_beside() -> bool:
    return (
        bool(settings.SEARCH_CONCURRENT)
        and not connection.in_atomic_block
        and not getattr(_worker, "active", False)
    )


def _here(fn: Callable[[], T]) -> Callable[[], T]:
    result = fn()
    return lambda: result


def start(fn: Callable[[], T]) -> Callable[[], T]:
    """Start `fn` (a read) beside the calling thread when a worker is free; otherwise run it
    now, here. Returns a function that waits for and returns its result, re-raising what `fn`
    raised."""
    if not can_run_beside():
        return _here(fn)
    workers = _current()
    if not workers.idle.acquire(blocking=False):
        return _here(fn)  # every worker is busy: no waiting in line for one
    try:
        future = workers.executor.submit(_in_worker, fn, workers.idle)
    except RuntimeError:  # the workers were just stopped (close_connections)
        workers.idle.release()
        return _here(fn)

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
    global _workers
    with _lock:
        workers, _workers = _workers, None
    if workers is None:
        return
    barrier = threading.Barrier(workers.count)

    def close() -> None:
        barrier.wait(timeout=10)
        connection.close()

    for done in [workers.executor.submit(close) for _ in range(workers.count)]:
        done.result()
    workers.executor.shutdown(wait=True)
