"""Indexing a repository into the graph: whole (`index_directory`) or a few changed files at a
time (`index_changes`), and keeping memories in step with renames and deletions.

A full index reads and parses every supported file once (extract.py), resolves imports across
the repository (resolve.py), builds nodes, edges, chunks and the file-level closure in memory
and writes them with COPY in one transaction. An incremental update marks the changed files'
edges stale at once, then replaces their symbols and outgoing edges and recomputes the closure
only for the files whose dependency paths can have changed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import posixpath
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from apps.graph import closure as closure_mod
from apps.graph.extract import Chunk, FileFacts, chunks, extract, is_test_file, language_of
from apps.graph.models import (
    DEPENDENCY_KINDS,
    EDGE_WEIGHTS,
    CodeChunk,
    GraphClosure,
    GraphEdge,
    GraphNode,
    IndexJob,
    IndexStatus,
)
from apps.graph.resolve import Resolver
from apps.memories.codetokens import split_parts
from apps.tenants.models import Project
from memorysaas.realtime import publish

logger = logging.getLogger(__name__)

VENDORED_DIRS = {
    "node_modules", ".git", ".hg", ".svn", "vendor", "third_party", "dist", "build", "target", "__pycache__",
    ".venv", "venv", "env", "site-packages", ".tox", ".mypy_cache", ".pytest_cache", ".next", "coverage",
}  # fmt: skip
MAX_FILE_BYTES = 1_000_000
Progress = Callable[[int], None]


def depth_cap() -> int:
    return int(getattr(settings, "GRAPH_CLOSURE_DEPTH", 5))


# ------------------------------------------------------------------------------- reading a tree


@dataclass
class SourceTree:
    files: dict[str, bytes] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=lambda: {"binary": 0, "vendored": 0, "huge": 0})
    tsconfigs: dict[str, str] = field(default_factory=dict)
    go_mod: str | None = None


def read_tree(root: str, *, include: Iterable[str] = ()) -> SourceTree:
    """Supported source files under `root` (relative posix paths), skipping vendored
    directories, binary and huge files and counting what was skipped."""
    tree = SourceTree()
    include = [p.strip("/") for p in include]
    starts = [os.path.join(root, p) for p in include] if include else [root]
    for start in starts:
        _walk(tree, root, start)
    return tree


def _walk(tree: SourceTree, root: str, start: str) -> None:
    for directory, subdirs, names in os.walk(start):
        rel_dir = os.path.relpath(directory, root).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir
        kept = []
        for sub in subdirs:
            if sub in VENDORED_DIRS or sub.endswith(".egg-info"):
                tree.skipped["vendored"] += 1
            else:
                kept.append(sub)
        subdirs[:] = sorted(kept)
        for name in sorted(names):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            full = os.path.join(directory, name)
            if os.path.islink(full) or not os.path.isfile(full):
                continue
            if name == "tsconfig.json" or (name.startswith("tsconfig.") and name.endswith(".json")):
                tree.tsconfigs[rel] = _read_text(full)
            elif name == "go.mod" and tree.go_mod is None:
                tree.go_mod = _read_text(full)
            if language_of(name) is None:
                continue
            if os.path.getsize(full) > MAX_FILE_BYTES:
                tree.skipped["huge"] += 1
                continue
            with open(full, "rb") as handle:
                data = handle.read()
            if b"\x00" in data[:8192]:
                tree.skipped["binary"] += 1
                continue
            tree.files[rel] = data


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as handle:
        return handle.read(200_000)


# ------------------------------------------------------------------------------- building in memory


@dataclass
class Graph:
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # key → row
    edges: list[tuple[str, str, str, float]] = field(
        default_factory=list
    )  # (source, target, kind, confidence)
    chunks: list[Chunk] = field(default_factory=list)
    file_deps: dict[str, set[str]] = field(default_factory=dict)

    def node(self, key: str, **row: Any) -> None:
        if key not in self.nodes:
            self.nodes[key] = {"key": key, **row}


def symbol_key(path: str, qualname: str) -> str:
    return f"{path}:{qualname}"


def _add_file(graph: Graph, facts: FileFacts, source: bytes) -> None:
    path = facts.path
    metadata = {"sha": hashlib.sha1(source).hexdigest(), "exports": facts.exports[:200], "lines": facts.lines}
    if facts.docstring:
        metadata["docstring"] = facts.docstring
    graph.node(path, kind="file", path=path, name=posixpath.basename(path), language=facts.language,
               start_line=1, end_line=facts.lines, is_test=is_test_file(path), metadata=metadata)  # fmt: skip
    for d in facts.definitions:
        key = symbol_key(path, d.qualname)
        meta = {"docstring": d.docstring} if d.docstring else {}
        graph.node(key, kind=d.kind, path=path, name=d.name, language=facts.language, start_line=d.start_line,
                   end_line=d.end_line, is_test=is_test_file(path), metadata=meta)  # fmt: skip
        parent = symbol_key(path, d.parent) if d.parent else path
        graph.edges.append((parent, key, "contains", 1.0))
        if d.parent is None and d.name in facts.exports:
            graph.edges.append((path, key, "exports", 1.0))
    graph.chunks += chunks(facts, source)


def _add_directories(graph: Graph, paths: Iterable[str]) -> None:
    for path in paths:
        child, parent = path, posixpath.dirname(path)
        while True:
            dir_key = f"{parent}/" if parent else "./"
            graph.node(dir_key, kind="directory", path=parent, name=posixpath.basename(parent) or ".",
                       language="", start_line=None, end_line=None, is_test=False, metadata={})  # fmt: skip
            child_key = child if child == path else f"{child}/"
            graph.edges.append((dir_key, child_key, "contains", 1.0))
            if not parent:
                break
            child, parent = parent, posixpath.dirname(parent)
        top = path.split("/", 1)[0] if "/" in path else None
        if top is not None:
            graph.node(f"module:{top}", kind="module", path=top, name=top, language="", start_line=None,
                       end_line=None, is_test=False, metadata={})  # fmt: skip
            graph.edges.append((f"module:{top}", f"{top}/", "contains", 1.0))


def _scope(
    facts: FileFacts, resolved: list, defs_by_file: dict[str, dict[str, str]]
) -> dict[str, tuple[str, float]]:
    """Names callable from this file → (symbol key, confidence)."""
    scope: dict[str, tuple[str, float]] = {}
    for target, item in resolved:
        target_defs = defs_by_file.get(target, {})
        for name, key in target_defs.items():
            scope.setdefault(name, (key, 0.6))  # a top-level name of an imported file
        for name in item.names:
            if name in target_defs:
                scope[name] = (target_defs[name], 0.9)  # imported by name
    for name, key in defs_by_file.get(facts.path, {}).items():
        scope[name] = (key, 0.9)
    return scope


def build(files: dict[str, FileFacts], sources: dict[str, bytes], resolver: Resolver) -> Graph:
    graph = Graph()
    for path in files:
        _add_file(graph, files[path], sources[path])
    _add_directories(graph, files)
    defs_by_file = {
        path: {d.name: symbol_key(path, d.qualname) for d in facts.definitions if d.parent is None}
        for path, facts in files.items()
    }
    for facts in files.values():
        _link_file(graph, facts, resolver.resolve(facts), defs_by_file)
    return graph


def _link_file(
    graph: Graph, facts: FileFacts, resolved: list, defs_by_file: dict[str, dict[str, str]]
) -> None:
    path = facts.path
    deps = graph.file_deps.setdefault(path, set())
    for target, item in resolved:
        graph.edges.append((path, target, "imports", 1.0))
        deps.add(target)
        if item.reexport:
            graph.edges.append((path, target, "exports", 1.0))
    scope = _scope(facts, resolved, defs_by_file)
    methods = {d.qualname for d in facts.definitions if d.parent is not None}
    for caller, callee in facts.calls:
        sibling = f"{caller.rsplit('.', 1)[0]}.{callee}" if caller and "." in caller else None
        if sibling in methods:
            target, confidence = symbol_key(path, sibling), 0.9
        elif callee in scope:
            target, confidence = scope[callee]
        else:
            continue
        source = symbol_key(path, caller) if caller else path
        if source != target:
            graph.edges.append((source, target, "calls", confidence))
    for owner, base, kind in facts.bases:
        if base in scope:
            graph.edges.append((symbol_key(path, owner), scope[base][0], kind, scope[base][1]))


def parse_all(sources: dict[str, bytes]) -> dict[str, FileFacts]:
    files = {}
    for path, data in sources.items():
        try:
            files[path] = extract(path, data)
        except Exception:  # a file tree-sitter cannot read is skipped, not fatal
            logger.exception("could not parse %s", path)
    return files


# ------------------------------------------------------------------------------- writing


def _relaxed_commit() -> None:
    """An index can always be run again, so its commit need not wait for the disk."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit TO off")


