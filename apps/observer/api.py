"""Observer endpoints: sessions, event batches, validation, completion, step injection, packed
/context for a task, git cold start, and an authenticated no-op (`/ping`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from django.db import transaction
from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict, ValidationError, field_validator, model_validator

from apps.memories.onboarding import with_onboarding
from apps.memories.validation import clean_paths, from_root
from apps.observer import injection, selectors, services
from apps.observer.models import Outcome, Session, SessionStatus, SessionType
from apps.tenants.roles import Perm
from apps.tenants.selectors import project_get
from apps.tenants.services import require
from memorysaas.kernel.errors import ApiError, conflict
from memorysaas.kernel.jsontypes import JsonTyped
from memorysaas.kernel.metrics import observe_search_stages
from memorysaas.kernel.openapi import (
    NOT_SPACE,
    SOME_PATH,
    inline_refs,
    link,
    links,
    stripped_text_schema,
    with_schema,
)
from memorysaas.kernel.schemas import (
    ESCAPED_UNSTORABLE,
    MAX_DEPTH,
    InputSchema,
    OutputSchema,
    QuerySchema,
    find_too_deep,
    find_unstorable_char,
)

router = Router(tags=["observer"])
MAX_EVENTS = 1000
EVENT_TYPES = (
    "tool_call",
    "tool_result",
    "reasoning",
    "step_complete",
    "record_memory",
    "plan",
    "commit",
    "phase",
)
_REQUIRED = {
    "tool_call": ("tool",),
    "tool_result": ("tool",),
    "reasoning": ("text",),
    "record_memory": ("memory",),
    "plan": ("planned_steps",),
    "commit": ("sha",),
    "phase": ("phase",),
}
SESSION_CLOSED = conflict("The session is complete (`session_closed`): open a new one.")


class NoteIn(JsonTyped):
    model_config = ConfigDict(
        extra="forbid", str_strip_whitespace=True, json_schema_extra=stripped_text_schema
    )

    type: str = Field("gotcha", max_length=40)
    content: str = Field(min_length=1, max_length=4000)
    related_files: list[str] = Field(default_factory=list, max_length=20)


def _event_schema(schema: dict[str, Any]) -> None:
    """Each type's own fields are there, and not null (`_fields_of_type`)."""
    schema["allOf"] = [
        {
            "if": {"properties": {"type": {"const": event_type}}},
            "then": {"required": list(fields), "properties": {f: {"not": {"type": "null"}} for f in fields}},
        }
        for event_type, fields in _REQUIRED.items()
    ]


