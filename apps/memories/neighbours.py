"""Neighbour providers for the retrieval pipeline's graph path.

A provider is `fn(project_id, files: list[str]) -> dict[str, float]`: for the files in play it
returns neighbouring file paths with a weight in (0, 1] (1 = as close as it gets). The pipeline
calls every registered provider and keeps each file's highest weight. Apps register theirs from
`AppConfig.ready()`:

    from apps.memories.neighbours import register_neighbour_provider
    register_neighbour_provider(import_neighbours)   # apps.graph: depth-1 imports, both ways

The built-in provider (registered by this app) links files that memories mention together.
A provider that raises is logged and skipped: retrieval never fails because of one.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from functools import partial
from uuid import UUID

from apps.memories import concurrent_reads

logger = logging.getLogger(__name__)

NeighbourProvider = Callable[[UUID, list[str]], dict[str, float]]

_PROVIDERS: dict[str, NeighbourProvider] = {}
# How long each provider has been taking (ms, moving average): the slowest runs in the calling
# thread and the others beside it, where with one spare core they run one after another.
_COST: dict[str, float] = {}


def _name(fn: NeighbourProvider) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def register_neighbour_provider(fn: NeighbourProvider) -> NeighbourProvider:
    """Add `fn` to the providers (idempotent by qualified name, so a reloaded app does not
    register twice). Usable as a decorator."""
    _PROVIDERS[_name(fn)] = fn
    return fn


def unregister_neighbour_provider(fn: NeighbourProvider) -> None:
    _PROVIDERS.pop(_name(fn), None)


def file_neighbours(project_id: UUID, files: list[str]) -> tuple[dict[str, float], dict[str, str]]:
    """Every provider's neighbours of `files` merged (max weight), and which provider gave each.
    The providers are independent reads: the slowest so far runs in this thread while the
    others run beside it."""
    merged: dict[str, float] = {}
    origin: dict[str, str] = {}
    if not files:
        return merged, origin
    in_play = set(files)
    by_cost = sorted(_PROVIDERS.items(), key=lambda item: _COST.get(item[0], 0.0))
    asks = [(name, partial(_ask, name, provider, project_id, list(files))) for name, provider in by_cost]
    waiting = [(name, concurrent_reads.start(ask)) for name, ask in asks[:-1]]
    here = [(name, ask()) for name, ask in asks[-1:]]  # while the others run beside
    answers = [(name, result()) for name, result in waiting] + here
    for name, found in answers:
        for path, weight in found.items():
            if path in in_play or weight <= 0:
                continue
            weight = min(float(weight), 1.0)
            if weight > merged.get(path, 0.0):
                merged[path] = weight
                origin[path] = name.rsplit(".", 1)[-1]
    return merged, origin


def _ask(name: str, provider: NeighbourProvider, project_id: UUID, files: list[str]) -> dict[str, float]:
    started = time.perf_counter()
    try:
        return provider(project_id, files) or {}
    except Exception:
        logger.exception("Neighbour provider %s failed", name)
        return {}
    finally:
        took = (time.perf_counter() - started) * 1000
        _COST[name] = took if name not in _COST else 0.8 * _COST[name] + 0.2 * took


def co_mentioned_files(project_id: UUID, files: list[str]) -> dict[str, float]:
    """Built-in provider: files that appear in the same memories' related_files as `files`.

    The weight is the share of the in-play files' memories that also name the neighbour,
    capped at 0.5: co-mention is weaker evidence than an import edge. Personal memories are left
    out: whose search this is is not known here, and one person's files must not steer another's.
    """
    from django.db import connection

    from apps.memories.models import TENANT_FILES

    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT other, count(*)::float / greatest(max(total), 1)
            FROM (
                SELECT related_files, count(*) OVER () AS total
                FROM memories_memory
                WHERE project_id = %s AND deprecated = false AND scope <> 'personal' AND {TENANT_FILES}
                LIMIT 500
            ) m, unnest(m.related_files) AS other
            WHERE NOT other = ANY(%s::varchar[])
            GROUP BY other
            ORDER BY 2 DESC
            LIMIT 50
            """,
            [str(project_id), _organization_of(project_id), list(files), list(files)],
        )
        return {path: min(0.5, 0.5 * share + 0.1) for path, share in cursor.fetchall()}


@functools.lru_cache(maxsize=4096)
def _organization_of(project_id: UUID) -> UUID | None:
    """A project's organization (it never changes), for the organization-tagged file index."""
    from apps.tenants.models import Project

    return Project.objects.filter(id=project_id).values_list("organization_id", flat=True).first()
