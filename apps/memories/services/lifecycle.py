"""The lifecycle pass: memories that stopped earning their place are retired (deprecated, kept
in the history and restorable), and those retired long enough are deleted.

Each retirement rule is a query for its candidates. The daily job, an admin's "prune now" and
"clean up" apply them; the preview lists them without changing anything. One code path, so the
preview shows what the job will do next.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.db.models import BooleanField, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from apps.memories.models import LAST_ACCESSED_SQL, Memory
from apps.memories.services.indexing import _adjust_term_stats
from apps.memories.validation import MAX_HALF_LIFE_DAYS
from apps.tenants.models import Project
from apps.tenants.principal import SYSTEM

# A retired memory is deleted after this grace, unless a person verified, pinned or disputed it.
DELETE_AFTER = timedelta(days=30)
LOW_CONFIDENCE = 0.2
LOW_CONFIDENCE_UNUSED = timedelta(days=60)
RECIPE_UNUSED = timedelta(days=60)
# A closed work unit's outcome stays this long before it is retired: with the grace it is gone
# 90 days after the unit closed. Its work state is retired at once: the next agent resuming
# "where it left off" in a finished unit would be misled.
OUTCOME_KEPT_AFTER_CLOSE = timedelta(days=60)

_LAST_USE = f"coalesce({LAST_ACCESSED_SQL}, memories_memory.created_at)"


def _where(sql: str, params: list[Any]) -> RawSQL:
    return RawSQL(sql, params, output_field=BooleanField())


def _retirable(project: Project | None) -> QuerySet[Memory]:
    # Pinning says keep it, whatever its age or confidence.
    qs = Memory.objects.filter(deprecated=False, pinned=False)
    return qs.filter(project=project) if project is not None else qs


def _decayed(project: Project | None, now: datetime) -> list:
    """Unused for three half-lives: its decayed confidence is under an eighth of what it was."""
    return list(
        _retirable(project)
        .filter(decay_half_life_days__isnull=False)
        .filter(
            _where(
                f"{_LAST_USE} < %s - make_interval(secs => least(decay_half_life_days, %s) * 3 * 86400)",
                # (the bound the API enforces, so that no row can push the look-back out of range)
                [now, MAX_HALF_LIFE_DAYS],
            )
        )
        .values_list("id", flat=True)
    )


def _low_confidence(project: Project | None, now: datetime) -> list:
    """Confidence under 0.2 and unused for 60 days; a memory a person verified stays."""
    return list(
        _retirable(project)
        .filter(confidence__lt=LOW_CONFIDENCE, user_verified=False)
        .filter(_where(f"{_LAST_USE} < %s", [now - LOW_CONFIDENCE_UNUSED]))
        .values_list("id", flat=True)
    )


def _last_success(memory: Memory) -> datetime:
    stamp = (memory.payload or {}).get("last_validated_at")
    parsed = parse_datetime(stamp) if isinstance(stamp, str) else None
    if parsed is not None and timezone.is_naive(parsed):
        parsed = parsed.replace(tzinfo=UTC)
    return max(memory.created_at, parsed) if parsed else memory.created_at


def _recipe_unused(project: Project | None, now: datetime) -> list:
    """A workflow recipe that has not worked for 60 days (not since it was written, nor since
    a session followed it and succeeded). Its last success is a date the payload holds as text,
    read here rather than cast in SQL, where one malformed value would fail the whole job."""
    cutoff = now - RECIPE_UNUSED
    recipes = (
        _retirable(project)
        .filter(type="workflow_recipe", created_at__lt=cutoff)
        .only("id", "payload", "created_at")
    )
    return [m.id for m in recipes.iterator(chunk_size=500) if _last_success(m) < cutoff]


def _work_unit_closed(project: Project | None, now: datetime) -> list:
    """The work state and outcome of a finished work unit. A unit is finished when its latest
    outcome memory says it succeeded (the observer writes one when a session of the unit
    passes its gate) and nothing of the unit was written since; later work reopens it."""
    scope, params = ("AND project_id = %s", [str(project.id)]) if project is not None else ("", [])
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH units AS (
                SELECT project_id, work_unit_ref->'hierarchy' AS unit,
                       coalesce(work_unit_ref->>'methodology', '') AS methodology,
                       max(created_at) FILTER (WHERE type = 'work_unit_outcome'
                                                 AND payload->>'outcome' = 'success') AS closed_at,
                       max(created_at) AS last_written
                FROM memories_memory
                WHERE type IN ('work_state', 'work_unit_outcome')
                  AND jsonb_typeof(work_unit_ref->'hierarchy') = 'array'
                  AND jsonb_array_length(work_unit_ref->'hierarchy') > 0 {scope}
                GROUP BY 1, 2, 3
            )
            SELECT m.id FROM memories_memory m
            JOIN units u ON u.project_id = m.project_id AND m.work_unit_ref->'hierarchy' = u.unit
                        AND coalesce(m.work_unit_ref->>'methodology', '') = u.methodology
            WHERE u.closed_at IS NOT NULL AND u.last_written = u.closed_at
              AND m.deprecated = false AND m.pinned = false
              AND (m.type = 'work_state' OR (m.type = 'work_unit_outcome' AND u.closed_at < %s))
            """,
            [*params, now - OUTCOME_KEPT_AFTER_CLOSE],
        )
        return [row[0] for row in cursor.fetchall()]


@dataclass(frozen=True)
class Rule:
    name: str
    description: str
    candidates: Callable[[Project | None, datetime], list]