def _reserve_ids(count: int) -> list[int]:
    if count == 0:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence('graph_graphnode', 'id')) FROM generate_series(1, %s)",
            [count],
        )
        return [row[0] for row in cursor.fetchall()]


_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _field(value: Any) -> str:
    """One value in COPY's text format."""
    if value is None:
        return "\\N"
    if value is True or value is False:
        return "t" if value else "f"
    if isinstance(value, (list, tuple)):
        return "{" + ",".join(map(str, value)) + "}"
    return str(value).translate(_ESCAPES)


def _copy(table: str, columns: tuple[str, ...], rows: Iterable[tuple]) -> int:
    return _copy_lines(table, columns, ("\t".join(map(_field, row)) for row in rows))


def _copy_lines(table: str, columns: tuple[str, ...], lines: Iterable[str]) -> int:
    """COPY text-format lines, written in large blocks (much faster than row by row)."""
    count, block = 0, []
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy,
    ):
        for line in lines:
            block.append(line)
            count += 1
            if len(block) >= 5000:
                copy.write("\n".join(block) + "\n")
                block = []
        if block:
            copy.write("\n".join(block) + "\n")
    return count


def _clear(project: Project, *, paths: list[str] | None = None) -> None:
    """Remove a project's graph (or the nodes of `paths`) with their edges and closure rows."""
    with connection.cursor() as cursor:
        if paths is None:
            for table in ("graph_graphclosure", "graph_graphedge", "graph_codechunk", "graph_graphnode"):
                cursor.execute(f"DELETE FROM {table} WHERE project_id = %s", [project.id])
            return
        cursor.execute(
            "SELECT id FROM graph_graphnode WHERE project_id = %s AND path = ANY(%s) AND kind NOT IN ('directory', 'module')",
            [project.id, paths],
        )
        _delete_nodes([row[0] for row in cursor.fetchall()])
        cursor.execute(
            "DELETE FROM graph_codechunk WHERE project_id = %s AND path = ANY(%s)", [project.id, paths]
        )


