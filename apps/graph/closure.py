"""The transitive closure of file dependencies, up to a depth cap. Pure: no Django.

`forward[d]` lists the files `d` depends on as (target, kind, weight) — one entry per target,
the strongest kind. Walking breadth-first from each file gives the shortest dependency path to
every file it reaches: the closure row (ancestor = the reached file, descendant = the start)
with its depth, the path of ids, the edge kinds along it and the product of their weights.

The walk carries the path and the kinds as the comma-separated text COPY wants, extended by one
step at a time, so a full index formats its tens of thousands of rows as it finds them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

Forward = dict[int, list[tuple[int, str, float]]]


@dataclass(frozen=True, slots=True)
class Row:
    ancestor: int
    descendant: int
    depth: int
    path: tuple[int, ...]
    kinds: tuple[str, ...]
    weight: float


def _walk(start: int, forward: Forward, max_depth: int) -> Iterator[tuple[int, int, str, str, float]]:
    """(reached file, depth, "start,…,reached", "kind,…", weight), nearest first."""
    seen = {start}
    frontier: list[tuple[int, str, str, float]] = []
    for target, kind, weight in forward.get(start, ()):
        if target not in seen:
            seen.add(target)
            step = (target, f"{start},{target}", kind, weight)
            yield target, 1, step[1], kind, weight
            frontier.append(step)
    for depth in range(2, max_depth + 1):
        if not frontier:
            return
        following = []
        for node, path, kinds, weight in frontier:
            for target, kind, edge_weight in forward.get(node, ()):
                if target in seen:
                    continue
                seen.add(target)
                step = (target, f"{path},{target}", f"{kinds},{kind}", weight * edge_weight)
                yield target, depth, step[1], step[2], step[3]
                following.append(step)
        frontier = following


def copy_lines(starts: Iterable[int], forward: Forward, max_depth: int, project_id: str) -> Iterator[str]:
    """The closure rows of `starts` as COPY text lines: project, ancestor, descendant, depth,
    path, edge kinds, weight."""
    for start in starts:
        head = f"{project_id}\t"
        tail = f"\t{start}\t"
        for target, depth, path, kinds, weight in _walk(start, forward, max_depth):
            yield f"{head}{target}{tail}{depth}\t{{{path}}}\t{{{kinds}}}\t{weight}"


def rows_from(start: int, forward: Forward, max_depth: int) -> list[Row]:
    return [
        Row(target, start, depth, tuple(map(int, path.split(","))), tuple(kinds.split(",")), weight)
        for target, depth, path, kinds, weight in _walk(start, forward, max_depth)
    ]


def closure(starts: Iterable[int], forward: Forward, max_depth: int) -> list[Row]:
    return [row for start in starts for row in rows_from(start, forward, max_depth)]


def strongest(edges: Iterable[tuple[int, int, str, float]]) -> Forward:
    """(source, target, kind, weight) edges → the forward map, one (strongest) edge per pair."""
    best: dict[tuple[int, int], tuple[str, float]] = {}
    for source, target, kind, weight in edges:
        if source == target:
            continue
        current = best.get((source, target))
        if current is None or weight > current[1]:
            best[(source, target)] = (kind, weight)
    forward: Forward = {}
    for (source, target), (kind, weight) in sorted(best.items()):
        forward.setdefault(source, []).append((target, kind, weight))
    return forward
