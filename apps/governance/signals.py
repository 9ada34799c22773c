"""Tell a project's owners and admins when feedback makes the trust rules offer a new level
(once per offer since the level last changed); they accept or ignore it on the trust page."""

from __future__ import annotations

from django.db import transaction
from django.urls import reverse

from apps.governance.models import Notification, ProjectTrust
from apps.governance.notify import WIDE_ROLES, notify
from apps.governance.trust import project_offer
from apps.memories.models import FeedbackKind, MemoryFeedback
from apps.tenants.models import Membership, Project, User

JUDGEMENTS = {FeedbackKind.CONFIRM, FeedbackKind.CORRECT, FeedbackKind.FLAG}


def offer_trust_change(project_id) -> Notification | None:
    project = Project.objects.select_related("organization").filter(pk=project_id).first()
    trust = ProjectTrust.objects.filter(project_id=project_id).first()
    offer = project_offer(project) if project is not None and trust is not None else None
    if offer is None:
        return None
    verb = "step back to" if offer.direction == "regress" else "move to"
    title = f"{project.name}: trust rules suggest you {verb} {offer.label}"
    if Notification.objects.filter(project=project, title=title, created_at__gte=trust.changed_at).exists():
        return None
    admins = User.objects.filter(
        id__in=Membership.objects.filter(organization_id=project.organization_id, role__in=WIDE_ROLES).values(
            "user_id"
        )
    )
    created = notify(
        project=project,
        users=admins,
        kind="trust.offer",
        title=title,
        body=offer.reason,
        url=reverse("trust", args=[project.organization.slug, project.slug]),
    )
    return created[0] if created else None


def on_feedback(sender, instance: MemoryFeedback, created: bool, **kwargs) -> None:
    if created and instance.kind in JUDGEMENTS:
        project_id = instance.memory.project_id
        transaction.on_commit(lambda: offer_trust_change(project_id))
