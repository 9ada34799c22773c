"""Files moving under memories: a renamed file is renamed in them, a deleted one makes them stale,
a restored one makes them current again."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any
from uuid import UUID

from django.db import transaction
from django.utils import timezone

from apps.memories.models import (
    Memory,
    MemoryRelation,
    StaleReason,
)
from apps.memories.services.update import _save_change
from apps.tenants.models import Project
from apps.tenants.principal import Principal


@transaction.atomic
def memories_files_renamed(*, project: Project, renames: dict[str, str]) -> int:
    """Memories of `project` follow renamed files: `related_files` (and file relations) take
    the new path; each changed memory gets a new version, a new index entry and embedding.
    Returns the number of memories changed."""
    renames = {old: new for old, new in renames.items() if old and new and old != new}
    if not renames:
        return 0
    affected = list(
        Memory.objects.select_for_update()
        .filter(project=project, related_files__overlap=list(renames))
        .order_by("id")
    )
    system = Principal()
    for memory in affected:
        moved = [renames.get(path, path) for path in memory.related_files]
        memory.related_files = list(dict.fromkeys(moved))
        _save_change(memory, system, "files_renamed", {"related_files"})
    # All at once, as related_files moved: one rename after another took a chain (a → b, b → c)
    # twice and a swap (a ↔ b) both ways. A relation that lands on one its memory already has
    # (same type, same file) goes.
    moving = list(
        MemoryRelation.objects.select_for_update()
        .filter(memory__project=project, target_file_path__in=list(renames))
        .order_by("id")
    )
    for relation in moving:
        relation.target_file_path = renames[relation.target_file_path]
    MemoryRelation.objects.bulk_update(moving, ["target_file_path"])
    _drop_duplicate_file_relations([r.memory_id for r in moving])
    return len(affected)


def _drop_duplicate_file_relations(memory_ids: Iterable[UUID]) -> None:
    """Of these memories' file relations, one per (memory, type, file): the oldest."""
    seen: set[tuple[Any, str, str]] = set()
    extra = []
    for relation in MemoryRelation.objects.filter(
        memory_id__in=set(memory_ids), target_memory__isnull=True
    ).order_by("created_at", "id"):
        key = (relation.memory_id, relation.relation_type, relation.target_file_path)
        if key in seen:
            extra.append(relation.id)
        seen.add(key)
    if extra:
        MemoryRelation.objects.filter(id__in=extra).delete()


@transaction.atomic
def memories_files_deleted(*, project: Project, paths: Iterable[str]) -> int:
    """Memories that name a deleted file become stale: never injected proactively, flagged when
    searched. Returns the number of memories newly marked."""
    paths = [p for p in paths if p]
    if not paths:
        return 0
    now = timezone.now()
    affected = list(
        Memory.objects.select_for_update()
        .filter(project=project, related_files__overlap=paths, stale_at__isnull=True)
        .order_by("id")
    )
    system = Principal()
    for memory in affected:
        memory.stale_at, memory.stale_reason = now, StaleReason.FILE_DELETED
        _save_change(memory, system, "files_deleted", {"stale_at", "stale_reason"})
    return len(affected)


@transaction.atomic
def memories_files_restored(
    *, project: Project, exists: Callable[[str], bool], touching: Iterable[str] | None = None
) -> int:
    """Memories of `project` stale for a deleted file (optionally only those naming a path in
    `touching`) whose related files all exist again are fresh again: a deleted file that came
    back (restored, re-added, renamed back) had left them out of injection for good. Memories
    stale because their files changed since their commit stay stale: the file being there says
    nothing about them. Returns how many."""
    stale = (
        Memory.objects.select_for_update()
        .filter(project=project, stale_at__isnull=False)
        .exclude(stale_reason=StaleReason.CHANGED_SINCE_COMMIT)
    )
    if touching is not None:
        stale = stale.filter(related_files__overlap=list(touching))
    system = Principal()
    restored = 0
    for memory in stale.order_by("id"):
        if all(exists(path) for path in memory.related_files):
            memory.stale_at, memory.stale_reason = None, StaleReason.NONE
            _save_change(memory, system, "files_restored", {"stale_at", "stale_reason"})
            restored += 1
    return restored


# A memory whose every file changed since its commit keeps half its confidence; one file of
# four changed, seven eighths: the more of what it describes moved, the less it is trusted.
CHANGED_CONFIDENCE_CUT = 0.5


def _same_commit(stored: str, reported: str) -> bool:
    """Either may be abbreviated (an agent's commit event, a client's `git rev-parse --short`)."""
    return bool(stored) and (stored.startswith(reported) or reported.startswith(stored))


@transaction.atomic
def memories_changed_since_commit(*, project: Project, commit: str, files: Iterable[str]) -> list[Memory]:
    """Memories of `project` that carry `commit` and name a file changed since it (what
    `git diff --name-only <commit>..HEAD` printed on the client) become stale, and lose
    confidence in proportion to the share of their files that changed. A memory already stale is
    left as it is, so reporting the same diff twice changes nothing. Returns the memories marked."""
    changed = set(files)
    if not changed:
        return []
    now = timezone.now()
    affected = [
        memory
        for memory in Memory.objects.select_for_update()
        .filter(
            project=project,
            commit_sha__startswith=commit[:7],
            related_files__overlap=list(changed),
            stale_at__isnull=True,
        )
        .order_by("id")
        if _same_commit(memory.commit_sha, commit)
    ]
    system = Principal()
    for memory in affected:
        share = len(changed.intersection(memory.related_files)) / len(memory.related_files)
        memory.stale_at, memory.stale_reason = now, StaleReason.CHANGED_SINCE_COMMIT
        fields = {"stale_at", "stale_reason"}
        if not memory.pinned:  # (a pinned memory's confidence is a person's decision)
            memory.confidence = round(memory.confidence * (1 - CHANGED_CONFIDENCE_CUT * share), 4)
            fields.add("confidence")
        _save_change(memory, system, "files_changed_since_commit", fields)
    return affected
