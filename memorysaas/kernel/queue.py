"""Background work through django-q2, always queued after the transaction commits.

Delivery is at least once (deploy/SCALING.md): a task can run twice — a worker killed before it
acknowledged, a sweep that queued stranded work again — so tasks receive ids, re-read what they
need and must be idempotent. With `Q_CLUSTER["sync"]` (tests) the task runs inline when the
transaction commits.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from django.db import DatabaseError, InterfaceError, OperationalError, connections, transaction
from django_q.conf import Conf
from tenacity import retry, retry_if_exception, stop_after_delay, wait_exponential

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

# A task that meets the database gone (restarting, failing over, a connection cut) waits for it
# with growing pauses, ~0.5 s to 15 s, for up to this long, before it gives up and fails; what it
# left undone is then queued again by a redelivery or the stranded-work sweeps.
DATABASE_RETRY_SECONDS = 120

DATABASE_ERRORS: tuple[type[DatabaseError], ...] = (OperationalError, InterfaceError)


def task_path(func: Callable[..., Any] | str) -> str:
    if isinstance(func, str):
        return func
    return f"{func.__module__}.{func.__qualname__}"


# Work a person or an agent waits for (a finalize, a graph index, an export, a notification) runs
# on the interactive lane; work nobody waits for (embeddings, rollups, pruning) on the bulk lane.
# Each lane is a django-q2 cluster with workers of its own (settings.QUEUE_LANES), so a backlog
# of thousands of embeddings never stands in front of a graph index.
LANES = ("interactive", "bulk")


def lane_cluster(lane: str) -> str:
    """The django-q2 cluster (its queue's name) that serves `lane`."""
    from django.conf import settings

    if lane not in LANES:
        raise ValueError(f"unknown queue lane {lane!r}; one of {', '.join(LANES)}")
    return settings.QUEUE_LANES[lane]


def enqueue(
    func: Callable[..., Any] | str,
    *args: Any,
    lane: str = "interactive",
    task_name: str | None = None,
    group: str | None = None,
) -> None:
    """Queue `func(*args)` on `lane` for when the current transaction commits (at once outside one).

    With the ORM broker the task's row is written in the caller's transaction: it exists if and
    only if the write that asked for it committed, so no outage between the two can lose it.
    Other brokers are handed the task after the commit; one that cannot take it then (Redis just
    went away) must not turn a committed write into an error: the failure is logged, and the work
    it stood for is found again by the sweeps (pending memories, queued index jobs, exports,
    unfinalized sessions). Inline (sync) tasks run after the commit and raise, so tests see
    their errors."""
    from django_q.tasks import async_task  # (here: it loads django-q2's models, and apps import this)

    path = task_path(func)
    options: dict[str, Any] = {"cluster": lane_cluster(lane)}
    if task_name:
        options["task_name"] = task_name
    if group:
        options["group"] = group
    if Conf.SYNC:
        transaction.on_commit(lambda: async_task(path, *args, **options))
    elif Conf.ORM and not Conf.BROKER_CLASS:
        async_task(path, *args, **options)
    else:
        transaction.on_commit(lambda: async_task(path, *args, **options), robust=True)


def is_database_outage(error: BaseException) -> bool:
    """A connection-level database failure that a later attempt may not meet (not a constraint
    or a bad query). Inside a transaction nothing can be retried: the transaction is lost."""
    if not isinstance(error, DATABASE_ERRORS):
        return False
    return not any(connection.in_atomic_block for connection in connections.all(initialized_only=True))


def _forget_connections(_state: Any) -> None:
    """Between attempts: drop every connection, so the next attempt opens a fresh one rather
    than reusing a socket to a server that restarted."""
    for connection in connections.all(initialized_only=True):
        with contextlib.suppress(DatabaseError):  # (closing a dead one can fail; it is gone either way)
            connection.close()


def _log_retry(state: Any) -> None:
    logger.warning(
        "%s met a database outage (%s); attempt %s failed, trying again in %.1f s",
        getattr(state.fn, "__qualname__", state.fn),
        state.outcome.exception() if state.outcome else "",
        state.attempt_number,
        state.next_action.sleep if state.next_action else 0.0,
    )


def _before_sleep(state: Any) -> None:
    _log_retry(state)
    _forget_connections(state)


def retry_on_database_error(func: F) -> F:
    """Run the task again, with exponential backoff, when it fails because the database is
    unreachable, for up to DATABASE_RETRY_SECONDS; any other error fails the task at once. A task
    so wrapped must be safe to run again from the start (every task is)."""
    return retry(
        retry=retry_if_exception(is_database_outage),
        wait=wait_exponential(multiplier=0.5, max=15),
        stop=stop_after_delay(DATABASE_RETRY_SECONDS),
        before_sleep=_before_sleep,
        reraise=True,
    )(func)
