"""What the memories app gives to an export and removes in an erasure (see apps/tenants/gdpr.py).

A person's memories are the ones they created. On erasure their personal-scope memories are
deleted with their vectors and cached embeddings; memories they shared with a project, team or
org stay — they are the team's knowledge — with the author detached and their name in the
history replaced by a pseudonym.
"""

from __future__ import annotations

from copy import copy
from typing import Any

from django.db.models import Q

from apps.memories.embedding.providers import cache_key
from apps.memories.models import (
    ConfidencePropagation,
    EmbeddingCache,
    Memory,
    MemoryFeedback,
    MemoryScope,
    MemoryVersion,
)
from apps.memories.services import embedding_text, memory_delete
from apps.tenants.principal import SYSTEM


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def memory_row(memory: Memory) -> dict[str, Any]:
    return {
        "id": str(memory.id),
        "project": f"{memory.project.organization.slug}/{memory.project.slug}",
        "type": memory.type,
        "content": memory.content,
        "scope": memory.scope,
        "source": memory.source,
        "confidence": round(memory.confidence, 4),
        "tags": list(memory.tags),
        "related_files": list(memory.related_files),
        "related_modules": list(memory.related_modules),
        "payload": memory.payload,
        "methodology": memory.methodology,
        "work_unit_ref": memory.work_unit_ref,
        "session_id": memory.session_id,
        "needs_review": memory.needs_review,
        "user_verified": memory.user_verified,
        "pinned": memory.pinned,
        "deprecated": memory.deprecated,
        "disputed": memory.disputed,
        "version": memory.version,
        "access_count": memory.access_count,
        "created_at": _iso(memory.created_at),
        "updated_at": _iso(memory.updated_at),
        "history": [
            {"version": v.version, "change": v.change, "content": v.content, "at": _iso(v.created_at)}
            for v in memory.versions.all()
        ],
    }


def _rows(queryset) -> list[dict[str, Any]]:
    queryset = queryset.select_related("project__organization", "usage_row").prefetch_related("versions")
    return [memory_row(m) for m in queryset.order_by("project_id", "created_at")]


def export_user(user) -> dict[str, Any]:
    return {
        "memories": _rows(Memory.objects.filter(owner=user)),
        "memory_feedback": [
            {"memory": str(f.memory_id), "kind": f.kind, "note": f.note, "at": _iso(f.created_at)}
            for f in MemoryFeedback.objects.filter(actor_user=user).order_by("created_at")
        ],
    }


def export_organization(organization) -> dict[str, Any]:
    """The org's shared knowledge. Personal memories belong to their owners and are left out."""
    memories = Memory.objects.filter(organization=organization).exclude(scope=MemoryScope.PERSONAL)
    return {"memories": _rows(memories)}


def user_identifiers(user) -> list[str]:
    return [
        str(i)
        for i in Memory.objects.filter(owner=user, scope=MemoryScope.PERSONAL).values_list("id", flat=True)
    ]


def _cache_keys(memories: list[Memory]) -> set[str]:
    """The embedding cache's keys for each memory's text, now and at every version it kept (the
    fields a version does not record are taken as they are now; a cached text that differs in
    those too ages out of the cache within EMBEDDING_CACHE_TTL_DAYS)."""
    keys: set[str] = set()
    for memory in memories:
        if not (memory.embedding_model and memory.embedding_dims):
            continue
        keys.add(cache_key(embedding_text(memory), memory.embedding_model, memory.embedding_dims))
        for version in memory.versions.all():
            then = copy(memory)
            then.type, then.content, then.related_files = version.type, version.content, version.related_files
            keys.add(cache_key(embedding_text(then), memory.embedding_model, memory.embedding_dims))
    return keys


def delete_user_data(user, alias: str) -> dict[str, int]:
    personal = list(
        Memory.objects.filter(owner=user, scope=MemoryScope.PERSONAL).prefetch_related("versions")
    )
    EmbeddingCache.objects.filter(key__in=_cache_keys(personal)).delete()
    for memory in personal:
        memory_delete(memory=memory, actor=SYSTEM)
    label = f"user:{user.pk}"
    versions = MemoryVersion.objects.filter(changed_by=label).update(changed_by=alias)
    # (before the feedback loses its author: the confidence moves it caused name them too)
    moves = ConfidencePropagation.objects.filter(Q(feedback__actor_user=user) | Q(actor_label=label)).update(
        actor_label=alias
    )
    feedback = MemoryFeedback.objects.filter(actor_user=user).update(actor_label=alias, actor_user=None)
    return {"personal_memories": len(personal), "memory_history_rows": versions + feedback + moves}
