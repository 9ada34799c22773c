"""Which A/B group a new session joins. The experiment (its split, its periods) belongs to the
insights app, above this one, so it registers the assigner from its AppConfig.ready():

    register_assigner(fn)   # fn(session_id: UUID, project: Project) -> "control" | "passive" | "full"

Without one, every session gets full memory. An assigner that raises is logged and the session
gets full memory: opening a session never fails because of the experiment.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

logger = logging.getLogger(__name__)

Assigner = Callable[[UUID, Any], str]
_ASSIGNER: list[Assigner] = []


def register_assigner(fn: Assigner) -> Assigner:
    _ASSIGNER[:] = [fn]
    return fn


def assign(session_id: UUID, project: Any) -> str:
    if not _ASSIGNER:
        return "full"
    try:
        return _ASSIGNER[0](session_id, project)
    except Exception:
        logger.exception("A/B assignment failed for session %s; it gets full memory.", session_id)
        return "full"
