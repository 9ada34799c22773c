"""Reads for tenancy, always through the principal's scoped querysets."""

from __future__ import annotations

from uuid import UUID

from apps.tenants.models import ApiKey, Invitation, Membership, Organization, Project, Team
from apps.tenants.principal import Principal
from memorysaas.kernel.errors import Forbidden, NotFound
from memorysaas.kernel.ids import as_uuid


def organization_get(*, principal: Principal, ref: str | UUID) -> Organization:
    """An organization the principal belongs to, by slug or id; 404 otherwise."""
    qs = Organization.objects.visible_to(principal)
    as_id = as_uuid(ref)
    org = qs.filter(id=as_id).first() if as_id else qs.filter(slug=str(ref)).first()
    if org is None:
        raise NotFound("No such organization.")
    return org


def organizations_for(*, principal: Principal):
    return Organization.objects.visible_to(principal)


def project_get(*, principal: Principal, project_id: str | UUID, permission: str | None = None) -> Project:
    """The project if the principal can see it (404 otherwise), checked for `permission` (403)."""
    as_id = as_uuid(project_id)
    project = (
        Project.objects.visible_to(principal).select_related("organization", "team").filter(id=as_id).first()
        if as_id
        else None
    )
    if project is None:
        raise NotFound("No such project.")
    if permission is not None and not principal.has(project.organization_id, permission):
        raise Forbidden(f"This needs the '{permission}' permission.")
    return project


def projects_for(*, principal: Principal, organization: Organization | None = None):
    qs = Project.objects.visible_to(principal).select_related("organization", "team")
    if organization is not None:
        qs = qs.for_org(organization)
    return qs.order_by("organization__name", "name")


def api_keys_for(*, principal: Principal, organization: Organization):
    return ApiKey.objects.visible_to(principal).for_org(organization).select_related("project", "created_by")


def api_key_get(*, principal: Principal, organization: Organization, key_id: str | UUID) -> ApiKey:
    as_id = as_uuid(key_id)
    key = (
        api_keys_for(principal=principal, organization=organization).filter(id=as_id).first()
        if as_id
        else None
    )
    if key is None:
        raise NotFound("No such API key.")
    return key


def members_for(*, organization: Organization):
    return Membership.objects.for_org(organization).select_related("user").order_by("user__email")


def membership_get(*, organization: Organization, membership_id: int | str) -> Membership:
    try:
        pk = int(membership_id)
    except (TypeError, ValueError):
        raise NotFound("No such member.") from None
    membership = members_for(organization=organization).filter(pk=pk).first()
    if membership is None:
        raise NotFound("No such member.")
    return membership


def invitations_pending(*, organization: Organization):
    return Invitation.objects.for_org(organization).pending().select_related("invited_by")


def invitation_get(*, organization: Organization, invitation_id: str | UUID) -> Invitation:
    as_id = as_uuid(invitation_id)
    invitation = Invitation.objects.for_org(organization).filter(id=as_id).first() if as_id else None
    if invitation is None:
        raise NotFound("No such invitation.")
    return invitation


def teams_for(*, organization: Organization):
    return Team.objects.for_org(organization)
