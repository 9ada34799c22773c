"""Memories endpoints: create (one or a batch), list, get, patch, delete, feedback, search."""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from django.db import transaction
from django.utils import timezone
from ninja import Body, Field, Query, Router, Status
from pydantic import ConfigDict, Discriminator, Tag, field_validator, model_validator

from apps.memories import selectors, services
from apps.memories.dateranges import Period
from apps.memories.kinds import TYPE_NAMES, Scope, normalize_type
from apps.memories.models import EmbeddingStatus, FeedbackKind, Memory, MemorySource, MemoryType
from apps.memories.search.packing import citation
from apps.memories.validation import (
    MAX_BATCH,
    MAX_CONTENT_CHARS,
    MAX_HALF_LIFE_DAYS,
    MemoryChanges,
    MemoryDraft,
    WorkUnitRef,
)
from apps.tenants.roles import Perm
from apps.tenants.selectors import project_get
from apps.tenants.services import require
from memorysaas.kernel.errors import Invalid, conflict
from memorysaas.kernel.metrics import observe_search_stages
from memorysaas.kernel.openapi import (
    change_schema,
    link,
    links,
    openapi_extra,
    with_schema,
)
from memorysaas.kernel.schemas import InputSchema, OutputSchema, QuerySchema

router = Router(tags=["memories"])


# ---------------------------------------------------------------- schemas


class MemoryIn(MemoryDraft, InputSchema):
    """One memory. `type` is one of the 16 types or a Dex alias; secrets are redacted on the way in."""

    # (The draft's schema, not InputSchema's: of two bases' configs the later one wins.)
    model_config = ConfigDict(json_schema_extra=MemoryDraft.model_config["json_schema_extra"])


class BatchIn(InputSchema):
    memories: list[MemoryIn] = Field(min_length=1, max_length=MAX_BATCH)


def _one_or_batch(body: Any) -> str:
    """A body with `memories` is a batch, any other one memory: its errors are reported against
    that shape alone, not against both (`memories: Field required` beside a too-long `content`)."""
    return (
        "batch" if isinstance(body, BatchIn) or (isinstance(body, dict) and "memories" in body) else "memory"
    )


CreateIn = Annotated[
    Annotated[BatchIn, Tag("batch")] | Annotated[MemoryIn, Tag("memory")], Discriminator(_one_or_batch)
]


class RelationOut(OutputSchema):
    relation_type: str
    target_memory_id: UUID | None
    target_file_path: str
    confidence: float


class MemoryOut(OutputSchema):
    id: UUID
    project_id: UUID
    organization_id: UUID
    type: str
    content: str
    source: str
    scope: str
    confidence: float
    tags: list[str]
    related_files: list[str]
    related_modules: list[str]
    payload: dict
    citation_text: str
    citation: str
    work_unit_ref: dict | None
    methodology: str
    session_id: str
    provenance_session_ids: list[str]
    commit_sha: str
    decay_half_life_days: float | None
    needs_review: bool
    user_verified: bool
    pinned: bool
    deprecated: bool
    deprecated_at: datetime | None
    stale_at: datetime | None
    disputed: bool
    secrets_redacted: bool
    secret_kinds: list[str]
    chunk_type: str
    chunk_start_line: int | None
    chunk_end_line: int | None
    access_count: int
    used_count: int
    helpful_count: int
    flag_count: int
    last_accessed_at: datetime | None
    embedding_status: str
    embedding_model: str
    version: int
    relations: list[RelationOut]
    created_at: datetime
    updated_at: datetime

    @staticmethod
    def resolve_citation(obj: Memory) -> str:
        return citation(str(obj.id), obj.citation_text)

    @staticmethod
    def resolve_relations(obj: Memory) -> list:
        return list(obj.relations.all())  # (as the principal may see them: relations_seen_by)


class BatchOut(OutputSchema):
    count: int
    memories: list[MemoryOut]


class MemoryPage(OutputSchema):
    items: list[MemoryOut]
    next_cursor: str | None


_DAY_OR_MOMENT = (
    "{} on or after (`_from`) / on or before (`_to`) this day or moment: ISO 8601, a day meaning"
    " the whole day in the server's time zone, a moment without an offset read in it too."
)


