"""The keyword index and its document frequencies, the embeddings (queued, stored, retried, and
the precision model's second vectors and token rows), and the live update after a write."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.postgres.search import SearchVectorField
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.expressions import RawSQL
from django.utils import timezone

from apps.memories.embedding import precision
from apps.memories.embedding.contextual import memory_embedding_text
from apps.memories.models import (
    EmbeddingStatus,
    Memory,
    MemoryScope,
    MemoryTokens,
)
from apps.memories.payloads import payload_text
from apps.memories.search.codetokens import CJK_CLASS
from apps.memories.search.keyword import index_memory
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from apps.tenants.roles import Perm
from apps.tenants.services import require
from memorysaas.kernel.queue import DATABASE_ERRORS
from memorysaas.kernel.realtime import publish_many

logger = logging.getLogger(__name__)


# A memory's keyword index from four texts (see keyword.index_memory): verbatim identifier
# lexemes, then the words of the A, B and C fields, stemmed by PostgreSQL.
_SEARCH_VECTOR = (
    "({0}::tsvector || setweight(to_tsvector('english', {1}), 'A')"
    " || setweight(to_tsvector('english', {2}), 'B') || setweight(to_tsvector('english', {3}), 'C'))"
)


def _index_texts(memory: Memory) -> list[str]:
    indexed = index_memory(
        content=memory.content,
        citation_text=memory.citation_text,
        tags=memory.tags,
        related_files=memory.related_files,
        related_modules=memory.related_modules,
        extra=payload_text(memory.type, memory.payload),
    )
    return [indexed.whole_literal, indexed.words_a, indexed.words_b, indexed.words_c]


def _search_vector(memory: Memory) -> RawSQL:
    """The memory's `search_vector` as an SQL expression, saved with the row's other changes:
    an index filled by a second UPDATE would write every index of the row (HNSW included) twice."""
    return RawSQL(_SEARCH_VECTOR.format("%s", "%s", "%s", "%s"), _index_texts(memory), SearchVectorField())


def _adjust_term_stats(ids: Sequence[UUID | str], sign: int) -> None:
    """Add (sign=1) or remove (sign=-1) these memories' lexemes from their projects' DF table.

    Rows are touched in (project, term) order so that concurrent writers cannot deadlock.
    """
    if not ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO memories_termstat (project_id, term, df)
            SELECT project_id, term, n FROM (
                SELECT m.project_id, t AS term, %s * count(*) AS n
                FROM memories_memory m, unnest(tsvector_to_array(m.search_vector)) AS t
                WHERE m.id = ANY(%s::uuid[]) AND length(t) <= 200
                GROUP BY m.project_id, t
                UNION ALL
                SELECT project_id, '', %s * count(*) FROM memories_memory
                WHERE id = ANY(%s::uuid[]) GROUP BY project_id
            ) d
            ORDER BY project_id, term
            ON CONFLICT (project_id, term) DO UPDATE SET df = memories_termstat.df + EXCLUDED.df
            """,
            [sign, [str(i) for i in ids], sign, [str(i) for i in ids]],
        )


_INDEXED_FIELDS = (
    "project_id",
    "type",
    "content",
    "citation_text",
    "tags",
    "related_files",
    "related_modules",
    "payload",
)


def keyword_reindex_ids(*, project_id: UUID | str | None = None, cjk_only: bool = True) -> list[str]:
    """The memories (of one project, or all) whose keyword index a change in what it holds would
    alter, in id order: those with CJK text in any indexed field, or every one."""
    where, params = ["TRUE"], []
    if project_id:
        where.append("project_id = %s")
        params.append(str(project_id))
    if cjk_only:
        where.append(
            "concat_ws(' ', content, citation_text, array_to_string(tags, ' '),"
            " array_to_string(related_files, ' '), array_to_string(related_modules, ' '), payload::text) ~ %s"
        )
        params.append(CJK_CLASS)  # (the characters codetokens indexes by pairs)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id FROM memories_memory WHERE {' AND '.join(where)} ORDER BY id", params)
        return [str(row[0]) for row in cursor.fetchall()]


def memories_reindex_keywords(memory_ids: Iterable[UUID | str]) -> int:
    """Rebuild these memories' keyword index (`search_vector`) and their projects' document
    frequencies, after a change in what the index holds (a data migration runs it). Nothing
    else about a memory changes: no new version, no re-embedding. Returns how many it rebuilt."""
    ids = [str(i) for i in memory_ids]
    if not ids:
        return 0
    with transaction.atomic():
        memories = list(
            Memory.objects.select_for_update().filter(id__in=ids).order_by("id").only(*_INDEXED_FIELDS)
        )
        found = [m.id for m in memories]
        _adjust_term_stats(found, -1)
        for memory in memories:
            Memory.objects.filter(pk=memory.pk).update(search_vector=_search_vector(memory))
        _adjust_term_stats(found, +1)
    return len(memories)


