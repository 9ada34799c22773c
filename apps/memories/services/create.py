"""Creating memories: one, or a batch in one transaction, with their relations; each draft is
scanned for secrets and stored with its keyword index, its version row and its audit row."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np
from django.db import connection, models, transaction
from django.utils import timezone

from apps.memories import secrets_scan
from apps.memories.embedding import precision
from apps.memories.kinds import default_half_life
from apps.memories.models import (
    EmbeddingStatus,
    Memory,
    MemoryRelation,
    MemoryScope,
    MemoryVersion,
)
from apps.memories.services.indexing import (
    _SEARCH_VECTOR,
    _adjust_term_stats,
    _announce,
    _index_texts,
    _schedule_embedding,
    _store_tokens,
)
from apps.memories.services.redaction import _redacted_fields
from apps.memories.services.update import _snapshot
from apps.memories.validation import (
    MemoryDraft,
    RelationDraft,
    short_citation,
)
from apps.memories.vectors import vector_literal
from apps.tenants.models import Project
from apps.tenants.principal import SYSTEM, Principal
from apps.tenants.services import audit_record
from memorysaas.kernel import events as org_events
from memorysaas.kernel.errors import ApiError, Conflict, Invalid, NotFound


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
) -> list[Memory]:
    """Store up to 500 drafts in one transaction: all of them or none. Embeddings follow on commit
    (services.intake, which embeds its drafts for novelty first, stores them with theirs)."""
    from apps.memories.validation import MAX_BATCH

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
    return _store(project, actor, pairs)


def _store(
    project: Project,
    actor: Principal,
    pairs: list[tuple[Memory, list[RelationDraft]]],
    vectors: Sequence[Any] | None = None,
    tokens: Sequence[bytes | None] | None = None,
) -> list[Memory]:
    """Write built memories (with their relations), their versions, index and audit rows, and
    queue what follows on commit. `vectors`: the memories' embeddings of their `embedding_text`
    by the current provider, already computed, with the packed token embeddings in `tokens`."""
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
    memories: Sequence[Memory],
    vectors: Sequence[Any],
    tokens: Sequence[bytes | None] | None,
) -> tuple[list[Memory], list[bytes | None], str]:
    """Give each memory its vector. Returns the memories that took one, with their tokens (none where
    the caller has none) and the model id, for `_store_tokens` once the rows exist."""
    from apps.memories.embedding.providers import get_provider

    provider = get_provider()
    now = timezone.now()
    taken: list[Memory] = []
    taken_tokens: list[bytes | None] = []
    for memory, vector, packed in zip(memories, vectors, tokens or [None] * len(memories), strict=True):
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