class MemoryFilters(QuerySchema):
    type: str | None = Field(
        None, description="A memory type (or Dex alias).", json_schema_extra={"enum": list(TYPE_NAMES)}
    )
    scope: Scope | None = None
    source: MemorySource | None = None
    needs_review: bool | None = None
    min_confidence: float | None = Field(None, ge=0, le=1)
    file: str | None = Field(None, max_length=500, description="Memories that name this related file.")
    tag: str | None = Field(None, max_length=100)
    text: str | None = Field(None, max_length=500, description="Words or identifiers in the memory.")
    embedding_status: EmbeddingStatus | None = None
    deprecated: bool | None = Field(False, description="Deprecated memories are hidden unless asked for.")
    created_from: date | datetime | None = Field(None, description=_DAY_OR_MOMENT.format("Created"))
    created_to: date | datetime | None = Field(None, description=_DAY_OR_MOMENT.format("Created"))
    used_from: date | datetime | None = Field(None, description=_DAY_OR_MOMENT.format("Last used"))
    used_to: date | datetime | None = Field(None, description=_DAY_OR_MOMENT.format("Last used"))
    cursor: str | None = Field(
        None, pattern=selectors.CURSOR_PATTERN, description="`next_cursor` of the page before."
    )
    limit: int = Field(50, ge=1, le=200)

    @field_validator("created_from", "created_to", "used_from", "used_to", mode="before")
    @classmethod
    def day_or_moment(cls, value: Any) -> Any:
        """A day (`2026-03-01`) stays a day, a moment (`2026-03-01T09:30Z`) a moment: the two
        bound a period differently, and pydantic would read a midnight moment as a day."""
        if not isinstance(value, str) or not value.strip():
            return value
        text = value.strip()
        try:
            return datetime.fromisoformat(text.upper()) if len(text) > 10 else date.fromisoformat(text)
        except ValueError:
            raise ValueError(
                "not an ISO 8601 date (2026-03-01) or date-time (2026-03-01T09:30:00Z)"
            ) from None

    @model_validator(mode="after")
    def periods_run_forward(self) -> MemoryFilters:
        for name in ("created", "used"):
            try:
                self.period(name)
            except ValueError:
                raise ValueError(f"{name}_from is after {name}_to") from None
        return self

    def period(self, name: str) -> Period | None:
        """The `created` or `used` period asked for (None: not filtered on it)."""
        low, high = getattr(self, f"{name}_from"), getattr(self, f"{name}_to")
        return Period.between(low, high, timezone.get_current_timezone())

    def selector_filters(self) -> dict[str, Any]:
        periods = {"created_from", "created_to", "used_from", "used_to"}
        return self.model_dump(exclude=periods) | {
            "created": self.period("created"),
            "used": self.period("used"),
        }


_PATCH_NULLABLE = frozenset({"work_unit_ref", "decay_half_life_days"})


class MemoryPatch(MemoryChanges):
    model_config = ConfigDict(json_schema_extra=change_schema(nullable=_PATCH_NULLABLE, like=MemoryDraft))

    content: str | None = Field(None, min_length=1, max_length=MAX_CONTENT_CHARS)
    scope: Scope | None = None
    needs_review: bool | None = None
    decay_half_life_days: float | None = Field(None, gt=0, le=MAX_HALF_LIFE_DAYS)
    work_unit_ref: WorkUnitRef | None = None
    methodology: str | None = Field(None, max_length=40)
    commit_sha: str | None = Field(None, max_length=64)

    @model_validator(mode="after")
    def something_to_change(self) -> MemoryPatch:
        if not self.model_fields_set:
            raise ValueError("send at least one field to change")
        nulls = sorted(
            f for f in self.model_fields_set if getattr(self, f) is None and f not in _PATCH_NULLABLE
        )
        if nulls:
            raise ValueError(f"these fields cannot be null: {', '.join(nulls)}")
        return self


class FeedbackIn(InputSchema):
    # (A correction carries the corrected content.)
    model_config = ConfigDict(
        json_schema_extra=with_schema(
            {
                "if": {"properties": {"kind": {"const": "correct"}}},
                "then": {"required": ["content"], "properties": {"content": {"type": "string"}}},
            }
        )
    )

    kind: FeedbackKind
    content: str | None = Field(None, min_length=1, max_length=MAX_CONTENT_CHARS)
    note: str = Field("", max_length=2000)
    session_id: str = Field("", max_length=100)


# ---------------------------------------------------------------- CRUD


_SCOPE_CONFLICT = (
    "The scope cannot be had here (`conflict`): team scope in a project of no team, personal scope"
    " with no person behind the key."
)


_MEMORY = {"memory_id": "$response.body#/id"}


