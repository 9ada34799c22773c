"""Named locks held until the current transaction ends (PostgreSQL advisory locks)."""

from __future__ import annotations

from django.db import connection


def hold_until_commit(name: str) -> None:
    """Wait until no other transaction holds `name`, then hold it until this one ends. For work
    whose rows do not exist yet, so no row lock can serialise it (two first writes of one thing)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [name])