def rebuild_term_stats(*, project: Project) -> None:
    """Recompute a project's document frequencies from scratch: after a bulk load that wrote
    rows directly (the benchmark), or as a repair; every service write keeps them incrementally."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM memories_termstat WHERE project_id = %s", [str(project.id)])
        cursor.execute(
            """
            INSERT INTO memories_termstat (project_id, term, df)
            SELECT %s, term, n FROM (
                SELECT t AS term, count(*) AS n FROM memories_memory m,
                    unnest(tsvector_to_array(m.search_vector)) AS t
                WHERE m.project_id = %s AND length(t) <= 200 GROUP BY t
                UNION ALL SELECT '', count(*) FROM memories_memory WHERE project_id = %s
            ) d ORDER BY term
            """,
            [str(project.id)] * 3,
        )


def embedding_text(memory: Memory) -> str:
    return memory_embedding_text(
        memory_type=memory.type,
        content=memory.content,
        related_files=memory.related_files,
        related_modules=memory.related_modules,
        context_prefix=memory.context_prefix,
        extra=payload_text(memory.type, memory.payload),
    )


# What embedding_text reads of a memory.
_EMBEDDED_FIELDS = ("type", "content", "related_files", "related_modules", "context_prefix", "payload")


def _still_saying(memories: Sequence[Memory], texts: Sequence[str]) -> list[int]:
    """The positions of the memories whose text is still the one embedded, their rows locked
    until the transaction ends. An edit while the model ran (from the API, or seen by another
    worker) changed what a memory says: its vector (or failure) is not this task's to record,
    the edit's own task embeds the new text."""
    holding = (
        Memory.objects.select_for_update()
        .filter(id__in=[m.id for m in memories])
        .only(*_EMBEDDED_FIELDS)
        .order_by("id")
    )
    now_text = {m.id: embedding_text(m) for m in holding}
    return [i for i, (m, text) in enumerate(zip(memories, texts, strict=True)) if now_text.get(m.id) == text]


def memories_embed(memory_ids: Iterable[UUID | str], *, pending_only: bool = False) -> int:
    """Compute and store embeddings for these memories (idempotent). Returns how many it stored.
    `pending_only` passes over those no longer pending (a second delivery, or a sweep's task,
    finds them done and costs one query).

    Losing the database is raised: the task runs again (memorysaas.kernel.queue) and the memories stay
    pending for it or for the sweep. Anything else that fails marks them `failed`, with the
    reason, where a person sees them and can retry."""
    from apps.memories.embedding.providers import embed_cached_with_tokens, get_provider

    rows = Memory.objects.filter(id__in=list(memory_ids))
    if pending_only:
        rows = rows.filter(embedding_status=EmbeddingStatus.PENDING)
    memories = list(rows)
    if not memories:
        return 0
    now = timezone.now()
    texts: list[str] | None = None
    try:
        provider = get_provider()
        texts = [embedding_text(m) for m in memories]
        vectors, tokens = embed_cached_with_tokens(texts, provider)
        second = _precision_vectors(texts) if provider.late_interaction else None
    except DATABASE_ERRORS:
        raise
    except Exception as exc:
        logger.exception("Embedding %d memories failed", len(memories))
        _embedding_failed(memories, texts, exc)
        return 0
    with transaction.atomic():
        kept = _still_saying(memories, texts)
        memories = [memories[i] for i in kept]
        for memory, i in zip(memories, kept, strict=True):
            memory.embedding = vectors[i]
            memory.embedding_model = provider.model_id
            memory.embedding_dims = provider.dimensions
            memory.embedding_status = EmbeddingStatus.READY
            memory.embedding_error = ""
            memory.embedded_at = now
        Memory.objects.bulk_update(
            memories,
            [
                "embedding",
                "embedding_model",
                "embedding_dims",
                "embedding_status",
                "embedding_error",
                "embedded_at",
            ],
            batch_size=500,
        )
        _store_tokens(
            memories,
            [tokens[i] for i in kept],
            provider.model_id,
            second and (second[0], [second[1][i] for i in kept]),
        )
    return len(memories)


