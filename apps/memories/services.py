"""Writes for memories: create, update, delete, feedback, reinforcement, file moves, access.

Every write is atomic, scans text for secrets before anything is stored, keeps the keyword
index and its document frequencies in step, increments `version` (keeping the old text in
`MemoryVersion`), writes an audit row and, on commit, queues embedding and a live update.
Permission checks are the caller's: API views check the principal's permission, other apps
(the observer's promotion, the graph's file moves) call these as trusted system code.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import numpy as np
from django.conf import settings
from django.contrib.postgres.search import SearchVectorField
from django.core.exceptions import FieldDoesNotExist
from django.db import connection, models, transaction
from django.db.models import F, Q
from django.db.models.expressions import RawSQL
from django.utils import timezone
from pydantic import ValidationError

from apps.memories import precision, secrets_scan, selectors
from apps.memories.codetokens import CJK_CLASS
from apps.memories.contextual import memory_embedding_text
from apps.memories.drafts import (
    MAX_CONTENT_CHARS,
    MAX_HALF_LIFE_DAYS,
    MemoryDraft,
    RelationDraft,
    short_citation,
)
from apps.memories.keyword import index_memory
from apps.memories.kinds import default_half_life
from apps.memories.models import (
    LAST_ACCESSED_SQL,
    EmbeddingStatus,
    FeedbackKind,
    Memory,
    MemoryFeedback,
    MemoryRelation,
    MemoryScope,
    MemoryTokens,
    MemoryUsage,
    MemoryVersion,
)
from apps.memories.payloads import payload_text
from apps.memories.vectors import vector_literal
from apps.tenants.models import Project
from apps.tenants.principal import SYSTEM, Principal
from apps.tenants.roles import Perm
from apps.tenants.services import audit_record, require
from memorysaas.kernel import events as org_events
from memorysaas.kernel.errors import ApiError, Conflict, Invalid, NotFound, field_errors
from memorysaas.kernel.queue import DATABASE_ERRORS
from memorysaas.kernel.realtime import publish_many

logger = logging.getLogger(__name__)

CONFIDENCE_CAP = 0.95
FLAG_PENALTY = 0.2
ACCESS_REWARD = 0.05
ACCESSES_FOR_REWARD = 5
ACCESSES_TO_CLEAR_REVIEW = 10
# An access outside a session (a /context call without session_id) counts toward those rewards
# only when the memory's last counted access is older than this: within a session each memory
# counts once, and without one a loop of calls would otherwise clear a review in seconds.
UNPACED_ACCESS_GAP = timedelta(hours=1)
_NOW = "statement_timestamp()"  # (not now(): two accesses in one transaction are two statements)

# Fields whose change alters what the memory says, so its index and embedding are rebuilt.
_TEXT_FIELDS = {"content", "type", "tags", "related_files", "related_modules", "citation_text", "payload"}


# ---------------------------------------------------------------- secrets


def _redacted_fields(
    fields: dict[str, Any],
    found: secrets_scan.Findings | None = None,
    *,
    model: type[models.Model] = Memory,
    known: Iterable[str] = (),
) -> tuple[dict[str, Any], list[str]]:
    """The fields with their secrets redacted, each cut to its column in `model` if the marker
    made it longer than the column holds, and the kinds found. `found`: the detect-secrets hits
    over these fields (and maybe others), computed once for a whole batch; computed here when
    not given. `known`: the kinds the memory already records (see `secrets_scan.redact`)."""
    kinds: set[str] = set()
    known = frozenset(known)
    if found is None:
        found = secrets_scan.plugin_findings(list(secrets_scan.strings(list(fields.values()))))
    clean = {}
    for name, value in fields.items():
        value = secrets_scan.redact(value, found, kinds, known)
        limit = _column_length(model, name)
        clean[name] = _fit(value, limit) if limit else value
    return clean, sorted(kinds)


# Draft keys that are not a column of the memory itself: the column their values go to.
_COLUMN_OF = {"relation_paths": (MemoryRelation, "target_file_path")}


# Text columns without a length whose drafts have one: a marker must not push a stored memory
# past what any later edit (validated as a whole draft) accepts.
_DRAFT_LIMITS = {(Memory, "content"): MAX_CONTENT_CHARS}


def _column_length(model: type[models.Model], name: str) -> int | None:
    """The longest string the column `name` (or each entry of that array column) holds."""
    if (model, name) in _DRAFT_LIMITS:
        return _DRAFT_LIMITS[model, name]
    model, name = _COLUMN_OF.get(name, (model, name))
    try:
        field = model._meta.get_field(name)
    except FieldDoesNotExist:
        return None
    return getattr(getattr(field, "base_field", field), "max_length", None)


def _fit(value: Any, limit: int) -> Any:
    """A redacted value cut to its column: `[REDACTED:<kind>]` can be longer than what it
    replaced. Values without a marker are left for validation to judge."""
    if isinstance(value, str) and len(value) > limit and "[REDACTED:" in value:
        return value[: limit - 1] + "…"
    if isinstance(value, list):
        return [_fit(v, limit) for v in value]
    return value


# ---------------------------------------------------------------- index, stats, embeddings


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
    from apps.memories.embeddings import embed_cached_with_tokens, get_provider

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
    from apps.memories.embeddings import embed_cached

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

        enqueue("apps.memories.tasks.embed_memories", id_strings, group="memories.embed")


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


# ---------------------------------------------------------------- create


def _draft_fields(draft: MemoryDraft) -> dict[str, Any]:
    """The fields of a draft that are stored as written, and so scanned for secrets, and
    `relation_paths`: its relations' file targets, in order."""
    sessions = [*draft.provenance_session_ids, *([draft.session_id] if draft.session_id else [])]
    return {
        "content": draft.content,
        "citation_text": draft.citation_text,  # as written; `_build` makes one from the content
        "tags": draft.tags,
        "related_files": draft.related_files,
        "related_modules": draft.related_modules,
        "payload": draft.payload,
        "context_prefix": draft.context_prefix,
        "commit_sha": draft.commit_sha,
        "work_unit_ref": draft.work_unit_ref.model_dump() if draft.work_unit_ref else None,
        "methodology": draft.methodology or (draft.work_unit_ref.methodology if draft.work_unit_ref else ""),
        "session_id": draft.session_id,
        "provenance_session_ids": list(dict.fromkeys(sessions)),
        "target_node_id": draft.target_node_id,
        "impacted_node_ids": draft.impacted_node_ids,
        "relation_paths": [r.target_file_path for r in draft.relations],
    }