@router.post(
    "/projects/{project_id}/memories",
    response={201: MemoryOut | BatchOut},
    openapi_extra=openapi_extra(
        conflict(_SCOPE_CONFLICT),
        links(
            201,
            GetMemory=link("GET", "/memories/{memory_id}", **_MEMORY),
            PatchMemory=link("PATCH", "/memories/{memory_id}", **_MEMORY),
            DeleteMemory=link("DELETE", "/memories/{memory_id}", **_MEMORY),
            GiveFeedback=link("POST", "/memories/{memory_id}/feedback", **_MEMORY),
            OpenDispute=link("POST", "/memories/{memory_id}/disputes", **_MEMORY),
        ),
    ),
)
def memories_create(request, project_id: UUID, payload: Body[CreateIn]):
    """Store one memory, or `{"memories": [...]}` — up to 500 in one transaction (all or none)."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_WRITE)
    batch = payload.memories if isinstance(payload, BatchIn) else [payload]
    if any(m.pinned for m in batch):  # (as a PATCH that pins)
        require(request.auth, project.organization_id, Perm.MEMORIES_REVIEW)
    if isinstance(payload, BatchIn):
        drafts = [MemoryDraft.model_validate(m.model_dump()) for m in payload.memories]
        created = services.memories_create_batch(project=project, actor=request.auth, drafts=drafts)
        memories = selectors.memories_by_ids([m.id for m in created], principal=request.auth)
        return Status(201, {"count": len(memories), "memories": memories})
    draft = MemoryDraft.model_validate(payload.model_dump())
    memory = services.memory_create(project=project, actor=request.auth, draft=draft)
    return Status(201, selectors.memories_by_ids([memory.id], principal=request.auth)[0])


@router.get("/projects/{project_id}/memories", response=MemoryPage)
def memories_list(request, project_id: UUID, filters: Query[MemoryFilters]):
    """Memories that apply in the project, newest first, filtered; follow `next_cursor` for more."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    items, next_cursor = selectors.memories_list(
        principal=request.auth, project=project, **filters.selector_filters()
    )
    return {"items": items, "next_cursor": next_cursor}


@router.get("/memories/{memory_id}", response=MemoryOut)
def memories_get(request, memory_id: UUID):
    memory = selectors.memory_get(principal=request.auth, memory_id=memory_id)
    require(request.auth, memory.organization_id, Perm.MEMORIES_READ)
    return selectors.memories_by_ids([memory.id], principal=request.auth)[0]


def _writable(request, memory_id: UUID) -> Memory:
    memory = selectors.memory_get(principal=request.auth, memory_id=memory_id)
    require(request.auth, memory.organization_id, Perm.MEMORIES_WRITE)
    return memory


_CHANGE_CONFLICT = (
    "The change does not fit the memory as it is (`conflict`): a payload its type does not take, a"
    " type its payload does not fit, or a scope that cannot be had here; `details` says which."
)


@router.patch("/memories/{memory_id}", response=MemoryOut, openapi_extra=conflict(_CHANGE_CONFLICT))
def memories_patch(request, memory_id: UUID, payload: MemoryPatch):
    """Change fields; every change is a new version, a content change re-embeds."""
    memory = _writable(request, memory_id)
    changes = payload.model_dump(exclude_unset=True)
    with transaction.atomic():  # (the check reads the row the change is then applied to)
        memory = services.memory_locked(memory)
        if selectors.steward_fields(changes, memory):
            require(request.auth, memory.organization_id, Perm.MEMORIES_REVIEW)
        memory = services.memory_update(memory=memory, actor=request.auth, changes=changes)
    return selectors.memories_by_ids([memory.id], principal=request.auth)[0]


@router.delete(
    "/memories/{memory_id}",
    response={204: None},
    openapi_extra=links(
        204, GetMemory=link("GET", "/memories/{memory_id}", memory_id="$request.path.memory_id")
    ),
)
def memories_delete(request, memory_id: UUID):
    """Delete a memory. Its author may; anyone else needs `memories:review`."""
    memory = _writable(request, memory_id)
    if not selectors.is_author(principal=request.auth, memory=memory):
        require(request.auth, memory.organization_id, Perm.MEMORIES_REVIEW)
    services.memory_delete(memory=memory, actor=request.auth)
    return Status(204, None)


@router.post("/memories/{memory_id}/feedback", response=MemoryOut, openapi_extra=conflict(_CHANGE_CONFLICT))
def memories_feedback(request, memory_id: UUID, payload: FeedbackIn):
    """confirm → verified; correct (with `content`) → new version, history kept; flag → −0.2
    confidence and needs review; dispute → ×0.8 in retrieval and needs review; used/helpful count."""
    memory = _writable(request, memory_id)
    if payload.kind == FeedbackKind.CORRECT and not payload.content:
        raise Invalid("A correction needs the corrected content.", details={"field": "content"})
    memory = services.memory_feedback(
        memory=memory,
        actor=request.auth,
        kind=payload.kind.value,
        content=payload.content,
        note=payload.note,
        session_id=payload.session_id,
    )
    return selectors.memories_by_ids([memory.id], principal=request.auth)[0]