def _embedding_failed(memories: Sequence[Memory], texts: Sequence[str] | None, error: Exception) -> None:
    """Mark these memories failed with the reason, unless an edit changed what one says since
    (its own task embeds the new text). Without texts (making them failed), all are marked."""
    with transaction.atomic():
        positions = range(len(memories)) if texts is None else _still_saying(memories, texts)
        Memory.objects.filter(id__in=[memories[i].id for i in positions]).update(
            embedding_status=EmbeddingStatus.FAILED, embedding_error=str(error)[:300] or type(error).__name__
        )


# Memories still pending this long after their last change lost their task (a worker killed
# before it acknowledged with a broker that forgets, a queue unreachable at commit, a task that
# gave up on the database): the sweep queues them again, this many a task, at most
# STRANDED_LIMIT a run, oldest first.
STRANDED_BATCH = 100
STRANDED_LIMIT = 5000


def memories_embed_stranded(*, now: datetime | None = None) -> int:
    """Queue the embedding of memories left pending longer than STRANDED_WORK_AFTER_SECONDS
    again (a schedule runs this). A memory whose first task is merely late is embedded by
    whichever runs first; the other finds it done. Returns how many were queued."""
    from memorysaas.kernel.queue import enqueue

    cutoff = (now or timezone.now()) - timedelta(seconds=settings.STRANDED_WORK_AFTER_SECONDS)
    ids = [
        str(i)
        for i in Memory.objects.filter(embedding_status=EmbeddingStatus.PENDING, updated_at__lt=cutoff)
        .order_by("updated_at")
        .values_list("id", flat=True)[:STRANDED_LIMIT]
    ]
    for start in range(0, len(ids), STRANDED_BATCH):
        enqueue(
            "apps.memories.tasks.embed_pending_memories",
            ids[start : start + STRANDED_BATCH],
            lane="bulk",
            group="memories.embed",
        )
    if ids:
        logger.warning("%d memories were still pending embedding; queued again", len(ids))
    return len(ids)


def memory_embed_retry(*, memory: Memory, actor: Principal) -> Memory:
    """Try a memory's embedding again (after it failed): pending, its error cleared, queued."""
    require(actor, memory.organization_id, Perm.MEMORIES_WRITE)
    with transaction.atomic():
        Memory.objects.filter(id=memory.id).update(
            embedding_status=EmbeddingStatus.PENDING, embedding_error=""
        )
        _schedule_embedding([memory.id])
    memory.refresh_from_db()
    return memory


def _precision_vectors(texts: list[str]) -> tuple[str, list[bytes | None]] | None:
    """The precision model's id and packed vectors for `texts` (precision.py), or None where it
    is not configured or cannot run: the memory is then reranked without it, not left unembedded."""
    from apps.memories.embedding.providers import embed_cached

    second = precision.provider()
    if second is None:
        return None
    try:
        vectors = embed_cached(texts, second)
    except precision.ModelUnavailable:
        return None  # (logged where it failed to load)
    except Exception:
        logger.exception(
            "The precision model could not embed %d memories; they rerank without it", len(texts)
        )
        return None
    return second.model_id, [precision.pack(v) for v in vectors]


def _store_tokens(
    memories: Sequence[Memory],
    tokens: Sequence[bytes | None],
    model_id: str,
    second: tuple[str, Sequence[bytes | None]] | None = None,
) -> None:
    """The token embeddings for the late-interaction rerank (late.pack), from the model that made
    the vectors, and the precision model's vectors (`second`: its id and one per memory); a None
    leaves the memory without (any tokens it had, of another model, go)."""
    without = [memory for memory, data in zip(memories, tokens, strict=True) if data is None]
    if without:
        MemoryTokens.objects.filter(memory__in=without).delete()
    second_model, second_vectors = second or ("", [None] * len(memories))
    MemoryTokens.objects.bulk_create(
        [
            MemoryTokens(
                memory=memory,
                model_id=model_id,
                data=data,
                precision_model=second_model if vector is not None else "",
                precision=vector,
            )
            for memory, data, vector in zip(memories, tokens, second_vectors, strict=True)
            if data is not None
        ],
        update_conflicts=True,
        unique_fields=["memory"],
        update_fields=["model_id", "data", "precision_model", "precision"],
        batch_size=500,
    )


def _schedule_embedding(ids: Sequence[UUID]) -> None:
    if not ids:
        return
    id_strings = [str(i) for i in ids]
    if settings.EMBEDDING_MODE == "sync":
        # Inline, inside the transaction: tests and tiny setups see vectors at once.
        memories_embed(id_strings)
    else:
        from memorysaas.kernel.queue import enqueue

        enqueue("apps.memories.tasks.embed_memories", id_strings, lane="bulk", group="memories.embed")


