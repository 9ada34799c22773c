"""Writes for tenancy: organizations, projects, members, invitations, API keys, devices, audit."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.db.models import Model, Q, QuerySet
from django.utils import timezone
from django.utils.text import slugify

from apps.tenants.models import (
    ApiKey,
    AuditLog,
    Device,
    Invitation,
    Membership,
    Organization,
    OrganizationLimits,
    Project,
    Team,
    TeamMembership,
    User,
    hash_api_secret,
)
from apps.tenants.principal import Principal
from apps.tenants.roles import API_KEY_SCOPES, Perm, Role, can_assign_role
from memorysaas.kernel.errors import ApiError, Forbidden, Invalid
from memorysaas.kernel.realtime import access_changed

_SECRET_WORDS = ("secret", "password", "token", "key", "authorization", "credential")


def _scrub(metadata: dict[str, Any]) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for name, value in metadata.items():
        if any(word in name.lower() for word in _SECRET_WORDS) and name not in ("key_prefix", "api_key_id"):
            continue
        clean[name] = _scrub(value) if isinstance(value, dict) else value
    return clean


def audit_record(
    *,
    actor: Principal,
    action: str,
    organization: Organization | None = None,
    target: Model | None = None,
    metadata: dict[str, Any] | None = None,
) -> AuditLog:
    if organization is None and target is not None:
        organization = getattr(target, "organization", None)
    return AuditLog.objects.create(
        organization=organization,
        actor_user=actor.user if actor.user is not None and actor.user.pk else None,
        actor_api_key=actor.api_key,
        actor_label=actor.label,
        action=action,
        target_type=target._meta.label_lower if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        metadata=_scrub(metadata or {}),
    )


def unique_slug(queryset: QuerySet, base: str, *, field: str = "slug", max_length: int = 50) -> str:
    root = (slugify(base) or "item")[:max_length]
    candidate, n = root, 1
    while queryset.filter(**{field: candidate}).exists():
        n += 1
        candidate = f"{root[: max_length - len(str(n)) - 1]}-{n}"
    return candidate


def require(principal: Principal, organization_id, permission: str) -> None:
    if not principal.has(organization_id, permission):
        raise Forbidden(f"This needs the '{permission}' permission.")


@transaction.atomic
def organization_create(
    *, name: str, owner: User, slug: str | None = None, personal: bool = False
) -> Organization:
    org = Organization(
        name=name,
        slug=unique_slug(Organization.objects.all(), slug or name),
        is_personal=personal,
    )
    org.full_clean()
    org.save()
    Membership.objects.create(organization=org, user=owner, role=Role.OWNER)
    audit_record(actor=Principal(user=owner), action="organization.created", organization=org, target=org)
    return org


@transaction.atomic
def personal_workspace_create(*, user: User) -> Project:
    """Signup gives everyone an organization of their own with a first project in it."""
    org = organization_create(  # (a name fits its 120 characters, however long the address)
        name=f"{user.display_name[:100]}'s workspace", slug=user.display_name[:50], owner=user, personal=True
    )
    return project_create(
        organization=org, actor=Principal(user=user, roles={org.id: Role.OWNER}), name="My first project"
    )


@transaction.atomic
def project_create(
    *,
    organization: Organization,
    actor: Principal,
    name: str,
    slug: str | None = None,
    description: str = "",
    methodology: str = "native",
    team: Team | None = None,
) -> Project:
    require(actor, organization.id, Perm.ADMIN)
    if actor.project_limit is not None:  # (it could never see what it made)
        raise Forbidden("A key limited to one project cannot create projects: use an organization-wide key.")
    if team is not None and team.organization_id != organization.id:
        raise Invalid("The team belongs to another organization.")
    siblings = Project.objects.filter(organization=organization)
    if slug and siblings.filter(slug=slug).exists():  # (asked for by name: not quietly another)
        raise ApiError(
            409,
            f"The organization already has a project '{slug}'.",
            code="slug_taken",
            details={"field": "slug"},
        )
    project = Project(
        organization=organization,
        name=name.strip(),
        slug=slug or unique_slug(siblings, name),
        description=description,
        methodology=methodology,
        team=team,
        created_by=actor.user,
    )
    try:
        project.full_clean()
    except ValidationError as exc:
        raise Invalid("The project is not valid.", details=exc.message_dict) from None
    project.save()
    audit_record(actor=actor, action="project.created", target=project, metadata={"name": project.name})
    return project


@transaction.atomic
def team_create(*, organization: Organization, actor: Principal, name: str) -> Team:
    require(actor, organization.id, Perm.ADMIN)
    team = Team.objects.create(
        organization=organization,
        name=name,
        slug=unique_slug(Team.objects.filter(organization=organization), name),
    )
    audit_record(actor=actor, action="team.created", target=team)
    return team


@transaction.atomic
def team_member_add(*, team: Team, actor: Principal, user: User) -> TeamMembership:
    require(actor, team.organization_id, Perm.MEMBERS_MANAGE)
    if not Membership.objects.filter(organization_id=team.organization_id, user=user).exists():
        raise Invalid("Only members of the organization can join its teams.")
    membership, _ = TeamMembership.objects.get_or_create(team=team, user=user)
    audit_record(actor=actor, action="team.member_added", target=team, metadata={"user_id": user.pk})
    return membership


def _validate_scopes(scopes: Iterable[str]) -> list[str]:
    chosen = sorted(set(scopes))
    unknown = [s for s in chosen if s not in API_KEY_SCOPES]
    if unknown:
        raise Invalid("Unknown scopes.", details={"unknown": unknown, "allowed": list(API_KEY_SCOPES)})
    if not chosen:
        raise Invalid("A key needs at least one scope.", details={"allowed": list(API_KEY_SCOPES)})
    return chosen


@transaction.atomic
def api_key_create(
    *,
    organization: Organization,
    actor: Principal,
    name: str,
    scopes: Iterable[str],
    project: Project | None = None,
    expires_at: datetime | None = None,
    check_permission: bool = True,
) -> tuple[ApiKey, str]:
    """Returns the key and its full secret form, which is shown once and never stored."""
    if check_permission:
        require(actor, organization.id, Perm.ADMIN)
    chosen = _validate_scopes(scopes)
    if actor.api_key is not None and not set(chosen) <= set(actor.api_key.scopes):
        raise Forbidden("A key cannot create a key with scopes it does not have itself.")
    if project is not None and project.organization_id != organization.id:
        raise Invalid("The project belongs to another organization.")
    if actor.project_limit is not None:
        # A key limited to one project makes keys limited to it: it cannot widen its own reach.
        if project is not None and project.id != actor.project_limit:
            raise Forbidden("A key limited to one project can only create keys for that project.")
        project = project or Project.objects.get(id=actor.project_limit)
    if expires_at is not None and expires_at <= timezone.now():
        raise Invalid("expires_at must be in the future.")
    if actor.api_key is not None and actor.api_key.expires_at is not None:
        # Nor can a key outlive itself through a key it makes.
        if expires_at is not None and expires_at > actor.api_key.expires_at:
            raise Forbidden("A key cannot create a key that expires after itself.")
        expires_at = expires_at or actor.api_key.expires_at
    for _ in range(5):
        full, prefix, secret = ApiKey.generate()
        if not ApiKey.objects.filter(prefix=prefix).exists():
            break
    api_key = ApiKey.objects.create(
        organization=organization,
        project=project,
        name=name.strip() or "API key",
        prefix=prefix,
        secret_hash=hash_api_secret(secret),
        last_four=secret[-4:],
        scopes=chosen,
        created_by=actor.user,
        expires_at=expires_at,
    )
    audit_record(
        actor=actor,
        action="api_key.created",
        target=api_key,
        metadata={"key_prefix": prefix, "scopes": chosen, "project_id": str(project.id) if project else None},
    )
    return api_key, full


@transaction.atomic
def api_key_revoke(*, api_key: ApiKey, actor: Principal) -> ApiKey:
    require(actor, api_key.organization_id, Perm.ADMIN)
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at"])
        audit_record(
            actor=actor, action="api_key.revoked", target=api_key, metadata={"key_prefix": api_key.prefix}
        )
        access_changed(api_key.organization_id)
    return api_key


def api_key_authenticate(raw: str) -> ApiKey | None:
    """The key for a presented secret, or None. Always does one lookup and one constant-time compare."""
    parts = raw.split("_")
    if len(parts) != 3 or parts[0] != "msk" or len(parts[1]) != 8 or len(parts[2]) != 40:
        return None
    _, prefix, secret = parts
    if not (prefix.isascii() and prefix.isalnum() and secret.isascii() and secret.isalnum()):
        return None
    # (the organization's rate limits come along: every request with a key is charged against them)
    # (not .first(): ordering a unique prefix's one row by the model's -created_at made Django
    # build this query twice as slowly, on every request with a key; docs/scaling.md)
    found = list(
        ApiKey.objects.select_related("created_by", "device__user", "organization__limits")
        .filter(prefix=prefix)
        .order_by()[:1]
    )
    api_key = found[0] if found else None
    if api_key is None:
        hash_api_secret(secret)  # same work either way
        return None
    if not api_key.matches(secret) or not api_key.is_active:
        return None
    acting = api_key.acting_user
    if acting is not None and not acting.is_active:
        return None  # a deactivated person's keys act for no one (their sign-in stops too)
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at > ApiKey.LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now
    return api_key


@transaction.atomic
def invitation_create(
    *, organization: Organization, actor: Principal, email: str, role: str
) -> tuple[Invitation, str]:
    require(actor, organization.id, Perm.MEMBERS_MANAGE)
    actor_role = actor.role_in(organization.id)
    if actor_role is None or not can_assign_role(actor_role, role):
        raise Forbidden(f"You cannot invite someone as {role}.")
    email = email.strip().lower()
    if Membership.objects.filter(organization=organization, user__email__iexact=email).exists():
        raise ApiError(409, f"{email} is already a member.", code="already_member")
    # Inviting an address again sends a fresh link: the older ones stop working, so only one
    # invitation an address holds is ever open (a spare one let a removed member walk back in).
    _invitations_close(organization.id, email)
    token = secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        organization=organization,
        email=email,
        role=role,
        token_hash=Invitation.hash_token(token),
        invited_by=actor.user,
        expires_at=timezone.now() + Invitation.INVITATION_TTL,
    )
    audit_record(
        actor=actor, action="invitation.created", target=invitation, metadata={"email": email, "role": role}
    )
    link = f"{settings.SITE_URL}/invitations/{token}/"
    transaction.on_commit(
        lambda: send_mail(
            f"[memorysaas] You are invited to {organization.name}",
            f"{actor.user.display_name if actor.user else 'Someone'} invited you to join {organization.name} "
            f"as {role}.\n\nAccept: {link}\n\nThe link expires in 7 days.",
            None,
            [email],
        )
    )
    return invitation, token


def invitation_for_token(token: str) -> Invitation | None:
    return (
        Invitation.objects.select_related("organization")
        .filter(token_hash=Invitation.hash_token(token))
        .first()
    )


@transaction.atomic
def invitation_accept(*, token: str, user: User) -> Membership:
    invitation = invitation_for_token(token)
    if invitation is None or not invitation.is_pending:
        raise ApiError(404, "This invitation does not exist or has expired.")
    if invitation.email.lower() != user.email.lower():
        raise Forbidden("This invitation was sent to another email address.")
    try:
        membership, created = Membership.objects.get_or_create(
            organization=invitation.organization, user=user, defaults={"role": invitation.role}
        )
    except IntegrityError:
        membership, _created = Membership.objects.get(organization=invitation.organization, user=user), False
    invitation.accepted_at = timezone.now()
    invitation.accepted_by = user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    _invitations_close(invitation.organization_id, invitation.email)
    audit_record(actor=Principal(user=user), action="invitation.accepted", target=invitation)
    return membership


@transaction.atomic
def invitation_revoke(*, invitation: Invitation, actor: Principal) -> None:
    require(actor, invitation.organization_id, Perm.MEMBERS_MANAGE)
    if invitation.revoked_at is None and invitation.accepted_at is None:
        invitation.revoked_at = timezone.now()
        invitation.save(update_fields=["revoked_at"])
        audit_record(actor=actor, action="invitation.revoked", target=invitation)


def _owners_left(organization_id, excluding: Membership) -> int:
    return (
        Membership.objects.filter(organization_id=organization_id, role=Role.OWNER)
        .exclude(pk=excluding.pk)
        .count()
    )


@transaction.atomic
def membership_change_role(*, membership: Membership, actor: Principal, role: str) -> Membership:
    require(actor, membership.organization_id, Perm.MEMBERS_MANAGE)
    actor_role = actor.role_in(membership.organization_id)
    if (
        actor_role is None
        or not can_assign_role(actor_role, role)
        or not can_assign_role(actor_role, membership.role)
    ):
        raise Forbidden(f"You cannot change this member's role to {role}.")
    if (
        membership.role == Role.OWNER
        and role != Role.OWNER
        and _owners_left(membership.organization_id, membership) == 0
    ):
        raise ApiError(409, "An organization needs at least one owner.", code="last_owner")
    old = membership.role
    membership.role = role
    membership.save(update_fields=["role"])
    audit_record(
        actor=actor,
        action="membership.role_changed",
        organization=membership.organization,
        target=membership,
        metadata={"from": old, "to": role, "user_id": membership.user_id},
    )
    if Role(role).rank < Role(old).rank:
        access_changed(membership.organization_id)  # their open pages and keys' sockets check again
    return membership


@transaction.atomic
def membership_remove(*, membership: Membership, actor: Principal) -> None:
    leaving_self = actor.user is not None and actor.user.pk == membership.user_id
    if not leaving_self:
        require(actor, membership.organization_id, Perm.MEMBERS_MANAGE)
        actor_role = actor.role_in(membership.organization_id)
        if actor_role is None or not can_assign_role(actor_role, membership.role):
            raise Forbidden("You cannot remove this member.")
    if membership.role == Role.OWNER and _owners_left(membership.organization_id, membership) == 0:
        raise ApiError(409, "An organization needs at least one owner.", code="last_owner")
    TeamMembership.objects.filter(
        team__organization_id=membership.organization_id, user_id=membership.user_id
    ).delete()
    # Their keys and devices act as them: they go with them, or the org stays open to them.
    revoked = ApiKey.objects.filter(
        Q(created_by_id=membership.user_id) | Q(device__user_id=membership.user_id),
        organization_id=membership.organization_id,
        revoked_at__isnull=True,
    ).update(revoked_at=timezone.now())
    audit_record(
        actor=actor,
        action="membership.removed",
        organization=membership.organization,
        target=membership,
        metadata={"user_id": membership.user_id, "api_keys_revoked": revoked},
    )
    membership.delete()
    # An invitation still open to their address would let them back in on their own (only the
    # address they sign in with can accept one).
    _invitations_close(membership.organization_id, membership.user.email)
    access_changed(membership.organization_id)


def _invitations_close(organization_id, email: str) -> int:
    """Revoke the organization's pending invitations to `email` (case aside)."""
    return (
        Invitation.objects.pending()
        .filter(organization_id=organization_id, email__iexact=email.strip())
        .update(revoked_at=timezone.now())
    )


