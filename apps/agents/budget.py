"""Time limits for a hook's answer: a hook must answer inside Claude Code's timeout, and an
answer without context is worth more than one that comes too late.

`budget(ms)` is a transaction whose statements give up after `ms` (the database's part);
`within(ms, what, build)` builds an answer's text on a thread of its own and gives it up when
it is not ready after `ms` (the rest: a local model still loading, a machine too busy).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from django.db import DatabaseError, close_old_connections, connection, transaction

logger = logging.getLogger(__name__)

# Threads that build answers' context; more at once would only queue behind each other.
CONTEXT_BUILDERS = 8


def set_timeout(milliseconds: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config('statement_timeout', %s, true)", [str(int(milliseconds))])


@contextmanager
def budget(milliseconds: int | None = None) -> Iterator[None]:
    """A transaction whose every statement gives up after `milliseconds` (a read that runs
    beside the caller on another connection is not started inside a transaction, so none
    escapes the limit). Without `milliseconds`, its first statement sets the limit itself."""
    with transaction.atomic():
        if milliseconds is not None:
            set_timeout(milliseconds)
        yield


def within(milliseconds: int, what: str, build: Callable[[], str]) -> str:
    """`build()`'s text, or "" when it fails or is not ready within `milliseconds`: a statement
    timeout bounds the database, and the wait for the answer bounds the rest (a local model
    still loading, a machine too busy), since building runs on a thread of its own. A build
    that comes too late is dropped; what it recorded (the memories it packed as given to the
    session) stands. Run here instead when the caller has a transaction open, which another
    connection could not see."""
    if connection.in_atomic_block:
        return _built(milliseconds, what, build)
    deadline = time.monotonic() + milliseconds / 1000
    future = _builders().submit(_build_beside, deadline, milliseconds, what, build)
    try:
        return future.result(timeout=milliseconds / 1000)
    except TimeoutError:
        logger.warning("Hook context (%s) left out: not ready within %d ms", what, milliseconds)
        return ""


def _built(milliseconds: int, what: str, build: Callable[[], str]) -> str:
    try:
        with budget(milliseconds):
            return build()
    except DatabaseError as exc:
        logger.warning("Hook context (%s) left out: %s", what, exc)
    except Exception:
        logger.exception("Hook context (%s) failed", what)
    return ""


def _build_beside(deadline: float, milliseconds: int, what: str, build: Callable[[], str]) -> str:
    if time.monotonic() >= deadline:  # (it waited for a thread until its answer was given up)
        return ""
    # A builder keeps its connection between jobs (opening one costs more than most builds),
    # checked as a request's is: past its age or broken, it is replaced.
    close_old_connections()
    try:
        return _built(milliseconds, what, build)
    except DatabaseError:
        connection.close()
        raise


_executor: ThreadPoolExecutor | None = None
_executor_lock = threading.Lock()


def _builders() -> ThreadPoolExecutor:
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(max_workers=CONTEXT_BUILDERS, thread_name_prefix="hook-context")
        return _executor


def close_context_builders() -> None:
    """Close every builder thread's connection and stop the threads (tests do this before their
    database goes away). Each thread takes one closing job: they all wait at a barrier."""
    global _executor
    with _executor_lock:
        executor, _executor = _executor, None
    if executor is None:
        return
    barrier = threading.Barrier(CONTEXT_BUILDERS)

    def close() -> None:
        barrier.wait(timeout=10)
        connection.close()

    for done in [executor.submit(close) for _ in range(CONTEXT_BUILDERS)]:
        done.result()
    executor.shutdown(wait=True)
