"""Reading the graph: impact, dependencies, node search, neighbours for retrieval, code chunks.

Every query skips stale edges, and closure paths that run through a file whose edges are stale.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import connection

from apps.graph.models import DEPENDENCY_KINDS, EDGE_WEIGHTS, CodeChunk, GraphNode, NodeKind
from apps.memories.search.codetokens import analyze, split_parts
from apps.tenants.models import Project
from memorysaas.kernel.errors import Invalid, NotFound

MAX_DEPTH = 10


_STALE = (
    "ARRAY(SELECT id FROM graph_graphnode WHERE project_id = %s AND kind = 'file' AND stale_at IS NOT NULL)"
)


def _fetch(sql: str, params: list) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def file_paths(*, project: Project) -> list[str]:
    """Paths of the live (not stale) files the graph has indexed in `project`."""
    return list(
        GraphNode.objects.for_project(project)
        .filter(kind=NodeKind.FILE, stale_at__isnull=True)
        .values_list("path", flat=True)
    )


def node_for_target(project: Project, target: str) -> tuple[int, str, str, str, str]:
    """(id, key, kind, path, name) of `path` or `path:Qual.name` (the form agents use)."""
    rows = _fetch(
        "SELECT id, key, kind, path, name FROM graph_graphnode WHERE project_id = %s AND key = %s",
        [project.id, target],
    )
    if not rows and ":" in target:
        path, symbol = target.split(":", 1)
        rows = _fetch(
            "SELECT id, key, kind, path, name FROM graph_graphnode WHERE project_id = %s AND path = %s AND name = %s"
            " ORDER BY key LIMIT 1",
            [project.id, path, symbol],
        )
    if not rows:
        raise NotFound(f"No file or symbol {target!r} in the graph.")
    return rows[0]


def impact(*, project: Project, target: str, depth: int = 3) -> dict[str, Any]:
    """What may break if `target` changes: its direct and transitive dependents with depth,
    weight and edge kinds, the tests among them, and the memories linked to it. Three indexed
    reads: the node, its dependents (closure, or symbol edges then closure), its memories."""
    if not 1 <= depth <= MAX_DEPTH:
        raise Invalid(f"depth must be between 1 and {MAX_DEPTH}.", details={"field": "depth"})
    node_id, key, kind, path, name = node_for_target(project, target)
    dependents: dict[str, dict[str, Any]] = {}
    if kind != "file":
        for source_path, source_name, source_kind, is_test, edge_kind in _fetch(
            """
            SELECT s.path, s.name, s.kind, s.is_test, e.kind FROM graph_graphedge e
            JOIN graph_graphnode s ON s.id = e.source_id
            WHERE e.target_id = %s AND e.stale_at IS NULL AND e.kind = ANY(%s) AND s.path <> %s
            """,
            [node_id, list(DEPENDENCY_KINDS), path],
        ):
            symbol = source_name if source_kind != "file" else None
            dependents.setdefault(
                source_path, _dependent(source_path, symbol, 1, EDGE_WEIGHTS[edge_kind], [edge_kind], is_test)
            )
    for dep_path, is_test, row_depth, weight, kinds in _fetch(
        f"""
        SELECT n.path, n.is_test, c.depth, c.weight, c.edge_kinds
        FROM graph_graphclosure c
        JOIN graph_graphnode n ON n.id = c.descendant_id
        WHERE c.ancestor_id = (SELECT id FROM graph_graphnode WHERE project_id = %s AND key = %s)
          AND c.depth <= %s AND NOT (c.path && {_STALE})
        ORDER BY c.depth, c.weight DESC
        """,
        [project.id, path, depth, project.id],
    ):
        if dep_path not in dependents:
            dependents[dep_path] = _dependent(dep_path, None, row_depth, weight, kinds, is_test)
    ordered = sorted(dependents.values(), key=lambda d: (d["depth"], -d["weight"], d["file"]))
    return {
        "target": {"key": key, "kind": kind, "file": path, "name": name},
        "direct": [d for d in ordered if d["depth"] == 1],
        "transitive": [d for d in ordered if d["depth"] > 1],
        "tests": sorted({d["file"] for d in ordered if d["is_test"]}),
        "memories": linked_memories(project, path=path, key=key),
        "impact_score": round(sum(d["weight"] for d in ordered), 3),
    }


def _dependent(
    path: str, symbol: str | None, depth: int, weight: float, kinds, is_test: bool
) -> dict[str, Any]:
    return {
        "file": path,
        "symbol": symbol,
        "depth": depth,
        "weight": round(float(weight), 4),
        "edge_types": list(dict.fromkeys(kinds)),
        "is_test": is_test,
    }


def linked_memories(project: Project, *, path: str, key: str) -> list[dict[str, Any]]:
    """Shared memories about the file (related_files) or linked to the node (target_node_id)."""
    rows = _fetch(
        """
        SELECT id, type, left(content, 300), confidence FROM memories_memory
        WHERE project_id = %s AND NOT deprecated AND scope <> 'personal'
          AND (related_files @> ARRAY[%s]::varchar[] OR target_node_id = %s)
        ORDER BY confidence DESC LIMIT 20
        """,
        [project.id, path, key],
    )
    return [{"id": str(i), "type": t, "content": c, "confidence": round(conf, 3)} for i, t, c, conf in rows]


def dependencies(*, project: Project, file: str, depth: int = 1) -> dict[str, Any]:
    """The files `file` depends on, up to `depth`."""
    if not 1 <= depth <= MAX_DEPTH:
        raise Invalid(f"depth must be between 1 and {MAX_DEPTH}.", details={"field": "depth"})
    node = GraphNode.objects.filter(project=project, kind="file", key=file).first()
    if node is None:
        raise NotFound(f"No file {file!r} in the graph.")
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT n.path, min(c.depth), (array_agg(array_to_string(c.edge_kinds, ',') ORDER BY c.depth))[1]
            FROM graph_graphclosure c JOIN graph_graphnode n ON n.id = c.ancestor_id
            WHERE c.descendant_id = %s AND c.depth <= %s AND NOT (c.path && {_STALE})
            GROUP BY n.path ORDER BY 2, 1
            """,
            [node.id, depth, project.id],
        )
        rows = cursor.fetchall()
    return {
        "file": file,
        "dependencies": [
            {"file": path, "depth": d, "edge_types": list(dict.fromkeys(kinds.split(",")))}
            for path, d, kinds in rows
        ],
    }


