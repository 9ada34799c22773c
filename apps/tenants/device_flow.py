"""`memorysaas login`, server side: the OAuth 2.0 device authorization grant (RFC 8628).

1. The device asks for a code pair (`authorization_start`): a long device code it keeps secret
   and polls with, and a short user code for a person to type (8 letters without vowels or
   lookalikes, shown as `BCDF-GHJK`; §6.1).
2. A signed-in person enters the user code on the dashboard's /device page and approves it into
   one of their projects (`authorization_approve`), or denies it.
3. The device polls (`token_exchange`). Until someone decides it hears `authorization_pending`;
   polling faster than the interval gets `slow_down` and five seconds more on the interval (§3.5);
   after a denial `access_denied`, after expiry `expired_token`. Once approved, its first poll
   registers the Device and gets the device's own API key — made there and then, as the person
   who approved, with their current roles: the key is never stored, not even for a moment.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.tenants.models import (
    Device,
    DeviceAuthorization,
    DeviceAuthorizationStatus,
    Organization,
    Project,
)
from apps.tenants.principal import Principal
from apps.tenants.roles import Perm
from apps.tenants.services import audit_record, device_register, require
from memorysaas.kernel.errors import ApiError, Invalid, NotFound

Status = DeviceAuthorizationStatus
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"  # no vowels (no words), nothing read as a digit
USER_CODE_LENGTH = 8
SLOW_DOWN_STEP = 5  # seconds added to the interval at each `slow_down`
KEPT_AFTER_EXPIRY = timedelta(days=1)  # then swept: a stale row only blocks its user code


class GrantError(ApiError):
    """A token request the grant refuses, with the RFC's error code (a 400, as §3.5 says)."""

    def __init__(self, code: str, message: str, *, details: dict | None = None, status: int = 400) -> None:
        super().__init__(status, message, code=code, details=details)