def _delete_nodes(ids: list[int]) -> None:
    if not ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "DELETE FROM graph_graphclosure WHERE ancestor_id = ANY(%s) OR descendant_id = ANY(%s)",
            [ids, ids],
        )
        cursor.execute(
            "DELETE FROM graph_graphedge WHERE source_id = ANY(%s) OR target_id = ANY(%s)", [ids, ids]
        )
        cursor.execute("DELETE FROM graph_graphnode WHERE id = ANY(%s)", [ids])


def _write_nodes(project: Project, rows: list[dict[str, Any]]) -> dict[str, int]:
    ids = _reserve_ids(len(rows))
    columns = ("id", "project_id", "kind", "key", "path", "name", "language", "start_line", "end_line", "is_test", "metadata")  # fmt: skip
    _copy(
        "graph_graphnode",
        columns,
        (
            (
                i,
                project.id,
                r["kind"],
                r["key"],
                r["path"],
                r["name"][:300],
                r["language"],
                r["start_line"],
                r["end_line"],
                r["is_test"],
                json.dumps(r["metadata"], ensure_ascii=False),
            )  # fmt: skip
            for i, r in zip(ids, rows, strict=True)
        ),
    )
    return {r["key"]: i for i, r in zip(ids, rows, strict=True)}


def _edge_rows(project: Project, edges: Iterable[tuple[str, str, str, float]], ids: dict[str, int]):
    seen = set()
    for source, target, kind, confidence in edges:
        s, t = ids.get(source), ids.get(target)
        if s is None or t is None or (s, t, kind) in seen:
            continue
        seen.add((s, t, kind))
        yield (project.id, s, t, kind, confidence, EDGE_WEIGHTS.get(kind, 0.0))


