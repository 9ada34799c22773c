"""What a project stores: its memories, their vectors, its code graph and its agent sessions'
events, each as a row count and bytes.

Bytes are the stored size of the project's rows (`pg_column_size`, after PostgreSQL's
compression), summed per part; indexes and free space are not counted, since a table's are shared
by every tenant and naming its total would tell one tenant about the others. A memory's vector
is counted under vectors, not under memories.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from django.db import connection

from apps.tenants.models import Project


@dataclass(frozen=True)
class Part:
    name: str
    label: str
    rows: int
    bytes: int


# Per part: (name, label, the statement counting its rows and bytes for one project). Each
# statement takes the project id once per %s.
_PARTS: tuple[tuple[str, str, str], ...] = (
    (
        "memories",
        "Memories (text, metadata, history)",
        """
        SELECT (SELECT count(*) FROM memories_memory WHERE project_id = %s),
               coalesce((SELECT sum(pg_column_size(m.*) - coalesce(pg_column_size(m.embedding), 0))
                         FROM memories_memory m WHERE m.project_id = %s), 0)
             + coalesce((SELECT sum(pg_column_size(v.*)) FROM memories_memoryversion v
                         JOIN memories_memory m ON m.id = v.memory_id WHERE m.project_id = %s), 0)
        """,
    ),
    (
        "vectors",
        "Vectors (embeddings and token embeddings)",
        """
        SELECT (SELECT count(*) FROM memories_memory WHERE project_id = %s AND embedding IS NOT NULL),
               coalesce((SELECT sum(pg_column_size(embedding)) FROM memories_memory
                         WHERE project_id = %s AND embedding IS NOT NULL), 0)
             + coalesce((SELECT sum(pg_column_size(t.*)) FROM memories_memorytokens t
                         JOIN memories_memory m ON m.id = t.memory_id WHERE m.project_id = %s), 0)
        """,
    ),
    (
        "graph",
        "Code graph (nodes, edges, closure, chunks)",
        """
        SELECT (SELECT count(*) FROM graph_graphnode WHERE project_id = %s)
             + (SELECT count(*) FROM graph_graphedge WHERE project_id = %s),
               coalesce((SELECT sum(pg_column_size(n.*)) FROM graph_graphnode n WHERE n.project_id = %s), 0)
             + coalesce((SELECT sum(pg_column_size(e.*)) FROM graph_graphedge e WHERE e.project_id = %s), 0)
             + coalesce((SELECT sum(pg_column_size(c.*)) FROM graph_graphclosure c WHERE c.project_id = %s), 0)
             + coalesce((SELECT sum(pg_column_size(k.*)) FROM graph_codechunk k WHERE k.project_id = %s), 0)
             + coalesce((SELECT sum(pg_column_size(f.*)) FROM graph_graphfilelinks f WHERE f.project_id = %s), 0)
        """,
    ),
    (
        "events",
        "Agent sessions and their events",
        """
        SELECT coalesce((SELECT sum(b.count) FROM observer_eventbatch b
                         JOIN observer_session s ON s.id = b.session_id WHERE s.project_id = %s), 0),
               coalesce((SELECT sum(pg_column_size(s.*)) FROM observer_session s WHERE s.project_id = %s), 0)
             + coalesce((SELECT sum(pg_column_size(b.*)) FROM observer_eventbatch b
                         JOIN observer_session s ON s.id = b.session_id WHERE s.project_id = %s), 0)
        """,
    ),
)


def project_storage(*, project: Project) -> dict:
    """Each part's rows and bytes, and the total bytes. The caller has checked the project."""
    parts = []
    with connection.cursor() as cursor:
        for name, label, sql in _PARTS:
            cursor.execute(sql, [str(project.id)] * sql.count("%s"))
            rows, size = cursor.fetchone()
            parts.append(Part(name=name, label=label, rows=int(rows or 0), bytes=int(size or 0)))
    return {"parts": [asdict(p) for p in parts], "total_bytes": sum(p.bytes for p in parts)}