def _build(
    project: Project, actor: Principal, draft: MemoryDraft, found: secrets_scan.Findings | None = None
) -> tuple[Memory, list[RelationDraft]]:
    scope = draft.scope.value
    owner = actor.user if actor.user is not None and actor.user.pk else None
    if scope == MemoryScope.PERSONAL and owner is None:
        raise Conflict("A personal memory needs a person behind the request.", details={"field": "scope"})
    if scope == MemoryScope.TEAM and project.team_id is None:
        raise Conflict("Team scope needs a project that belongs to a team.", details={"field": "scope"})
    fields, kinds = _redacted_fields(_draft_fields(draft), found)
    if not draft.citation_text:
        # Cut from the redacted content: a cut through a secret leaves a piece no pattern knows.
        fields["citation_text"] = short_citation(fields["content"])
    elif fields["citation_text"] != draft.citation_text:  # a marker may have made it longer
        fields["citation_text"] = short_citation(fields["citation_text"])
    relations = [
        relation.model_copy(update={"target_file_path": path})
        for relation, path in zip(draft.relations, fields.pop("relation_paths"), strict=True)
    ]
    half_life = draft.decay_half_life_days or default_half_life(draft.type)
    memory = Memory(
        organization_id=project.organization_id,
        project=project,
        team_id=project.team_id if scope == MemoryScope.TEAM else None,
        owner=owner,
        created_by_key=actor.api_key,
        type=draft.type,
        source=draft.source.value,
        scope=scope,
        confidence=draft.confidence,
        needs_review=draft.needs_review or bool(kinds),
        user_verified=draft.user_verified,
        pinned=draft.pinned,
        decay_half_life_days=half_life,
        chunk_type=draft.chunk_type,
        chunk_start_line=draft.chunk_start_line,
        chunk_end_line=draft.chunk_end_line,
        secrets_redacted=bool(kinds),
        secret_kinds=kinds,
        **fields,
    )
    return memory, relations


