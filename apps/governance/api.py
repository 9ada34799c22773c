"""Disputes, notifications and trust-level endpoints."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from ninja import Field, Query, Router, Status
from pydantic import ConfigDict

from apps.governance import selectors, services, trust
from apps.governance.models import DisputeStatus, Resolution
from apps.memories.api import MemoryPatch
from apps.memories.selectors import memory_get
from apps.tenants.roles import Perm
from apps.tenants.selectors import project_get
from apps.tenants.services import require
from memorysaas.kernel.errors import conflict
from memorysaas.kernel.openapi import link, links, openapi_extra, with_schema
from memorysaas.kernel.schemas import InputSchema, OutputSchema, QuerySchema

router = Router(tags=["governance"])


class DisputeIn(InputSchema):
    reason: str = Field(min_length=1, max_length=5000)


class CommentIn(InputSchema):
    body: str = Field(min_length=1, max_length=5000)


class ResolveIn(InputSchema):
    # (Changes go with an update, which needs them, and with nothing else.)
    model_config = ConfigDict(
        json_schema_extra=with_schema(
            {
                "if": {"properties": {"resolution": {"const": "update"}}},
                "then": {"required": ["changes"], "properties": {"changes": {"type": "object"}}},
                "else": {"properties": {"changes": {"type": "null"}}},
            }
        )
    )

    resolution: Resolution
    note: str = Field("", max_length=5000)
    changes: MemoryPatch | None = Field(
        None,
        description="For resolution 'update' (only): the memory fields to change, as PATCH /memories/{id}.",
    )


class CommentOut(OutputSchema):
    id: int
    kind: str
    author_label: str
    body: str
    created_at: datetime


class DisputeOut(OutputSchema):
    id: UUID
    project_id: UUID
    memory_id: UUID
    opened_by_label: str
    reason: str
    status: str
    resolution: str
    resolution_note: str
    resolved_by_label: str
    override: bool
    created_at: datetime
    updated_at: datetime
    resolved_at: datetime | None


class DisputeDetailOut(DisputeOut):
    comments: list[CommentOut]

    @staticmethod
    def resolve_comments(obj) -> list:
        return list(selectors.dispute_thread(dispute=obj))


class DisputeFilters(QuerySchema):
    status: DisputeStatus | None = None


class NotificationOut(OutputSchema):
    id: int
    kind: str
    title: str
    body: str
    url: str
    read: bool
    project_id: UUID | None
    created_at: datetime


class NotificationFilters(QuerySchema):
    unread: bool = False
    limit: int = Field(50, ge=1, le=200)


class ReadIn(InputSchema):
    ids: list[int] | None = Field(None, description="Omit to mark every notification read.")


class ReadOut(OutputSchema):
    marked: int


class OfferOut(OutputSchema):
    level: int
    label: str
    direction: Literal["advance", "regress"]
    reason: str


class TrustOut(OutputSchema):
    level: int | None
    label: str
    injection_min_confidence: float
    sessions: int
    memories: int
    confirmed_share: float
    correction_rate: float | None
    confirmations: int
    corrections: int
    flags: int
    worst_session_flags: int
    offer: OfferOut | None
    allowed_levels: list[int]


class TrustIn(InputSchema):
    level: int = Field(ge=1, le=4)
    reason: str = Field("", max_length=300)


def _trust_out(project) -> dict[str, Any]:
    level = trust.current_level(project)
    offer = trust.project_offer(project)
    stats = trust.trust_stats(project)
    return {
        "level": level,
        "label": trust.TrustLevel(level).label if level else "Default",
        "injection_min_confidence": trust.threshold_for(project),
        "sessions": stats.sessions,
        "memories": stats.memories,
        "confirmed_share": round(stats.confirmed_share, 4),
        "correction_rate": None if stats.correction_rate is None else round(stats.correction_rate, 4),
        "confirmations": stats.confirmations,
        "corrections": stats.corrections,
        "flags": stats.flags,
        "worst_session_flags": stats.worst_session_flags,
        "offer": offer,
        "allowed_levels": trust.allowed_levels(level, offer),
    }


_DISPUTE = {"dispute_id": "$response.body#/id"}


@router.post(
    "/memories/{memory_id}/disputes",
    response={201: DisputeDetailOut},
    openapi_extra=openapi_extra(
        conflict(
            "The memory already has an open dispute (`conflict`): comment on it instead; or it is a"
            " personal memory, which is its owner's alone to correct."
        ),
        links(
            201,
            GetDispute=link("GET", "/disputes/{dispute_id}", **_DISPUTE),
            Comment=link("POST", "/disputes/{dispute_id}/comments", **_DISPUTE),
            Resolve=link("POST", "/disputes/{dispute_id}/resolve", **_DISPUTE),
        ),
    ),
)
def disputes_open(request, memory_id: UUID, payload: DisputeIn):
    """Dispute a memory (memories:write): it gets the disputed badge and stewards are notified."""
    memory = memory_get(principal=request.auth, memory_id=memory_id)
    dispute = services.dispute_open(memory=memory, actor=request.auth, reason=payload.reason)
    return Status(201, dispute)


@router.get("/memories/{memory_id}/disputes", response=list[DisputeOut])
def disputes_of_memory(request, memory_id: UUID):
    memory = memory_get(principal=request.auth, memory_id=memory_id)
    require(request.auth, memory.organization_id, Perm.MEMORIES_READ)
    return list(selectors.disputes_for_memory(principal=request.auth, memory=memory))


@router.get("/projects/{project_id}/disputes", response=list[DisputeOut])
def disputes_of_project(request, project_id: UUID, filters: Query[DisputeFilters]):
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    return list(
        selectors.disputes_for_project(principal=request.auth, project=project, status=filters.status)
    )


def _readable(request, dispute_id: UUID):
    dispute = selectors.dispute_get(principal=request.auth, dispute_id=dispute_id)
    require(request.auth, dispute.organization_id, Perm.MEMORIES_READ)
    return dispute


@router.get("/disputes/{dispute_id}", response=DisputeDetailOut)
def disputes_get(request, dispute_id: UUID):
    return _readable(request, dispute_id)


@router.get("/disputes/{dispute_id}/comments", response=list[CommentOut])
def disputes_comments(request, dispute_id: UUID):
    return list(selectors.dispute_thread(dispute=_readable(request, dispute_id)))


@router.post("/disputes/{dispute_id}/comments", response={201: CommentOut})
def disputes_comment(request, dispute_id: UUID, payload: CommentIn):
    dispute = _readable(request, dispute_id)
    return Status(201, services.dispute_comment(dispute=dispute, actor=request.auth, body=payload.body))


@router.post(
    "/disputes/{dispute_id}/resolve",
    response=DisputeDetailOut,
    openapi_extra=conflict("The update would leave the memory as it is (`conflict`)."),
)
def disputes_resolve(request, dispute_id: UUID, payload: ResolveIn):
    """Steward, admin or owner: update the memory, deprecate it, or reject the dispute. An
    admin or owner may resolve a closed dispute again (an override; history is kept)."""
    dispute = _readable(request, dispute_id)
    return services.dispute_resolve(
        dispute=dispute,
        actor=request.auth,
        resolution=payload.resolution,
        note=payload.note,
        changes=payload.changes.model_dump(exclude_unset=True) if payload.changes else None,
    )


@router.get("/notifications", response=list[NotificationOut])
def notifications_list(request, filters: Query[NotificationFilters]):
    """The caller's own notifications (an API key: its acting user's, within the key's
    organization or project), newest first."""
    auth = request.auth
    qs = selectors.notifications_for(user=auth.user, unread_only=filters.unread, key=auth.api_key)
    return list(qs[: filters.limit])


@router.post("/notifications/read", response=ReadOut)
def notifications_read(request, payload: ReadIn):
    auth = request.auth
    return {"marked": services.notifications_mark_read(user=auth.user, ids=payload.ids, key=auth.api_key)}


@router.post("/notifications/{notification_id}/read", response=NotificationOut)
def notification_read(request, notification_id: int):
    auth = request.auth
    item = selectors.notification_get(user=auth.user, notification_id=notification_id, key=auth.api_key)
    services.notifications_mark_read(user=auth.user, ids=[item.pk], key=auth.api_key)
    item.read = True
    return item


@router.get("/projects/{project_id}/trust", response=TrustOut)
def trust_get(request, project_id: UUID):
    """The project's trust level, its injection threshold, the feedback behind the rules and
    the move they offer (never applied until an owner or admin accepts it)."""
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.MEMORIES_READ)
    return _trust_out(project)


@router.put(
    "/projects/{project_id}/trust",
    response=TrustOut,
    openapi_extra=conflict(
        "The level is not on offer now (`conflict`): accept the offered level, step back, or opt in"
        " to Autonomous from Confident; `details.allowed` lists them."
    ),
)
def trust_set(request, project_id: UUID, payload: TrustIn):
    project = project_get(principal=request.auth, project_id=project_id, permission=Perm.ADMIN)
    services.trust_level_set(project=project, actor=request.auth, level=payload.level, reason=payload.reason)
    return _trust_out(project)
