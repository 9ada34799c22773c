"""pgvector plumbing: literals, the per-dimension HNSW index, and the session settings that keep
tenant-filtered ANN search exact enough (pgvector 0.8 iterative index scans).

The `embedding` column is untyped (`vector`), so vectors of any model fit; each dimension count
gets a partial expression index `USING hnsw ((embedding::vector(N)) vector_cosine_ops) WHERE
embedding_dims = N`, and queries order by the same expression so the planner uses it.

Matryoshka-trained models (OpenAI's text-embedding-3) put most of the meaning in the leading
dimensions, so for them the index covers only the first 256 (`subvector(...)`: a smaller, faster
graph) and `nearest()` orders its candidates by the full vectors.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection, connections


def vector_literal(vector: Sequence[float] | np.ndarray) -> str:
    """pgvector's text form, exact for float32 (9 significant digits), formatted by one C-level
    `%` over the whole vector: per-float formatting in Python costs more than the query."""
    values = vector.tolist() if isinstance(vector, np.ndarray) else [float(x) for x in vector]
    return _literal_format(len(values)) % tuple(values)


@functools.cache
def _literal_format(dims: int) -> str:
    return "[" + ",".join(["%.9g"] * dims) + "]"


MATRYOSHKA_PREFIX = 256
# Candidates the prefix index hands to the full vectors, per result asked for.
MATRYOSHKA_CANDIDATES = 4


def prefix_dims(dims: int, matryoshka: bool) -> int | None:
    """The leading dimensions a Matryoshka model's vectors are indexed by, or None (all)."""
    return MATRYOSHKA_PREFIX if matryoshka and dims > MATRYOSHKA_PREFIX else None


def index_name(dims: int, prefix: int | None = None) -> str:
    return f"memory_embedding_hnsw_{int(dims)}" + (f"_p{int(prefix)}" if prefix else "")


def indexed_expr(dims: int, value: str = "embedding", prefix: int | None = None) -> str:
    """`value` as the HNSW index for `dims` holds it: cast to its dimensions, or with `prefix`
    only its first `prefix` of them (the Matryoshka index)."""
    dims = int(dims)
    if prefix:
        return f"subvector({value}::vector({dims}), 1, {int(prefix)})::vector({int(prefix)})"
    return f"{value}::vector({dims})"


def distance_expr(dims: int, column: str = "embedding", query: str = "%s", prefix: int | None = None) -> str:
    """The ordering expression the HNSW index for `dims` answers (cosine distance) between
    `column` and `query` (a parameter placeholder by default, or a column of another relation);
    with `prefix`, between their first `prefix` dimensions (the Matryoshka index's expression)."""
    return f"({indexed_expr(dims, column, prefix)} <=> {indexed_expr(dims, query, prefix)})"


def nearest(
    dims: int,
    *,
    columns: str,
    where: str,
    params: Sequence[Any],
    limit: int,
    query: str = "%s",
    query_params: Sequence[Any] = (),
    matryoshka: bool = False,
    exact: bool = False,
) -> tuple[str, list[Any]]:
    """A statement selecting `columns` and the cosine `distance` of the `limit` memories nearest
    to `query` (its parameters `query_params`) among those matching `where` (`params`), nearest
    first, through the HNSW index of `dims`; for a Matryoshka model through its prefix index, for
    MATRYOSHKA_CANDIDATES × `limit` candidates that the full vectors then order.

    `exact`: every matching row measured, no index (the fallback when an index scan came back
    short: see `enough`). `OFFSET 0` keeps the planner from folding the ordering into the scan."""
    distance = distance_expr(dims, query=query)
    select = f"SELECT {columns}, {distance} AS distance FROM memories_memory WHERE {where}"
    if exact:
        return f"SELECT * FROM ({select} OFFSET 0) exact ORDER BY distance LIMIT %s", [
            *query_params,
            *params,
            limit,
        ]
    prefix = prefix_dims(dims, matryoshka)
    if prefix is None:
        return f"{select} ORDER BY distance LIMIT %s", [*query_params, *params, limit]
    candidates = f"{select} ORDER BY {distance_expr(dims, query=query, prefix=prefix)} LIMIT %s"
    return (
        f"SELECT * FROM ({candidates}) candidates ORDER BY distance LIMIT %s",
        [*query_params, *params, *query_params, MATRYOSHKA_CANDIDATES * limit, limit],
    )


def ensure_hnsw_index(dims: int, *, matryoshka: bool = False, concurrently: bool = False, using=None) -> None:
    """Create the HNSW index for `dims` (its prefix for a Matryoshka model) if missing: the
    migration makes 384; `migrate` and `reembed` make the configured provider's."""
    dims = int(dims)
    prefix = prefix_dims(dims, matryoshka)
    name = index_name(dims, prefix)
    how = "CONCURRENTLY " if concurrently else ""
    with (connections[using] if using else connection).cursor() as cursor:
        cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [name])
        existing = cursor.fetchone()
        if existing and existing[0]:
            return
        if existing:  # an interrupted concurrent build leaves an invalid index behind
            cursor.execute(f"DROP INDEX {how}IF EXISTS {name}")
        cursor.execute(
            f"CREATE INDEX {how}IF NOT EXISTS {name} ON memories_memory "
            f"USING hnsw (({indexed_expr(dims, prefix=prefix)}) vector_cosine_ops) "
            f"WITH (m = 16, ef_construction = 64) WHERE embedding_dims = {dims}"
        )


def ensure_provider_index(sender=None, using: str = "default", apps=None, **kwargs) -> None:
    """`post_migrate` receiver: the configured embedding provider's index exists after `migrate`
    (on a PostgreSQL database that has the memories table: not after `migrate memories zero`,
    nor on a database the router keeps memories out of). Built CONCURRENTLY outside a
    transaction, so a populated table keeps taking writes while it builds."""
    from django.db import router

    from apps.memories.embedding.providers import get_provider
    from apps.memories.models import Memory

    database = connections[using]
    if database.vendor != "postgresql" or not router.allow_migrate_model(using, Memory):
        return
    with database.cursor() as cursor:
        cursor.execute("SELECT to_regclass(%s) IS NOT NULL", [Memory._meta.db_table])
        if not cursor.fetchone()[0]:
            return
    provider = get_provider()
    ensure_hnsw_index(
        provider.dimensions,
        matryoshka=provider.matryoshka,
        concurrently=not database.in_atomic_block,
        using=using,
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