def _create_relations(
    project: Project, actor: Principal, pairs: list[tuple[Memory, list[RelationDraft]]]
) -> None:
    if not any(relations for _, relations in pairs):
        return
    wanted = {r.target_memory_id for _, rels in pairs for r in rels if r.target_memory_id}
    # Only what the actor may read: linking must not reveal that someone else's memory exists.
    # The system (background jobs) acts for the whole organization.
    candidates = Memory.objects.all() if actor == SYSTEM else Memory.objects.visible_to(actor)
    known = set(
        candidates.filter(organization_id=project.organization_id, id__in=wanted).values_list("id", flat=True)
    )
    rows = []
    for index, (memory, relations) in enumerate(pairs):
        relations = list(
            {(r.relation_type, r.target_memory_id, r.target_file_path.strip()): r for r in relations}.values()
        )  # the same relation twice is one
        for rel in relations:
            if rel.target_memory_id is not None and rel.target_memory_id not in known:
                missing = NotFound(
                    "A relation points at a memory that does not exist.",
                    details={"target_memory_id": str(rel.target_memory_id)},
                )
                raise _in_batch(missing, index, len(pairs))
            rows.append(
                MemoryRelation(
                    organization_id=project.organization_id,
                    memory=memory,
                    target_memory_id=rel.target_memory_id,
                    target_file_path=rel.target_file_path.strip(),
                    relation_type=rel.relation_type.value,
                    confidence=rel.confidence,
                    auto_extracted=rel.auto_extracted,
                )
            )
    MemoryRelation.objects.bulk_create(rows, ignore_conflicts=True)


def _in_batch(exc: ApiError, index: int, count: int) -> ApiError:
    """`exc` naming the batch item it is about (`details.index`, from 0), when there is a batch."""
    if count < 2:
        return exc
    details = exc.details if isinstance(exc.details, dict) else {"detail": exc.details}
    return ApiError(
        exc.status, f"Memory {index}: {exc.message}", details={"index": index, **details}, code=exc.code
    )


@transaction.atomic
def memories_create_batch(
    *,
    project: Project,
    actor: Principal,
    drafts: Sequence[MemoryDraft],
    vectors: Sequence[Any] | None = None,
    tokens: Sequence[bytes | None] | None = None,
) -> list[Memory]:
    """Store up to 500 drafts in one transaction: all of them or none. Embeddings follow on commit,
    unless the caller already computed them (`vectors`, one per draft, of `embedding_text` by the
    current provider, with its packed token embeddings in `tokens` where it makes them: the
    observer embeds its candidates once for novelty and storage)."""
    from apps.memories.drafts import MAX_BATCH

    if len(drafts) > MAX_BATCH:
        raise Invalid(f"At most {MAX_BATCH} memories per batch.", details={"count": len(drafts)})
    # one detect-secrets pass for the whole batch: each pass has a fixed cost (its settings reset)
    found = secrets_scan.plugin_findings(
        [t for d in drafts for t in secrets_scan.strings(list(_draft_fields(d).values()))]
    )
    pairs = []
    for index, draft in enumerate(drafts):
        try:
            pairs.append(_build(project, actor, draft, found))
        except ApiError as exc:
            raise _in_batch(exc, index, len(drafts)) from None
    memories = [memory for memory, _ in pairs]
    attached = _attach_vectors(memories, vectors, tokens) if vectors is not None else None
    _insert(memories, [_snapshot(m, "created", actor) for m in memories])
    if attached and any(data is not None for data in attached[1]):  # (new rows: nothing to delete)
        _store_tokens(*attached)
    _create_relations(project, actor, pairs)
    ids = [m.id for m in memories]
    _adjust_term_stats(ids, +1)
    if len(memories) == 1:
        audit_record(
            actor=actor,
            action="memory.created",
            target=memories[0],
            metadata={"type": memories[0].type, "scope": memories[0].scope, "source": memories[0].source},
        )
    elif memories:
        audit_record(
            actor=actor,
            action="memory.batch_created",
            organization=project.organization,
            target=project,
            metadata={"count": len(memories)},
        )
    pending = [m.id for m in memories if m.embedding_status != EmbeddingStatus.READY]
    if attached and precision.provider() is not None:
        # The caller's vectors are MiniLM's: the precision model's follow after commit (the
        # embedding task takes MiniLM's from the cache), not inside the caller's transaction.
        pending += [m.id for m in attached[0]]
    _schedule_embedding(pending)
    _announce(
        project.id, ("memory.created", memories), ("review.needed", [m for m in memories if m.needs_review])
    )
    org_events.emit(
        project.organization_id, "memory.review_needed", org_events.review_payload(project.id, memories)
    )
    return memories


