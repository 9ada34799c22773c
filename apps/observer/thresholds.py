"""Per-project tightening of a signal class's promotion threshold. The insights app decides it
(when reviewers reject too many of a class's memories) and registers the lookup from its
AppConfig.ready():

    register_tightening_provider(fn)   # fn(project_id: UUID) -> {signal class: factor >= 1}

A class's minimum number of sessions is multiplied by its factor (rounded up). A provider that
raises is logged and nothing is tightened: a session's finalize never fails because of it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from uuid import UUID

logger = logging.getLogger(__name__)

Provider = Callable[[UUID], dict[str, float]]
_PROVIDER: list[Provider] = []


def register_tightening_provider(fn: Provider) -> Provider:
    _PROVIDER[:] = [fn]
    return fn


def tightened_for(project_id: UUID) -> dict[str, float]:
    if not _PROVIDER:
        return {}
    try:
        return _PROVIDER[0](project_id)
    except Exception:
        logger.exception("Tightened thresholds of project %s could not be read; none apply.", project_id)
        return {}
