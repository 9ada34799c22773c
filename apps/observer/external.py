"""Sessions an agent names by its own id (Claude Code's `session_id`) instead of opening them
through the API: found by that id inside the project, opened on first sight, once.

An agent's hooks arrive in parallel and may repeat (a retried delivery, two tool calls at once,
SessionStart racing the first prompt), so opening is serialised per (project, id) and the
unique constraint on `Session.external_id` backs it up: however the deliveries interleave,
one id is one session.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from apps.memories import secrets_scan
from apps.observer import services, text_rules
from apps.observer.models import Session
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from memorysaas.kernel.locks import hold_until_commit


def session_open_external(
    *, project: Project, actor: Principal, external_id: str, data: dict[str, Any]
) -> tuple[Session, bool]:
    """The project's session called `external_id`, opened with `data` (as `session_open` takes
    it) when there is none yet. Returns it and whether this call opened it."""
    with transaction.atomic():
        hold_until_commit(f"observer.external:{project.id}:{external_id}")
        found = (
            Session.objects.for_project(project).defer("scratchpad").filter(external_id=external_id).first()
        )
        if found is not None:
            return found, False
        session = services.session_open(project=project, actor=actor, data=data)
        session.external_id = external_id
        session.save(update_fields=["external_id"])
    return session, True


def session_task_set(*, session: Session, task: str) -> bool:
    """Give a session that has no task yet its task (an agent that opened it before it knew
    one: Claude Code's first prompt comes after SessionStart). True when this call set it."""
    # As session_open cleans the task it is given: private spans, then secrets.
    cleaned = secrets_scan.scan(text_rules.strip_private(task)).text.strip()[:4000]
    if not cleaned:
        return False
    updated = Session.objects.filter(pk=session.pk, task="").update(task=cleaned)
    if updated:
        session.task = cleaned
    return bool(updated)
