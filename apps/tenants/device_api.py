"""The device authorization grant's two endpoints (RFC 8628 §3.1 and §3.4), for `memorysaas login`.

Neither takes a key — the device has none yet. Bodies are JSON, like the rest of the API, and a
refused token request is a 400 whose envelope's `code` is the RFC's error code
(`authorization_pending`, `slow_down`, `expired_token`, `access_denied`, `invalid_grant`), except
an unknown device code: a 404, as the API answers anything it does not know.
"""

from __future__ import annotations

from typing import Literal
from uuid import UUID

from django.urls import reverse
from ninja import Field, Router

from apps.tenants import device_flow
from memorysaas.kernel.schemas import InputSchema, Name, OutputSchema

router = Router(tags=["devices"])
DEVICE_CODE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


class CodeIn(InputSchema):
    client_id: str = Field("memorysaas-cli", min_length=1, max_length=60)
    device_name: Name = Field(description="How the approval page names the device, e.g. its host name.")
    platform: str = Field("", max_length=60)


class CodeOut(OutputSchema):
    device_code: str = Field(description="The device's secret: it polls /device/token with it.")
    user_code: str = Field(description="For the person to enter at `verification_uri`.")
    verification_uri: str
    verification_uri_complete: str
    expires_in: int = Field(description="Seconds until both codes expire.")
    interval: int = Field(description="Seconds to wait between polls.")


@router.post("/device/code", auth=None, response=CodeOut, summary="Start a device login (RFC 8628)")
def device_code(request, payload: CodeIn):
    """A code pair for a device that wants a key: it shows `user_code` and `verification_uri` to
    its user and polls /device/token with `device_code` every `interval` seconds."""
    started = device_flow.authorization_start(
        client_id=payload.client_id, device_name=payload.device_name, platform=payload.platform
    )
    page = request.build_absolute_uri(reverse("device"))
    authorization = started.authorization
    return {
        "device_code": started.device_code,
        "user_code": started.user_code,
        "verification_uri": page,
        "verification_uri_complete": f"{page}?user_code={started.user_code}",
        "expires_in": round((authorization.expires_at - authorization.created_at).total_seconds()),
        "interval": authorization.interval,
    }


class TokenIn(InputSchema):
    grant_type: Literal["urn:ietf:params:oauth:grant-type:device_code"]
    device_code: str = Field(min_length=1, max_length=200)
    client_id: str = Field("memorysaas-cli", min_length=1, max_length=60)


class OrganizationRef(OutputSchema):
    id: UUID
    slug: str
    name: str


class ProjectRef(OutputSchema):
    id: UUID
    slug: str
    name: str
    organization: OrganizationRef


class TokenOut(OutputSchema):
    access_token: str = Field(description="The device's API key (`msk_…`), shown this once.")
    token_type: Literal["Bearer"]
    scope: str = Field(description="The key's scopes, space-separated.")
    device_id: UUID
    organization: OrganizationRef
    project: ProjectRef


@router.post("/device/token", auth=None, response=TokenOut, summary="Poll for the device's key (RFC 8628)")
def device_token(request, payload: TokenIn):
    """The device's own API key once a person approved the login on /device (the Device is
    registered then), limited to the project they chose. Until then a 400 whose `code` says why:
    `authorization_pending` (ask again after `interval`), `slow_down` (asked too soon; the
    interval grows by 5 s), `access_denied`, `expired_token`, `invalid_grant` (already exchanged);
    an unknown device code is a 404 (`invalid_grant`)."""
    issued = device_flow.token_exchange(device_code=payload.device_code, client_id=payload.client_id)
    device = issued.device
    project = device.api_key.project
    return {
        "access_token": issued.api_key,
        "token_type": "Bearer",
        "scope": " ".join(device.api_key.scopes),
        "device_id": device.id,
        "organization": device.organization,
        "project": project,
    }
