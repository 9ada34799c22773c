"""What a hook answers with: the session-start plan and the project's top gotchas, packed
/context for a prompt, step injection before an edit. Each is the observer's or the retrieval
engine's own answer, as the API gives it, turned into text for Claude (hooks.start_plan_text)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from apps.agents import hooks as H
from apps.memories.selectors import memories_visible
from apps.memories.services import memories_record_access
from apps.memories.thresholds import injection_min_confidence
from apps.observer import injection, selectors
from apps.observer import services as observer
from apps.observer.models import Session
from apps.tenants.models import Project
from apps.tenants.principal import Principal

TOP_GOTCHAS = 5
GOTCHA_TYPES = ("gotcha", "error_pattern", "dead_end")


def start_plan(*, principal: Principal, session_id: UUID, gotchas: bool) -> str:
    """The session-start plan (prefetch, recipes, work state) and, at SessionStart, the project's
    strongest warnings; what it hands over counts as injected into the session."""
    session = selectors.session_get(principal=principal, session_id=session_id)
    plan = injection.start_context(session=session, principal=principal, files=[])
    injection.start_injection_record(session=session, start_context=plan)
    top = top_gotchas(principal, session) if gotchas else []
    if top:
        new = observer.context_injection_record(
            session_id=session.id, project=session.project, memory_ids=[g["id"] for g in top]
        )
        memories_record_access(memory_ids=new or [])
    return H.start_plan_text(plan, top)


def top_gotchas(principal: Principal, session: Session) -> list[dict[str, Any]]:
    """The project's most confident gotchas, error patterns and dead ends that may be injected."""
    project = session.project
    found = (
        memories_visible(principal=principal, project=project)
        .filter(
            type__in=GOTCHA_TYPES,
            deprecated=False,
            disputed=False,
            stale_at__isnull=True,
            confidence__gte=injection_min_confidence(project),
        )
        .order_by("-confidence", "-updated_at")
        .values("id", "type", "content")[:TOP_GOTCHAS]
    )
    return [{**g, "id": str(g["id"])} for g in found]


def prompt_context(*, principal: Principal, project: Project, prompt: str, session_id: str) -> str:
    """/context packed for a prompt ("" for an empty one), in the session when it is open."""
    if not prompt.strip():
        return ""
    packed = injection.build_context(
        principal=principal, project=project, phase=None, task=prompt[:4000], session_id=session_id
    )
    return packed["text"]


def step_injection(*, principal: Principal, session_id: UUID, step: int, files: list[str]) -> str:
    answer = injection.step_injection_for(session_id=session_id, principal=principal, step=step, files=files)
    given = answer.get("injection")
    return given["content"] if given else ""
