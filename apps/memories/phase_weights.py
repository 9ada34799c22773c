"""The phase weights retrieval uses for a project. The defaults live in kinds.PHASE_WEIGHTS; a
steward may apply learned ones to a project (the insights app owns that, above this one, and
registers the lookup from its AppConfig.ready()):

    register_phase_weights_provider(fn)   # fn(project_id: UUID) -> {phase: {memory type: weight}}

A provider that raises is logged and the defaults serve: retrieval never fails because of it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from uuid import UUID

from apps.memories.kinds import PHASE_WEIGHTS

logger = logging.getLogger(__name__)

Provider = Callable[[UUID], dict[str, dict[str, float]]]
_PROVIDER: list[Provider] = []


def register_phase_weights_provider(fn: Provider) -> Provider:
    _PROVIDER[:] = [fn]
    return fn


def phase_weights_for(project_id: UUID) -> dict[str, dict[str, float]]:
    if not _PROVIDER:
        return PHASE_WEIGHTS
    try:
        return _PROVIDER[0](project_id)
    except Exception:
        logger.exception("Phase weights of project %s could not be read; the defaults serve.", project_id)
        return PHASE_WEIGHTS
