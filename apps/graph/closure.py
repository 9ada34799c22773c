"""The transitive closure of file dependencies, up to a depth cap. Pure: no Django.

`forward[d]` lists the files `d` depends on as (target, kind, weight) — one entry per target,
the strongest kind. Walking breadth-first from each file gives the shortest dependency path to
every file it reaches: the closure row (ancestor = the reached file, descendant = the start)
with its depth, the path of ids, the edge kinds along it and the product of their weights.

The walk carries the path and the kinds as the comma-separated text COPY wants, extended by one
step at a time, so a full index formats its tens of thousands of rows as it finds them; `Row`s
are read back from those lines where a caller wants values.
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


def copy_lines(starts: Iterable[int], forward: Forward, max_depth: int, project_id: str) -> Iterator[str]:
    """The closure rows of `starts` as COPY text lines — project, ancestor (the reached file),
    descendant (the start), depth, path, edge kinds, weight — nearest first for each start."""
    for start in starts:
        head, tail = f"{project_id}\t", f"\t{start}\t"
        seen = {start}
        frontier: list[tuple[int, str, str, float]] = [(start, str(start), "", 1.0)]
        for depth in range(1, max_depth + 1):
            following = []
            for node, path, kinds, weight in frontier:
                for target, kind, edge_weight in forward.get(node, ()):
                    if target in seen:
                        continue
                    seen.add(target)
                    step = (
                        target,
                        f"{path},{target}",
                        f"{kinds},{kind}" if kinds else kind,
                        weight * edge_weight,
                    )
                    yield f"{head}{target}{tail}{depth}\t{{{step[1]}}}\t{{{step[2]}}}\t{step[3]}"
                    following.append(step)
            if not following:
                break
            frontier = following


def rows_from(start: int, forward: Forward, max_depth: int) -> list[Row]:
    rows = []
    for line in copy_lines([start], forward, max_depth, ""):
        _, ancestor, descendant, depth, path, kinds, weight = line.split("\t")
        path_ids = tuple(int(i) for i in path.strip("{}").split(","))
        rows.append(
            Row(
                int(ancestor),
                int(descendant),
                int(depth),
                path_ids,
                tuple(kinds.strip("{}").split(",")),
                float(weight),
            )
        )
    return rows


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
