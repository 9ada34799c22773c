"""Module summaries from structure: what a module holds, read from the graph, not from an LLM.

After a full index, each top-level module gets one `module_insight` memory, marked
`needs_review`, written from what the graph already knows: its entry points, what they export,
their docstrings, the files the rest of the code depends on most, and the modules it uses and
is used by. No LLM is called here; a human (or a later LLM pass) refines the text, and a
reviewed summary (`user_verified`) is never overwritten.
"""

from __future__ import annotations

import posixpath
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from apps.graph.models import GraphEdge, GraphNode
from apps.memories import selectors as memory_selectors
from apps.memories.kinds import Source
from apps.memories.validation import MemoryDraft
from apps.tenants.models import Project
from apps.tenants.principal import SYSTEM

SUMMARY_TAG = "module-summary"
ENTRY_NAMES = (
    "__init__.py", "__main__.py", "main.py", "cli.py", "index.ts", "index.tsx", "index.js",
    "main.ts", "main.go", "lib.rs", "main.rs", "mod.rs",
)  # fmt: skip
MAX_LISTED = 8


@dataclass
class ModuleFacts:
    name: str
    files: list[str] = field(default_factory=list)
    tests: int = 0
    languages: Counter = field(default_factory=Counter)
    entry_points: list[str] = field(default_factory=list)
    exports: list[str] = field(default_factory=list)
    docstring: str = ""
    most_used: list[str] = field(default_factory=list)
    uses: list[str] = field(default_factory=list)
    used_by: list[str] = field(default_factory=list)


def module_of(path: str, depth: int) -> str:
    return "/".join(path.split("/")[:depth])


def module_depth(paths: list[str]) -> int:
    """1 (top-level directories), or 2 when everything sits in one directory (`src/`, a package)."""
    tops = {p.split("/", 1)[0] for p in paths if "/" in p}
    rooted = all("/" in p for p in paths)
    return 2 if rooted and len(tops) == 1 else 1


def _entry_rank(path: str, module: str) -> tuple[int, int]:
    name = posixpath.basename(path)
    return (path.count("/") - module.count("/"), ENTRY_NAMES.index(name))


def collect(project: Project) -> list[ModuleFacts]:
    """The structure of each module with at least one file inside a directory."""
    files = list(
        GraphNode.objects.filter(project=project, kind="file").values_list(
            "id", "path", "language", "is_test", "metadata"
        )
    )
    depth = module_depth([f[1] for f in files])
    modules: dict[str, ModuleFacts] = {}
    module_by_id: dict[int, str] = {}
    meta_by_path: dict[str, dict] = {}
    for node_id, path, language, is_test, metadata in files:
        if path.count("/") < depth:
            continue
        name = module_of(path, depth)
        facts = modules.setdefault(name, ModuleFacts(name=name))
        facts.files.append(path)
        facts.tests += int(is_test)
        facts.languages[language] += 1
        module_by_id[node_id] = name
        meta_by_path[path] = metadata
    _cross_module_edges(project, modules, module_by_id)
    for facts in modules.values():
        _entry_points(facts, meta_by_path)
    return sorted(modules.values(), key=lambda m: m.name)


def _cross_module_edges(
    project: Project, modules: dict[str, ModuleFacts], module_by_id: dict[int, str]
) -> None:
    """Import edges between files: which modules use which, and each module's most-used files."""
    uses: dict[str, Counter] = defaultdict(Counter)
    used_by: dict[str, Counter] = defaultdict(Counter)
    inbound: dict[str, Counter] = defaultdict(Counter)
    edges = GraphEdge.objects.filter(project=project, kind="imports", stale_at__isnull=True).values_list(
        "source_id", "target_id", "target__path"
    )
    for source_id, target_id, target_path in edges:
        source, target = module_by_id.get(source_id), module_by_id.get(target_id)
        if source is None or target is None or source == target:
            continue
        uses[source][target] += 1
        used_by[target][source] += 1
        inbound[target][target_path] += 1
    for name, facts in modules.items():
        facts.uses = [m for m, _ in uses[name].most_common(MAX_LISTED)]
        facts.used_by = [m for m, _ in used_by[name].most_common(MAX_LISTED)]
        facts.most_used = [p for p, _ in inbound[name].most_common(5)]


def _entry_points(facts: ModuleFacts, meta_by_path: dict[str, dict]) -> None:
    entries = sorted(
        (p for p in facts.files if posixpath.basename(p) in ENTRY_NAMES),
        key=lambda p: _entry_rank(p, facts.name),
    )
    facts.entry_points = entries[:5]
    for path in [*entries, *facts.files]:
        docstring = meta_by_path.get(path, {}).get("docstring", "")
        if docstring:
            facts.docstring = docstring  # whitespace-collapsed, ≤ 300 characters (extract)
            break
    exports: list[str] = []
    for path in entries[:3]:
        exports += [name for name in meta_by_path.get(path, {}).get("exports", []) if name not in exports]
    facts.exports = exports[:MAX_LISTED]


def render(facts: ModuleFacts) -> str:
    languages = ", ".join(f"{count} {lang or 'other'}" for lang, count in facts.languages.most_common())
    lines = [f"Module `{facts.name}`: {len(facts.files)} files ({languages}), {facts.tests} of them tests."]
    if facts.docstring:
        lines.append(f"Purpose (from its docstring): {facts.docstring}")
    if facts.entry_points:
        lines.append("Entry points: " + ", ".join(facts.entry_points) + ".")
    if facts.exports:
        lines.append("Exports: " + ", ".join(facts.exports) + ".")
    if facts.most_used:
        lines.append("Most depended-on from other modules: " + ", ".join(facts.most_used) + ".")
    if facts.uses:
        lines.append("Uses modules: " + ", ".join(facts.uses) + ".")
    if facts.used_by:
        lines.append("Used by modules: " + ", ".join(facts.used_by) + ".")
    lines.append("Generated from the code graph's structure; review and refine.")
    return "\n".join(lines)[:4000]


def _draft(facts: ModuleFacts) -> MemoryDraft:
    related = list(dict.fromkeys([*facts.entry_points, *facts.most_used]))[:20]
    return MemoryDraft(
        content=render(facts),
        type="module_insight",
        source=Source.OBSERVER_INFERRED,
        confidence=0.5,
        tags=[SUMMARY_TAG],
        related_files=related,
        related_modules=[facts.name],
        needs_review=True,
    )


def module_summaries_write(*, project: Project) -> dict[str, int]:
    """Create or refresh one summary memory per module; leave reviewed ones alone."""
    from apps.memories.services import memories_create_batch, memory_update

    existing = {
        m.related_modules[0]: m
        for m in memory_selectors.memories_of_project(project=project)
        .filter(type="module_insight", tags__contains=[SUMMARY_TAG])
        .exclude(related_modules=[])
    }
    created: list[MemoryDraft] = []
    counts = {"created": 0, "updated": 0, "unchanged": 0, "kept_reviewed": 0}
    for facts in collect(project):
        draft = _draft(facts)
        memory = existing.get(facts.name)
        if memory is None:
            created.append(draft)
        elif memory.user_verified or memory.deprecated:
            counts["kept_reviewed"] += 1
        elif memory.content == draft.content:
            counts["unchanged"] += 1
        else:
            changes = {"content": draft.content, "related_files": draft.related_files, "needs_review": True}
            memory_update(memory=memory, actor=SYSTEM, changes=changes, change="module summary refreshed")
            counts["updated"] += 1
    if created:
        memories_create_batch(project=project, actor=SYSTEM, drafts=created)
        counts["created"] = len(created)
    return counts