def _write_edges(project: Project, edges, ids: dict[str, int]) -> int:
    columns = ("project_id", "source_id", "target_id", "kind", "confidence", "weight")
    return _copy("graph_graphedge", columns, _edge_rows(project, edges, ids))


def _write_closure(project: Project, rows: list[closure_mod.Row]) -> int:
    """Closure rows are numbers and plain words: formatted directly, the hot path of an index."""
    columns = ("project_id", "ancestor_id", "descendant_id", "depth", "path", "edge_kinds", "weight")
    pid = str(project.id)
    lines = (
        f"{pid}\t{r.ancestor}\t{r.descendant}\t{r.depth}\t{{{','.join(map(str, r.path))}}}\t{{{','.join(r.kinds)}}}\t{r.weight}"
        for r in rows
    )
    return _copy_lines("graph_graphclosure", columns, lines)


def _words(text: str) -> str:
    return " ".join(split_parts(text))[:600]


def _write_chunks(project: Project, items: list[Chunk]) -> int:
    columns = ("project_id", "path", "language", "chunk_type", "name", "start_line", "end_line", "content",
               "context_prefix", "name_words", "path_words")  # fmt: skip
    return _copy(
        "graph_codechunk",
        columns,
        (
            (
                project.id,
                c.path,
                c.language,
                c.chunk_type,
                c.name[:300],
                c.start_line,
                c.end_line,
                c.content.replace("\x00", ""),
                c.context_prefix[:800],
                _words(c.name),
                _words(c.path),
            )  # fmt: skip
            for c in items
        ),
    )


def _file_forward(project: Project, file_ids: Iterable[int] | None = None) -> closure_mod.Forward:
    """File → files it depends on (fresh edges only), lifting symbol edges to their files."""
    sql = """
        SELECT sf.id, tf.id, e.kind, e.weight
        FROM graph_graphedge e
        JOIN graph_graphnode s ON s.id = e.source_id
        JOIN graph_graphnode t ON t.id = e.target_id
        JOIN graph_graphnode sf ON sf.project_id = s.project_id AND sf.key = s.path
        JOIN graph_graphnode tf ON tf.project_id = t.project_id AND tf.key = t.path
        WHERE e.project_id = %s AND e.stale_at IS NULL AND e.kind = ANY(%s)
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [project.id, list(DEPENDENCY_KINDS)])
        return closure_mod.strongest(cursor.fetchall())


def _forward_in_memory(graph: Graph, ids: dict[str, int]) -> closure_mod.Forward:
    edges = []
    for source, target, kind, _confidence in graph.edges:
        if kind not in EDGE_WEIGHTS:
            continue
        s_file, t_file = source.split(":", 1)[0], target.split(":", 1)[0]
        s, t = ids.get(s_file), ids.get(t_file)
        if s is not None and t is not None and graph.nodes.get(s_file, {}).get("kind") == "file":
            edges.append((s, t, kind, EDGE_WEIGHTS[kind]))
    return closure_mod.strongest(edges)


# ------------------------------------------------------------------------------- full index


@dataclass
class IndexResult:
    files: int = 0
    nodes: int = 0
    edges: int = 0
    closure_rows: int = 0
    chunks: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())


def index_directory(
    project: Project, root: str, *, include: Iterable[str] = (), progress: Progress | None = None
) -> IndexResult:
    """Replace the project's graph with the code under `root`."""
    report = progress or (lambda _p: None)
    tree = read_tree(root, include=include)
    report(10)
    files = parse_all(tree.files)
    report(50)
    resolver = Resolver(tree.files, tsconfigs=tree.tsconfigs, go_mod=tree.go_mod)
    graph = build(files, tree.files, resolver)
    report(60)
    with transaction.atomic():
        _relaxed_commit()
        _clear(project)
        ids = _write_nodes(project, list(graph.nodes.values()))
        edges = _write_edges(project, graph.edges, ids)
        report(75)
        file_ids = [ids[p] for p in files]
        rows = closure_mod.closure(file_ids, _forward_in_memory(graph, ids), depth_cap())
        closure_rows = _write_closure(project, rows)
        report(90)
        chunk_count = _write_chunks(project, graph.chunks)
    _memories_follow(project, files)
    return IndexResult(
        files=len(files), nodes=len(ids), edges=edges, closure_rows=closure_rows, chunks=chunk_count,
        skipped=dict(tree.skipped),
    )  # fmt: skip


