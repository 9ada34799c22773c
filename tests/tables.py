"""Probes of what the database holds, for tests that must prove something never got there."""

from __future__ import annotations

from django.db import connection


def tables_holding(text: str) -> list[str]:
    """Every table of the public schema with a row whose text form contains `text`."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM information_schema.tables"
            " WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
        )
        tables = [row[0] for row in cursor.fetchall()]
        holding = []
        for table in tables:
            cursor.execute(
                f"SELECT EXISTS (SELECT 1 FROM {connection.ops.quote_name(table)} t WHERE t::text LIKE %s)",
                [f"%{text}%"],
            )
            if cursor.fetchone()[0]:
                holding.append(table)
    return holding
