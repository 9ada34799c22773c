"""The graph boost rate: of the retrievals that ran the neighbourhood boost, how many had their
top 8 changed by it. Counted in the process (a dict increment on the search path) and added to
the project's `RetrievalDay` row at most every FLUSH_SECONDS, by one upsert; a process that dies
loses at most that long's counts, which a rate can spare."""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from uuid import UUID

from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from apps.insights.models import RetrievalDay
from apps.tenants.models import Project

logger = logging.getLogger(__name__)

FLUSH_SECONDS = 60.0
_lock = threading.Lock()
_counts: dict[tuple[UUID, object], list[int]] = defaultdict(lambda: [0, 0])
_last_flush = [time.monotonic()]


def boost_counted(project_id: UUID, changed_top: bool) -> None:
    """The memories app's boost listener."""
    key = (project_id, timezone.now().date())
    with _lock:
        row = _counts[key]
        row[0] += 1
        row[1] += int(changed_top)
        due = time.monotonic() - _last_flush[0] >= FLUSH_SECONDS
    if due:
        retrieval_counts_flush()


_UPSERT = f"""
    INSERT INTO {RetrievalDay._meta.db_table} AS r (project_id, day, boosted, changed_top)
    SELECT u.project_id, u.day, u.boosted, u.changed_top
    FROM unnest(%s::uuid[], %s::date[], %s::int[], %s::int[]) AS u(project_id, day, boosted, changed_top)
    -- (a project deleted since it was counted is skipped here: its key is checked only at commit)
    WHERE EXISTS (SELECT 1 FROM {Project._meta.db_table} p WHERE p.id = u.project_id)
    ON CONFLICT (project_id, day) DO UPDATE
    SET boosted = r.boosted + EXCLUDED.boosted, changed_top = r.changed_top + EXCLUDED.changed_top
"""


def retrieval_counts_flush() -> int:
    """Write this process's counts; returns how many (project, day) rows were touched."""
    with _lock:
        taken = dict(_counts)
        _counts.clear()
        _last_flush[0] = time.monotonic()
    if not taken:
        return 0
    keys = list(taken)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                _UPSERT,
                [[str(p) for p, _ in keys], [d for _, d in keys], [taken[k][0] for k in keys],
                 [taken[k][1] for k in keys]],
            )  # fmt: skip
    except DatabaseError:  # (a project deleted meanwhile, a database away: the counts are let go)
        logger.warning("Could not write the graph boost counts; %s rows dropped.", len(keys))
        return 0
    return len(keys)