def _announce(project_id: UUID, *events: tuple[str, Sequence[Memory]]) -> None:
    """On commit, tell the watchers of every project where these memories apply: each (event,
    memories) that has any, one publish per project — the home project, and for team and org
    scope the team's or the organization's other projects, whose pages show them too. Every
    watcher of a project hears it, so a personal memory goes unnamed (its event still tells
    pages to refresh)."""
    events = tuple((event, list(memories)) for event, memories in events if memories)
    if not events:
        return
    wide = [m for _, memories in events for m in memories if m.scope in (MemoryScope.TEAM, MemoryScope.ORG)]

    def send() -> None:
        reach = _reach(wide)
        per_project: dict[Any, list[tuple[str, dict[str, Any]]]] = {project_id: []}
        for event, memories in events:
            ids: dict[Any, list[str]] = {project_id: []}
            for memory in memories:
                if memory.scope == MemoryScope.PERSONAL:
                    continue
                for target in {project_id, *reach.get(memory.id, ())}:
                    ids.setdefault(target, []).append(str(memory.id))
            for target, named in ids.items():
                if target == project_id or named:
                    per_project.setdefault(target, []).append((event, {"memory_ids": named}))
        for target, batch in per_project.items():
            publish_many(target, batch)

    transaction.on_commit(send)


def _reach(memories: Sequence[Memory]) -> dict[UUID, list[UUID]]:
    """For team- and org-scope memories: the projects besides their own where they apply."""
    reach: dict[UUID, list[UUID]] = {}
    orgs = {m.organization_id for m in memories if m.scope == MemoryScope.ORG}
    teams = {m.team_id for m in memories if m.scope == MemoryScope.TEAM and m.team_id}
    if not orgs and not teams:
        return reach
    projects = list(
        Project.objects.filter(Q(organization_id__in=orgs) | Q(team_id__in=teams)).values_list(
            "id", "organization_id", "team_id"
        )
    )
    for memory in memories:
        reach[memory.id] = [
            pid
            for pid, org_id, team_id in projects
            if pid != memory.project_id
            and (
                (memory.scope == MemoryScope.ORG and org_id == memory.organization_id)
                or (memory.scope == MemoryScope.TEAM and team_id == memory.team_id)
            )
        ]
    return reach


def embedding_out_of_date(provider: Any) -> Q:
    """Memories whose vector is missing, failed or from another model than `provider`; and,
    where it keeps token embeddings, those embedded before they were kept (or before the
    precision model's vectors were)."""
    from django.db.models import Exists, OuterRef

    stale = (
        ~Q(embedding_model=provider.model_id)
        | ~Q(embedding_dims=provider.dimensions)
        | ~Q(embedding_status=EmbeddingStatus.READY)
    )
    if provider.late_interaction:
        # (NOT EXISTS: a NOT IN over a large token table degrades to a per-row scan)
        tokens = MemoryTokens.objects.filter(memory_id=OuterRef("id"), model_id=provider.model_id)
        if precision.enabled():
            tokens = tokens.filter(precision_model=precision.MODEL_ID)
        stale |= ~Exists(tokens)
    return stale


REINDEX_BATCH = 256


def memories_reindex_project(*, project: Project) -> dict[str, int]:
    """Rebuild one project's memory indexes: every keyword index and the document frequencies
    now, and the embeddings that are out of date queued on the bulk lane (in batches, as new
    memories' are). Safe to run again: each step rewrites the same values."""
    from apps.memories.embedding.providers import get_provider
    from memorysaas.kernel.queue import enqueue

    ids = keyword_reindex_ids(project_id=project.id, cjk_only=False)
    for start in range(0, len(ids), REINDEX_BATCH):
        memories_reindex_keywords(ids[start : start + REINDEX_BATCH])
    rebuild_term_stats(project=project)
    stale = [
        str(i)
        for i in Memory.objects.filter(project=project)
        .filter(embedding_out_of_date(get_provider()))
        .order_by("id")
        .values_list("id", flat=True)
    ]
    for start in range(0, len(stale), REINDEX_BATCH):
        enqueue(
            "apps.memories.tasks.embed_memories",
            stale[start : start + REINDEX_BATCH],
            lane="bulk",
            group="memories.embed",
        )
    return {"keywords": len(ids), "embeddings_queued": len(stale)}