class EventIn(JsonTyped):
    """One event. Fields beyond those of its type are refused."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_event_schema)

    seq: int = Field(ge=1, le=2**53)
    type: Literal[EVENT_TYPES]  # type: ignore[valid-type]
    step: int | None = Field(None, ge=0, le=1_000_000)
    tool: str | None = Field(None, min_length=1, max_length=200)
    args: dict[str, Any] | None = None
    is_error: bool | None = None
    result: str | None = Field(None, max_length=50_000)
    text: str | None = Field(None, max_length=50_000)
    input_tokens: int | None = Field(None, ge=0, le=10_000_000)
    output_tokens: int | None = Field(None, ge=0, le=10_000_000)
    memory: NoteIn | None = None
    planned_steps: int | None = Field(None, ge=1, le=100_000)
    sha: str | None = Field(None, max_length=64)
    files: list[str] | None = Field(None, max_length=1000)
    phase: str | None = Field(None, max_length=60)
    ts: str | None = Field(None, max_length=40, json_schema_extra={"format": "date-time"})

    @field_validator("args")
    @classmethod
    def _shallow(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and (where := find_too_deep(value, "args")):
            raise ValueError(f"{where} nests deeper than {MAX_DEPTH} levels")
        return value

    @field_validator("ts")
    @classmethod
    def _iso(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError("ts is an ISO 8601 time") from None
        return value

    @model_validator(mode="after")
    def _fields_of_type(self) -> EventIn:
        missing = [f for f in _REQUIRED.get(self.type, ()) if getattr(self, f) is None]
        if missing:
            raise ValueError(f"a {self.type} event needs {', '.join(missing)}")
        return self


class EventsIn(Schema):
    """Not an InputSchema: walking every event for NUL characters costs more than ingesting
    them, so the view looks for an escaped NUL in the raw body first."""

    model_config = ConfigDict(extra="forbid")

    events: list[dict[str, Any]] = Field(
        description=f"Up to {MAX_EVENTS} events, each with a client-side seq (more: 413).",
        # (Each event is validated on its own, so that every bad one can be named.)
        json_schema_extra={"items": inline_refs(EventIn.model_json_schema()), "maxItems": MAX_EVENTS},
    )


class WorkUnitIn(InputSchema):
    hierarchy: list[str] = Field(default_factory=list, max_length=10)
    label: str = Field("", max_length=200)
    parallel_group: str = Field("", max_length=300, description="Sessions sharing it run in parallel.")


class SessionIn(InputSchema):
    session_type: SessionType = SessionType.BUILD
    methodology: str = Field("", max_length=40)
    phase: str = Field("", max_length=60)
    work_unit: WorkUnitIn | None = None
    task: str = Field("", max_length=4000)
    client: str = Field("", max_length=100)
    root: str = Field(
        "",
        max_length=500,
        description="The repository's root on the agent's machine (its working directory, say): the "
        "absolute paths its tools send are taken relative to it.",
    )
    files: list[str] = Field(
        default_factory=list, max_length=100, description="Files in play, for the start plan."
    )


class SessionOut(OutputSchema):
    id: UUID
    project_id: UUID
    session_type: str
    methodology: str
    phase: str
    universal_phase: str
    work_unit: dict[str, Any]
    task: str
    client: str
    root: str
    ab_group: str
    status: str
    outcome: str
    steps: int | None
    event_count: int
    last_step: int
    started_at: datetime
    ended_at: datetime | None
    finalized_at: datetime | None
    promoted_memory_ids: list[UUID]
    reinforced_memory_ids: list[UUID]
    report: dict[str, Any]


class SessionOpened(SessionOut):
    start_context: dict[str, Any]


class SessionPage(OutputSchema):
    items: list[SessionOut]


class IngestOut(OutputSchema):
    accepted: int
    duplicates: int
    event_count: int
    notes: int


class CheckIn(InputSchema):
    name: str = Field(min_length=1, max_length=300, description="What was checked: a test id, a lint rule.")
    passed: bool = False
    error: str = Field("", max_length=4000)
    files: list[Annotated[str, Field(max_length=500)]] = Field(default_factory=list, max_length=20)
    severity: Literal["critical", "high", "medium", "low", ""] = Field(
        "", description="Medium and low failures are not mined into memories."
    )


class ValidationIn(InputSchema):
    passed: bool
    work_unit: str = Field("", max_length=200)
    report: str = Field(
        "",
        max_length=20_000,
        description="The runner's output: its failure lines (pytest, jest, go test, linters) are mined.",
    )
    checks: list[CheckIn] = Field(default_factory=list, max_length=200)


class ValidationOut(OutputSchema):
    validations: int
    passed: bool
    promoted: list[UUID]
    failed_checks: int = Field(
        0,
        description="Failures read from `checks` and the report: each becomes an error_pattern at finalize.",
    )


class CompleteIn(InputSchema):
    outcome: Outcome
    steps: int | None = Field(None, ge=0, le=1_000_000)


class StepIn(InputSchema):
    step: int = Field(ge=0, le=1_000_000)
    files: list[str] = Field(default_factory=list, max_length=50, description="Files just read or edited.")
    searches: list[Annotated[str, Field(max_length=500)]] = Field(
        default_factory=list, max_length=10, description="Recent Grep/Glob patterns."
    )


class StepOut(OutputSchema):
    step: int
    injection: dict[str, Any] | None
    reason: str = ""


class GitLogIn(InputSchema):
    log: str = Field(min_length=1, max_length=5_000_000, description="Output of `git log --name-only`.")


class GitLogOut(OutputSchema):
    commits: int
    commits_used: int
    files: int
    edges: int


class SessionFilters(QuerySchema):
    status: str | None = Field(None, max_length=12)
    limit: int = Field(50, ge=1, le=200)


def _session(request, session_id: UUID, permission: str):
    session = selectors.session_get(principal=request.auth, session_id=session_id)
    require(request.auth, session.organization_id, permission)
    return session


_SESSION = {"session_id": "$response.body#/id"}


@router.post(
    "/projects/{project_id}/sessions",
    response={201: SessionOpened},
    openapi_extra=links(
        201,
        GetSession=link("GET", "/sessions/{session_id}", **_SESSION),
        SendEvents=link("POST", "/sessions/{session_id}/events", **_SESSION),
        RecordValidation=link("POST", "/sessions/{session_id}/validation", **_SESSION),
        AskStepInjection=link("POST", "/sessions/{session_id}/step-injection", **_SESSION),
        CompleteSession=link("POST", "/sessions/{session_id}/complete", **_SESSION),
    ),
)
def sessions_open(request, project_id: UUID, payload: SessionIn):
    """Open a session: its id, its A/B group, and the session-start plan (prefetch, work state,
    recipes)."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.OBSERVER_WRITE)
    data = payload.model_dump()
    session = services.session_open(project=project, actor=request.auth, data=data)
    start = (
        {"modules": [], "prefetch": [], "work_state": None, "recipes": []}
        if session.ab_group == "control"
        else injection.start_context(
            session=session, principal=request.auth, files=clean_paths(payload.files, session.root)
        )
    )
    injection.start_injection_record(session=session, start_context=start)
    session.start_context = start
    return Status(201, session)


