"""The context-cost window: a module's context-cost figures describe its recent sessions, not
its whole history.

The observer keeps running sums per module (tokens read, sessions with a spike, sessions seen)
rather than each session's sample, so there are no old samples to delete. Instead, once a
module has seen more than CONTEXT_COST_WINDOW sessions, its sums are scaled down to that many
sessions' worth: the average and the share of spiking sessions stay as they were, and each
later session then weighs as one of the last 30. The older sessions fade geometrically rather
than dropping out at once, which is the nearest a sum can come to a rolling window.
"""

from __future__ import annotations

from uuid import UUID

from django.db import connection

CONTEXT_COST_WINDOW = 30


def context_cost_window(*, project_id: UUID | str | None = None) -> int:
    """Scale each module's context-cost sums (of one project, or all) to the window; returns
    how many modules it scaled. Running it again changes nothing until more sessions come."""
    scope, params = ("AND project_id = %s", [str(project_id)]) if project_id else ("", [])
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE observer_patternstat
            SET total = total * %s / session_count, total2 = total2 * %s / session_count, session_count = %s
            WHERE kind = 'context_token_spike' AND session_count > %s {scope}
            """,
            [CONTEXT_COST_WINDOW] * 4 + params,
        )
        return cursor.rowcount


def context_cost_over_window(*, project_id: UUID | str) -> int:
    """How many of the project's modules the next pass would scale."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM observer_patternstat"
            " WHERE kind = 'context_token_spike' AND session_count > %s AND project_id = %s",
            [CONTEXT_COST_WINDOW, str(project_id)],
        )
        return cursor.fetchone()[0]
