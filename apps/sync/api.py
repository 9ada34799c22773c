"""Device sync: pull the change feed, push offline work (/sync/pull, /sync/push; docs/api/devices-sync.md)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from uuid import UUID

from ninja import Field, Query, Router
from pydantic import TypeAdapter, ValidationError, model_validator

from apps.memories.models import Memory
from apps.memories.selectors import memories_visible
from apps.memories.validation import MemoryChanges, MemoryDraft
from apps.sync import conflicts, selectors, services
from apps.sync.feed import CURSOR_PATTERN, BadCursor, Cursor
from apps.tenants.roles import Perm
from apps.tenants.selectors import project_get
from memorysaas.kernel.errors import Forbidden, Invalid, conflict, field_errors
from memorysaas.kernel.ids import as_uuid
from memorysaas.kernel.schemas import InputSchema, OutputSchema, QuerySchema, refuse_unstorable

router = Router(tags=["sync"])
MAX_PUSH = 500


class PullQuery(QuerySchema):
    project_id: UUID
    cursor: str | None = Field(
        None,
        max_length=200,
        description="From the previous pull; omit for everything. (A `c1.` cursor of an earlier"
        " version is still read.)",
        json_schema_extra={"pattern": CURSOR_PATTERN},
    )
    limit: int = Field(selectors.MAX_PULL, ge=1, le=selectors.MAX_PULL)


class PullOut(OutputSchema):
    changes: list[dict[str, Any]]
    cursor: str
    has_more: bool
    open_conflicts: list[str] | None = Field(
        None,
        description="On the last page: the ids of the caller's conflicts in the project that still"
        " wait for a person. A replica drops the ones no longer listed (decided elsewhere).",
    )


def _sync_project(request, project_id):
    principal = request.auth
    project = project_get(principal=principal, project_id=project_id, permission=Perm.SYNC)
    if not principal.has(project.organization_id, Perm.MEMORIES_READ):
        raise Forbidden("This needs the 'memories:read' permission.")
    return principal, project


@router.get("/sync/pull", response=PullOut)
def pull(request, query: Query[PullQuery]):
    """Changes after `cursor` to the memories that apply in the project, oldest first:
    `{"op": "upsert", "memory": {...}}` (with its vector) or `{"op": "delete", "id": ...}`.
    Repeat with the returned cursor while `has_more`."""
    principal, project = _sync_project(request, query.project_id)
    try:
        cursor = Cursor.decode(query.cursor)
    except BadCursor:
        raise Invalid("The cursor is not one this server gave out.", details={"field": "cursor"}) from None
    result = selectors.changes_since(principal=principal, project=project, cursor=cursor, limit=query.limit)
    services.device_seen(principal)
    waiting = None if result.has_more else selectors.open_conflict_ids(principal=principal, project=project)
    return {
        "changes": result.changes,
        "cursor": result.cursor.encode(),
        "has_more": result.has_more,
        "open_conflicts": waiting,
    }


class UpdatableFields(MemoryChanges):
    """The fields an offline edit may change (the API's PATCH changes more)."""


class CreateChange(InputSchema):
    op: Literal["create"]
    ref: str = Field(
        min_length=1, max_length=100, description="The device's own id for it; makes retries safe."
    )
    memory: MemoryDraft


class UpdateChange(InputSchema):
    op: Literal["update"]
    id: UUID
    base_version: int = Field(ge=1, description="The version the device edited.")
    fields: UpdatableFields

    @model_validator(mode="after")
    def something_changes(self) -> UpdateChange:
        if not self.fields.model_dump(exclude_none=True):
            raise ValueError("fields is empty")
        return self


class DeleteChange(InputSchema):
    op: Literal["delete"]
    id: UUID
    base_version: int = Field(ge=1)


Change = Annotated[CreateChange | UpdateChange | DeleteChange, Field(discriminator="op")]
_change = TypeAdapter(Change)


class PushIn(InputSchema):
    project_id: UUID
    changes: list[Any] = Field(
        max_length=MAX_PUSH,
        description="create, update or delete changes, each checked on its own: one that is not "
        "valid comes back `invalid` and the others apply.",
    )

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        """(Overrides InputSchema's: each change is checked for what cannot be stored on its own, so
        one bad change cannot refuse the whole push.)"""
        if isinstance(data, dict):
            refuse_unstorable({k: v for k, v in data.items() if k != "changes"})
        return data


class PushOut(OutputSchema):
    results: list[dict[str, Any]]


@router.post("/sync/push", response=PushOut)
def push(request, body: PushIn):
    """Apply a device's offline changes in order, in one transaction. Each result says
    `applied`, `merged` (a stale edit merged cleanly), `conflict` (with the server's copy;
    nothing applied), `not_found`/`gone`, `forbidden` (with the server's copy), or `invalid`
    (`message` and `details` say why; nothing of it applied, the others did; with the server's
    copy when it names a memory the caller may see). A change that pins or deprecates without
    `memories:review` applies without those fields and names them in `refused`."""
    principal, project = _sync_project(request, body.project_id)
    if not principal.has(project.organization_id, Perm.MEMORIES_WRITE):
        raise Forbidden("This needs the 'memories:write' permission.")
    parsed: list[tuple[int, CreateChange | UpdateChange | DeleteChange]] = []
    results: dict[int, dict[str, Any]] = {}
    for index, raw in enumerate(body.changes):
        try:
            parsed.append((index, _change.validate_python(raw)))
        except ValidationError as exc:
            results[index] = services.invalid_result(
                _named(raw), "The change is not valid.", details=field_errors(exc.errors())
            )
    ids = [c.id for _, c in parsed if not isinstance(c, CreateChange)]
    visible: dict[str, Memory] = {
        str(m.id): m for m in memories_visible(principal=principal, project=project).filter(id__in=ids)
    }
    changes = []
    for _, change in parsed:
        if isinstance(change, CreateChange):
            changes.append({"op": "create", "ref": change.ref, "memory": change.memory})
        elif isinstance(change, UpdateChange):
            fields = change.fields.model_dump(exclude_none=True)
            changes.append(
                {"op": "update", "id": str(change.id), "base_version": change.base_version, "fields": fields}
            )
        else:
            changes.append({"op": "delete", "id": str(change.id), "base_version": change.base_version})
    applied = services.push_apply(project=project, actor=principal, changes=changes, memories=visible)
    results |= {index: result for (index, _), result in zip(parsed, applied, strict=True)}
    ordered = [results[index] for index in range(len(body.changes))]
    return {"results": _with_server_copies(principal, project, ordered)}


def _named(raw: Any) -> dict[str, str]:
    """The ref or id a change that is not valid names, when it names one, for its result."""
    if not isinstance(raw, dict):
        return {}
    return {key: raw[key] for key in ("ref", "id") if isinstance(raw.get(key), str) and len(raw[key]) <= 100}


def _with_server_copies(principal, project, results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """An `invalid` change to a memory the caller may see carries the server's copy (as it is
    after the push), so the device can undo the edit it could not push."""
    named = {r["id"]: as_uuid(r["id"]) for r in results if r["status"] == "invalid" and "id" in r}
    wanted = {memory_id for memory_id in named.values() if memory_id is not None}
    if not wanted:
        return results
    copies = {
        m.id: selectors.memory_payload(m)
        for m in memories_visible(principal=principal, project=project).filter(id__in=wanted)
    }
    return [
        {**r, "server": copies[named[r["id"]]]}
        if r["status"] == "invalid" and named.get(r.get("id")) in copies
        else r
        for r in results
    ]


class ConflictOut(OutputSchema):
    id: UUID
    memory_id: UUID
    project_id: UUID
    kind: str = Field(
        description="`edit` (both edited a field) or `delete` (deleted on the device, edited here)."
    )
    fields: list[str]
    status: str
    resolution: str
    author: str | None = Field(description="The email of the person whose device pushed the change.")
    device: str
    base_version: int
    base: dict[str, Any] = Field(
        description="The fields at the version both sides started from ({} if unknown)."
    )
    mine: dict[str, Any] = Field(description="What the device sent.")
    theirs_version: int
    theirs: dict[str, Any] = Field(description="The server's copy when the device pushed.")
    current_version: int = Field(description="The memory's version now: send it back to resolve.")
    current: dict[str, Any]
    created_at: datetime
    resolved_at: datetime | None
    resolved_by: str | None
    result_version: int | None


class ConflictQuery(QuerySchema):
    status: Literal["open", "resolved", "all"] = "open"


class ConflictResolveIn(InputSchema):
    keep: Literal["mine", "theirs", "merge"]
    base_version: int = Field(ge=1, description="The memory version you decided against (`current_version`).")
    fields: UpdatableFields | None = Field(
        None, description="For `merge`: the fields the merge sets (none: the memory stays as it is now)."
    )


def conflict_out(conflict) -> dict[str, Any]:
    return {
        "id": conflict.id,
        "memory_id": conflict.memory_id,
        "project_id": conflict.project_id,
        "kind": conflict.kind,
        "fields": conflict.fields,
        "status": conflict.status,
        "resolution": conflict.resolution,
        "author": conflict.author.email if conflict.author else None,
        "device": conflict.device_label,
        "base_version": conflict.base_version,
        "base": conflict.base,
        "mine": conflict.mine,
        "theirs_version": conflict.theirs_version,
        "theirs": conflict.theirs,
        "current_version": conflict.memory.version,
        "current": conflicts.shown(conflict.memory),
        "created_at": conflict.created_at,
        "resolved_at": conflict.resolved_at,
        "resolved_by": conflict.resolved_by.email if conflict.resolved_by else None,
        "result_version": conflict.result_version,
    }


@router.get("/projects/{project_id}/sync/conflicts", response=list[ConflictOut])
def conflicts_list(request, project_id: UUID, query: Query[ConflictQuery]):
    """Offline edits the server could not merge, waiting for a person (`status=open`, the
    default), with both versions and their common base."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    status = None if query.status == "all" else query.status
    found = selectors.conflicts_for(principal=request.auth, project=project, status=status)[:200]
    return [conflict_out(c) for c in found]


@router.get("/sync/conflicts/{conflict_id}", response=ConflictOut)
def conflicts_get(request, conflict_id: UUID):
    conflict = selectors.conflict_get(principal=request.auth, conflict_id=conflict_id)
    if not request.auth.has(conflict.organization_id, Perm.MEMORIES_READ):
        raise Forbidden("This needs the 'memories:read' permission.")
    return conflict_out(conflict)


@router.post(
    "/sync/conflicts/{conflict_id}/resolve",
    response=ConflictOut,
    openapi_extra=conflict(
        "Already resolved (`already_resolved`), or the memory changed since `base_version`"
        " (`stale_base`; `details.current_version` and `details.current` say how it is now)."
    ),
)
def conflicts_resolve(request, conflict_id: UUID, body: ConflictResolveIn):
    """Decide a conflict: keep the device's version (`mine`), the server's (`theirs`), or a
    `merge` you edited (`fields`). `mine` and `merge` make a new version of the memory, which
    every replica pulls at its next sync; `theirs` changes nothing and closes the conflict. The
    device's person, the memory's owner and stewards may resolve (others: 403)."""
    found = selectors.conflict_get(principal=request.auth, conflict_id=conflict_id)
    merged = body.fields.model_dump(exclude_none=True) if body.fields is not None else None
    resolved = conflicts.conflict_resolve(
        conflict=found, actor=request.auth, keep=body.keep, base_version=body.base_version, merged=merged
    )
    resolved.memory = (
        Memory.objects.filter(pk=resolved.memory_id).first() or resolved.memory
    )  # (gone: as it was)
    return conflict_out(resolved)
