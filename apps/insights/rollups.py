"""The A/B rollup, run by a schedule: each finalized session's metrics once, then the daily sums
of every (project, experiment period, day, group) those sessions touched.

Incremental: a run reads only sessions finalized since the last run (less a margin, for a
finalize that committed late with an earlier timestamp) that have no metrics row yet, and adds
their figures to the sums of the days they fall on: its work grows with the new sessions, not
with the days' totals. Rerunning changes nothing: a session gets its metrics row once, and its
figures go into the sums in the same transaction (runs take turns on the cursor row, so no two
runs add the same session).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from apps.insights import ab, metrics
from apps.insights.models import DailyRollup, ExperimentPeriod, RollupCursor, SessionMetrics
from apps.insights.retrieval import retrieval_counts_flush
from apps.memories.models import Memory, MemoryFeedback
from apps.observer.models import PatternStat, Session

CURSOR = "sessions"
MARGIN = timedelta(minutes=10)
BATCH = 2000

# One row per finalized session not rolled up yet: the figures metrics.RawSession takes, read
# from the session's final scratchpad, its memories and the feedback given in it.
_NEW_SESSIONS = f"""
    SELECT s.id, s.organization_id, s.project_id, s.ab_group, s.started_at, s.finalized_at,
        s.universal_phase,
        COALESCE((s.scratchpad->>'tool_calls')::int, 0),
        (SELECT count(*) FROM jsonb_each(COALESCE(s.scratchpad->'files', '{{}}'::jsonb)) AS f(path, v)
         WHERE jsonb_typeof(f.v) = 'array' AND (f.v->>0)::int > 0 AND EXISTS (
            SELECT 1 FROM {PatternStat._meta.db_table} p
            WHERE p.project_id = s.project_id AND p.kind = 'file_access' AND p.key = f.path
              AND p.first_seen < s.started_at)),
        (s.scratchpad->'validations'->0->>'passed')::boolean,
        (SELECT count(*) FROM {Memory._meta.db_table} m
         WHERE m.id = ANY(s.reinforced_memory_ids) AND m.type = 'dead_end' AND m.created_at < s.started_at),
        s.scratchpad->'tokens',
        (s.scratchpad->>'planned_steps')::int,
        COALESCE(s.steps, (s.scratchpad->>'step')::int),
        cardinality(s.injected_memory_ids),
        (SELECT count(*) FILTER (WHERE f.kind = 'used') FROM {MemoryFeedback._meta.db_table} f
         WHERE f.session_id = s.id::text),
        (SELECT count(*) FILTER (WHERE f.kind IN ('flag', 'correct')) FROM {MemoryFeedback._meta.db_table} f
         WHERE f.session_id = s.id::text),
        (SELECT jsonb_object_agg(t.type, t.n) FROM (
            SELECT m.type, count(*) AS n FROM {Memory._meta.db_table} m
            WHERE m.id = ANY(s.injected_memory_ids) GROUP BY m.type) t),
        -- the experiment period open when the session started; one that started before the
        -- project's first period belongs to that first period
        COALESCE(
            (SELECT ep.id FROM {ExperimentPeriod._meta.db_table} ep
             WHERE ep.project_id = s.project_id AND ep.started_at <= s.started_at
               AND (ep.ended_at IS NULL OR s.started_at < ep.ended_at)
             ORDER BY ep.started_at DESC LIMIT 1),
            (SELECT first.id FROM (
                SELECT ep.id, ep.started_at FROM {ExperimentPeriod._meta.db_table} ep
                WHERE ep.project_id = s.project_id ORDER BY ep.started_at LIMIT 1) first
             WHERE s.started_at < first.started_at))
    FROM {Session._meta.db_table} s
    WHERE s.status = 'completed' AND s.finalized_at >= %s
      AND NOT EXISTS (SELECT 1 FROM {SessionMetrics._meta.db_table} sm WHERE sm.session_id = s.id)
    ORDER BY s.finalized_at, s.id
    LIMIT %s
