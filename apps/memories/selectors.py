"""Reads for memories, always inside the principal's tenancy."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.db.models import BooleanField, Prefetch, Q
from django.db.models.expressions import RawSQL

from apps.memories.dateranges import Period
from apps.memories.embedding.contextual import memory_embedding_text
from apps.memories.models import (
    ConfidencePropagation,
    Memory,
    MemoryFeedback,
    MemoryQuerySet,
    MemoryRelation,
    MemoryVersion,
)
from apps.memories.validation import clean_paths
from apps.memories.vectors import nearest, set_search_params, vector_literal
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from memorysaas.kernel.errors import Invalid, NotFound
from memorysaas.kernel.ids import as_uuid


def memory_get(*, principal: Principal, memory_id: str | UUID) -> Memory:
    """A memory the principal may read (any project it sees, by scope); `NotFound` (404) for
    anything else — missing and not-yours look the same."""
    as_id = as_uuid(memory_id)
    memory = (
        Memory.objects.visible_to(principal)
        .select_related("project", "organization", "usage_row")
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


def without_session_only(memories: MemoryQuerySet, session_id: str) -> MemoryQuerySet:
    """`memories` less those written in `session_id` that no other session has reinforced since
    (one another session confirmed is the team's knowledge again)."""
    return memories.exclude(session_id=session_id, provenance_session_ids__contained_by=[session_id])


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
    from apps.memories.embedding.providers import embed_query, get_provider

    provider = get_provider()
    query = memory_embedding_text(
        memory_type=memory_type,
        content=text,
        related_files=list(related_files),
        related_modules=list(related_modules),
    )
    dims = provider.dimensions
    statement = functools.partial(
        nearest,
        dims,
        columns="id",
        where="project_id = %s AND type = %s AND deprecated = false AND embedding_dims = %s AND embedding_model = %s",
        params=[str(project.id), memory_type, dims, provider.model_id],
        limit=1,
        query_params=[vector_literal(embed_query(query, provider))],
        matryoshka=provider.matryoshka,
    )
    with transaction.atomic(), connection.cursor() as cursor:
        set_search_params(cursor)
        cursor.execute(*statement())
        row = cursor.fetchone()
        if row is None:  # the index scan came back short (search.dense_path says how)
            cursor.execute(*statement(exact=True))
            row = cursor.fetchone()
    if row is None or not 1 - row[1] >= threshold:  # (NaN, from a zero vector, is not near)
        return None
    return Memory.objects.filter(id=row[0]).first()


def relations_seen_by(principal: Principal) -> Prefetch:
    """Memories' relations as `principal` may see them: to a file, or to a memory they may read
    (another person's personal memory is not named, not even by its id). One query for all."""
    return Prefetch(
        "relations",
        queryset=MemoryRelation.objects.filter(
            Q(target_memory__isnull=True) | Q(target_memory__in=Memory.objects.visible_to(principal))
        ),
    )


def memories_by_ids(ids: Sequence[UUID | str], *, principal: Principal) -> list[Memory]:
    """These memories with the relations `principal` may see, in the order given. The caller
    has checked access."""
    rows = (
        Memory.objects.filter(id__in=list(ids))
        .select_related("usage_row")
        .defer("embedding", "search_vector")
        .prefetch_related(relations_seen_by(principal))
    )
    by_id = {str(m.id): m for m in rows}
    return [by_id[str(i)] for i in ids if str(i) in by_id]


def is_author(*, principal: Principal, memory: Memory) -> bool:
    if principal.api_key is not None and memory.created_by_key_id == principal.api_key.pk:
        return True
    return principal.user is not None and memory.owner_id == principal.user.pk


STEWARD_FIELDS = ("pinned", "deprecated")


def steward_fields(changes: Mapping[str, Any], memory: Memory) -> list[str]:
    """The fields among `changes` that only a steward changes (`memories:review`): pinning and
    deprecating, either way, and ending the review of a memory that waits for a steward; a value
    the memory already has is no change."""
    fields = [
        name
        for name in STEWARD_FIELDS
        if changes.get(name) is not None and bool(changes[name]) != getattr(memory, name)
    ]
    if changes.get("needs_review") is False and waits_for_steward(memory):
        fields.append("needs_review")
    return fields


def waits_for_steward(memory: Memory) -> bool:
    """A memory under review because a secret was redacted from it: a steward looks at what was
    taken out before it is cleared (a confirm or `needs_review: false` from anyone else is a 403)."""
    return memory.needs_review and memory.secrets_redacted


# A page cursor: the last memory's creation time (microseconds since 1970, UTC) and id. Every
# string of this shape is a position in the list (17 digits stay inside datetime's range), so
# the API's schema can say exactly which cursors it takes.
CURSOR_PATTERN = r"^[0-9]{1,17}-[0-9a-f]{32}$"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _encode_cursor(memory: Memory) -> str:
    return f"{(memory.created_at - _EPOCH) // _MICROSECOND}-{memory.id.hex}"


def _decode_cursor(cursor: str) -> tuple[datetime, UUID]:
    """A cursor of CURSOR_PATTERN's shape (the API has checked it) as (created_at, id)."""
    micros, memory_id = cursor.split("-")
    return _EPOCH + int(micros) * _MICROSECOND, UUID(hex=memory_id)


def memories_list(
    *,
    principal: Principal,
    project: Project,
    type: str | None = None,
    scope: str | None = None,
    source: str | None = None,
    needs_review: bool | None = None,
    min_confidence: float | None = None,
    file: str | None = None,
    tag: str | None = None,
    text: str | None = None,
    embedding_status: str | None = None,
    deprecated: bool | None = False,
    created: Period | None = None,
    used: Period | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> tuple[list[Memory], str | None]:
    """One page of the memories that apply in `project`, newest first, and the next cursor.
    `used` is the last use (`last_accessed_at`, the decay clock): a memory never used is outside any."""
    from apps.memories.kinds import normalize_type
    from apps.memories.search.codetokens import tsquery_any
    from apps.memories.search.keyword import query_terms

    qs = memories_visible(principal=principal, project=project)
    if type:
        try:
            qs = qs.filter(type=normalize_type(type))
        except ValueError:
            raise Invalid(f"Unknown memory type {type!r}.", details={"field": "type"}) from None
    exact = {
        "scope": scope,
        "source": source,
        "needs_review": needs_review,
        "embedding_status": embedding_status,
        "deprecated": deprecated,
    }
    qs = qs.filter(**{name: value for name, value in exact.items() if value is not None})
    if min_confidence is not None:
        qs = qs.filter(confidence__gte=min_confidence)
    if created:
        qs = qs.filter(**created.lookups("created_at"))
    if used:
        qs = qs.filter(**used.lookups("usage_row__last_accessed_at"))
    if file:
        qs = qs.filter(related_files__contains=clean_paths([file])[:1] or [""])  # (as stored)
    if tag:
        qs = qs.filter(tags__contains=[tag.strip()])
    if text and text.strip():
        terms = query_terms(text)
        tsquery = "plainto_tsquery('english', %s)"
        params: list[str] = [terms.words]
        # Any identifier matches; a CJK run's character pairs must all be there (any one pair
        # would match most text in that language).
        identifiers = [w for w in terms.whole if w not in terms.grams]
        for extra in (tsquery_any(identifiers), tsquery_any(terms.grams, joint=" & ")):
            if extra:
                tsquery = f"({tsquery} || %s::tsquery)"
                params.append(extra)
        qs = qs.alias(
            text_match=RawSQL(f"search_vector @@ {tsquery}", params, output_field=BooleanField())
        ).filter(Q(content__icontains=text.strip()) | Q(text_match=True))
    if cursor:
        created_at, memory_id = _decode_cursor(cursor)
        qs = qs.filter(Q(created_at__lt=created_at) | Q(created_at=created_at, id__lt=memory_id))
    page = list(
        qs.order_by("-created_at", "-id")
        .select_related("usage_row")
        .defer("embedding", "search_vector")
        .prefetch_related(relations_seen_by(principal))[: limit + 1]
    )
    next_cursor = _encode_cursor(page[limit - 1]) if len(page) > limit else None
    return page[:limit], next_cursor


# ---------------------------------------------------------------- for trusted system code
# Other apps' own work (promotion, the graph's staleness pass, trust statistics, sync's merge)
# reads the memories of a project it already holds, with no principal to scope by.


def memories_of_project(*, project: Project | UUID) -> MemoryQuerySet:
    """Every memory stored in `project`, of any scope, deprecated ones included."""
    return Memory.objects.filter(project=project)


def memory_by_id(memory_id: UUID | str) -> Memory:
    """The memory with this id, for code holding an id from its own rows (DoesNotExist if gone)."""
    return Memory.objects.get(pk=memory_id)


def memory_ids_visible(*, principal: Principal):
    """The ids of every memory the principal may read, as a subquery."""
    return Memory.objects.visible_to(principal).values("id")


def memory_version_get(*, memory: Memory, version: int) -> MemoryVersion | None:
    """The memory as it stood at `version`, if that version is kept."""
    return MemoryVersion.objects.filter(memory=memory, version=version).first()


PROPAGATIONS_SHOWN = 100


def memory_propagations(*, memory: Memory, principal: Principal) -> list[ConfidencePropagation]:
    """The confidence changes `memory` took from feedback on related memories, newest first. The
    caller has checked access to `memory`; a judged memory the principal may not read is not
    named (`source_memory_id` None, as for one since deleted)."""
    rows = list(
        ConfidencePropagation.objects.filter(memory=memory).select_related(
            "source_memory__project__organization"
        )[:PROPAGATIONS_SHOWN]
    )
    sources = {r.source_memory_id for r in rows if r.source_memory_id is not None}
    readable = set(Memory.objects.visible_to(principal).filter(id__in=sources).values_list("id", flat=True))
    for row in rows:
        if row.source_memory_id not in readable:
            row.source_memory = None
    return rows


def feedback_of_project(*, project: Project):
    """Every feedback given on the project's memories."""
    return MemoryFeedback.objects.filter(memory__project=project)


def memories_lock(*, organization_id: UUID, ids: Iterable[UUID]) -> None:
    """Lock the organization's memories among `ids` until the caller's transaction ends, in id
    order (so two callers locking overlapping sets cannot deadlock)."""
    list(
        Memory.objects.select_for_update().filter(organization_id=organization_id, pk__in=ids).order_by("pk")
    )