def _hash(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()


def normalize_user_code(raw: str) -> str:
    """What a person typed, as stored: letters of the alphabet only, upper case (`bcdf ghjk`,
    `BCDF-GHJK` and `bcdfghjk` are one code)."""
    return "".join(c for c in raw.upper() if c in USER_CODE_ALPHABET)


def display_user_code(code: str) -> str:
    half = USER_CODE_LENGTH // 2
    return f"{code[:half]}-{code[half:]}"


@dataclass(frozen=True)
class Started:
    authorization: DeviceAuthorization
    device_code: str
    user_code: str  # as shown: BCDF-GHJK


@transaction.atomic
def authorization_start(*, client_id: str, device_name: str, platform: str = "") -> Started:
    DeviceAuthorization.objects.filter(expires_at__lt=timezone.now() - KEPT_AFTER_EXPIRY).delete()
    device_code = secrets.token_urlsafe(32)
    while True:  # (20^8 codes: a clash with a live one is rare, and then another is drawn)
        user_code = "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(USER_CODE_LENGTH))
        if not DeviceAuthorization.objects.filter(user_code_hash=_hash(user_code)).exists():
            break
    authorization = DeviceAuthorization.objects.create(
        device_code_hash=_hash(device_code),
        user_code_hash=_hash(user_code),
        client_id=client_id,
        device_name=device_name.strip() or "device",
        platform=platform.strip(),
        interval=settings.DEVICE_FLOW_INTERVAL,
        expires_at=timezone.now() + timedelta(seconds=settings.DEVICE_FLOW_TTL),
    )
    return Started(authorization, device_code, display_user_code(user_code))


def authorization_for_user_code(raw: str) -> DeviceAuthorization | None:
    """The login waiting for a decision under this user code, or None (unknown, expired or
    already decided: the page says the same for each)."""
    code = normalize_user_code(raw)
    if len(code) != USER_CODE_LENGTH:
        return None
    return DeviceAuthorization.objects.filter(
        user_code_hash=_hash(code), status=Status.PENDING, expires_at__gt=timezone.now()
    ).first()


def _locked_pending(authorization: DeviceAuthorization) -> DeviceAuthorization:
    locked = DeviceAuthorization.objects.select_for_update().get(pk=authorization.pk)
    if locked.status != Status.PENDING or locked.is_expired:
        raise Invalid("This code has expired or was already used: run `memorysaas login` again.")
    return locked


@transaction.atomic
def authorization_approve(
    *, authorization: DeviceAuthorization, actor: Principal, organization_id, project_id
) -> DeviceAuthorization:
    """Approve the login into a project the person may sync: an organization they are not in and
    a project they cannot see are "not found", as everywhere."""
    if actor.user is None:
        raise Invalid("A device is approved by a signed-in person.")
    organization = Organization.objects.visible_to(actor).filter(id=organization_id).first()
    if organization is None:
        raise NotFound("No such organization.")
    require(actor, organization.id, Perm.SYNC)
    project = Project.objects.visible_to(actor).filter(organization=organization, id=project_id).first()
    if project is None:
        raise NotFound("No such project in this organization.")
    locked = _locked_pending(authorization)
    locked.status = Status.APPROVED
    locked.decided_by = actor.user
    locked.decided_at = timezone.now()
    locked.organization = organization
    locked.project = project
    locked.save(update_fields=["status", "decided_by", "decided_at", "organization", "project"])
    audit_record(
        actor=actor,
        action="device.login_approved",
        organization=organization,
        target=project,
        metadata={"device_name": locked.device_name, "platform": locked.platform},
    )
    return locked


@transaction.atomic
def authorization_deny(*, authorization: DeviceAuthorization, actor: Principal) -> DeviceAuthorization:
    locked = _locked_pending(authorization)
    locked.status = Status.DENIED
    locked.decided_by = actor.user
    locked.decided_at = timezone.now()
    locked.save(update_fields=["status", "decided_by", "decided_at"])
    audit_record(actor=actor, action="device.login_denied", metadata={"device_name": locked.device_name})
    return locked


@dataclass(frozen=True)
class Issued:
    device: Device
    api_key: str


def token_exchange(*, device_code: str, client_id: str) -> Issued:
    """The device's key, or a `GrantError` with the RFC's code. The poll itself is recorded even
    when the answer is an error (that is how the next poll knows it came too soon)."""
    outcome = _poll(device_code, client_id)
    if isinstance(outcome, GrantError):
        raise outcome
    return outcome


@transaction.atomic
def _poll(device_code: str, client_id: str) -> Issued | GrantError:
    authorization = (
        DeviceAuthorization.objects.select_for_update().filter(device_code_hash=_hash(device_code)).first()
    )
    if authorization is None or authorization.client_id != client_id:
        # (a 404, as the API answers for anything it does not know, with the RFC's code)
        return GrantError("invalid_grant", "Unknown device code: run `memorysaas login` again.", status=404)
    if authorization.status == Status.ISSUED:
        return GrantError("invalid_grant", "This device code was already exchanged for a key.")
    if authorization.status == Status.DENIED:
        return GrantError("access_denied", "The login was denied.")
    if authorization.is_expired:
        return GrantError("expired_token", "The code expired before anyone approved it.")
    now = timezone.now()
    too_soon = authorization.last_polled_at is not None and now - authorization.last_polled_at < timedelta(
        seconds=authorization.interval
    )
    authorization.last_polled_at = now
    if too_soon:
        authorization.interval += SLOW_DOWN_STEP
        authorization.save(update_fields=["last_polled_at", "interval"])
        return GrantError(
            "slow_down",
            f"Polled too soon: wait {authorization.interval} seconds between requests.",
            details={"interval": authorization.interval},
        )
    if authorization.status == Status.PENDING:
        authorization.save(update_fields=["last_polled_at"])
        return GrantError(
            "authorization_pending",
            "Waiting for someone to approve the code.",
            details={"interval": authorization.interval},
        )
    return _issue(authorization)


def _issue(authorization: DeviceAuthorization) -> Issued | GrantError:
    """Register the device as the person who approved it, with what they may do now (a person
    removed from the organization since approving registers nothing)."""
    approver = Principal.for_user(authorization.decided_by)
    still_visible = Project.objects.visible_to(approver).filter(id=authorization.project_id).exists()
    if not (still_visible and approver.has(authorization.organization_id, Perm.SYNC)):
        authorization.status = Status.DENIED
        authorization.save(update_fields=["status", "last_polled_at"])
        return GrantError(
            "access_denied", "The person who approved the login can no longer sync this project."
        )
    device, key = device_register(
        organization=authorization.organization,
        actor=approver,
        name=authorization.device_name,
        platform=authorization.platform,
        project=authorization.project,
    )
    authorization.status = Status.ISSUED
    authorization.device = device
    authorization.save(update_fields=["status", "device", "last_polled_at"])
    return Issued(device=device, api_key=key)