"""


@dataclass
class RunResult:
    sessions: int = 0
    days: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"sessions": self.sessions, "days": self.days}


def rollup_run(*, batch: int = BATCH) -> RunResult:
    """Roll up every session finalized since the last run. One run at a time (the cursor row is
    held); a second one waits, then finds nothing new."""
    result = RunResult()
    retrieval_counts_flush()
    while True:
        with transaction.atomic():
            cursor = _locked_cursor()
            since = (
                (cursor.finalized_after - MARGIN)
                if cursor.finalized_after
                else timezone.now().replace(year=1970)
            )
            with connection.cursor() as db:
                # What a run writes is derived from the sessions and written again by the next
                # run if a crash loses it (the cursor is in the same transaction), so it need not
                # wait for its commit to reach the disk.
                db.execute("SET LOCAL synchronous_commit = off")
                db.execute(_NEW_SESSIONS, [since, batch])
                rows = db.fetchall()
            if not rows:
                return result
            added = _store_metrics(rows)
            result.sessions += len(rows)
            result.days += _add_to_days(added)
            newest = max(row[5] for row in rows)
            if cursor.finalized_after is None or newest > cursor.finalized_after:
                cursor.finalized_after = newest
            cursor.runs += 1
            cursor.save(update_fields=["finalized_after", "runs", "updated_at"])
        if len(rows) < batch:
            return result


def _locked_cursor() -> RollupCursor:
    """The run's cursor row, locked for the run (one statement once the row exists)."""
    cursor = RollupCursor.objects.select_for_update().filter(name=CURSOR).first()
    if cursor is None:
        RollupCursor.objects.get_or_create(name=CURSOR)
        cursor = RollupCursor.objects.select_for_update().get(name=CURSOR)
    return cursor


@dataclass
class _Sums:
    """One day's figures for one group: sessions, and per metric [n, sum, sum of squares]."""

    sessions: int = 0
    sums: dict[str, list[float]] = field(default_factory=dict)

    def add(self, values: dict[str, Any]) -> None:
        """Add one session, from its metrics fields."""
        contributions = metrics.contributions(values)
        self.merge(1, {name: [n, value, value * value] for name, (n, value) in contributions.items()})

    def merge(self, sessions: int, sums: dict[str, list[float]]) -> None:
        self.sessions += sessions
        for name, (n, total, squares) in sums.items():
            acc = self.sums.setdefault(name, [0.0, 0.0, 0.0])
            acc[0] += n
            acc[1] += total
            acc[2] += squares


def _store_metrics(rows: list[tuple]) -> dict[tuple, _Sums]:
    """Insert the sessions' metrics rows; returns their figures summed by the (organization,
    project, period, day, group) they fall on."""
    objects, added = [], defaultdict(_Sums)
    for (sid, org_id, project_id, group, started_at, finalized_at, phase, tool_calls, rereads, first,
         reentries, tokens, planned, steps, injected, used, corrected, types, period_id) in rows:  # fmt: skip
        if isinstance(tokens, str):
            tokens = json.loads(tokens)
        if isinstance(types, str):
            types = json.loads(types)
        raw = metrics.RawSession(
            tool_calls=tool_calls, rereads=rereads, first_validation=first, reentries=reentries,
            tokens=tokens if isinstance(tokens, list) else None, planned_steps=planned, steps=steps,
            injected=injected, used=used, corrected=corrected,
        )  # fmt: skip
        day = timezone.localdate(started_at)
        group = ab.canonical(group)
        values = metrics.session_values(raw)
        objects.append(
            SessionMetrics(
                session_id=sid,
                organization_id=org_id,
                project_id=project_id,
                period_id=period_id,
                group=group,
                day=day,
                phase=phase,
                finalized_at=finalized_at,
                injected_types=types or {},
                **values,
            )  # fmt: skip
        )
        added[(org_id, project_id, period_id, day, group)].add(values)
    SessionMetrics.objects.bulk_create(objects, batch_size=1000)
    return added


def _add_to_days(added: dict[tuple, _Sums]) -> int:
    """Add the new sessions' figures to their days' sums; returns how many day rows were written."""
    projects = {project_id for _, project_id, _, _, _ in added}
    days = {day for _, _, _, day, _ in added}
    by_row = {key[1:]: total for key, total in added.items()}  # (the organization follows the project)
    current = DailyRollup.objects.filter(project_id__in=projects, day__in=days).values_list(
        "project_id", "period_id", "day", "group", "sessions", "sums"
    )
    for project_id, period_id, day, group, sessions, sums in current:
        if (project_id, period_id, day, group) in by_row:
            by_row[(project_id, period_id, day, group)].merge(sessions, sums)
    DailyRollup.objects.bulk_create(
        [
            DailyRollup(organization_id=org_id, project_id=project_id, period_id=period_id, day=day, group=group,
                        sessions=total.sessions, sums=total.sums)
            for (org_id, project_id, period_id, day, group), total in added.items()
        ],
        update_conflicts=True,
        unique_fields=["project", "period", "day", "group"],
        update_fields=["sessions", "sums"],
    )  # fmt: skip
    return len(added)
