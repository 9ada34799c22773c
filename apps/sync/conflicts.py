"""Conflicts a person decides: an offline change the server could not merge waits here, with the
device's version, the server's and their common base, until someone keeps one or writes a merge.

A resolution is an ordinary edit: keeping the device's version or a merge makes a new version of
the memory (with its history), which every replica pulls at its next sync; keeping the server's
version changes nothing and only closes the conflict. A resolution names the memory version it
was decided against: if the memory moved on since, it is refused (409) and the person looks again.

Who may decide: the person whose device pushed the change, the memory's owner, and stewards
(`memories:review`), each needing `memories:write`. Those who hear of a waiting conflict (the
memory's owner, the device's person and the project's stewards) are told by whoever registered
with `on_conflict_waiting` (the dashboard registers the in-app notifications): this app does not
know the governance app beside it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone

from apps.memories.models import Memory, MemoryVersion
from apps.memories.services import memory_delete, memory_locked, memory_update
from apps.sync.models import ConflictKind, ConflictResolution, ConflictStatus, SyncConflict
from apps.tenants.models import Device
from apps.tenants.principal import Principal
from apps.tenants.roles import Perm
from apps.tenants.services import audit_record
from memorysaas.kernel.errors import Conflict, Forbidden, Invalid, NotFound

logger = logging.getLogger(__name__)

# What a conflict shows side by side (the fields a device edits that a person reads).
SHOWN_FIELDS = ("content", "type", "tags", "related_files", "related_modules", "confidence", "citation_text")

ConflictListener = Callable[[SyncConflict], None]
_LISTENERS: list[ConflictListener] = []


def on_conflict_waiting(listener: ConflictListener) -> ConflictListener:
    """Call `listener` with each new conflict once its push commits. One that raises is logged
    and skipped: a notification that fails must not lose the device's push."""
    if listener not in _LISTENERS:
        _LISTENERS.append(listener)
    return listener


def _announce(conflict: SyncConflict) -> None:
    for listener in _LISTENERS:
        try:
            listener(conflict)
        except Exception:
            logger.exception("A conflict listener failed for %s", conflict.pk)


def shown(memory: Memory) -> dict[str, Any]:
    return {name: _plain(getattr(memory, name)) for name in SHOWN_FIELDS}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


def base_of(memory: Memory, version: int) -> dict[str, Any]:
    """The memory's fields at `version`, as far as its history keeps them ({} when it does not)."""
    snapshot = MemoryVersion.objects.filter(memory=memory, version=version).first()
    if snapshot is None:
        return {}
    return {
        name: _plain(getattr(snapshot, name))
        for name in ("content", "type", "confidence", "tags", "related_files")
    }


def _device_label(actor: Principal) -> str:
    if actor.api_key is None:
        return "dashboard"
    device = Device.objects.filter(api_key=actor.api_key).only("name").first()
    return device.name if device is not None else actor.api_key.name


@transaction.atomic
def conflict_record(
    *,
    memory: Memory,
    actor: Principal,
    base_version: int,
    mine: dict[str, Any],
    fields: list[str],
    kind: str = ConflictKind.EDIT,
) -> SyncConflict:
    """Keep a change the server could not merge (in the push's transaction). The same change
    pushed again (a retry after a lost answer) finds its open conflict and refreshes it."""
    author = actor.user if actor.user is not None and actor.user.pk else None
    existing = (
        SyncConflict.objects.select_for_update()
        .filter(
            memory=memory,
            status=ConflictStatus.OPEN,
            author=author,
            api_key=actor.api_key,
            base_version=base_version,
            kind=kind,
        )
        .first()
    )
    conflict = existing or SyncConflict(
        organization_id=memory.organization_id,
        project_id=memory.project_id,
        memory=memory,
        author=author,
        api_key=actor.api_key,
        device_label=_device_label(actor)[:120],
        kind=kind,
        base_version=base_version,
        base=base_of(memory, base_version),
    )
    conflict.mine = {name: _plain(value) for name, value in mine.items()}
    conflict.fields = sorted(fields)
    conflict.theirs_version = memory.version
    conflict.theirs = shown(memory)
    conflict.save()
    if existing is None:
        audit_record(
            actor=actor,
            action="sync.conflict_recorded",
            target=conflict,
            metadata={"memory_id": str(memory.pk), "fields": conflict.fields, "kind": kind},
        )
        transaction.on_commit(lambda: _announce(conflict))
    return conflict


def may_resolve(actor: Principal, conflict: SyncConflict) -> bool:
    if not actor.has(conflict.organization_id, Perm.MEMORIES_WRITE):
        return False
    if actor.has(conflict.organization_id, Perm.MEMORIES_REVIEW):
        return True
    user_id = actor.user.pk if actor.user is not None else None
    owner_id = Memory.objects.filter(pk=conflict.memory_id).values_list("owner_id", flat=True).first()
    return user_id is not None and user_id in (conflict.author_id, owner_id)


@transaction.atomic
def conflict_resolve(
    *,
    conflict: SyncConflict,
    actor: Principal,
    keep: str,
    base_version: int,
    merged: dict[str, Any] | None = None,
) -> SyncConflict:
    """Decide `conflict`: keep `mine`, `theirs`, or a `merge` (its fields in `merged`), against
    the memory as it was at `base_version`. Returns the closed conflict."""
    if not may_resolve(actor, conflict):
        raise Forbidden(
            "Only the person whose device made the change, the memory's owner or a steward can resolve it."
        )
    conflict = (
        SyncConflict.objects.select_for_update(of=("self",))
        .select_related("memory", "author", "resolved_by")
        .get(pk=conflict.pk)
    )
    if conflict.status != ConflictStatus.OPEN:
        raise Conflict(
            "This conflict was already resolved.",
            code="already_resolved",
            details={"resolution": conflict.resolution, "result_version": conflict.result_version},
        )
    try:
        memory = memory_locked(Memory(pk=conflict.memory_id))
    except Memory.DoesNotExist:
        raise NotFound("The memory no longer exists.") from None
    if base_version != memory.version:
        raise Conflict(
            f"The memory changed since you looked (now version {memory.version}): look again and decide.",
            code="stale_base",
            details={"current_version": memory.version, "current": shown(memory)},
        )
    result_version: int | None = memory.version
    if keep == ConflictResolution.THEIRS:
        pass
    elif keep == ConflictResolution.MINE and conflict.kind == ConflictKind.DELETE:
        memory_delete(memory=memory, actor=actor)
        result_version = None
    elif keep in (ConflictResolution.MINE, ConflictResolution.MERGE):
        changes = conflict.mine if keep == ConflictResolution.MINE else (merged or {})
        if changes:  # (a merge that sets nothing keeps the memory as it is now)
            memory = memory_update(memory=memory, actor=actor, changes=changes, change="conflict_resolved")
        result_version = memory.version
    else:
        raise Invalid("keep is one of mine, theirs, merge.", details={"field": "keep"})
    conflict.status = ConflictStatus.RESOLVED
    conflict.resolution = keep
    conflict.resolved_by = actor.user if actor.user is not None and actor.user.pk else None
    conflict.resolved_at = timezone.now()
    conflict.result_version = result_version
    # (kept before the delete cascades it: a deleted memory takes its conflicts with it)
    audit_record(
        actor=actor,
        action="sync.conflict_resolved",
        target=conflict,
        metadata={"memory_id": str(conflict.memory_id), "keep": keep, "version": result_version},
    )
    if result_version is not None:
        conflict.save()
    return conflict
