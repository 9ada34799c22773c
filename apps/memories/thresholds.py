"""The confidence a memory needs before it is handed to an agent unasked (by /context, session
start and hooks), per project.

Memories own the question but not the answer: a project's trust level (apps.governance) sets
it, and governance sits above memories. So governance registers its lookup here from
`AppConfig.ready()`, as apps register neighbour providers (neighbours.py):

    from apps.memories.thresholds import register_injection_threshold
    register_injection_threshold(threshold_for)   # apps.governance: the trust level's threshold

With none registered, settings.MEMORY_INJECTION_MIN_CONFIDENCE applies.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings

from apps.tenants.models import Project

InjectionThreshold = Callable[[Project], float]

_LOOKUP: list[InjectionThreshold] = []


def register_injection_threshold(fn: InjectionThreshold) -> InjectionThreshold:
    """Make `fn(project) -> float` the project's injection threshold (the last one registered
    wins, so a reloaded app replaces its own). Usable as a decorator."""
    _LOOKUP[:] = [fn]
    return fn


def injection_min_confidence(project: Project) -> float:
    """The decayed confidence a memory needs to be injected proactively in `project`."""
    if _LOOKUP:
        return _LOOKUP[0](project)
    return float(settings.MEMORY_INJECTION_MIN_CONFIDENCE)
