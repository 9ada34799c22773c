"""Indexing a repository into the graph: whole (`index_directory`) or a few changed files at a
time (`index_changes`), and keeping memories in step with renames and deletions.

A full index reads and parses every supported file once (extract.py), resolves imports across
the repository (resolve.py), builds nodes, edges, chunks and the file-level closure in memory
and writes them with COPY in one transaction. An incremental update marks the changed files'
edges stale at once, then replaces their symbols and outgoing edges and recomputes the closure
only for the files whose dependency paths can have changed. Every file's link facts (imports,
calls, bases) are kept, so that when a batch adds, deletes or renames files, the other files
whose imports now land elsewhere are linked again without their source, as a full index would.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import posixpath
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from itertools import chain, islice
from typing import Any

from django.conf import settings
from django.db import connection, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Q
from django.utils import timezone

from apps.graph import bulk, fanout
from apps.graph import closure as closure_mod
from apps.graph.extract import Chunk, Definition, FileFacts, Import, chunks, is_test_file, language_of
from apps.graph.models import (
    DEPENDENCY_KINDS,
    EDGE_WEIGHTS,
    CodeChunk,
    GraphClosure,
    GraphEdge,
    GraphFileLinks,
    GraphNode,
    IndexJob,
    IndexStatus,
)
from apps.graph.resolve import Resolver
from apps.memories.search.codetokens import split_parts
from apps.tenants.models import Project
from memorysaas.kernel import events as org_events
from memorysaas.kernel.locks import hold_until_commit
from memorysaas.kernel.realtime import outside_transaction, publish

logger = logging.getLogger(__name__)

VENDORED_DIRS = {
    "node_modules", ".git", ".hg", ".svn", "vendor", "third_party", "dist", "build", "target", "__pycache__",
    ".venv", "venv", "env", "site-packages", ".tox", ".mypy_cache", ".pytest_cache", ".next", "coverage",
}  # fmt: skip
MAX_FILE_BYTES = 1_000_000
MAX_PATH = 500  # GraphNode.path and CodeChunk.path
MAX_KEY = 700  # GraphNode.key: a symbol deeper than this is left out
CLOSURE_AHEAD = 250_000  # closure rows walked before their COPY (~40 MB); the rest stream in it
Progress = Callable[[int], None]


def depth_cap() -> int:
    return int(getattr(settings, "GRAPH_CLOSURE_DEPTH", 5))


def parse_processes() -> int:
    """How many processes parse a full index's files: GRAPH_PARSE_PROCESSES, else one per CPU."""
    return settings.GRAPH_PARSE_PROCESSES or fanout.usable_cpus()


# ------------------------------------------------------------------------------- reading a tree


@dataclass
class SourceTree:
    files: dict[str, bytes] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=lambda: {"binary": 0, "vendored": 0, "huge": 0})
    tsconfigs: dict[str, str] = field(default_factory=dict)
    go_mod: str | None = None
    # What exists without being indexed: source files skipped (huge, binary, long paths) and the
    # directories not walked (vendored). A memory about them is not about a deleted file.
    unparsed: set[str] = field(default_factory=set)
    unwalked: list[str] = field(default_factory=list)
    # The walk's roots ("" for all of it; `--include` names parts): what lies outside was not looked at.
    roots: list[str] = field(default_factory=lambda: [""])

    def exists(self, path: str) -> bool | None:
        """Whether `path` is in the tree: True, False, or None when the walk did not look there."""
        if path in self.files or path in self.unparsed:
            return True
        if not any(not root or path.startswith(f"{root}/") for root in self.roots):
            return None
        if any(path.startswith(f"{d}/") for d in self.unwalked):
            return None
        return False

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


def read_tree(root: str, *, include: Iterable[str] = ()) -> SourceTree:
    """Supported source files under `root` (relative posix paths), skipping vendored
    directories, binary and huge files, and names that are not UTF-8 (the database could not
    store them), and counting what was skipped."""
    tree = SourceTree(roots=[])
    for part in include or [""]:
        start = os.path.join(root, part.strip("/"))
        rel_dir = os.path.relpath(start, root).replace(os.sep, "/")
        tree.roots.append("" if rel_dir == "." else rel_dir)
        _walk(tree, start, "" if rel_dir == "." else rel_dir)
    return tree