class PropagationOut(OutputSchema):
    """One confidence change the memory took because someone judged a related memory."""

    id: int
    direction: str = Field(
        description="`lift` (a memory that validates this one was confirmed or"
        " found helpful) or `lower` (one this memory derives from was flagged or disputed)."
    )
    feedback_kind: str
    actor_label: str = Field(description="Who gave that feedback.")
    relation_type: str
    source_memory_id: UUID | None = Field(
        description="The judged memory; null once deleted, or when it is not one you may read."
    )
    confidence_before: float
    confidence_after: float
    created_at: datetime


class PropagationPage(OutputSchema):
    items: list[PropagationOut]


@router.get("/memories/{memory_id}/propagations", response=PropagationPage)
def memories_propagations(request, memory_id: UUID):
    """Why the memory's confidence moved with feedback on related memories, newest first (100)."""
    memory = selectors.memory_get(principal=request.auth, memory_id=memory_id)
    require(request.auth, memory.organization_id, Perm.MEMORIES_READ)
    return {"items": selectors.memory_propagations(memory=memory, principal=request.auth)}


# ---------------------------------------------------------------- retrieval


QueryKind = Literal["identifier", "semantic", "structural"]


def _v5_type(value: Any) -> Any:
    try:
        return normalize_type(value) if isinstance(value, str) else value
    except ValueError:
        return value  # (the field says what is wrong with it)


class SearchIn(InputSchema):
    query: str = Field(min_length=1, max_length=2000)
    files: list[str] = Field(default_factory=list, max_length=50)
    phase: str | None = Field(None, max_length=40, description="A universal or methodology phase.")
    limit: int = Field(8, ge=1, le=50)
    query_kind: QueryKind | None = Field(None, description="Override the detected query type.")
    types: list[MemoryType] | None = Field(
        None, description="Memory types (or Dex aliases: pitfall, fix, …)."
    )
    rerank: bool = True
    hyde: bool = Field(True, description="Allow HyDE (runs only when an LLM is configured).")

    @field_validator("types", mode="before")
    @classmethod
    def _aliases(cls, value: Any) -> Any:
        """As create and the list filter do, a Dex alias names its memory type."""
        if isinstance(value, list):
            return [_v5_type(v) for v in value]
        return value


class PathRanks(OutputSchema):
    dense: int | None
    keyword: int | None
    graph: int | None


class ScoreParts(OutputSchema):
    rrf: float  # weighted RRF (k=60), reported beside the score fusion that orders
    fused: float  # score fusion: cosine + keyword and graph evidence, by query kind
    cosine: float | None
    keyword: (
        float  # the keyword path's BM25 on the query's scale (1 = as good as the query allows; 0 = not found)
    )
    graph: float  # the graph path's neighbour strength in [0, 1] (0 = not found)
    boost: float
    phase_weight: float
    source_trust: float
    confidence: float
    dispute: float
    score: float
    late_interaction: float | None  # token-level MaxSim (local rerank with the local model)
    precision: float | None  # the precision model's cosine (local rerank, not on structural queries)
    rerank: float | None


class SearchHit(OutputSchema):
    rank: int
    memory: MemoryOut
    ranks: PathRanks
    components: ScoreParts
    boost_reason: str | None
    stale: bool
    citation: str


class HydeInfo(OutputSchema):
    ran: bool  # a hypothetical answer's embedding was averaged into the dense query
    # ran | cached | not_configured | disabled | skipped_kind | confident | failed | cooldown | not_run
    status: str
    hypothetical: str | None


class SearchOut(OutputSchema):
    query: str
    query_kind: str
    phase: str
    weights: dict[str, float]
    rrf_weights: dict[str, float]
    results: list[SearchHit]
    candidates: dict[str, int]
    timings_ms: dict[str, float]
    reranker: str
    hyde: HydeInfo


@router.post("/projects/{project_id}/search", response=SearchOut)
def memories_search(request, project_id: UUID, payload: SearchIn):
    """Hybrid search: dense + keyword + graph paths, score fusion (weighted RRF reported beside
    it), neighbourhood boost, phase, trust, confidence and dispute weighting, rerank. Each result carries its rank in every path,
    its score components and any boost reason; the response carries per-stage timings."""
    from apps.memories.search import SearchRequest, Stages, search

    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    result = search(
        SearchRequest(
            principal=request.auth,
            project=project,
            query=payload.query,
            files=payload.files,
            phase=payload.phase,
            limit=payload.limit,
            query_kind=payload.query_kind,
            types=[t.value for t in payload.types] if payload.types else None,
        ),
        Stages(rerank=payload.rerank, hyde=payload.hyde),
    )
    observe_search_stages("search", result.timings_ms)
    return result.as_dict()
