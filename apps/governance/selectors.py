"""Reads: disputes a principal may see, their threads, a user's notifications."""

from __future__ import annotations

from uuid import UUID

from apps.governance.models import Dispute, DisputeStatus, Notification
from apps.memories.models import Memory
from apps.memories.selectors import memory_ids_visible
from apps.tenants.models import ApiKey, Project
from apps.tenants.principal import Principal
from memorysaas.kernel.errors import NotFound
from memorysaas.kernel.ids import as_uuid


def disputes_visible(*, principal: Principal):
    """Disputes on memories the principal can read (a personal memory only to its owner)."""
    return (
        Dispute.objects.visible_to(principal)
        .filter(memory__in=memory_ids_visible(principal=principal))
        .select_related("project__organization", "memory", "opened_by", "resolved_by")
    )


def dispute_get(*, principal: Principal, dispute_id: str | UUID) -> Dispute:
    dispute = disputes_visible(principal=principal).filter(id=as_uuid(dispute_id)).first()
    if dispute is None:
        raise NotFound("No such dispute.")
    return dispute


def disputes_for_project(*, principal: Principal, project: Project, status: str | None = None):
    qs = disputes_visible(principal=principal).filter(project=project)
    if status:
        qs = qs.filter(status=DisputeStatus(status))
    return qs


def disputes_for_memory(*, principal: Principal, memory: Memory):
    return disputes_visible(principal=principal).filter(memory=memory)


def dispute_thread(*, dispute: Dispute):
    return dispute.comments.select_related("author")


def notifications_for(*, user, unread_only: bool = False, key: ApiKey | None = None):
    """The user's notifications; through an API key, only those of the key's organization and,
    for a project key, of that project (a key never reads what its scope does not cover)."""
    if user is None or not user.pk:
        return Notification.objects.none()
    qs = Notification.objects.filter(user=user).select_related("project")
    if key is not None:
        qs = qs.filter(organization_id=key.organization_id)
        if key.project_id is not None:
            qs = qs.filter(project_id=key.project_id)
    return qs.filter(read=False) if unread_only else qs


def notifications_menu(*, user) -> dict:
    """The header's menu: the unread count and the five newest unread notifications."""
    unread = notifications_for(user=user, unread_only=True)
    return {"unread": unread.count(), "recent": list(unread[:5])}


def notification_get(*, user, notification_id: int, key: ApiKey | None = None) -> Notification:
    item = notifications_for(user=user, key=key).filter(pk=notification_id).first()
    if item is None:
        raise NotFound("No such notification.")
    return item
