"""The retrieval pipeline's Django side (filled in below the hooks)."""

from __future__ import annotations

import logging
from typing import Any

from apps.tenants.models import Project

logger = logging.getLogger(__name__)


def injection_min_confidence(project: Project) -> float:
    """The decayed confidence a memory needs to be injected proactively by /context in
    `project`: its trust level's threshold (apps.governance.trust), else
    settings.MEMORY_INJECTION_MIN_CONFIDENCE."""
    from apps.governance.trust import threshold_for

    return threshold_for(project)


def session_notes(*, session_id: str | None, project: Project) -> list[dict[str, Any]]:
    """In-session notes from the observer's scratchpad (dicts with at least type, content,
    related_files), or [] when the observer app offers none."""
    if not session_id:
        return []
    try:
        from apps.observer.selectors import session_notes as observer_session_notes
    except (ModuleNotFoundError, ImportError, AttributeError):
        return []
    try:
        notes = observer_session_notes(session_id=session_id, project=project) or []
    except Exception:
        logger.exception("session_notes failed for session %s", session_id)
        return []
    return [n for n in notes if isinstance(n, dict) and n.get("content")]


def session_root(*, session_id: str | None, project: Project) -> str:
    """The repository root the session named when it opened, "" for none (or no observer)."""
    if not session_id:
        return ""
    try:
        from apps.observer.selectors import session_root as observer_session_root
    except (ModuleNotFoundError, ImportError, AttributeError):
        return ""
    return observer_session_root(session_id=session_id, project=project)


def record_injection(*, session_id: str | None, project: Project, memory_ids: list[Any]) -> list[str] | None:
    """Tell the observer that /context served `memory_ids` to a running session, so the
    session's review lists them as applied. Returns the ids the session had not been given
    before, or None when there is no such open session (or no observer)."""
    if not session_id:
        return None
    try:
        from apps.observer.services import context_injection_record
    except (ModuleNotFoundError, ImportError, AttributeError):
        return None
    return context_injection_record(session_id=session_id, project=project, memory_ids=memory_ids)


def in_control_group(*, session_id: str | None, project: Project) -> bool:
    """Whether the session is one the A/B test serves no memory (seeds/003 §16)."""
    if not session_id:
        return False
    try:
        from apps.observer.services import session_is_control
    except (ModuleNotFoundError, ImportError, AttributeError):
        return False
    return session_is_control(session_id=session_id, project=project)
