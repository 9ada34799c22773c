"""Agent integrations' background work (django-q2); thin over services."""

from __future__ import annotations

from apps.agents import services
from memorysaas.kernel.queue import retry_on_database_error


@retry_on_database_error
def idle_sessions_task() -> dict[str, int]:
    return {"completed": services.hook_sessions_complete_idle()}
