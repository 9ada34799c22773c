"""Export and erasure: a person's (or an organization's) right to take their data and to have
it removed (GDPR art. 15, 17, 20).

The tenants app knows people, organizations, keys, devices and the audit log. Every other app
that holds personal data says so in an `apps/<app>/gdpr.py` with any of:

- `export_user(user) -> dict[str, Any]`: sections to add to the person's export;
- `export_organization(organization) -> dict[str, Any]`: sections for an organization export;
- `delete_user_data(user, pseudonym) -> dict[str, int]`: remove (or pseudonymise) what the
  person owns in that app; called again if a crashed deletion is re-run, so it must be idempotent;
- `user_identifiers(user) -> list[str]`: extra strings that identify the person's data in queued
  task arguments (ids of their objects).

Hard deletion runs in steps that are each safe to repeat, and removes the user row last: a
deletion that crashes half-way is simply run again by the next daily pass.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import logging
import re
from collections.abc import Iterable
from datetime import timedelta
from types import ModuleType
from typing import Any

from django.apps import apps as django_apps
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.tenants.models import (
    ApiKey,
    AuditLog,
    DataExport,
    Device,
    ExportFormat,
    ExportStatus,
    Invitation,
    Membership,
    Organization,
    TeamMembership,
    User,
)
from apps.tenants.principal import Principal
from apps.tenants.roles import Perm, Role
from memorysaas.kernel.errors import Forbidden, Invalid
from memorysaas.kernel.queue import enqueue

logger = logging.getLogger(__name__)

DELETION_GRACE = timedelta(days=30)


# ---------------------------------------------------------------------------------------------
# Contributors


def contributors() -> list[ModuleType]:
    """The `gdpr` modules of our installed apps, tenants excluded (it is the caller)."""
    modules = []
    for config in django_apps.get_app_configs():
        if not config.name.startswith("apps.") or config.name == "apps.tenants":
            continue
        try:
            modules.append(importlib.import_module(f"{config.name}.gdpr"))
        except ModuleNotFoundError as exc:
            if exc.name != f"{config.name}.gdpr":
                raise
    return modules


def _collect(hook: str, subject: Any) -> dict[str, Any]:
    sections: dict[str, Any] = {}
    for module in contributors():
        fn = getattr(module, hook, None)
        if fn is not None:
            sections.update(fn(subject))
    return sections


def pseudonym(kind: str, ident: Any) -> str:
    """A stable stand-in for a deleted person or organization: the same id always maps to the
    same pseudonym (so an audit trail still reads as one actor), and it cannot be reversed."""
    digest = hmac.new(settings.SECRET_KEY.encode(), f"{kind}:{ident}".encode(), hashlib.sha256)
    return f"deleted-{kind}-{digest.hexdigest()[:12]}"


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


# ---------------------------------------------------------------------------------------------
# What we hold


def _api_key_row(key: ApiKey) -> dict[str, Any]:
    return {
        "id": str(key.id),
        "name": key.name,
        "display": key.display,
        "organization": key.organization.slug,
        "project": str(key.project_id) if key.project_id else None,
        "scopes": list(key.scopes),
        "created_at": _iso(key.created_at),
        "last_used_at": _iso(key.last_used_at),
        "expires_at": _iso(key.expires_at),
        "revoked_at": _iso(key.revoked_at),
    }


def _audit_rows(queryset) -> list[dict[str, Any]]:
    return [
        {
            "at": _iso(row.created_at),
            "actor": row.actor_label,
            "action": row.action,
            "target": f"{row.target_type}:{row.target_id}" if row.target_type else "",
            "metadata": row.metadata,
        }
        for row in queryset.order_by("created_at")[:10_000]
    ]


def _invitations_of(user: User, emails: set[str]) -> dict[str, list[dict[str, Any]]]:
    """The invitations they sent, and those sent to one of their verified addresses (anyone may
    add an address they do not own, unverified) or accepted by them."""

    def row(invitation: Invitation, *, to: bool) -> dict[str, Any]:
        return {
            "organization": invitation.organization.slug,
            **({"email": invitation.email} if to else {}),
            "role": invitation.role,
            "created_at": _iso(invitation.created_at),
            "expires_at": _iso(invitation.expires_at),
            "accepted_at": _iso(invitation.accepted_at),
            "revoked_at": _iso(invitation.revoked_at),
        }

    invitations = Invitation.objects.select_related("organization").order_by("created_at")
    received = Q(accepted_by=user)
    for email in emails:
        received |= Q(email__iexact=email)
    return {
        "invitations_sent": [row(i, to=True) for i in invitations.filter(invited_by=user)],
        "invitations_received": [row(i, to=False) for i in invitations.filter(received)],
    }


def user_data(user: User) -> dict[str, Any]:
    """Everything we hold about `user`, as plain JSON-ready data."""
    from allauth.account.models import EmailAddress
    from allauth.mfa.models import Authenticator

    memberships = Membership.objects.filter(user=user).select_related("organization")
    addresses = list(EmailAddress.objects.filter(user=user))
    data: dict[str, Any] = {
        "profile": {
            "id": user.pk,
            "email": user.email,
            "name": user.name,
            "date_joined": _iso(user.date_joined),
            "last_login": _iso(user.last_login),
            "deletion_requested_at": _iso(user.deletion_requested_at),
        },
        "email_addresses": [
            {"email": e.email, "verified": e.verified, "primary": e.primary} for e in addresses
        ],
        "mfa": [
            {"type": a.type, "created_at": _iso(a.created_at), "last_used_at": _iso(a.last_used_at)}
            for a in Authenticator.objects.filter(user=user)
        ],
        "organizations": [
            {
                "id": str(m.organization_id),
                "slug": m.organization.slug,
                "name": m.organization.name,
                "role": m.role,
            }
            for m in memberships
        ],
        "teams": [
            {"team": tm.team.name, "organization": tm.team.organization.slug}
            for tm in TeamMembership.objects.filter(user=user).select_related("team__organization")
        ],
        "api_keys": [
            _api_key_row(k) for k in ApiKey.objects.filter(created_by=user).select_related("organization")
        ],
        "devices": [
            {
                "id": str(d.id),
                "name": d.name,
                "platform": d.platform,
                "organization": str(d.organization_id),
                "created_at": _iso(d.created_at),
                "last_sync_at": _iso(d.last_sync_at),
            }
            for d in Device.objects.filter(user=user)
        ],
        **_invitations_of(user, {e.email.lower() for e in addresses if e.verified}),
        "audit_log": _audit_rows(AuditLog.objects.filter(actor_user=user)),
    }
    data.update(_collect("export_user", user))
    return data


def organization_data(organization: Organization) -> dict[str, Any]:
    data: dict[str, Any] = {
        "organization": {
            "id": str(organization.id),
            "slug": organization.slug,
            "name": organization.name,
            "created_at": _iso(organization.created_at),
        },
        "members": [
            {"email": m.user.email, "name": m.user.name, "role": m.role, "since": _iso(m.created_at)}
            for m in Membership.objects.filter(organization=organization).select_related("user")
        ],
        "teams": [
            {"name": t.name, "members": [tm.user.email for tm in t.team_memberships.select_related("user")]}
            for t in organization.teams.all()
        ],
        "projects": [
            {
                "id": str(p.id),
                "slug": p.slug,
                "name": p.name,
                "methodology": p.methodology,
                "team": p.team.name if p.team_id else None,
                "created_at": _iso(p.created_at),
            }
            for p in organization.projects.select_related("team")
        ],
        "api_keys": [
            _api_key_row(k)
            for k in ApiKey.objects.filter(organization=organization).select_related("organization")
        ],
        "audit_log": _audit_rows(AuditLog.objects.filter(organization=organization)),
    }
    data.update(_collect("export_organization", organization))
    return data


# ---------------------------------------------------------------------------------------------
# Export


def export_request(*, user: User, fmt: str, organization: Organization | None = None) -> DataExport:
    if fmt not in ExportFormat.values:
        raise Invalid(f"Unknown export format {fmt!r}; choose one of {', '.join(ExportFormat.values)}.")
    if organization is not None and not owns(user, organization.id):
        raise Forbidden("Only an owner can export the organization.")
    export = DataExport.objects.create(requested_by=user, organization=organization, format=fmt)
    from apps.tenants.services import audit_record

    audit_record(
        actor=Principal.for_user(user),
        action="organization.export_requested" if organization else "account.export_requested",
        organization=organization,
        target=export,
        metadata={"format": fmt},
    )
    from apps.tenants.tasks import export_build_task

    enqueue(export_build_task, str(export.id))
    return export


def owns(user: User, organization_id) -> bool:
    """Whether `user` is (still) an owner of the organization: its export is theirs to take."""
    return Principal.for_user(user).has(organization_id, Perm.ORG_OWN)


def export_build(export_id: str) -> DataExport | None:
    """Render the export. Runs in a worker; a second run of a built export does nothing."""
    from apps.tenants.export_formats import render

    export = DataExport.objects.select_related("requested_by", "organization").filter(id=export_id).first()
    if export is None or export.status != ExportStatus.PENDING:
        return export
    if export.organization_id and not owns(export.requested_by, export.organization_id):
        export.status, export.error = ExportStatus.FAILED, "The requester is no longer an owner."
        export.save(update_fields=["status", "error"])
        return export
    try:
        if export.organization_id:
            data = organization_data(export.organization)
            stem = f"memorysaas-{export.organization.slug}"
        else:
            data = user_data(export.requested_by)
            stem = "memorysaas-my-data"
        envelope = {
            "export": {
                "id": str(export.id),
                "kind": "organization" if export.organization_id else "user",
                "generated_at": timezone.now().isoformat(),
                "format_version": 1,
            },
            **data,
        }
        body, extension = render(export.format, envelope)
    except Exception as exc:  # the row records the failure; the worker log has the traceback
        logger.exception("export %s failed", export.id)
        export.status, export.error = ExportStatus.FAILED, str(exc)[:300]
        export.save(update_fields=["status", "error"])
        return export
    now = timezone.now()
    export.content = body
    export.size_bytes = len(body)
    export.filename = f"{stem}-{now:%Y%m%d}.{extension}"
    export.status, export.ready_at, export.expires_at = ExportStatus.READY, now, now + DataExport.TTL
    export.save(update_fields=["content", "size_bytes", "filename", "status", "ready_at", "expires_at"])
    _notify(
        export.requested_by.email,
        "Your memorysaas export is ready",
        f"Your {export.get_format_display()} export is ready to download from "
        f"{settings.SITE_URL}/account/data/ until {export.expires_at:%Y-%m-%d %H:%M} UTC.",
    )
    return export


def exports_expire(*, now=None) -> int:
    """Drop the archives whose download links have expired; the records stay."""
    now = now or timezone.now()
    return DataExport.objects.filter(status=ExportStatus.READY, expires_at__lte=now).update(
        status=ExportStatus.EXPIRED, content=None
    )


# ---------------------------------------------------------------------------------------------
# Deletion


def _sole_owner_blockers(user: User) -> list[Organization]:
    """Shared organizations that would be left without an owner."""
    blockers = []
    for m in Membership.objects.filter(user=user, role=Role.OWNER).select_related("organization"):
        others = Membership.objects.filter(organization=m.organization).exclude(user=user)
        if others.exists() and not others.filter(role=Role.OWNER).exists():
            blockers.append(m.organization)
    return blockers


def _heirs_promoted(user: User, alias: str) -> int:
    """Shared organizations the erased person is, by now, the only owner of (others left or
    were demoted during the grace period, after the request was let through) get a new owner:
    the highest-ranking remaining member, the longest-standing among equals. An erasure cannot
    wait for that, and an organization without an owner could be neither exported nor deleted."""
    from apps.tenants.services import audit_record

    promoted = 0
    for organization in _sole_owner_blockers(user):
        others = Membership.objects.filter(organization=organization).exclude(user=user)
        heir = min(others, key=lambda m: (-Role(m.role).rank, m.created_at, m.pk))
        previous, heir.role = heir.role, Role.OWNER
        heir.save(update_fields=["role"])
        audit_record(
            actor=Principal(),
            action="membership.owner_on_erasure",
            organization=organization,
            target=heir,
            metadata={"user_id": heir.user_id, "previous_role": previous, "erased_owner": alias},
        )
        promoted += 1
    return promoted


def account_deletion_request(*, user: User) -> User:
    blockers = _sole_owner_blockers(user)
    if blockers:
        names = ", ".join(o.name for o in blockers)
        raise Invalid(f"You are the only owner of {names}. Make someone else an owner first.")
    if user.deletion_requested_at is None:
        user.deletion_requested_at = timezone.now()
        user.save(update_fields=["deletion_requested_at"])
        _audit_everywhere(user, "account.deletion_requested")
        _notify(
            user.email,
            "Your memorysaas account will be deleted",
            f"You asked us to delete your account. It will be deleted for good on "
            f"{user.deletion_requested_at + DELETION_GRACE:%Y-%m-%d}. Until then you can cancel at "
            f"{settings.SITE_URL}/account/data/.",
        )
    return user


def account_deletion_cancel(*, user: User) -> User:
    if user.deletion_requested_at is not None:
        user.deletion_requested_at = None
        user.save(update_fields=["deletion_requested_at"])
        _audit_everywhere(user, "account.deletion_cancelled")
    return user


def _audit_everywhere(user: User, action: str) -> None:
    from apps.tenants.services import audit_record

    principal = Principal.for_user(user)
    for org_id in principal.org_ids:
        audit_record(actor=principal, action=action, organization=Organization(id=org_id), target=user)


def user_identifiers(user: User) -> list[str]:
    # (not the bare pk: a job id or a count equal to it named someone else's work; a pk counts
    # only under a key that says it is a user's, see _mentions)
    identifiers = [user.email, f"user:{user.pk}"]
    identifiers += [str(e) for e in DataExport.objects.filter(requested_by=user).values_list("id", flat=True)]
    for module in contributors():
        fn = getattr(module, "user_identifiers", None)
        if fn is not None:
            identifiers += [str(i) for i in fn(user)]
    return identifiers


def account_hard_delete(user_id: int) -> dict[str, int] | None:
    """Erase a person. Idempotent: each step can be repeated, and the user row goes last, so a
    crash part-way leaves the account still marked for deletion and the next pass finishes it.
    Returns counts per step, or None when there is no such user (already deleted)."""
    user = User.objects.filter(pk=user_id).first()
    if user is None:
        return None
    alias = pseudonym("user", user.pk)
    counts: dict[str, int] = {"task_arguments": purge_task_arguments(user_identifiers(user))}
    for module in contributors():
        fn = getattr(module, "delete_user_data", None)
        if fn is not None:
            counts.update(fn(user, alias))
    with transaction.atomic():
        solo_orgs = [
            m.organization
            for m in Membership.objects.filter(user=user).select_related("organization")
            if not Membership.objects.filter(organization=m.organization).exclude(user=user).exists()
        ]
        counts["organizations"] = len(solo_orgs)
        for org in solo_orgs:
            _organization_erase(org)
        counts["owners_promoted"] = _heirs_promoted(user, alias)
        counts["audit_rows"] = _pseudonymise_audit(user, alias)
        ApiKey.objects.filter(created_by=user, revoked_at__isnull=True).update(revoked_at=timezone.now())
        AuditLog.objects.create(
            actor_label=alias,
            action="account.deleted",
            target_type="tenants.user",
            target_id=alias,
            metadata=counts,
        )
        user.delete()
    return counts


def _pseudonymise_audit(user: User, alias: str) -> int:
    rows = AuditLog.objects.filter(actor_user=user)
    changed = rows.update(actor_label=alias)
    # Their id may also be the target of others' actions ("user:<pk>", or the row id itself).
    changed += AuditLog.objects.filter(target_type="tenants.user", target_id=str(user.pk)).update(
        target_id=alias
    )
    # Invitations to their address: the audit rows that name it, and the invitations themselves.
    for row in AuditLog.objects.filter(metadata__email__iexact=user.email):
        row.metadata = {**row.metadata, "email": alias}
        row.save(update_fields=["metadata"])
        changed += 1
    Invitation.objects.filter(email__iexact=user.email).delete()
    return changed


def organization_deletion_request(*, organization: Organization, user: User) -> Organization:
    if not Principal.for_user(user).has(organization.id, Perm.ORG_OWN):
        raise Forbidden("Only an owner can delete the organization.")
    if organization.deletion_requested_at is None:
        from apps.tenants.services import audit_record

        organization.deletion_requested_at = timezone.now()
        organization.save(update_fields=["deletion_requested_at"])
        audit_record(
            actor=Principal.for_user(user), action="organization.deletion_requested", target=organization
        )
        owners = Membership.objects.filter(organization=organization, role=Role.OWNER).select_related("user")
        for m in owners:
            _notify(
                m.user.email,
                f"{organization.name} will be deleted",
                f"{user.email} asked to delete the organization {organization.name}. It will be deleted "
                f"for good on {organization.deletion_requested_at + DELETION_GRACE:%Y-%m-%d}; an owner can "
                f"cancel at {settings.SITE_URL}/o/{organization.slug}/settings/.",
            )
    return organization


def organization_deletion_cancel(*, organization: Organization, user: User) -> Organization:
    if not Principal.for_user(user).has(organization.id, Perm.ORG_OWN):
        raise Forbidden("Only an owner can cancel the deletion.")
    if organization.deletion_requested_at is not None:
        from apps.tenants.services import audit_record

        organization.deletion_requested_at = None
        organization.save(update_fields=["deletion_requested_at"])
        audit_record(
            actor=Principal.for_user(user), action="organization.deletion_cancelled", target=organization
        )
    return organization


def organization_hard_delete(organization_id) -> bool:
    organization = Organization.objects.filter(id=organization_id).first()
    if organization is None:
        return False
    purge_task_arguments(
        [str(organization.id), *(str(p) for p in organization.projects.values_list("id", flat=True))]
    )
    with transaction.atomic():
        _organization_erase(organization)
    return True


def _organization_erase(organization: Organization) -> None:
    alias = pseudonym("organization", organization.id)
    AuditLog.objects.filter(
        Q(organization=organization) | Q(target_type="tenants.organization", target_id=str(organization.id))
    ).delete()
    AuditLog.objects.create(
        actor_label="system",
        action="organization.deleted",
        target_type="tenants.organization",
        target_id=alias,
    )
    organization.delete()  # cascades to projects and everything that hangs on them


def deletions_process_due(*, now=None) -> dict[str, int]:
    """The daily pass: erase what has waited out its grace period, expire old exports."""
    now = now or timezone.now()
    cutoff = now - DELETION_GRACE
    users = organizations = 0
    for user_id in User.objects.filter(deletion_requested_at__lte=cutoff).values_list("pk", flat=True):
        try:
            users += account_hard_delete(user_id) is not None
        except Exception:  # one failure must not block the others; the next pass retries it
            logger.exception("hard delete of user %s failed; will retry", user_id)
    for org_id in Organization.objects.filter(deletion_requested_at__lte=cutoff).values_list("id", flat=True):
        try:
            organizations += organization_hard_delete(org_id)
        except Exception:
            logger.exception("hard delete of organization %s failed; will retry", org_id)
    return {"users": users, "organizations": organizations, "exports_expired": exports_expire(now=now)}


# ---------------------------------------------------------------------------------------------
# Queued task arguments


_USER_KEY = re.compile(r"(?:^|_)(?:user|owner|actor|person)(?:_?(?:id|pk))?$", re.IGNORECASE)


def _mentions(value: Any, exact: set[str], fragments: list[str]) -> bool:
    """Does `value` (task arguments, however nested) name one of the identifiers? Scalars match
    exactly (a user id 7 is not "17"); strings also match when they contain a long identifier;
    a bare number is a user's id only under a key that says so (`user_id=7` is `user:7`)."""
    if isinstance(value, dict):
        return any(
            _mentions(k, exact, fragments)
            or _mentions(v, exact, fragments)
            or (isinstance(k, str) and _USER_KEY.search(k) is not None and f"user:{v}" in exact)
            for k, v in value.items()
        )
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_mentions(v, exact, fragments) for v in value)
    if value is None:
        return False
    text = str(value)
    return text in exact or (isinstance(value, str) and any(f in text for f in fragments))