# What a device's key may do, as far as its person may: agents on it read and write memories and
# send their sessions, `memorysaas index` sends the code graph, and the replica syncs.
DEVICE_SCOPES = (Perm.MEMORIES_READ, Perm.MEMORIES_WRITE, Perm.OBSERVER_WRITE, Perm.GRAPH_WRITE, Perm.SYNC)


@transaction.atomic
def device_register(
    *,
    organization: Organization,
    actor: Principal,
    name: str,
    platform: str = "",
    project: Project | None = None,
) -> tuple[Device, str]:
    """A device is a person's machine with a key of its own for sync and agent traffic."""
    if actor.user is None or not actor.has(organization.id, Perm.SYNC):
        raise Forbidden("Devices are registered by members with the sync permission.")
    api_key, full = api_key_create(
        organization=organization,
        actor=actor,
        name=f"Device: {name}",
        scopes=[s for s in DEVICE_SCOPES if actor.has(organization.id, s)],
        project=project,
        check_permission=False,
    )
    device = Device.objects.create(
        organization=organization, user=actor.user, name=name, platform=platform, api_key=api_key
    )
    audit_record(
        actor=actor, action="device.registered", target=device, metadata={"key_prefix": api_key.prefix}
    )
    return device, full


@transaction.atomic
def device_remove(*, device: Device, actor: Principal) -> None:
    if actor.user is None or (
        actor.user.pk != device.user_id and not actor.has(device.organization_id, Perm.ADMIN)
    ):
        raise Forbidden("Only the device's owner or an admin can remove it.")
    device.api_key.revoked_at = timezone.now()
    device.api_key.save(update_fields=["revoked_at"])
    audit_record(actor=actor, action="device.removed", target=device)
    device.delete()
    access_changed(device.organization_id)