@router.get("/projects/{project_id}/sessions", response=SessionPage)
def sessions_list(request, project_id: UUID, filters: Query[SessionFilters]):
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    sessions = selectors.sessions_for(project=project)
    if filters.status:
        sessions = sessions.filter(status=filters.status)
    return {"items": list(sessions[: filters.limit])}


@router.get("/sessions/{session_id}", response=SessionOut)
def sessions_get(request, session_id: UUID):
    return _session(request, session_id, Perm.MEMORIES_READ)


def _valid_events(request, payload: EventsIn) -> list[dict[str, Any]]:
    """The batch's events, each validated, or the ApiError that refuses the whole batch."""
    if ESCAPED_UNSTORABLE.search(request.body) and (found := find_unstorable_char(payload.events, "events")):
        raise ApiError(422, f"{found}.")
    if len(payload.events) > MAX_EVENTS:
        raise ApiError(413, f"At most {MAX_EVENTS} events per batch.", code="batch_too_large",
                       details={"count": len(payload.events), "max": MAX_EVENTS})  # fmt: skip
    events, errors = [], []
    for index, item in enumerate(payload.events):
        try:
            events.append(EventIn.model_validate(item).model_dump(exclude_none=True))
        except ValidationError as exc:
            seq = item.get("seq") if isinstance(item, dict) else None
            errors.append({"index": index, "seq": seq, "errors": [
                {"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()
            ]})  # fmt: skip
    if errors:
        raise ApiError(422, f"{len(errors)} of {len(payload.events)} events are not valid; nothing was stored.",
                       code="invalid_events", details=errors)  # fmt: skip
    for event in events:
        if event.get("memory") is not None:
            event["memory"] = dict(event["memory"])
    return events


@router.post("/sessions/{session_id}/events", response=IngestOut, openapi_extra=SESSION_CLOSED)
def sessions_events(request, session_id: UUID, payload: EventsIn):
    """Append a batch (up to 1,000 events; 413 above). Idempotent by `seq`: a retried batch
    changes nothing. A batch with an invalid event is refused whole, with each bad item listed."""
    try:
        events = _valid_events(request, payload)
    except ApiError:
        # A session the caller cannot see is a 404, one it may not write to a 403, whatever the
        # batch holds. (A valid batch is checked by ingest's locking query, not a second one.)
        _session(request, session_id, Perm.OBSERVER_WRITE)
        raise
    return services.events_ingest(session=session_id, events=events, principal=request.auth)


@router.post("/sessions/{session_id}/validation", response=ValidationOut, openapi_extra=SESSION_CLOSED)
def sessions_validation(request, session_id: UUID, payload: ValidationIn):
    """A validation result (QA, tests, review) for the session or one of its work units."""
    session = _session(request, session_id, Perm.OBSERVER_WRITE)
    return services.validation_record(
        session=session,
        actor=request.auth,
        passed=payload.passed,
        work_unit=payload.work_unit,
        report=payload.report,
        checks=[check.model_dump() for check in payload.checks],
    )


@router.post("/sessions/{session_id}/complete", response={200: SessionOut, 202: SessionOut})
def sessions_complete(request, session_id: UUID, payload: CompleteIn):
    """Close the session. Promotion runs in the background: 202 while it runs, 200 once done
    (`promoted_memory_ids`, `report`). Completing again changes nothing, except that a finalize
    unfinished 30 minutes after it was queued is queued again."""
    session = _session(request, session_id, Perm.OBSERVER_WRITE)
    session = services.session_complete(session=session, outcome=payload.outcome.value, steps=payload.steps)
    return Status(200 if session.status == "completed" else 202, session)


@router.post("/sessions/{session_id}/step-injection", response=StepOut, openapi_extra=SESSION_CLOSED)
def sessions_step_injection(request, session_id: UUID, payload: StepIn):
    """What to add before the agent's next step, if anything (none before step 5; never the same
    memory twice in a session)."""
    session = _session(request, session_id, Perm.OBSERVER_WRITE)
    if session.ab_group in ("control", "passive"):  # (passive: session-start memory only)
        return {"step": payload.step, "injection": None, "reason": f"{session.ab_group}_group"}
    with transaction.atomic():
        # One injection at a time per session: two at once each gave the same memory.
        session = Session.objects.select_for_update().select_related("project").get(pk=session.pk)
        if session.status != SessionStatus.OPEN:
            raise services.session_closed()
        return injection.step_injection(
            session=session,
            principal=request.auth,
            step=payload.step,
            files=clean_paths(payload.files, session.root),
            searches=[from_root(pattern, session.root) for pattern in payload.searches],
        )


# ---------------------------------------------------------------- /context


class ContextIn(InputSchema):
    model_config = ConfigDict(
        json_schema_extra=with_schema(
            {
                "anyOf": [
                    {"required": ["task"], "properties": {"task": {"pattern": NOT_SPACE}}},
                    {"required": ["files"], "properties": {"files": {"contains": {"pattern": SOME_PATH}}}},
                ]
            }
        )
    )

    phase: str | None = Field(None, max_length=40)
    task: str = Field("", max_length=4000)
    files: list[str] = Field(default_factory=list, max_length=100)
    session_id: str = Field("", max_length=100)
    token_budget: int | None = Field(None, ge=50, le=32000)

    @model_validator(mode="after")
    def needs_something(self) -> ContextIn:
        if not self.task.strip() and not clean_paths(self.files):
            raise ValueError("send a task, files, or both")
        return self


class ContextMemory(OutputSchema):
    id: UUID
    type: str
    citation: str
    tokens: int
    score: float
    related_files: list[str]


class ContextOut(OutputSchema):
    phase: str
    text: str
    token_count: int
    token_budget: int
    memories: list[ContextMemory]
    session_notes: int
    timings_ms: dict[str, float]
    control_group: bool = Field(
        False, description="The session is in the A/B control group: it is served no memory."
    )
    onboarding: list[str] = Field(
        [],
        description="Ids of the project's most important memories, shown once to a person new to it"
        " (their first agent session) at the top of `text`.",
    )


# (Listed with the memories endpoints in the API docs, where it was first documented.)
@router.post("/projects/{project_id}/context", response=ContextOut, tags=["memories"])
def memories_context(request, project_id: UUID, payload: ContextIn):
    """Packed memories for a phase, task and files, inside the phase's token budget (or yours).
    Stale or low-confidence memories are never injected; each injection counts as an access."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    context = injection.build_context(
        principal=request.auth,
        project=project,
        phase=payload.phase,
        task=payload.task,
        files=payload.files,
        session_id=payload.session_id,
        token_budget=payload.token_budget,
    )
    observe_search_stages("context", context["timings_ms"])
    return with_onboarding(context, principal=request.auth, project=project)


@router.post("/projects/{project_id}/observer/git-log", response=GitLogOut)
def observer_git_log(request, project_id: UUID, payload: GitLogIn):
    """Cold start: seed co-change edges from `git log --name-only` before any session exists."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.OBSERVER_WRITE)
    return services.git_cold_start(project=project, log_text=payload.log)


class PingOut(OutputSchema):
    ok: bool


@router.post("/ping", response=PingOut)
def ping(request):
    """An authenticated no-op: check a key, measure round trips."""
    return {"ok": True}
