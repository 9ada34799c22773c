"""The numbers on a project's health dashboard, computed from plain counts (no Django).

No seed gives a formula for the health score, so it is stated here and shown on the page next
to the number it produces:

- health score = 100 × (0.30 × mean confidence
                        + 0.25 × share not waiting for review
                        + 0.15 × share not disputed
                        + 0.15 × share not stale
                        + 0.15 × share active in the last 30 days)

Tokens saved is measured, not computed here: the A/B rollups' difference in tokens per task
between the control group and full memory, times the full-memory sessions (insights.selectors).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

ACTIVE_DAYS = 30
CHARS_PER_TOKEN = 4
ROOT_MODULE = "(root)"

# (weight, label) of each health component, in the order the page explains them.
SCORE_WEIGHTS: tuple[tuple[str, float, str], ...] = (
    ("confidence", 0.30, "mean confidence"),
    ("reviewed", 0.25, "share not waiting for review"),
    ("undisputed", 0.15, "share not disputed"),
    ("fresh", 0.15, "share not stale (no deleted related file)"),
    ("active", 0.15, f"share used in the last {ACTIVE_DAYS} days"),
)


@dataclass(frozen=True)
class Totals:
    total: int = 0
    active: int = 0
    needs_review: int = 0
    disputed: int = 0
    stale: int = 0
    verified: int = 0
    mean_confidence: float = 0.0
    tokens_saved: int | None = None  # measured against control; None: not enough sessions yet
    tokens_saved_interval: list[int] | None = None


@dataclass(frozen=True)
class HealthScore:
    score: int | None
    parts: list[tuple[str, float, str, float]] = field(default_factory=list)  # key, weight, label, value


def health_score(totals: Totals) -> HealthScore:
    """The 0–100 score and the value of each component; no score for a project with no memories."""
    if totals.total == 0:
        return HealthScore(score=None)
    n = totals.total
    values = {
        "confidence": min(1.0, max(0.0, totals.mean_confidence)),
        "reviewed": 1 - totals.needs_review / n,
        "undisputed": 1 - totals.disputed / n,
        "fresh": 1 - totals.stale / n,
        "active": totals.active / n,
    }
    parts = [(key, weight, label, round(values[key], 3)) for key, weight, label in SCORE_WEIGHTS]
    score = round(100 * sum(weight * values[key] for key, weight, _ in SCORE_WEIGHTS))
    return HealthScore(score=max(0, min(100, score)), parts=parts)


def health_grade(score: int | None) -> str:
    """ok / warn / danger, for the colour of the score."""
    if score is None:
        return "muted"
    if score >= 75:
        return "ok"
    return "warn" if score >= 50 else "danger"


# ---------------------------------------------------------------- modules


def module_depth(paths: Iterable[str]) -> int:
    """1 (top-level directories), or 2 when every path sits inside one directory (`src/`, a
    package) — the same grouping the graph's module summaries use."""
    paths = [p for p in paths if p]
    tops = {p.split("/", 1)[0] for p in paths if "/" in p}
    return 2 if paths and all("/" in p for p in paths) and len(tops) == 1 else 1


def file_module(path: str, depth: int) -> str:
    if "/" not in path:
        return ROOT_MODULE
    parts = path.split("/")
    return "/".join(parts[: min(depth, len(parts) - 1)])


def named_module(name: str, depth: int) -> str:
    """A `related_modules` entry (`apps/memories`, `apps.memories`, `auth`) as a module key."""
    path = name.strip().strip("/")
    if "/" not in path and "." in path:
        path = path.replace(".", "/")
    return "/".join(path.split("/")[:depth])


def memory_modules(related_files: Iterable[str], related_modules: Iterable[str], depth: int) -> set[str]:
    modules = {file_module(p, depth) for p in related_files if p}
    modules |= {named_module(m, depth) for m in related_modules if m and m.strip("/ .")}
    return modules


@dataclass
class ModuleRow:
    name: str
    memories: int = 0
    needs_review: int = 0
    e2e: int = 0
    files_total: int | None = None  # files the knowledge graph knows in this module
    files_covered: int = 0  # of those, files some memory names

    @property
    def coverage(self) -> float | None:
        if not self.files_total:
            return None
        return min(1.0, self.files_covered / self.files_total)


@dataclass(frozen=True)
class MemoryFacts:
    related_files: list[str]
    related_modules: list[str]
    needs_review: bool = False
    is_e2e: bool = False


def module_rows(
    memories: Iterable[MemoryFacts], graph_files: Iterable[str] = ()
) -> tuple[list[ModuleRow], int]:
    """Per module: memories that name it, how many need review or are E2E observations, and —
    when the graph has indexed the code — the share of its files that some memory names.
    Largest first. Also returns the depth used, so filters group paths the same way."""
    memories = list(memories)
    graph_files = [f for f in graph_files if f]
    depth = module_depth(
        graph_files
        or [p for m in memories for p in m.related_files]
        or [n for m in memories for n in m.related_modules]
    )
    rows: dict[str, ModuleRow] = {}
    named_files: dict[str, set[str]] = defaultdict(set)
    for memory in memories:
        for module in memory_modules(memory.related_files, memory.related_modules, depth):
            row = rows.setdefault(module, ModuleRow(module))
            row.memories += 1
            row.needs_review += memory.needs_review
            row.e2e += memory.is_e2e
        for path in memory.related_files:
            named_files[file_module(path, depth)].add(path)
    if graph_files:
        known: dict[str, set[str]] = defaultdict(set)
        for path in graph_files:
            known[file_module(path, depth)].add(path)
        for module, files in known.items():
            row = rows.setdefault(module, ModuleRow(module))
            row.files_total = len(files)
            row.files_covered = len(files & named_files.get(module, set()))
    ordered = sorted(rows.values(), key=lambda r: (-r.memories, r.name))
    return ordered, depth


def bar_width(value: int, largest: int) -> int:
    """A bar's width in percent of the largest, at least 2 so a non-zero bar is visible."""
    if largest <= 0 or value <= 0:
        return 0
    return max(2, round(100 * value / largest))
