"""Organization webhooks: endpoints (admins), their delivery log, and redelivery."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated
from uuid import UUID

from ninja import Field, Router, Status

from apps.tenants import selectors as tenant_selectors
from apps.tenants.roles import Perm
from apps.tenants.services import require
from apps.webhooks import selectors, services
from memorysaas.kernel.events import EVENT_TYPES
from memorysaas.kernel.schemas import InputSchema, OutputSchema

router = Router(tags=["webhooks"])

Url = Annotated[str, Field(min_length=8, max_length=500, pattern=r"^https?://[^\s]+$")]
EventTypes = Annotated[
    list[str],
    Field(
        min_length=1,
        max_length=len(EVENT_TYPES),
        json_schema_extra={"items": {"type": "string", "enum": list(EVENT_TYPES)}},
    ),
]


class EndpointIn(InputSchema):
    url: Url
    event_types: EventTypes = Field(description=f"Any of {', '.join(EVENT_TYPES)}.")
    description: str = Field(default="", max_length=200)


class EndpointPatch(InputSchema):
    url: Url | None = None
    event_types: EventTypes | None = None
    description: str | None = Field(default=None, max_length=200)
    active: bool | None = None
    rotate_secret: bool = Field(default=False, description="Issue a new signing secret (returned once).")


class EndpointOut(OutputSchema):
    id: UUID
    url: str
    event_types: list[str]
    description: str
    active: bool
    created_at: datetime


class EndpointSecretOut(EndpointOut):
    secret: str | None = Field(
        default=None, description="The signing secret: on creation and after `rotate_secret` only."
    )


class AttemptOut(OutputSchema):
    number: int
    status_code: int | None
    response_ms: float | None
    error: str
    succeeded: bool
    manual: bool
    at: datetime


class DeliveryOut(OutputSchema):
    id: UUID
    event_id: UUID
    event_type: str
    status: str = Field(description="`pending` (waiting for an attempt), `succeeded` or `failed`.")
    attempts: int
    next_attempt_at: datetime | None
    created_at: datetime
    attempt_log: list[AttemptOut]


def _admin_org(request, org: str):
    organization = tenant_selectors.organization_get(principal=request.auth, ref=org)
    require(request.auth, organization.id, Perm.ADMIN)
    return organization


def _endpoint(request, org: str, webhook_id: UUID):
    organization = _admin_org(request, org)
    return selectors.endpoint_get(principal=request.auth, organization=organization, endpoint_id=webhook_id)


@router.get("/orgs/{org}/webhooks", response=list[EndpointOut])
def webhooks_list(request, org: str):
    """The organization's webhook endpoints (admins). Secrets are not listed."""
    organization = _admin_org(request, org)
    return list(selectors.endpoints_for(principal=request.auth, organization=organization))


@router.post("/orgs/{org}/webhooks", response={201: EndpointSecretOut})
def webhooks_create(request, org: str, payload: EndpointIn):
    """Add an endpoint. A URL whose host resolves to a loopback, private or link-local address is
    refused with 422 `unsafe_url` (unless the server allows them). The answer carries the secret
    that signs every delivery (docs/webhooks.md: verifying a signature)."""
    organization = _admin_org(request, org)
    endpoint = services.endpoint_create(
        organization=organization,
        actor=request.auth,
        url=payload.url,
        event_types=payload.event_types,
        description=payload.description,
    )
    return Status(201, endpoint)


@router.get("/orgs/{org}/webhooks/{webhook_id}", response=EndpointOut)
def webhooks_get(request, org: str, webhook_id: UUID):
    return _endpoint(request, org, webhook_id)


@router.patch("/orgs/{org}/webhooks/{webhook_id}", response=EndpointSecretOut)
def webhooks_update(request, org: str, webhook_id: UUID, payload: EndpointPatch):
    endpoint = _endpoint(request, org, webhook_id)
    endpoint = services.endpoint_update(
        endpoint=endpoint,
        actor=request.auth,
        url=payload.url,
        event_types=payload.event_types,
        description=payload.description,
        active=payload.active,
        rotate_secret=payload.rotate_secret,
    )
    out = EndpointSecretOut.model_validate(endpoint, from_attributes=True)
    if not payload.rotate_secret:
        out.secret = None
    return out


@router.delete("/orgs/{org}/webhooks/{webhook_id}", response={204: None})
def webhooks_delete(request, org: str, webhook_id: UUID):
    services.endpoint_delete(endpoint=_endpoint(request, org, webhook_id), actor=request.auth)
    return Status(204, None)


@router.get("/orgs/{org}/webhooks/{webhook_id}/deliveries", response=list[DeliveryOut])
def webhooks_deliveries(request, org: str, webhook_id: UUID):
    """The endpoint's last 50 deliveries, newest first, each with its attempts."""
    endpoint = _endpoint(request, org, webhook_id)
    deliveries = selectors.deliveries_for(endpoint=endpoint)
    attempts = selectors.attempts_for(deliveries=deliveries)
    return [{**_fields(d), "attempt_log": attempts[d.id]} for d in deliveries]


def _fields(delivery) -> dict:
    return {
        name: getattr(delivery, name)
        for name in ("id", "event_id", "event_type", "status", "attempts", "next_attempt_at", "created_at")
    }


@router.post(
    "/orgs/{org}/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver", response={202: DeliveryOut}
)
def webhooks_redeliver(request, org: str, webhook_id: UUID, delivery_id: UUID):
    """Send a delivery again now (its attempt is logged as manual)."""
    endpoint = _endpoint(request, org, webhook_id)
    delivery = selectors.delivery_get(endpoint=endpoint, delivery_id=delivery_id)
    delivery = services.redeliver(delivery=delivery, actor=request.auth)
    attempts = selectors.attempts_for(deliveries=[delivery])[delivery.id]
    return Status(202, {**_fields(delivery), "attempt_log": attempts})
