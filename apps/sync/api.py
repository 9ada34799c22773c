"""Device sync: pull the change feed, push offline work (/sync/pull, /sync/push; docs/api/devices-sync.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal
from uuid import UUID

from ninja import Field, Query, Router
from pydantic import TypeAdapter, ValidationError, model_validator

from apps.memories.models import Memory
from apps.memories.selectors import memories_visible
from apps.memories.validation import MemoryChanges, MemoryDraft
from apps.sync import selectors, services
from apps.sync.feed import CURSOR_PATTERN, BadCursor, Cursor
from apps.tenants.roles import Perm
from apps.tenants.selectors import project_get
from memorysaas.kernel.errors import Forbidden, Invalid, field_errors
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
    return {"changes": result.changes, "cursor": result.cursor.encode(), "has_more": result.has_more}


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