RETIRE_RULES: tuple[Rule, ...] = (
    Rule("decayed", "Unused for three half-lives of its type", _decayed),
    Rule("low_confidence", "Confidence under 0.2 and unused for 60 days", _low_confidence),
    Rule("recipe_unused", "Workflow recipe without a successful use for 60 days", _recipe_unused),
    Rule(
        "work_unit_closed",
        "Work state of a finished work unit; its outcome 60 days after it finished",
        _work_unit_closed,
    ),
)
DELETE_RULE = "expired"
DELETE_DESCRIPTION = "Retired 30 days ago; not verified, pinned or disputed"


def _deletable(project: Project | None, now: datetime) -> QuerySet[Memory]:
    """Retired past the grace. Kept: a pinned memory (retired by hand: pinning says keep it), a
    verified one, and a disputed one or one with a dispute thread (which records every step
    and would go with it)."""
    qs = Memory.objects.filter(
        deprecated=True,
        user_verified=False,
        pinned=False,
        disputed=False,
        deprecated_at__lt=now - DELETE_AFTER,
    ).exclude(id__in=Memory.objects.filter(disputes__isnull=False).values("id"))
    return qs.filter(project=project) if project is not None else qs


def _prune_plan(*, project: Project | None = None, now: datetime | None = None) -> dict[str, list]:
    """Each rule's candidates (memory ids), a memory under the first rule that names it; and
    the deletions, under `DELETE_RULE`."""
    now = now or timezone.now()
    plan: dict[str, list] = {}
    taken: set = set()
    for rule in RETIRE_RULES:
        plan[rule.name] = [i for i in rule.candidates(project, now) if i not in taken]
        taken.update(plan[rule.name])
    plan[DELETE_RULE] = list(_deletable(project, now).values_list("id", flat=True))
    return plan


def _retire(ids: list, now: datetime) -> int:
    """Deprecate these memories, each a new version kept in the history as the other changes
    are; a memory pinned or restored meanwhile is left alone."""
    if not ids:
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH deprecated AS (
                UPDATE memories_memory
                SET deprecated = true, deprecated_at = %s, version = version + 1, updated_at = %s
                WHERE id = ANY(%s::uuid[]) AND deprecated = false AND pinned = false
                RETURNING id, version, type, content, confidence, tags, related_files
            )
            INSERT INTO memories_memoryversion
                (memory_id, version, type, content, confidence, tags, related_files, change, changed_by, created_at)
            SELECT id, version, type, content, confidence, tags, related_files, 'deprecated', %s, %s
            FROM deprecated
            """,
            [now, now, [str(i) for i in ids], SYSTEM.label, now],
        )
        return cursor.rowcount


def _delete(project: Project | None, ids: list, now: datetime) -> int:
    # Locked and read again: a memory restored meanwhile is not deleted after all.
    doomed = list(
        _deletable(project, now).select_for_update().filter(id__in=ids).values_list("id", flat=True)
    )
    if not doomed:
        return 0
    _adjust_term_stats(doomed, -1)
    Memory.objects.filter(id__in=doomed).delete()
    return len(doomed)


def memories_decay_and_prune(
    *, now: datetime | None = None, project: Project | None = None
) -> dict[str, Any]:
    """The daily job (every project), or "prune now" for one: retire what the rules name, delete
    what has been retired past the grace, and (daily) evict expired embedding cache rows.
    Running it twice changes nothing the second time."""
    from apps.memories.models import EmbeddingCache

    now = now or timezone.now()
    with transaction.atomic():
        plan = _prune_plan(project=project, now=now)
        retired = {rule.name: _retire(plan[rule.name], now) for rule in RETIRE_RULES}
        deleted = _delete(project, plan[DELETE_RULE], now)
        evicted = EmbeddingCache.objects.filter(expires_at__lt=now).delete()[0] if project is None else 0
    return {
        "deprecated": sum(retired.values()),
        "deleted": deleted,
        "cache_evicted": evicted,
        "rules": {**retired, DELETE_RULE: deleted},
    }


PREVIEW_LIMIT = 50


def prune_preview(
    *, project: Project, now: datetime | None = None, limit: int = PREVIEW_LIMIT
) -> dict[str, Any]:
    """What the next pass would retire and delete in `project`, rule by rule, changing nothing:
    each rule's count and its first `limit` memories, the oldest first."""
    now = now or timezone.now()
    plan = _prune_plan(project=project, now=now)
    descriptions = {rule.name: rule.description for rule in RETIRE_RULES} | {DELETE_RULE: DELETE_DESCRIPTION}
    rules = []
    for name, ids in plan.items():
        shown = (
            Memory.objects.filter(id__in=ids)
            .select_related("usage_row")
            .only("id", "type", "content", "confidence", "created_at", "usage_row__last_accessed_at")
            .order_by("created_at", "id")[:limit]
        )
        rules.append(
            {
                "rule": name,
                "action": "delete" if name == DELETE_RULE else "retire",
                "description": descriptions[name],
                "count": len(ids),
                "memories": [
                    {
                        "id": m.id,
                        "type": m.type,
                        "content": m.content[:200],
                        "confidence": m.confidence,
                        "last_used_at": m.last_accessed_at or m.created_at,
                    }
                    for m in shown
                ],
            }
        )
    return {
        "as_of": now,
        "retire": sum(len(plan[rule.name]) for rule in RETIRE_RULES),
        "delete": len(plan[DELETE_RULE]),
        "rules": rules,
    }