# ------------------------------------------------------------------------------- incremental


def mark_stale(project: Project, paths: Iterable[str]) -> int:
    """At once, before the rebuild: queries stop using these files' edges and paths through them."""
    now = timezone.now()
    paths = list(paths)
    GraphNode.objects.filter(project=project, kind="file", path__in=paths).update(stale_at=now)
    return GraphEdge.objects.filter(project=project, source__path__in=paths, stale_at__isnull=True).update(
        stale_at=now
    )


def index_changes(
    project: Project,
    *,
    changed: dict[str, bytes],
    deleted: Iterable[str] = (),
    renamed: dict[str, str] | None = None,
) -> IndexResult:
    """Apply changed, deleted and renamed files to the graph (renames move the memories too)."""
    renamed = dict(renamed or {})
    deleted = set(deleted) | set(renamed)
    changed = {p: d for p, d in changed.items() if language_of(p) is not None}
    result = IndexResult()
    with transaction.atomic():
        _relaxed_commit()
        mark_stale(project, [*changed, *deleted])
        known = set(GraphNode.objects.filter(project=project, kind="file").values_list("path", flat=True))
        all_paths = (known - deleted) | set(changed)
        affected = _dependents(project, [*changed, *deleted])
        old_deps = _deps_of(project, changed)
        if deleted:
            _clear(project, paths=sorted(deleted))
        files = parse_all(changed)
        resolver = Resolver(all_paths)
        defs_by_file = _defs_by_file(project, files)
        graph = Graph()
        for path, facts in files.items():
            _add_file(graph, facts, changed[path])
        _add_directories(graph, files)
        for facts in files.values():
            _link_file(graph, facts, resolver.resolve(facts), defs_by_file)
        ids = _upsert_nodes(project, graph, files)
        GraphEdge.objects.filter(project=project, source__path__in=list(files)).exclude(
            source__kind__in=("directory", "module")
        )._raw_delete(connection.alias)
        external = {k: v for k, v in _ids_for(project, {t for _, t, _, _ in graph.edges} - set(ids)).items()}
        result.edges = _write_edges(project, graph.edges, {**ids, **external})
        CodeChunk.objects.filter(project=project, path__in=list(files)).delete()
        result.chunks = _write_chunks(project, graph.chunks)
        new_deps = {path: graph.file_deps.get(path, set()) for path in files}
        if deleted or any(new_deps[p] != old_deps.get(p, set()) for p in files):
            result.closure_rows = _recompute_closure(
                project, affected | set(_ids_for(project, files).values())
            )
        GraphNode.objects.filter(project=project, kind="file", path__in=list(files)).update(stale_at=None)
        GraphEdge.objects.filter(project=project, source__path__in=list(files)).update(stale_at=None)
    result.files, result.nodes = len(files), len(ids)
    if renamed:
        from apps.memories.services import memories_files_renamed

        memories_files_renamed(project=project, renames=renamed)
    gone = deleted - set(renamed)
    if gone:
        from apps.memories.services import memories_files_deleted

        memories_files_deleted(project=project, paths=gone)
    return result


def _dependents(project: Project, paths: list[str]) -> set[int]:
    """Files whose closure paths can run through `paths`: the files themselves and their dependents."""
    ids = set(_ids_for(project, paths).values())
    if not ids:
        return set()
    dependents = GraphClosure.objects.filter(ancestor_id__in=ids).values_list("descendant_id", flat=True)
    return ids | set(dependents)


def _deps_of(project: Project, paths: Iterable[str]) -> dict[str, set[str]]:
    deps: dict[str, set[str]] = defaultdict(set)
    rows = GraphEdge.objects.filter(
        project=project, kind="imports", source__kind="file", source__path__in=list(paths)
    )
    for source, target in rows.values_list("source__path", "target__path"):
        deps[source].add(target)
    return deps


def _ids_for(project: Project, keys: Iterable[str]) -> dict[str, int]:
    keys = list(keys)
    if not keys:
        return {}
    return dict(GraphNode.objects.filter(project=project, key__in=keys).values_list("key", "id"))


