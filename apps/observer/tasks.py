"""Observer work in the background (django-q2); thin over services and crosssession."""

from __future__ import annotations

from apps.observer import crosssession, services


def finalize_session(session_id: str) -> dict[str, int] | None:
    result = services.session_finalize(session_id)
    if result is None:
        return None
    return {"created": len(result.created), "reinforced": len(result.reinforced)}


def finalize_stalled_task() -> dict[str, int]:
    return {"queued": services.sessions_finalize_stalled()}


def synthesize_module(project_id: str, module: str, count: int) -> dict[str, int]:
    return crosssession.module_synthesis(project_id=project_id, module=module, session_count=count)


def cross_module_task() -> dict[str, int]:
    return crosssession.cross_module_all()