def _walk(tree: SourceTree, directory: str, rel_dir: str) -> None:
    """One directory's files (by name), then its subdirectories, as `os.walk` would order them;
    the directory entries carry what `os.walk` would stat again."""
    try:
        with os.scandir(directory) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError:
        return
    subdirs = []
    for entry in entries:
        name = entry.name
        if entry.is_dir(follow_symlinks=False):
            subdirs.append(entry)
            continue
        if not entry.is_file(follow_symlinks=False):  # symlinks, sockets, devices
            continue
        rel = f"{rel_dir}/{name}" if rel_dir else name
        if name == "tsconfig.json" or (name.startswith("tsconfig.") and name.endswith(".json")):
            tree.tsconfigs[rel] = _read_text(entry.path)
        elif name == "go.mod" and tree.go_mod is None:
            tree.go_mod = _read_text(entry.path)
        if language_of(name) is None:
            continue
        if not _utf8(rel):
            tree.skip("undecodable_name")
            continue
        if len(rel) > MAX_PATH:
            tree.skip("long_path")
            tree.unparsed.add(rel)
            continue
        with open(entry.path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            tree.skip("huge")
            tree.unparsed.add(rel)
        elif b"\x00" in data[:8192]:
            tree.skip("binary")
            tree.unparsed.add(rel)
        else:
            tree.files[rel] = data
    for entry in subdirs:
        name = entry.name
        if name in VENDORED_DIRS or name.endswith(".egg-info"):
            tree.skip("vendored")
            tree.unwalked.append(f"{rel_dir}/{name}" if rel_dir else name)
        elif not _utf8(name):
            tree.skip("undecodable_name")
        else:
            _walk(tree, entry.path, f"{rel_dir}/{name}" if rel_dir else name)


def _utf8(name: str) -> bool:
    """False for a file name whose bytes are not UTF-8 (Python holds them as surrogates)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
    file_deps: dict[str, set[str]] = field(default_factory=dict)

    def node(self, key: str, **row: Any) -> None:
        if key not in self.nodes:
            self.nodes[key] = {"key": key, **row}


def symbol_key(path: str, qualname: str) -> str:
    return f"{path}:{qualname}"


def _add_file(graph: Graph, facts: FileFacts, source: bytes) -> None:
    path, is_test = facts.path, is_test_file(facts.path)
    metadata = {"sha": hashlib.sha1(source).hexdigest(), "exports": facts.exports[:200], "lines": facts.lines}
    if facts.docstring:
        metadata["docstring"] = facts.docstring
    graph.node(path, kind="file", path=path, name=posixpath.basename(path), language=facts.language,
               start_line=1, end_line=facts.lines, is_test=is_test, metadata=metadata)  # fmt: skip
    for d in facts.definitions:
        key = symbol_key(path, d.qualname)
        if len(key) > MAX_KEY:
            continue  # its edges are dropped with it: they need both ends
        meta = {"docstring": d.docstring} if d.docstring else {}
        graph.node(key, kind=d.kind, path=path, name=d.name, language=facts.language, start_line=d.start_line,
                   end_line=d.end_line, is_test=is_test, metadata=meta)  # fmt: skip
        parent = symbol_key(path, d.parent) if d.parent else path
        graph.edges.append((parent, key, "contains", 1.0))
        if d.parent is None and d.name in facts.exports:
            graph.edges.append((path, key, "exports", 1.0))


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


@dataclass
class FilePart:
    """What one file brings to a full index, made in the process that parsed it: its chunks as
    COPY lines, its nodes and the edges inside it, those nodes as COPY lines still without
    their ids (reserved once every file's nodes are counted), and its link facts' COPY line."""

    chunk_lines: list[str]
    graph: Graph
    node_tails: list[str]
    links_line: str


def file_part(project_id: str, facts: FileFacts, source: bytes) -> FilePart:
    part = Graph()
    _add_file(part, facts, source)
    return FilePart(
        list(_chunk_lines(project_id, chunks(facts, source))),
        part,
        [_node_tail(project_id, row) for row in part.nodes.values()],
        _links_line(project_id, facts),
    )


def assemble(
    project_id: str, files: dict[str, FileFacts], parts: dict[str, FilePart], resolver: Resolver
) -> tuple[Graph, list[str]]:
    """The whole graph from the files' parts, nodes in the order of the files and then the
    directories (so ids come out in that order whichever process parsed what), with every
    node's COPY line but its id; then the edges between files."""
    graph, tails = Graph(), []
    for path in files:
        part = parts[path]
        graph.nodes.update(part.graph.nodes)
        graph.edges += part.graph.edges
        tails += part.node_tails
    files_only = len(graph.nodes)
    _add_directories(graph, files)
    tails += [_node_tail(project_id, row) for row in list(graph.nodes.values())[files_only:]]
    link(graph, files, resolver)
    return graph, tails


def link(graph: Graph, files: dict[str, FileFacts], resolver: Resolver) -> None:
    """The edges between files: imports resolved, then calls and bases through them."""
    defs_by_file = {
        path: {d.name: symbol_key(path, d.qualname) for d in facts.definitions if d.parent is None}
        for path, facts in files.items()
    }
    for facts in files.values():
        _link_file(graph, facts, resolver.resolve(facts), defs_by_file)


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


# ------------------------------------------------------------------------------- writing


def _relaxed_commit() -> None:
    """An index can always be run again, so its commit need not wait for the disk."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit TO off")


def _one_writer(project: Project) -> None:
    """Until this transaction ends, no other index of the project's graph runs: a second waits
    for the first, then reads what it wrote (two at once inserted the same nodes, and one failed
    with its files lost)."""
    hold_until_commit(f"graph:{project.id}")


def _reserve_ids(count: int, using: BaseDatabaseWrapper = connection) -> list[int]:
    """`count` ids from the nodes' sequence, on `using` (sequences are outside transactions, so a
    second connection can reserve them while this one's COPY is still running)."""
    if count == 0:
        return []
    with using.cursor() as cursor:
        # The sequence is looked up once: `nextval(pg_get_serial_sequence(…))` per row costs 6×.
        cursor.execute(
            "WITH s AS MATERIALIZED (SELECT pg_get_serial_sequence('graph_graphnode', 'id')::regclass AS seq)"
            " SELECT array_agg(nextval(seq)) FROM s, generate_series(1, %s)",
            [count],
        )
        return cursor.fetchone()[0]


@contextmanager
def _second_connection() -> Iterator[BaseDatabaseWrapper]:
    side = connections.create_connection(connection.alias)
    try:
        yield side
    finally:
        side.close()


def _clear(project: Project, *, paths: list[str] | None = None) -> None:
    """Remove a project's graph (or the nodes of `paths`) with their edges and closure rows."""
    with connection.cursor() as cursor:
        if paths is None:
            # Closure rows are found through their descendant, a file (the table has no project index).
            cursor.execute(
                "DELETE FROM graph_graphclosure WHERE descendant_id IN"
                " (SELECT id FROM graph_graphnode WHERE project_id = %s AND kind = 'file')",
                [project.id],
            )
            for table in ("graph_graphedge", "graph_codechunk", "graph_graphnode", "graph_graphfilelinks"):
                cursor.execute(f"DELETE FROM {table} WHERE project_id = %s", [project.id])
            return
        cursor.execute(
            "SELECT id FROM graph_graphnode WHERE project_id = %s AND path = ANY(%s) AND kind NOT IN ('directory', 'module')",
            [project.id, paths],
        )
        _delete_nodes([row[0] for row in cursor.fetchall()])
        for table in ("graph_codechunk", "graph_graphfilelinks"):
            cursor.execute(
                f"DELETE FROM {table} WHERE project_id = %s AND path = ANY(%s)", [project.id, paths]
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


NODE_COLUMNS = ("id", "project_id", "kind", "key", "path", "name", "language", "start_line", "end_line", "is_test", "metadata")  # fmt: skip
EDGE_COLUMNS = ("project_id", "source_id", "target_id", "kind", "confidence", "weight")
CLOSURE_COLUMNS = ("project_id", "ancestor_id", "descendant_id", "depth", "path", "edge_kinds", "weight")
CHUNK_COLUMNS = ("project_id", "path", "language", "chunk_type", "name", "start_line", "end_line", "content",
                 "context_prefix", "name_words", "path_words")  # fmt: skip
LINKS_COLUMNS = ("project_id", "path", "language", "imports", "calls", "bases")


def _node_tail(project_id: str, r: dict[str, Any]) -> str:
    """A node's COPY line after its id (most symbols have no metadata: no JSON encoder for them)."""
    text, field = bulk.text, bulk.field
    metadata = text(bulk.json_text(r["metadata"])) if r["metadata"] else "{}"
    return (
        f"{project_id}\t{r['kind']}\t{text(r['key'])}\t{text(r['path'])}\t{text(r['name'][:300])}\t"
        f"{r['language']}\t{field(r['start_line'])}\t{field(r['end_line'])}\t{'t' if r['is_test'] else 'f'}\t"
        f"{metadata}"
    )


def _links_line(project_id: str, facts: FileFacts) -> str:
    """A file's GraphFileLinks COPY line. Each call pair is kept once: a repeated call makes no
    other edge, and Django's calls are a fifth fewer that way."""
    text, dumps = bulk.text, bulk.json_text
    imports = [[i.specifier, list(i.names), i.reexport, i.kind] for i in facts.imports]
    calls = list(dict.fromkeys(facts.calls))
    return (
        f"{project_id}\t{text(facts.path)}\t{facts.language}\t{text(dumps(imports))}\t"
        f"{text(dumps(calls))}\t{text(dumps(facts.bases))}"
    )


def _edge_lines(
    project_id: str, edges: Iterable[tuple[str, str, str, float]], ids: dict[str, int]
) -> list[str]:
    """The edges between known nodes, once per (source, target, kind)."""
    lines, seen = [], set()
    for source, target, kind, confidence in edges:
        s, t = ids.get(source), ids.get(target)
        if s is None or t is None or (s, t, kind) in seen:
            continue
        seen.add((s, t, kind))
        lines.append(f"{project_id}\t{s}\t{t}\t{kind}\t{confidence}\t{EDGE_WEIGHTS.get(kind, 0.0)}")
    return lines


def _copy(table: str, columns: Iterable[str], lines: Iterable[str]) -> int:
    with bulk.CopyWriter(table, columns) as out:
        out.lines(lines)
    return out.count


def _write_nodes(project: Project, rows: list[dict[str, Any]]) -> dict[str, int]:
    """COPY the nodes, with ids from the table's sequence: key → id."""
    ids, pid = _reserve_ids(len(rows)), str(project.id)
    _copy(
        "graph_graphnode",
        NODE_COLUMNS,
        (f"{i}\t{_node_tail(pid, r)}" for i, r in zip(ids, rows, strict=True)),
    )
    return {r["key"]: i for i, r in zip(ids, rows, strict=True)}


def _write_edges(project: Project, edges: Iterable[tuple[str, str, str, float]], ids: dict[str, int]) -> int:
    return _copy("graph_graphedge", EDGE_COLUMNS, _edge_lines(str(project.id), edges, ids))


def _write_closure(project: Project, starts: Iterable[int], forward: closure_mod.Forward) -> int:
    """The closure rows of `starts`, streamed to COPY as the walk finds them."""
    lines = closure_mod.copy_lines(starts, forward, depth_cap(), str(project.id))
    return _copy("graph_graphclosure", CLOSURE_COLUMNS, lines)


def _words(text: str) -> str:
    return " ".join(split_parts(text))[:600]


def _chunk_lines(project_id: str, items: list[Chunk]) -> Iterable[str]:
    """COPY lines of one file's chunks (the path's words are the same for all of them)."""
    text, path_words = bulk.text, {}
    for c in items:
        if c.path not in path_words:
            path_words[c.path] = text(_words(c.path))
        yield (
            f"{project_id}\t{text(c.path)}\t{c.language}\t{c.chunk_type}\t{text(c.name[:300])}\t{c.start_line}\t"
            f"{c.end_line}\t{text(c.content)}\t{text(c.context_prefix[:800])}\t{text(_words(c.name))}\t{path_words[c.path]}"
        )


def _write_chunks(project: Project, items: list[Chunk]) -> int:
    return _copy("graph_codechunk", CHUNK_COLUMNS, _chunk_lines(str(project.id), items))


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


def _forward_in_memory(graph: Graph, ids: dict[str, int], files: Iterable[str]) -> closure_mod.Forward:
    """File → files it depends on, from the edges in memory (symbol edges lifted to their files)."""
    files, edges = set(files), []
    for source, target, kind, _confidence in graph.edges:
        if kind not in EDGE_WEIGHTS:
            continue
        s_file, t_file = source.split(":", 1)[0], target.split(":", 1)[0]
        s, t = ids.get(s_file), ids.get(t_file)
        if s is not None and t is not None and s_file in files:
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
    relinked: list[str] = field(default_factory=list)  # other files whose imports the batch moved

    @property
    def skipped_total(self) -> int:
        return sum(self.skipped.values())


@contextmanager
def _collector_paused() -> Iterator[None]:
    """A full index makes hundreds of thousands of objects that live until it ends (facts,
    nodes, edges, formatted rows), and the cyclic garbage collector, triggered by all those
    allocations, would walk every one of them again and again; they form no cycles worth
    collecting, so it waits until they are gone."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def index_directory(
    project: Project, root: str, *, include: Iterable[str] = (), progress: Progress | None = None
) -> IndexResult:
    """Replace the project's graph with the code under `root`, in one transaction."""
    report = progress or (lambda _p: None)
    tree = read_tree(root, include=include)
    report(10)
    with _collector_paused():  # until what the index built is gone again
        result = _replace_graph(project, tree, report)
    _memories_follow(project, tree)
    return result


def _replace_graph(project: Project, tree: SourceTree, report: Progress) -> IndexResult:
    """The full index's transaction.

    PostgreSQL's work — above all the chunks' keyword vectors — is the longest single thread of
    a full index, so it starts at once and is not kept waiting: other processes parse the files
    (fanout) and make each file's chunks, nodes and inner edges, while this one queues the
    chunks into their COPY as they arrive; the graph is assembled while PostgreSQL is still
    working through the chunks, and the nodes, edges and closure follow."""
    with transaction.atomic():
        _relaxed_commit()
        _one_writer(project)
        _clear(project)
        pid = str(project.id)
        parts: dict[str, FilePart] = {}

        def take(path: str, facts: FileFacts, part: FilePart) -> None:
            chunk_out.lines(part.chunk_lines)
            part.chunk_lines = []  # queued: not kept twice
            parts[path] = part

        with bulk.CopyWriter("graph_codechunk", CHUNK_COLUMNS) as chunk_out:
            files = fanout.extract_all(
                tree.files, prepare=partial(file_part, pid), consume=take, processes=parse_processes()
            )
            # PostgreSQL is still working through the queued chunks: assemble the graph and
            # reserve its ids meanwhile (on a second connection, this one is busy). From here on
            # each COPY's rows are made while PostgreSQL stores the previous one's.
            resolver = Resolver(tree.files, tsconfigs=tree.tsconfigs, go_mod=tree.go_mod)
            graph, tails = assemble(pid, files, parts, resolver)
            with _second_connection() as side:
                id_list = _reserve_ids(len(tails), side)
        report(50)
        ids = dict(zip(graph.nodes, id_list, strict=True))
        with bulk.CopyWriter("graph_graphnode", NODE_COLUMNS) as node_out:
            node_out.lines(f"{i}\t{tail}" for i, tail in zip(id_list, tails, strict=True))
            edge_lines = _edge_lines(pid, graph.edges, ids)
            forward = _forward_in_memory(graph, ids, files)
        closure = closure_mod.copy_lines([ids[p] for p in files], forward, depth_cap(), pid)
        with bulk.CopyWriter("graph_graphedge", EDGE_COLUMNS) as edge_out:
            edge_out.lines(edge_lines)
            ahead = list(islice(closure, CLOSURE_AHEAD))
        report(75)
        with bulk.CopyWriter("graph_graphfilelinks", LINKS_COLUMNS) as links_out:
            links_out.lines(parts[path].links_line for path in files)
        paths, nodes = set(files), len(ids)
        with bulk.CopyWriter("graph_graphclosure", CLOSURE_COLUMNS) as closure_out:
            closure_out.lines(chain(ahead, closure))
            # Free what the index built while PostgreSQL stores the closure, not after it.
            parts.clear()  # (held by `take` too)
            del files, graph, tails, id_list, ids, edge_lines, forward, closure, ahead
        report(90)
        _refresh_statistics(
            {"graph_graphnode": nodes, "graph_graphedge": edge_out.count, "graph_graphclosure": closure_out.count,
             "graph_codechunk": chunk_out.count}
        )  # fmt: skip
    result = IndexResult(
        files=len(paths), nodes=nodes, edges=edge_out.count, closure_rows=closure_out.count,
        chunks=chunk_out.count, skipped=dict(tree.skipped),
    )  # fmt: skip
    return result


# The columns the graph's queries filter and join on; the chunks' search vector is left to
# autovacuum (its statistics are the slow part of an ANALYZE).
STATISTICS_COLUMNS = {
    "graph_graphnode": "project_id, key, kind, path, name, stale_at",
    "graph_graphedge": "project_id, source_id, target_id, kind, stale_at",
    "graph_graphclosure": "project_id, ancestor_id, descendant_id, depth",
    "graph_codechunk": "project_id, path",
}


def _refresh_statistics(written: dict[str, int]) -> None:
    """ANALYZE the tables in which this project now makes up a large share. The planner's
    statistics describe the rows it last sampled; a new or rebuilt project that is a good part of
    a table is not in them (its project id looks rare, a table autovacuum last saw empty looks
    empty), and plans go badly wrong — an impact lookup scanning the project's whole node index,
    an incremental update joining every edge of the project — until autovacuum gets round to it.
    Past autovacuum's own threshold (a tenth of the table) this does what autovacuum would do,
    at once, on a small sample of the columns the graph queries use; autovacuum refines it later."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT relname, reltuples FROM pg_class WHERE relname = ANY(%s) AND relkind = 'r'",
            [list(written)],
        )
        stale = [table for table, believed in cursor.fetchall() if written[table] >= 0.1 * max(believed, 0)]
        if stale:
            cursor.execute("SET LOCAL default_statistics_target = 10")
            for table in stale:
                cursor.execute(f"ANALYZE {table} ({STATISTICS_COLUMNS[table]})")
            cursor.execute("SET LOCAL default_statistics_target TO DEFAULT")


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
    renamed = {old: new for old, new in (renamed or {}).items() if old != new}  # (a no-op "rename")
    changed = {p: d for p, d in changed.items() if language_of(p) is not None}
    # A file both sent and deleted is kept, as sent: clearing it took the edges into it with it.
    deleted = (set(deleted) | set(renamed)) - set(changed)
    result = IndexResult()
    with transaction.atomic():
        _relaxed_commit()
        _one_writer(project)
        mark_stale(project, [*changed, *deleted])
        known = set(GraphNode.objects.filter(project=project, kind="file").values_list("path", flat=True))
        all_paths = (known - deleted) | set(changed)
        affected = _dependents(project, [*changed, *deleted])
        old_deps = _deps_of(project, changed)
        if deleted:
            _clear(project, paths=sorted(deleted))
        files = fanout.extract_all(changed)
        resolver = Resolver(all_paths)
        defs_by_file = _defs_by_file(project, files)
        graph = Graph()
        for path, facts in files.items():
            _add_file(graph, facts, changed[path])
        _add_directories(graph, files)
        for facts in files.values():
            _link_file(graph, facts, resolver.resolve(facts), defs_by_file)
        relinked: dict[str, FileFacts] = {}
        if all_paths != known or renamed:
            moved = set(renamed) | set(renamed.values())
            relinked = _moved_importers(project, set(changed), Resolver(known), resolver, moved)
            for facts in relinked.values():
                _link_file(graph, facts, resolver.resolve(facts), defs_by_file)
            affected |= _dependents(project, list(relinked))
        ids = _upsert_nodes(project, graph, files)
        GraphEdge.objects.filter(project=project, source__path__in=list(files)).exclude(
            source__kind__in=("directory", "module")
        )._raw_delete(connection.alias)
        _delete_link_edges(project, list(relinked))
        ends = {key for source, target, _, _ in graph.edges for key in (source, target)}
        result.edges = _write_edges(project, graph.edges, {**ids, **_ids_for(project, ends - set(ids))})
        CodeChunk.objects.filter(project=project, path__in=list(files)).delete()
        result.chunks = _write_chunks(project, [c for p, f in files.items() for c in chunks(f, changed[p])])
        _write_links(project, files)
        new_deps = {path: graph.file_deps.get(path, set()) for path in files}
        if deleted or relinked or any(new_deps[p] != old_deps.get(p, set()) for p in files):
            result.closure_rows = _recompute_closure(
                project, affected | set(_ids_for(project, files).values())
            )
        GraphNode.objects.filter(project=project, kind="file", path__in=list(files)).update(stale_at=None)
        GraphEdge.objects.filter(project=project, source__path__in=list(files)).update(stale_at=None)
    result.files, result.nodes, result.relinked = len(files), len(ids), sorted(relinked)
    if renamed:
        from apps.memories.services import memories_files_renamed

        memories_files_renamed(project=project, renames=renamed)
    gone = deleted - set(renamed)
    if gone:
        from apps.memories.services import memories_files_deleted

        memories_files_deleted(project=project, paths=gone)
    back = set(changed) | set(renamed.values())
    if back:
        from apps.memories.services import memories_files_restored

        memories_files_restored(
            project=project, exists=lambda p: language_of(p) is None or p in all_paths, touching=back
        )
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


def _moved_importers(
    project: Project, batch: set[str], before: Resolver, after: Resolver, moved: set[str]
) -> dict[str, FileFacts]:
    """The stored files outside the batch that must be linked again, with the facts to do it.

    Which file an import lands in depends on which files exist (Python takes the deepest module
    there is), so a batch that adds, deletes or renames files can move other files' imports: one
    unresolved until its target arrived, one that fell back to a package's `__init__` until the
    submodule existed, one whose target left. Comparing each file's imports resolved against the
    paths before and after the batch (not against its stored edges, which a full index resolved
    with tsconfig and go.mod the batch does not have) finds them. A file importing a renamed
    path is taken too: what it calls there may have moved (a swap keeps every path)."""
    chosen: dict[str, FileFacts] = {}
    stored = GraphFileLinks.objects.filter(project=project).exclude(path__in=list(batch))
    for path, language, imports in stored.values_list("path", "language", "imports"):
        facts = FileFacts(path=path, language=language, lines=0)
        facts.imports = [
            Import(spec, tuple(names), reexport, kind) for spec, names, reexport, kind in imports
        ]
        now = after.resolve(facts)
        if now != before.resolve(facts) or any(target in moved for target, _ in now):
            chosen[path] = facts
    if chosen:
        _stored_calls_and_methods(project, chosen)
    return chosen


def _stored_calls_and_methods(project: Project, files: dict[str, FileFacts]) -> None:
    """Complete stored facts for `_link_file`: the calls and bases, and the nested definitions
    (their nodes) through which a method's call finds a sibling. A Go method is `Type.name` at
    the top level, with no parent: never a sibling there."""
    rows = GraphFileLinks.objects.filter(project=project, path__in=list(files))
    for path, calls, bases in rows.values_list("path", "calls", "bases"):
        files[path].calls = [(caller, callee) for caller, callee in calls]
        files[path].bases = [(owner, base, kind) for owner, base, kind in bases]
    symbols = GraphNode.objects.filter(project=project, path__in=list(files)).exclude(
        kind__in=("file", "directory", "module")
    )
    for path, key in symbols.values_list("path", "key"):
        qualname, facts = key[len(path) + 1 :], files[path]
        if "." in qualname and facts.language != "go":
            parent, name = qualname.rsplit(".", 1)
            facts.definitions.append(Definition("method", name, qualname, 0, 0, 0, 0, parent=parent))


def _delete_link_edges(project: Project, paths: list[str]) -> None:
    """The edges `_link_file` made from these files (imports, re-exports, calls and bases),
    leaving the structure inside them (contains, a file's exports of its own symbols)."""
    if not paths:
        return
    GraphEdge.objects.filter(project=project, source__path__in=paths).filter(
        Q(kind__in=("imports", "calls", "extends", "implements")) | Q(kind="exports", target__kind="file")
    )._raw_delete(connection.alias)


def _write_links(project: Project, files: dict[str, FileFacts]) -> None:
    """Replace the batch's stored link facts (a renamed file's went with its old path)."""
    if not files:
        return
    GraphFileLinks.objects.filter(project=project, path__in=list(files))._raw_delete(connection.alias)
    pid = str(project.id)
    _copy("graph_graphfilelinks", LINKS_COLUMNS, (_links_line(pid, facts) for facts in files.values()))


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
                    [bulk.json_text(r["metadata"]) for _, r in kept],
                ],
            )
    fresh = [row for key, row in graph.nodes.items() if key not in existing]
    return {**existing, **_write_nodes(project, fresh)}


def _recompute_closure(project: Project, descendants: set[int]) -> int:
    file_ids = set(GraphNode.objects.filter(id__in=descendants, kind="file").values_list("id", flat=True))
    GraphClosure.objects.filter(descendant_id__in=file_ids)._raw_delete(connection.alias)
    return _write_closure(project, sorted(file_ids), _file_forward(project))


def _memories_follow(project: Project, tree: SourceTree) -> None:
    """After a full index, memories about files that no longer exist are marked stale, and stale
    ones whose files are all there again are not. Only what the walk looked at counts: a file
    outside `--include`, or in a vendored directory, is not known to be gone."""
    from apps.memories.selectors import memories_of_project
    from apps.memories.services import memories_files_deleted, memories_files_restored

    referenced: set[str] = set()
    for paths in (
        memories_of_project(project=project)
        .filter(stale_at__isnull=True)
        .values_list("related_files", flat=True)
    ):
        referenced.update(paths)
    missing = {p for p in referenced if language_of(p) is not None and tree.exists(p) is False}
    if missing:
        memories_files_deleted(project=project, paths=missing)
    memories_files_restored(
        project=project, exists=lambda p: language_of(p) is None or tree.exists(p) is not False
    )


# ------------------------------------------------------------------------------- jobs


def job_run(job: IndexJob, runner: Callable[[Progress], IndexResult]) -> IndexJob:
    """Run an index job, recording progress on the row and announcing it on the project's group."""

    def progress(value: int) -> None:
        def report() -> None:
            IndexJob.objects.filter(id=job.id).update(progress=value)
            publish(job.project_id, "graph.progress", {"job": job.id, "status": "running", "progress": value})

        outside_transaction(report)  # (reported from inside the index's own transaction)

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
    org_events.emit(
        job.project.organization_id, "graph.index_completed", org_events.index_payload(job, result)
    )
    job.refresh_from_db()
    return job