def _defs_by_file(project: Project, files: dict[str, FileFacts]) -> dict[str, dict[str, str]]:
    """Top-level definitions of the changed files (fresh) and of every other file (stored)."""
    defs: dict[str, dict[str, str]] = defaultdict(dict)
    top_level = GraphNode.objects.filter(
        project=project, kind__in=("class", "function", "interface")
    ).exclude(path__in=list(files))
    for path, name, key in top_level.values_list("path", "name", "key"):
        if key.count(".") == path.count("."):  # a top-level symbol has no dotted qualname
            defs[path][name] = key
    for path, facts in files.items():
        defs[path] = {d.name: symbol_key(path, d.qualname) for d in facts.definitions if d.parent is None}
    return defs


def _upsert_nodes(project: Project, graph: Graph, files: dict[str, FileFacts]) -> dict[str, int]:
    """Keep the ids of symbols that survive (edges from other files still point at them)."""
    existing = dict(
        GraphNode.objects.filter(project=project, key__in=list(graph.nodes)).values_list("key", "id")
    )
    gone = GraphNode.objects.filter(project=project, path__in=list(files)).exclude(
        kind__in=("directory", "module")
    )
    _delete_nodes(list(gone.exclude(key__in=list(graph.nodes)).values_list("id", flat=True)))
    kept = [(existing[key], row) for key, row in graph.nodes.items() if key in existing]
    if kept:
        with connection.cursor() as cursor:
            cursor.execute(
                """
                UPDATE graph_graphnode n SET start_line = u.start_line, end_line = u.end_line, metadata = u.metadata
                FROM unnest(%s::bigint[], %s::int[], %s::int[], %s::jsonb[]) AS u(id, start_line, end_line, metadata)
                WHERE n.id = u.id
                """,
                [
                    [i for i, _ in kept],
                    [r["start_line"] for _, r in kept],
                    [r["end_line"] for _, r in kept],
                    [json.dumps(r["metadata"]) for _, r in kept],
                ],
            )
    fresh = [row for key, row in graph.nodes.items() if key not in existing]
    return {**existing, **_write_nodes(project, fresh)}


def _recompute_closure(project: Project, descendants: set[int]) -> int:
    file_ids = set(GraphNode.objects.filter(id__in=descendants, kind="file").values_list("id", flat=True))
    GraphClosure.objects.filter(descendant_id__in=file_ids)._raw_delete(connection.alias)
    forward = _file_forward(project)
    return _write_closure(project, closure_mod.closure(sorted(file_ids), forward, depth_cap()))


def _memories_follow(project: Project, files: dict[str, FileFacts]) -> None:
    """After a full index, memories about files that no longer exist are marked stale."""
    from apps.memories.models import Memory
    from apps.memories.services import memories_files_deleted

    referenced: set[str] = set()
    for paths in Memory.objects.filter(project=project, stale_at__isnull=True).values_list(
        "related_files", flat=True
    ):
        referenced.update(paths)
    missing = {p for p in referenced if language_of(p) is not None and p not in files}
    if missing:
        memories_files_deleted(project=project, paths=missing)


# ------------------------------------------------------------------------------- jobs


def job_run(job: IndexJob, runner: Callable[[Progress], IndexResult]) -> IndexJob:
    """Run an index job, recording progress on the row and announcing it on the project's group."""

    def progress(value: int) -> None:
        IndexJob.objects.filter(id=job.id).update(progress=value)
        publish(job.project_id, "graph.progress", {"job": job.id, "status": "running", "progress": value})

    IndexJob.objects.filter(id=job.id).update(status=IndexStatus.RUNNING, progress=0)
    try:
        result = runner(progress)
    except Exception as exc:
        logger.exception("graph index job %s failed", job.id)
        IndexJob.objects.filter(id=job.id).update(
            status=IndexStatus.FAILED, error=str(exc)[:500], finished_at=timezone.now()
        )
        publish(job.project_id, "graph.progress", {"job": job.id, "status": "failed", "progress": 100})
        job.refresh_from_db()
        return job
    IndexJob.objects.filter(id=job.id).update(
        status=IndexStatus.DONE,
        progress=100,
        files=result.files,
        nodes=result.nodes,
        edges=result.edges,
        skipped=job.skipped + result.skipped_total,
        finished_at=timezone.now(),
    )
    publish(job.project_id, "graph.progress", {"job": job.id, "status": "done", "progress": 100})
    job.refresh_from_db()
    return job
