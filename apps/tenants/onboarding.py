"""Onboarding, the tenancy half: who counts as new to a project, and the claim that makes its
welcome happen once per surface (the first dashboard visit, the first agent session).

A newcomer joined the project's organization — or, for a team's project, its team — within
ONBOARDING_WINDOW_DAYS (setting, 30 by default). Someone who has been around longer has met
the project's knowledge already; someone new gets its most important memories once — those
that were there before they joined (what came after, they saw arrive)."""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from apps.tenants.models import Membership, OnboardingServed, Project, TeamMembership, User


def _window() -> timedelta:
    return timedelta(days=settings.ONBOARDING_WINDOW_DAYS)


def joined_at(*, user: User, project: Project) -> datetime | None:
    """When `user` joined the project (its organization, or for a team's project the later of
    that and joining the team), if within the window; None for someone not new to it."""
    times = list(
        Membership.objects.filter(user=user, organization_id=project.organization_id).values_list(
            "created_at", flat=True
        )
    )
    if project.team_id is not None:
        times += TeamMembership.objects.filter(user=user, team_id=project.team_id).values_list(
            "created_at", flat=True
        )
    joined = max(times, default=None)
    return joined if joined is not None and joined >= timezone.now() - _window() else None


def already_served(*, user: User, project: Project, surface: str) -> bool:
    return OnboardingServed.objects.filter(user=user, project=project, surface=surface).exists()


def onboarding_claim(*, user: User, project: Project, surface: str, memory_ids: list[UUID]) -> bool:
    """Record that `user` is shown the welcome on `surface`; False when it was shown already
    (two first requests at once: only one of them wins)."""
    try:
        with transaction.atomic():
            OnboardingServed.objects.create(
                user=user, project=project, surface=surface, memory_ids=[str(m) for m in memory_ids]
            )
    except IntegrityError:
        return False
    return True
