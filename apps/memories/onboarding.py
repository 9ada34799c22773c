"""A newcomer's welcome: the project's five most important memories from before they joined, on
their first dashboard visit and in their first agent session, once each (apps/tenants/onboarding.py says who is new and
keeps the "once").

Importance: pinned first, then confidence weighted by use (confidence × ln(2 + times used)), so
a confident memory agents keep using outranks a confident one nobody needed. Only memories fit
to be injected count: not deprecated, disputed, stale or waiting for review."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import F, FloatField
from django.db.models.functions import Cast, Ln

from apps.memories.models import Memory
from apps.memories.selectors import memories_visible
from apps.tenants.models import OnboardingSurface, Project
from apps.tenants.onboarding import already_served, joined_at, onboarding_claim
from apps.tenants.principal import Principal

WELCOME_SIZE = 5


def most_important(
    *, principal: Principal, project: Project, before: datetime, limit: int = WELCOME_SIZE
) -> list[Memory]:
    """The project's most important memories that existed `before` then."""
    weight = F("confidence") * Ln(Cast(F("used_count"), FloatField()) + 2.0)
    return list(
        memories_visible(principal=principal, project=project)
        .filter(deprecated=False, disputed=False, stale_at__isnull=True, needs_review=False)
        .filter(created_at__lt=before)
        .annotate(importance=weight)
        .order_by("-pinned", "-importance", "-updated_at")[:limit]
    )


def onboarding_for(*, principal: Principal, project: Project, surface: str) -> list[Memory]:
    """The welcome for this person on `surface` if it is due now (and from now on, not again);
    [] otherwise. A key that acts for no person gets none."""
    user = principal.user
    if user is None or not user.pk or already_served(user=user, project=project, surface=surface):
        return []
    joined = joined_at(user=user, project=project)
    if joined is None:
        return []
    welcome = most_important(principal=principal, project=project, before=joined)
    if not welcome or not onboarding_claim(
        user=user, project=project, surface=surface, memory_ids=[m.id for m in welcome]
    ):
        return []
    return welcome


def onboarding_text(memories: list[Memory]) -> str:
    """The welcome as an agent reads it, with each memory's citation."""
    if not memories:
        return ""
    lines = [f"- [{m.type}] {m.content} [Memory #{str(m.id)[:8]}: {m.citation_text}]" for m in memories]
    return "New to this project? The memories that matter most here:\n" + "\n".join(lines)


def with_onboarding(context: dict[str, Any], *, principal: Principal, project: Project) -> dict[str, Any]:
    """A /context answer with the welcome on top when this is the person's first agent session
    in the project (never in an A/B control-group session, which is served no memory)."""
    if context.get("control_group"):
        return context
    welcome = onboarding_for(principal=principal, project=project, surface=OnboardingSurface.AGENT)
    if not welcome:
        return context
    text = "\n\n".join(part for part in (onboarding_text(welcome), context.get("text", "")) if part)
    return {**context, "text": text, "onboarding": [str(m.id) for m in welcome]}