def purge_task_arguments(identifiers: Iterable[str], *, broker=None) -> int:
    """Remove queued tasks, stored task results and schedules whose arguments name any of
    `identifiers`, from the ORM broker and from Redis when that is the broker."""
    from django_q.brokers import get_broker
    from django_q.models import OrmQ, Schedule, Task
    from django_q.signing import BadSignature, SignedPackage

    exact = {str(i) for i in identifiers if i}
    if not exact:
        return 0
    fragments = [i for i in exact if len(i) >= 8]

    def mentions(*values: Any) -> bool:
        return _mentions(values, exact, fragments)

    removed = 0
    for row in OrmQ.objects.all():
        try:
            task = SignedPackage.loads(row.payload)
        except BadSignature:
            continue
        if mentions(task.get("args"), task.get("kwargs")):
            row.delete()
            removed += 1
    for task in Task.objects.only("id", "args", "kwargs", "result").iterator():
        if mentions(task.args, task.kwargs, task.result):
            task.delete()
            removed += 1
    for schedule in Schedule.objects.all():
        if mentions(schedule.args, schedule.kwargs):
            schedule.delete()
            removed += 1
    # Every queue lane's list (settings.QUEUE_LANES) when the broker is Redis.
    for queue in [broker] if broker else [get_broker(cluster) for cluster in settings.QUEUE_LANES.values()]:
        connection = getattr(queue, "connection", None)
        if connection is None or not hasattr(connection, "lrange"):
            continue
        for item in connection.lrange(queue.list_key, 0, -1):
            try:
                task = SignedPackage.loads(item)
            except BadSignature:
                continue
            if mentions(task.get("args"), task.get("kwargs")):
                removed += connection.lrem(queue.list_key, 0, item)
    return removed


def _notify(email: str, subject: str, body: str) -> None:
    send_mail(subject, body, None, [email], fail_silently=True)
