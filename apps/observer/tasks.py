"""Observer work in the background (django-q2); thin over services and crosssession.

Each may run more than once (memorysaas.kernel.queue): a finalize runs once per session (it locks the
session and does nothing once the session is completed), and a module's synthesis once per
threshold (its log row is unique)."""

from __future__ import annotations

from apps.observer import crosssession, services, windows
from memorysaas.kernel.queue import retry_on_database_error


@retry_on_database_error
def finalize_session(session_id: str) -> dict[str, int] | None:
    result = services.session_finalize(session_id)
    if result is None:
        return None
    return {"created": len(result.created), "reinforced": len(result.reinforced)}


@retry_on_database_error
def finalize_stalled_task() -> dict[str, int]:
    return {"queued": services.sessions_finalize_stalled()}


@retry_on_database_error
def synthesize_module(project_id: str, module: str, count: int) -> dict[str, int]:
    return crosssession.module_synthesis(project_id=project_id, module=module, session_count=count)


@retry_on_database_error
def cross_module_task() -> dict[str, int]:
    return crosssession.cross_module_all()


@retry_on_database_error
def context_cost_window_task(project_id: str | None = None) -> dict[str, int]:
    return {"modules": windows.context_cost_window(project_id=project_id)}
