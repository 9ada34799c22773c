"""Who hears about a dispute, and how: an in-app Notification per person plus an email."""

from __future__ import annotations

from collections.abc import Iterable

from django.conf import settings
from django.core.mail import send_mail
from django.db.models import Q

from apps.governance.models import Notification
from apps.tenants.models import Membership, Project, TeamMembership, User
from apps.tenants.roles import ROLE_PERMISSIONS, Perm, Role
from memorysaas.kernel.queue import enqueue

REVIEW_ROLES = [role.value for role, perms in ROLE_PERMISSIONS.items() if Perm.MEMORIES_REVIEW in perms]
WIDE_ROLES = [Role.ADMIN.value, Role.OWNER.value]


def project_stewards(project: Project) -> list[User]:
    """People who may resolve disputes in `project`: stewards who see it (a team project is
    seen by its team's members) and every admin and owner of the organization."""
    memberships = Membership.objects.filter(organization_id=project.organization_id, role__in=REVIEW_ROLES)
    if project.team_id is not None:
        team_users = TeamMembership.objects.filter(team_id=project.team_id).values("user_id")
        memberships = memberships.filter(Q(role__in=WIDE_ROLES) | Q(user_id__in=team_users))
    return list(User.objects.filter(id__in=memberships.values("user_id")).order_by("id"))


def notify(
    *,
    project: Project,
    users: Iterable[User],
    kind: str,
    title: str,
    body: str = "",
    url: str = "",
) -> list[Notification]:
    """Create one in-app notification per distinct user and queue their emails."""
    unique = {user.pk: user for user in users if user is not None and user.pk}
    created = Notification.objects.bulk_create(
        Notification(
            organization_id=project.organization_id,
            project=project,
            user=user,
            kind=kind,
            title=title[:200],
            body=body,
            url=url[:300],
        )
        for user in unique.values()
    )
    if created:
        enqueue(send_notification_emails, [n.pk for n in created])
    return created


def send_notification_emails(notification_ids: list[int]) -> int:
    """The task behind `notify`: one plain-text email per notification."""
    sent = 0
    for item in Notification.objects.filter(pk__in=notification_ids).select_related("user"):
        if not item.user.email:
            continue
        link = f"\n\n{settings.SITE_URL}{item.url}" if item.url else ""
        sent += send_mail(
            subject=f"{settings.ACCOUNT_EMAIL_SUBJECT_PREFIX}{item.title}",
            message=f"{item.body}{link}".strip(),
            from_email=None,
            recipient_list=[item.user.email],
        )
    return sent