LIMIT_FIELDS = ("key_per_minute", "key_burst", "org_per_minute", "org_burst")


@transaction.atomic
def organization_limits_set(
    *, organization: Organization, actor: Principal, limits: dict[str, int | None]
) -> OrganizationLimits | None:
    """Give the organization rate limits of its own (a field left None keeps the default); with
    every field None, its own limits are removed. The operator's tool: no role in the
    organization lets its members raise their own limits."""
    unknown = sorted(set(limits) - set(LIMIT_FIELDS))
    if unknown:
        raise Invalid(f"Unknown limits {unknown}; known: {list(LIMIT_FIELDS)}.")
    values = {name: limits.get(name) for name in LIMIT_FIELDS}
    current = OrganizationLimits.objects.filter(organization=organization).first()
    if all(value is None for value in values.values()):
        if current is not None:
            current.delete()
        row = None
    else:
        row = current or OrganizationLimits(organization=organization)
        for name, value in values.items():
            setattr(row, name, value)
        row.full_clean()
        row.save()
    described = ", ".join(f"{name}={value}" for name, value in values.items() if value is not None)
    audit_record(
        actor=actor,
        action="organization.limits_set",
        organization=organization,
        target=organization,
        metadata={"limits": described or "defaults"},
    )
    return row


BENCHMARK_LIMIT = 2_000_000_000  # (PostgreSQL's integer column holds up to 2**31 - 1)


def organization_limits_lift(*, organization: Organization) -> None:
    """Limits this organization never reaches, with the limiter still in every request's path: a
    benchmark measures the service as it runs, not how soon one key is throttled."""
    organization_limits_set(
        organization=organization, actor=Principal(), limits=dict.fromkeys(LIMIT_FIELDS, BENCHMARK_LIMIT)
    )
