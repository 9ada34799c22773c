"""Who hears, after each retrieval that ran the neighbourhood boost, whether the boost changed
its top 8 (the graph boost rate an A/B report tracks). The insights app registers its counter
from its AppConfig.ready():

    register_boost_listener(fn)   # fn(project_id: UUID, changed_top: bool) -> None

A listener must be cheap (it runs on the search path) and one that raises is logged and skipped:
retrieval never fails because of it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from uuid import UUID

logger = logging.getLogger(__name__)

TOP = 8
BoostListener = Callable[[UUID, bool], None]
_LISTENERS: dict[str, BoostListener] = {}


def register_boost_listener(fn: BoostListener) -> BoostListener:
    _LISTENERS[f"{fn.__module__}.{fn.__qualname__}"] = fn
    return fn


def top_changed(ordered: list[str], fused: dict[str, float], boost: dict[str, float]) -> bool:
    """Whether adding the boost to the fused scores changes which memories make the top 8."""
    after = sorted(ordered, key=lambda i: (-(fused[i] + boost.get(i, 0.0)), i))
    return set(ordered[:TOP]) != set(after[:TOP])


def boost_observed(project_id: UUID, changed_top: bool) -> None:
    for name, fn in list(_LISTENERS.items()):
        try:
            fn(project_id, changed_top)
        except Exception:
            logger.exception("Boost listener %s failed; skipped.", name)
