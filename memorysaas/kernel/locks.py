"""Named locks (PostgreSQL advisory locks): held until the current transaction ends, or while a
block of background work runs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DatabaseError, connection


def hold_until_commit(name: str) -> None:
    """Wait until no other transaction holds `name`, then hold it until this one ends. For work
    whose rows do not exist yet, so no row lock can serialise it (two first writes of one thing)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [name])


@contextmanager
def held_while_running(name: str) -> Iterator[bool]:
    """Hold `name` while the block runs, on this connection's session rather than a transaction:
    yields True if this process now holds it, False if another one does (the block should then
    leave the work to it). A process that dies lets go with its connection, so a sweep can tell
    work that is running from work whose worker was lost (`is_held`)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [name])
        (acquired,) = cursor.fetchone()
    try:
        yield acquired
    finally:
        if acquired:
            try:
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [name])
            except DatabaseError:
                pass  # the connection is gone, and the lock went with it


def is_held(name: str) -> bool:
    """Whether some process holds `name` through `held_while_running` now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", [name])
        (acquired,) = cursor.fetchone()
        if acquired:
            cursor.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", [name])
    return not acquired
