"""Reads for memories, always inside the principal's tenancy."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from django.db import connection, transaction

from apps.memories.contextual import memory_embedding_text
from apps.memories.models import Memory, MemoryQuerySet
from apps.memories.vectors import distance_expr, set_search_params, vector_literal
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from memorysaas.errors import NotFound


def _as_uuid(value: str | UUID) -> UUID | None:
    if isinstance(value, UUID):
        return value
    try:
        return UUID(str(value))
    except ValueError:
        return None


def memory_get(*, principal: Principal, memory_id: str | UUID) -> Memory:
    """A memory the principal may read (any project it sees, by scope); `NotFound` (404) for
    anything else — missing and not-yours look the same."""
    as_id = _as_uuid(memory_id)
    memory = (
        Memory.objects.visible_to(principal)
        .select_related("project", "organization")
        .filter(id=as_id)
        .first()
        if as_id
        else None
    )
    if memory is None:
        raise NotFound("No such memory.")
    return memory


def memories_visible(*, principal: Principal, project: Project) -> MemoryQuerySet:
    """Memories that apply in `project` for this principal: the project's own (its personal ones
    only to their owner), its team's team-scoped ones, its organization's org-scoped ones.
    The caller has resolved `project` through `project_get` (so the principal sees it)."""
    return Memory.objects.applicable_in(project, principal)


def find_near_duplicate(
    *,
    project: Project,
    text: str,
    memory_type: str,
    threshold: float = 0.88,
    related_files: Sequence[str] = (),
    related_modules: Sequence[str] = (),
) -> Memory | None:
    """The closest live memory of `memory_type` in `project` whose cosine similarity to `text`
    is at least `threshold`, or None. Compares only vectors of the current embedding model.
    Pass the candidate's files/modules to embed it exactly as a stored memory is embedded."""
    from apps.memories.embeddings import embed_query, get_provider

    provider = get_provider()
    query = memory_embedding_text(
        memory_type=memory_type,
        content=text,
        related_files=list(related_files),
        related_modules=list(related_modules),
    )
    vector = vector_literal(embed_query(query, provider))
    dims = provider.dimensions
    with transaction.atomic(), connection.cursor() as cursor:
        set_search_params(cursor)
        cursor.execute(
            f"""
            SELECT id, 1 - {distance_expr(dims)} AS similarity FROM memories_memory
            WHERE project_id = %s AND type = %s AND deprecated = false
              AND embedding_dims = %s AND embedding_model = %s
            ORDER BY {distance_expr(dims)} LIMIT 1
            """,
            [vector, str(project.id), memory_type, dims, provider.model_id, vector],
        )
        row = cursor.fetchone()
    if row is None or row[1] < threshold:
        return None
    return Memory.objects.filter(id=row[0]).first()
