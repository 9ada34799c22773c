"""pgvector plumbing: literals, the per-dimension HNSW index, and the session settings that keep
tenant-filtered ANN search exact enough (pgvector 0.8 iterative index scans).

The `embedding` column is untyped (`vector`), so vectors of any model fit; each dimension count
gets a partial expression index `USING hnsw ((embedding::vector(N)) vector_cosine_ops) WHERE
embedding_dims = N`, and queries order by the same expression so the planner uses it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
from django.conf import settings
from django.db import connection


def vector_literal(vector: Sequence[float] | np.ndarray) -> str:
    """pgvector's text form, exact for float32 (9 significant digits), formatted by one C-level
    `%` over the whole vector: per-float formatting in Python costs more than the query."""
    values = vector.tolist() if isinstance(vector, np.ndarray) else [float(x) for x in vector]
    return _literal_format(len(values)) % tuple(values)


@functools.cache
def _literal_format(dims: int) -> str:
    return "[" + ",".join(["%.9g"] * dims) + "]"


def index_name(dims: int) -> str:
    return f"memory_embedding_hnsw_{int(dims)}"


def distance_expr(dims: int, column: str = "embedding", query: str = "%s") -> str:
    """The ordering expression the HNSW index for `dims` answers (cosine distance) between
    `column` and `query` (a parameter placeholder by default, or a column of another relation)."""
    return f"({column}::vector({int(dims)}) <=> {query}::vector({int(dims)}))"


def ensure_hnsw_index(dims: int, *, concurrently: bool = False) -> None:
    """Create the HNSW index for `dims` if missing (the migration makes 384; `reembed` others)."""
    dims = int(dims)
    how = "CONCURRENTLY " if concurrently else ""
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [index_name(dims)])
        if cursor.fetchone()[0]:
            return
        cursor.execute(
            f"CREATE INDEX {how}IF NOT EXISTS {index_name(dims)} ON memories_memory "
            f"USING hnsw ((embedding::vector({dims})) vector_cosine_ops) "
            f"WITH (m = 16, ef_construction = 64) WHERE embedding_dims = {dims}"
        )


def set_search_params(cursor, *, ef_search: int | None = None) -> None:
    """Per-transaction ANN settings: iterative scans continue past `ef_search` until enough rows
    pass the tenant filter, so a filter does not cost recall."""
    ef = int(ef_search or settings.MEMORY_HNSW_EF_SEARCH)
    cursor.execute(
        "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true),"
        " set_config('hnsw.ef_search', %s, true),"
        " set_config('hnsw.max_scan_tuples', %s, true)",
        [str(ef), str(int(settings.MEMORY_HNSW_MAX_SCAN_TUPLES))],
    )


def set_session_search_params(sender=None, connection=None, **kwargs) -> None:
    """`connection_created` receiver: the same ANN settings for the whole session, so a search
    needs no transaction and no extra round trip to set them; and the planner's random page
    cost (settings.DATABASE_RANDOM_PAGE_COST), without which it may scan a large project
    exactly rather than through an HNSW index grown larger than the memories left."""
    if connection is None or connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', false),"
            " set_config('hnsw.ef_search', %s, false),"
            " set_config('hnsw.max_scan_tuples', %s, false),"
            " set_config('random_page_cost', %s, false)",
            [
                str(int(settings.MEMORY_HNSW_EF_SEARCH)),
                str(int(settings.MEMORY_HNSW_MAX_SCAN_TUPLES)),
                str(float(settings.DATABASE_RANDOM_PAGE_COST)),
            ],
        )
