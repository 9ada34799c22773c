"""The lifecycle pass: confidence decays with time since the last access, and the memories that
have decayed to nothing are pruned."""

from __future__ import annotations

from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from apps.memories.models import (
    LAST_ACCESSED_SQL,
    Memory,
)
from apps.memories.services.indexing import _adjust_term_stats
from apps.memories.validation import (
    MAX_HALF_LIFE_DAYS,
)
from apps.tenants.principal import SYSTEM


def memories_decay_and_prune(*, now=None) -> dict[str, int]:
    """The daily job: soft-deprecate after three half-lives unused (never pinned), hard-delete
    30 days after deprecation unless user_verified (nor pinned, nor disputed: a dispute's thread
    is history to keep), evict expired embedding cache rows."""
    from apps.memories.models import EmbeddingCache

    now = now or timezone.now()
    with transaction.atomic(), connection.cursor() as cursor:
        # each deprecation is a new version, kept in the history as `_snapshot` keeps the others
        cursor.execute(
            f"""
            WITH deprecated AS (
                UPDATE memories_memory
                SET deprecated = true, deprecated_at = %s, version = version + 1, updated_at = %s
                WHERE deprecated = false AND pinned = false AND decay_half_life_days IS NOT NULL
                  AND coalesce({LAST_ACCESSED_SQL}, created_at)
                      < %s - make_interval(secs => least(decay_half_life_days, %s) * 3 * 86400)
                RETURNING id, version, type, content, confidence, tags, related_files
            )
            INSERT INTO memories_memoryversion
                (memory_id, version, type, content, confidence, tags, related_files, change, changed_by, created_at)
            SELECT id, version, type, content, confidence, tags, related_files, 'deprecated', %s, %s
            FROM deprecated
            """,
            # (the bound the API enforces, so that no row can push the look-back out of range)
            [now, now, now, MAX_HALF_LIFE_DAYS, SYSTEM.label, now],
        )
        deprecated = cursor.rowcount
        # Locked as read: a memory restored meanwhile is not deleted after all. Kept: a pinned
        # memory (deprecated by hand: pinning says keep it), and a disputed one or one with a
        # dispute thread (which records every step and would go with it).
        doomed = list(
            Memory.objects.select_for_update()
            .filter(
                deprecated=True,
                user_verified=False,
                pinned=False,
                disputed=False,
                deprecated_at__lt=now - timedelta(days=30),
            )
            .exclude(id__in=Memory.objects.filter(disputes__isnull=False).values("id"))
            .values_list("id", flat=True)
        )
        _adjust_term_stats(doomed, -1)
        deleted = Memory.objects.filter(id__in=doomed).delete()[0] if doomed else 0
        evicted = EmbeddingCache.objects.filter(expires_at__lt=now).delete()[0]
    return {"deprecated": deprecated, "deleted": len(doomed) if deleted else 0, "cache_evicted": evicted}