def _json_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return vector_literal(value)
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)  # UUIDs


def _json_rows(model: type[models.Model], objs: Sequence[models.Model]) -> tuple[list[str], list[dict]]:
    """The quoted columns of `model` and, per object, its values by column as `bulk_create` would
    write them (auto timestamps set; no database-generated id)."""
    fields = [
        f
        for f in model._meta.concrete_fields
        if f.name != "search_vector" and f is not model._meta.auto_field
    ]
    quote = connection.ops.quote_name
    return [quote(f.column) for f in fields], [
        {f.column: f.pre_save(obj, True) for f in fields} for obj in objs
    ]


def _insert(memories: Sequence[Memory], versions: Sequence[MemoryVersion]) -> None:
    """Write new memories and their first versions in one statement whose rows travel as JSON,
    expanded by PostgreSQL (`jsonb_populate_record`): `bulk_create` prepares and quotes each of a
    memory's ~45 values in Python, which costs more than the INSERT itself. The same statement
    fills each memory's `search_vector`, so no row is written twice."""
    columns, docs = _json_rows(Memory, memories)
    for doc, memory in zip(docs, memories, strict=True):
        doc["_index"] = _index_texts(memory)
    version_columns, version_docs = _json_rows(MemoryVersion, versions)
    index = _SEARCH_VECTOR.format(*(f"(x.doc->'_index'->>{i})" for i in range(4)))
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH written AS (
                INSERT INTO memories_memory ({", ".join(columns)}, search_vector)
                SELECT {", ".join(f"r.{c}" for c in columns)}, {index}
                FROM jsonb_array_elements(%s::jsonb) AS x(doc),
                     jsonb_populate_record(NULL::memories_memory, x.doc) AS r
            )
            INSERT INTO memories_memoryversion ({", ".join(version_columns)})
            SELECT {", ".join(f"v.{c}" for c in version_columns)}
            FROM jsonb_populate_recordset(NULL::memories_memoryversion, %s::jsonb) AS v
            """,
            [json.dumps(docs, default=_json_default), json.dumps(version_docs, default=_json_default)],
        )


def _attach_vectors(
    memories: Sequence[Memory], vectors: Sequence[Any], tokens: Sequence[bytes | None] | None
) -> tuple[list[Memory], list[bytes | None], str]:
    """Give each memory the caller's vector unless its stored text differs from what was embedded
    (a secret was redacted). Returns the memories that took one, with their tokens (none where
    the caller has none) and the model id, for `_store_tokens` once the rows exist."""
    from apps.memories.embeddings import get_provider

    provider = get_provider()
    now = timezone.now()
    taken: list[Memory] = []
    taken_tokens: list[bytes | None] = []
    for memory, vector, packed in zip(memories, vectors, tokens or [None] * len(memories), strict=True):
        if memory.secrets_redacted:
            continue  # the stored text differs from what was embedded
        memory.embedding = vector
        memory.embedding_model = provider.model_id
        memory.embedding_dims = provider.dimensions
        memory.embedding_status = EmbeddingStatus.READY
        memory.embedded_at = now
        taken.append(memory)
        taken_tokens.append(packed)
    return taken, taken_tokens, provider.model_id


def memory_create(*, project: Project, actor: Principal, draft: MemoryDraft) -> Memory:
    """Store one memory in `project` on behalf of `actor` (its owner for personal scope).

    Secrets in any text field are replaced by `[REDACTED:<kind>]` and the memory is marked
    (`secrets_redacted`, `needs_review`). Raises `Conflict` (409) for a scope the project or the
    caller cannot have, `NotFound` for a relation to a memory the caller cannot see.
    The embedding is computed after commit (a django-q2 task, or inline in "sync" mode).
    """
    return memories_create_batch(project=project, actor=actor, drafts=[draft])[0]


# ---------------------------------------------------------------- update


def _snapshot(memory: Memory, change: str, actor: Principal) -> MemoryVersion:
    return MemoryVersion(
        memory=memory,
        version=memory.version,
        type=memory.type,
        content=memory.content,
        confidence=memory.confidence,
        tags=list(memory.tags),
        related_files=list(memory.related_files),
        change=change,
        changed_by=actor.label,
    )


def memory_locked(memory: Memory) -> Memory:
    """The memory as it is now, its row locked until the caller's transaction ends: what a
    permission check reads must be what the change then applies to."""
    return Memory.objects.select_for_update().get(pk=memory.pk)


def _save_change(memory: Memory, actor: Principal, change: str, fields: set[str]) -> Memory:
    """Bump the version, keep history, persist `fields`, reindex and re-embed if text moved."""
    text_changed = bool(fields & _TEXT_FIELDS)
    if text_changed:
        _adjust_term_stats([memory.id], -1)
        memory.search_vector = _search_vector(memory)
        memory.embedding_status = EmbeddingStatus.PENDING
        fields = {*fields, "search_vector", "embedding_status"}
    memory.version += 1
    try:
        memory.save(update_fields=[*fields, "version", "updated_at"])
    finally:
        if text_changed:
            memory.search_vector = None
    _snapshot(memory, change, actor).save()
    if text_changed:
        _adjust_term_stats([memory.id], +1)
        _schedule_embedding([memory.id])
    _announce(memory.project_id, ("memory.updated", [memory]))
    return memory


UPDATABLE = {
    "content", "type", "tags", "related_files", "related_modules", "payload", "citation_text",
    "confidence", "scope", "needs_review", "pinned", "deprecated", "decay_half_life_days",
    "work_unit_ref", "methodology", "commit_sha",
}  # fmt: skip


@transaction.atomic
def memory_update(
    *, memory: Memory, actor: Principal, changes: dict[str, Any], change: str = "updated"
) -> Memory:
    """Apply `changes` (a subset of UPDATABLE), validated as a whole draft; new version.

    A change to the text fields re-indexes and re-embeds. Raises `Invalid` for unknown fields
    or a result that is not a valid memory.
    """
    return _update(memory, actor, changes, change)[0]


@transaction.atomic
def memory_update_with_secrets(
    *, memory: Memory, actor: Principal, changes: dict[str, Any], change: str = "updated"
) -> tuple[Memory, list[str]]:
    """memory_update, and the kinds of the secrets redacted from the change (a memory they were
    taken from waits for a steward's review: a caller must not clear it)."""
    return _update(memory, actor, changes, change)


def _fits_the_memory_as_it_is(errors: list[dict[str, Any]], changes: dict[str, Any]) -> bool:
    """Whether a change's errors are about what it leaves as it is (its type, when the change
    sends a payload alone; its payload, when the change sends a type alone): a conflict with the
    memory's state, not a change that is wrong in itself."""
    judged_alone = set(changes) - ({"payload"} if "type" not in changes else set())
    return any(not error["loc"] or error["loc"][0] not in judged_alone for error in errors)


def _update(
    memory: Memory, actor: Principal, changes: dict[str, Any], change: str
) -> tuple[Memory, list[str]]:
    """memory_update's work (in the caller's transaction), and the secret kinds the change
    brought (a correction with one waits for review)."""
    unknown = sorted(set(changes) - UPDATABLE)
    if unknown:
        raise Invalid("These fields cannot be changed.", details={"fields": unknown})
    memory = memory_locked(memory)
    current = {
        "content": memory.content,
        "type": memory.type,
        "tags": memory.tags,
        "related_files": memory.related_files,
        "related_modules": memory.related_modules,
        "payload": memory.payload,
        "citation_text": memory.citation_text,
        "confidence": memory.confidence,
        "scope": memory.scope,
    }
    # A citation made from the old content's start is made again from the new one: /context
    # would otherwise hand agents the corrected fact under the words of the wrong one. A citation
    # someone wrote stays; one cleared is made from the content, as at create.
    cleared = "citation_text" in changes and not (changes["citation_text"] or "").strip()
    remake = cleared or (
        "content" in changes
        and "citation_text" not in changes
        and memory.citation_text == short_citation(memory.content)
    )
    draft_fields = {**current, **{k: v for k, v in changes.items() if k in current}}
    try:
        draft = MemoryDraft(**draft_fields)
    except ValidationError as exc:
        errors = field_errors(exc.errors())
        if _fits_the_memory_as_it_is(errors, changes):
            raise Conflict("The change does not fit the memory as it is.", details=errors) from None
        raise Invalid("The memory would not be valid.", details=errors) from None
    changed: set[str] = set()
    texts = {k: getattr(draft, k) for k in current if k in changes}
    texts |= {k: v for k, v in changes.items() if k in ("methodology", "commit_sha", "work_unit_ref")}
    clean, kinds = _redacted_fields(texts, known=memory.secret_kinds)
    if remake:  # (from the redacted content, as at create)
        clean["citation_text"] = short_citation(clean.get("content", memory.content))
    if "scope" in clean:
        clean["scope"] = draft.scope.value
        if clean["scope"] == MemoryScope.TEAM:
            if memory.project.team_id is None:
                raise Conflict(
                    "Team scope needs a project that belongs to a team.", details={"field": "scope"}
                )
            memory.team_id = memory.project.team_id
            changed.add("team")
        if clean["scope"] == MemoryScope.PERSONAL and memory.owner_id is None:
            raise Conflict("Only a memory with an owner can be personal.", details={"field": "scope"})
    for name, value in clean.items():
        if getattr(memory, name) != value:
            setattr(memory, name, value)
            changed.add(name)
    # A half-life that was the old type's default becomes the new type's (one set by hand stays).
    by_type = memory.decay_half_life_days == default_half_life(current["type"])
    if "type" in changed and "decay_half_life_days" not in changes and by_type:
        changes = {**changes, "decay_half_life_days": default_half_life(memory.type)}
    for name in ("needs_review", "pinned", "decay_half_life_days"):
        if name in changes and getattr(memory, name) != changes[name]:
            setattr(memory, name, changes[name])
            changed.add(name)
    if "deprecated" in changes and memory.deprecated != bool(changes["deprecated"]):
        memory.deprecated = bool(changes["deprecated"])
        memory.deprecated_at = timezone.now() if memory.deprecated else None
        changed |= {"deprecated", "deprecated_at"}
        if not memory.deprecated:  # brought back: not retired again by tonight's job
            _restart_clock(memory)
    if kinds:
        memory.secrets_redacted = True
        memory.secret_kinds = sorted(set(memory.secret_kinds) | set(kinds))
        memory.needs_review = True
        changed |= {"secrets_redacted", "secret_kinds", "needs_review"}
    if not changed:
        return memory, kinds
    if "content" in changed or ("needs_review" in changed and memory.needs_review):
        # New text, or someone put it back in review: the accesses that earned the old text its
        # confidence and cleared its review do not vouch for this.
        MemoryUsage.objects.filter(memory=memory).update(uncorrected_access_count=0)
    _save_change(memory, actor, change, changed)
    audit_record(actor=actor, action=f"memory.{change}", target=memory, metadata={"fields": sorted(changed)})
    return memory, kinds


@transaction.atomic
def memory_delete(*, memory: Memory, actor: Principal) -> None:
    """Remove a memory for good (its relations, history and feedback go with it)."""
    _adjust_term_stats([memory.id], -1)
    audit_record(actor=actor, action="memory.deleted", target=memory, metadata={"type": memory.type})
    gone = Memory(  # (Model.delete() clears the pk)
        id=memory.id, scope=memory.scope, project_id=memory.project_id,
        organization_id=memory.organization_id, team_id=memory.team_id,
    )  # fmt: skip
    project_id = memory.project_id
    memory.delete()
    _announce(project_id, ("memory.deleted", [gone]))


# ---------------------------------------------------------------- feedback, reinforcement, access


@transaction.atomic
def memory_feedback(
    *,
    memory: Memory,
    actor: Principal,
    kind: str,
    content: str | None = None,
    note: str = "",
    session_id: str = "",
) -> Memory:
    """Record feedback and apply it.

    confirm → user_verified, review cleared; correct → new content (old kept in history),
    verified and review cleared (unless the correction held a secret); flag → confidence −0.2
    and needs_review; dispute → disputed (retrieval ×0.8) and needs_review; used / helpful →
    counters only. All but flag and dispute restart the decay clock.
    """
    kind = FeedbackKind(kind).value
    memory = memory_locked(memory)
    # (a steward reviews what a redaction took out; a member's correction is kept, not cleared)
    for_steward = selectors.waits_for_steward(memory) and not actor.has(
        memory.organization_id, Perm.MEMORIES_REVIEW
    )
    if kind == FeedbackKind.CONFIRM and for_steward:
        require(actor, memory.organization_id, Perm.MEMORIES_REVIEW)
    clean, _ = _redacted_fields({"note": note, "session_id": session_id}, model=MemoryFeedback)
    MemoryFeedback.objects.create(
        organization_id=memory.organization_id,
        memory=memory,
        kind=kind,
        note=clean["note"],
        actor_user=actor.user if actor.user is not None and actor.user.pk else None,
        actor_label=actor.label,
        session_id=clean["session_id"][:100],
    )
    if kind in (FeedbackKind.CONFIRM, FeedbackKind.CORRECT, FeedbackKind.USED, FeedbackKind.HELPFUL):
        _restart_clock(memory)  # someone just used or vouched for it: a use, for the decay clock
    if kind == FeedbackKind.CORRECT:
        if not content or not content.strip():
            raise Invalid("A correction needs the corrected content.", details={"field": "content"})
        memory, kinds = _update(memory, actor, {"content": content}, "corrected")
        # A person's correction is verified and ends the review, unless it brought a secret along
        # (redacted, as in any write): that one waits for a steward.
        cleared = not (kinds or for_steward)
        Memory.objects.filter(pk=memory.pk).update(user_verified=cleared, needs_review=not cleared)
        MemoryUsage.objects.filter(memory=memory).update(uncorrected_access_count=0)
        memory.refresh_from_db()
        return memory
    if kind in (FeedbackKind.USED, FeedbackKind.HELPFUL):
        counter = "used_count" if kind == FeedbackKind.USED else "helpful_count"
        Memory.objects.filter(pk=memory.pk).update(**{counter: F(counter) + 1})
        memory.refresh_from_db()
        return memory
    changed: set[str] = set()
    newly_needs_review = not memory.needs_review and kind in (FeedbackKind.FLAG, FeedbackKind.DISPUTE)
    if kind == FeedbackKind.CONFIRM:
        memory.user_verified, memory.needs_review = True, False
        changed = {"user_verified", "needs_review"}
    elif kind == FeedbackKind.FLAG:
        memory.confidence = round(max(0.0, memory.confidence - FLAG_PENALTY), 4)
        memory.needs_review = True
        memory.flag_count += 1
        MemoryUsage.objects.filter(memory=memory).update(uncorrected_access_count=0)
        changed = {"confidence", "needs_review", "flag_count"}
    elif kind == FeedbackKind.DISPUTE:
        memory.disputed, memory.needs_review = True, True
        MemoryUsage.objects.filter(memory=memory).update(uncorrected_access_count=0)
        changed = {"disputed", "needs_review"}
    _save_change(memory, actor, f"feedback_{kind}", changed)
    if newly_needs_review:
        _announce(memory.project_id, ("review.needed", [memory]))
        org_events.emit(
            memory.organization_id,
            "memory.review_needed",
            org_events.review_payload(memory.project_id, [memory]),
        )
    audit_record(actor=actor, action=f"memory.feedback.{kind}", target=memory)
    return memory


def _restart_clock(memory: Memory) -> None:
    """The memory counts as used now: decay and the daily job's three half-lives start again."""
    MemoryUsage.objects.update_or_create(memory=memory, defaults={"last_accessed_at": timezone.now()})


@transaction.atomic
def memory_reinforce(
    *, memory: Memory, actor: Principal, session_id: str | None = None, confidence_delta: float = 0.05
) -> Memory:
    """Another session observed what this memory says (the observer's novelty check found it
    above 0.88 cosine): add the session to its provenance, raise confidence (capped at 0.95),
    restart its decay clock. New version."""
    memory = memory_locked(memory)
    if session_id and session_id not in memory.provenance_session_ids:
        memory.provenance_session_ids = [*memory.provenance_session_ids, session_id[:100]]
    memory.confidence = round(
        min(CONFIDENCE_CAP, max(memory.confidence, memory.confidence + confidence_delta)), 4
    )
    _save_change(memory, actor, "reinforced", {"provenance_session_ids", "confidence"})
    _restart_clock(memory)
    return memory


def memories_record_access(*, memory_ids: Sequence[UUID | str], paced: bool = False) -> None:
    """Each injection is an access: after 5 uncorrected accesses confidence +0.05 (cap 0.95),
    after 10 needs_review clears (V5 §18) — not for a memory whose review is a steward's (a
    redacted secret, an open dispute, an observer memory tainted by outside text). One
    statement; no version bump (bookkeeping only).
    `paced` (an access outside any session): it counts toward those rewards only if the
    memory's last counted access is older than UNPACED_ACCESS_GAP (measured from that, not from
    the last access, a memory used every hour would never count again); access_count counts it
    anyway.
    The counts go to the narrow usage rows; a memory row is written only for those of its
    memories whose confidence or review flag the access changes.

    Locks go memory row, then usage row, as in feedback and reinforcement (which lock the memory
    FOR UPDATE, then write its usage): the memories are first locked FOR KEY SHARE, which waits
    for those and for a delete (a memory deleted meanwhile is skipped, not a foreign-key error)
    but not for plain updates or other accesses."""
    if not memory_ids:
        return
    # Whether this access counts toward the rewards (its old usage row `u`).
    counts = f"(NOT %(paced)s OR u.last_counted_at IS NULL OR u.last_counted_at <= {_NOW} - %(gap)s)"
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH counted AS (
                INSERT INTO memories_memoryusage AS u (memory_id, access_count,
                    uncorrected_access_count, last_accessed_at, last_counted_at)
                SELECT id, 1, 1, now(), {_NOW}
                FROM memories_memory WHERE id = ANY(%(ids)s::uuid[])
                ORDER BY id FOR KEY SHARE
                ON CONFLICT (memory_id) DO UPDATE SET
                    access_count = u.access_count + 1,
                    uncorrected_access_count = u.uncorrected_access_count + {counts}::int,
                    last_counted_at = CASE WHEN {counts} THEN {_NOW} ELSE u.last_counted_at END,
                    last_accessed_at = now()
                -- (counted by this statement: its own timestamp, not its transaction's; a paced
                -- access that did not count keeps an older one, so it pays no reward again)
                RETURNING memory_id, uncorrected_access_count AS n, last_counted_at = {_NOW} AS counts
            )
            UPDATE memories_memory m SET
                confidence = CASE
                    WHEN counted.n %% %(every)s = 0 AND confidence < %(cap)s
                    THEN least(%(cap)s, confidence + %(reward)s)
                    ELSE confidence END,
                needs_review = CASE
                    WHEN counted.n >= %(clear)s AND NOT secrets_redacted AND NOT disputed
                        AND NOT ('obs:tainted' = ANY(tags))
                    THEN false ELSE needs_review END
            FROM counted
            WHERE m.id = counted.memory_id AND counted.counts AND (
                (counted.n %% %(every)s = 0 AND m.confidence < %(cap)s)
                OR (counted.n >= %(clear)s AND m.needs_review AND NOT m.secrets_redacted AND NOT m.disputed
                    AND NOT ('obs:tainted' = ANY(m.tags)))
            )
            """,
            {
                "ids": [str(i) for i in memory_ids],
                "paced": paced,
                "gap": UNPACED_ACCESS_GAP,
                "every": ACCESSES_FOR_REWARD,
                "cap": CONFIDENCE_CAP,
                "reward": ACCESS_REWARD,
                "clear": ACCESSES_TO_CLEAR_REVIEW,
            },
        )


# ---------------------------------------------------------------- files moving under memories


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
        memory.stale_at = now
        _save_change(memory, system, "files_deleted", {"stale_at"})
    return len(affected)


@transaction.atomic
def memories_files_restored(
    *, project: Project, exists: Callable[[str], bool], touching: Iterable[str] | None = None
) -> int:
    """Stale memories of `project` (optionally only those naming a path in `touching`) whose
    related files all exist again are fresh again: a deleted file that came back (restored,
    re-added, renamed back) had left them out of injection for good. Returns how many."""
    stale = Memory.objects.select_for_update().filter(project=project, stale_at__isnull=False)
    if touching is not None:
        stale = stale.filter(related_files__overlap=list(touching))
    system = Principal()
    restored = 0
    for memory in stale.order_by("id"):
        if all(exists(path) for path in memory.related_files):
            memory.stale_at = None
            _save_change(memory, system, "files_restored", {"stale_at"})
            restored += 1
    return restored


# ---------------------------------------------------------------- lifecycle


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
