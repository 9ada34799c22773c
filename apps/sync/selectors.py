"""Reading the change feed for a device: `changes_since`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.db import connection

from apps.memories.models import Memory
from apps.memories.selectors import memories_visible
from apps.sync.feed import Cursor
from apps.sync.models import ConflictStatus, SyncConflict
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from memorysaas.kernel.errors import NotFound
from memorysaas.kernel.ids import as_uuid

MAX_PULL = 500


@dataclass
class Pull:
    changes: list[dict[str, Any]] = field(default_factory=list)
    cursor: Cursor = field(default_factory=Cursor)
    has_more: bool = False


def memory_payload(memory: Memory) -> dict[str, Any]:
    """What a replica stores of a memory: everything retrieval needs, vector included."""
    return {
        "id": str(memory.id),
        "project_id": str(memory.project_id),
        "type": memory.type,
        "content": memory.content,
        "scope": memory.scope,
        "source": memory.source,
        "confidence": memory.confidence,
        "tags": list(memory.tags),
        "related_files": list(memory.related_files),
        "related_modules": list(memory.related_modules),
        "payload": memory.payload,
        "citation_text": memory.citation_text,
        "needs_review": memory.needs_review,
        "user_verified": memory.user_verified,
        "pinned": memory.pinned,
        "deprecated": memory.deprecated,
        "disputed": memory.disputed,
        "stale": memory.stale_at is not None,
        "version": memory.version,
        "created_at": memory.created_at.isoformat(),
        "updated_at": memory.updated_at.isoformat(),
        "embedding_model": memory.embedding_model or None,
        "embedding": [float(x) for x in memory.embedding] if memory.embedding is not None else None,
    }


# The horizon: every transaction that can still add a change to this database's feed has an xid
# at or above it, so a cursor may move up to it and never skip a change that commits later.
#
# The statement's snapshot lists the transactions running anywhere on the server (`xip`); a
# transaction of another database (another tenant, a parallel test run) never writes here, so it
# must not hold the feed back the way the snapshot's cluster-wide xmin would. Only transactions
# *seen running in another database* are set aside: an xid belongs to one database for its whole
# life, so that is true however stale the activity view is (it is read after the snapshot and
# cached per transaction). Everything else counts — this database's transactions, and any the
# view cannot place (committed since the snapshot, xid not yet published, a prepared transaction
# of this database, a hidden backend) — which errs only towards holding back. The 32-bit xids are
# compared among transactions running at once, which wraparound protection keeps within 2^31 of
# each other, so no epoch arithmetic is needed; the horizon itself is a full xid8 from the
# snapshot. Transactions that start later get xids above the snapshot's xmax. Our own transaction
# is not in `xip`; if it has an xid (it wrote), that holds the feed back too, as the snapshot's
# xmin did: its changes are not committed yet. `backend_xmin` is no help: readers write nothing.
HORIZON = """
    SELECT LEAST(
        pg_snapshot_xmax(snap),
        pg_current_xact_id_if_assigned(),
        (SELECT min(running) FROM pg_snapshot_xip(snap) AS running
         WHERE xid(running) NOT IN (
             SELECT backend_xid FROM pg_stat_activity
             WHERE datname <> current_database() AND backend_xid IS NOT NULL
             UNION ALL
             SELECT transaction FROM pg_prepared_xacts WHERE database <> current_database()))
    ) AS xid
    FROM pg_current_snapshot() AS snap
"""


def _feed_rows(
    organization_id: UUID, after: Cursor, limit: int
) -> list[tuple[UUID, int, int, bool, UUID, bool, bool, int | None]]:
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH horizon AS MATERIALIZED ({HORIZON})
            SELECT memory_id, change.xid::text::bigint, seq, deleted, project_id, ever_shared, ever_wide,
                   owner_id
            FROM sync_memorychange AS change, horizon
            WHERE organization_id = %s
              AND (change.xid, seq) > (%s::text::xid8, %s)
              AND change.xid < horizon.xid
            ORDER BY change.xid, seq
            LIMIT %s
            """,
            [str(organization_id), str(after.xid), after.seq, limit],
        )
        return cursor.fetchall()


def changes_since(*, principal: Principal, project: Project, cursor: Cursor, limit: int = MAX_PULL) -> Pull:
    """The changes after `cursor` to memories that apply in `project` for this principal,
    oldest first: upserts with the memory, deletes as tombstones."""
    limit = max(1, min(limit, MAX_PULL))
    rows = _feed_rows(project.organization_id, cursor, limit + 1)
    has_more = len(rows) > limit
    rows = rows[:limit]
    live_ids = [row[0] for row in rows if not row[3]]
    visible = {
        m.id: m for m in memories_visible(principal=principal, project=project).filter(id__in=live_ids)
    }
    pull = Pull(cursor=cursor, has_more=has_more)
    user_id = principal.user.pk if principal.user is not None else None
    for memory_id, xid, seq, deleted, project_id, ever_shared, ever_wide, owner_id in rows:
        pull.cursor = Cursor(xid, seq)
        if not deleted and memory_id in visible:
            pull.changes.append({"op": "upsert", "memory": memory_payload(visible[memory_id])})
        elif (
            project_id == project.id and (ever_shared or (owner_id is not None and owner_id == user_id))
        ) or ever_wide:
            # Gone, or no longer for this principal (made personal by its owner, narrowed to its
            # own project): the replica drops it. Only memories this replica may have held are
            # named: this project's shared ones and the principal's own, and those ever of team or
            # org scope (whatever their scope now).
            pull.changes.append({"op": "delete", "id": str(memory_id)})
    return pull


def conflicts_for(*, principal: Principal, project: Project, status: str | None = "open"):
    """The project's conflicts on memories the principal may read, newest first."""
    qs = (
        SyncConflict.objects.visible_to(principal)
        .filter(project=project, memory__in=Memory.objects.visible_to(principal))
        .select_related("memory", "author", "resolved_by")
    )
    return qs.filter(status=status) if status else qs


def conflict_get(*, principal: Principal, conflict_id: UUID | str) -> SyncConflict:
    as_id = as_uuid(conflict_id)
    conflict = (
        SyncConflict.objects.visible_to(principal)
        .filter(id=as_id, memory__in=Memory.objects.visible_to(principal))
        .select_related("memory", "author", "resolved_by", "project__organization")
        .first()
        if as_id
        else None
    )
    if conflict is None:
        raise NotFound("No such conflict.")
    return conflict


def open_conflict_ids(*, principal: Principal, project: Project) -> list[str]:
    """The open conflicts this principal's pushes made in `project` (a replica keeps its own
    until they are decided, wherever they are decided)."""
    mine = SyncConflict.objects.filter(project=project, status=ConflictStatus.OPEN)
    if principal.user is not None:
        mine = mine.filter(author=principal.user)
    else:
        mine = mine.filter(api_key=principal.api_key)
    return [str(pk) for pk in mine.values_list("id", flat=True)]