def search_nodes(*, project: Project, name: str, kind: str | None = None, limit: int = 20) -> list[GraphNode]:
    """Nodes by name: exact first, then prefix, then containing."""
    qs = GraphNode.objects.filter(project=project, name__icontains=name)
    if kind:
        qs = qs.filter(kind=kind)
    nodes = list(qs.order_by("path")[: limit * 5])
    lowered = name.lower()
    nodes.sort(key=lambda n: (n.name.lower() != lowered, not n.name.lower().startswith(lowered), len(n.key)))
    return nodes[:limit]


def neighbour_files(project_id: UUID, files: list[str]) -> dict[str, float]:
    """Depth-1 graph neighbours of `files`, both ways (what they import, what imports them),
    weighted by the edge kind's impact weight — for the retrieval engine's graph path."""
    if not files:
        return {}
    # Seeded from the files' nodes (graph_node_path), then their edges each way through
    # graph_edge_source / graph_edge_target, then the other ends' paths by primary key. The ids
    # go in as arrays and the paths as subqueries so the planner cannot turn them into hash
    # joins over every edge and node of the project (which the former OR over the two joined
    # nodes' paths did: ~20-50 ms on Django's source). An edge with both ends in play comes
    # twice, which max() ignores; one whose node is gone gets a NULL path and drops out, as the
    # inner join dropped it.
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH seed AS MATERIALIZED (
                SELECT ARRAY(
                    SELECT id FROM graph_graphnode WHERE project_id = %(project)s AND path = ANY(%(files)s)
                ) AS ids
            ), hit AS (
                SELECT e.source_id, e.target_id, e.weight FROM graph_graphedge e
                WHERE e.source_id = ANY((SELECT ids FROM seed)::bigint[]) AND e.kind = ANY(%(kinds)s)
                  AND e.project_id = %(project)s AND e.stale_at IS NULL
                UNION ALL
                SELECT e.source_id, e.target_id, e.weight FROM graph_graphedge e
                WHERE e.target_id = ANY((SELECT ids FROM seed)::bigint[]) AND e.kind = ANY(%(kinds)s)
                  AND e.project_id = %(project)s AND e.stale_at IS NULL
            ), named AS MATERIALIZED (
                SELECT (SELECT n.path FROM graph_graphnode n WHERE n.id = h.source_id) AS s,
                       (SELECT n.path FROM graph_graphnode n WHERE n.id = h.target_id) AS t,
                       h.weight
                FROM hit h
            )
            SELECT CASE WHEN s = ANY(%(files)s) THEN t ELSE s END, max(weight)
            FROM named
            WHERE s <> t
            GROUP BY 1
            """,
            {"project": str(project_id), "files": list(files), "kinds": list(DEPENDENCY_KINDS)},
        )
        return {path: float(weight) for path, weight in cursor.fetchall() if path not in files}


def search_chunks(project: Project, query: str, limit: int = 5) -> list[dict[str, Any]]:
    """AST chunks matching `query` (identifiers whole and by parts), best first, each with its
    contextual prefix — code context to show beside memories."""
    terms = analyze(query)
    lexemes = list(
        dict.fromkeys(
            [*terms.whole, *(p for w in terms.whole for p in split_parts(w)), *terms.words.lower().split()]
        )
    )
    lexemes = [lex for lex in lexemes if lex.isascii() and lex.replace("_", "").isalnum()][:30]
    if not lexemes:
        return []
    tsquery = " | ".join(lexemes)
    chunks = CodeChunk.objects.raw(
        """
        SELECT id, path, name, chunk_type, start_line, end_line, content, context_prefix,
               ts_rank_cd(search_vector, to_tsquery('simple', %s)) AS rank
        FROM graph_codechunk
        WHERE project_id = %s AND search_vector @@ to_tsquery('simple', %s)
        ORDER BY rank DESC, path LIMIT %s
        """,
        [tsquery, str(project.id), tsquery, limit],
    )
    return [
        {
            "path": c.path,
            "name": c.name,
            "chunk_type": c.chunk_type,
            "lines": [c.start_line, c.end_line],
            "context_prefix": c.context_prefix,
            "content": c.content[:4000],
            "score": round(float(c.rank), 4),
        }
        for c in chunks
    ]
