"""The retrieval pipeline (docs/architecture.md, "Retrieval"): candidates → fusion → neighbourhood boost →
phase × trust × decayed confidence × dispute → rerank → (for /context) packing.

Fusion orders by score fusion (dense cosine + keyword and graph evidence, weights by query kind;
see fusion.FUSION_WEIGHTS for why not RRF) and reports weighted RRF (k=60) beside it. The graph
path takes the files in play plus files named in the query; its neighbours come from the
registered providers (apps.graph: depth-1 imports both ways; co-mention; co-access).

HyDE (hyde.py): when an LLM is configured and an explicit semantic search comes back unsure
(fewer than 3 results over 0.5), the pipeline runs again with the mean of the query's and a
hypothetical answer's embeddings; the `hyde` timing and diagnostics say whether it ran.

`search()` is what the API, the dashboard and the benchmarks call; apps/observer/injection.py
packs its results for an agent. Every query starts from the memories that apply in the project for the
principal (`memories_visible`), so a tenant filter is part of each path's SQL, and the dense
path runs with pgvector's iterative index scan so that filter does not cost recall.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

import numpy as np
import psycopg
from django.conf import settings
from django.core.exceptions import EmptyResultSet
from django.db import connection
from django.db.models import (
    DEFERRED,
    QuerySet,
    prefetch_related_objects,
)
from django.utils import timezone

from apps.memories import boost_listeners, concurrent_reads
from apps.memories.embedding import precision
from apps.memories.embedding.contextual import query_embedding_text
from apps.memories.kinds import universal_phase
from apps.memories.models import (
    LAST_ACCESSED_SQL,
    TENANT_FILES,
    TENANT_MATCH,
    Memory,
    MemoryRelation,
    MemoryTokens,
    MemoryUsage,
)
from apps.memories.neighbours import file_neighbours
from apps.memories.phase_weights import phase_weights_for
from apps.memories.search import fusion, hyde, late_interaction
from apps.memories.search.codetokens import tsquery_any
from apps.memories.search.keyword import (
    Candidate,
    bm25,
    query_terms,
    reference_score,
    select_filter_terms,
    weighted_tf,
)
from apps.memories.search.packing import citation
from apps.memories.selectors import memories_visible, relations_seen_by, without_session_only
from apps.memories.validation import clean_paths
from apps.memories.vectors import distance_expr, nearest, vector_literal
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from memorysaas.kernel import latency

logger = logging.getLogger(__name__)
T = TypeVar("T")

# Candidates per path. The dense path fetches at least twice the results asked for: past its
# first HNSW pass a tenant-filtered scan needs more passes, so rows fusion cannot use cost
# latency (100K memories over 20 projects: p50 2.0 ms for 10 rows, 4.3 ms for 30; the
# evaluation's figures are the same at 20 and 30). The keyword path ranks a pool by ts_rank for BM25.
DENSE_TOP = 20
KEYWORD_TOP = 50
KEYWORD_POOL = 60
GRAPH_TOP = 40
RERANK_TOP = 20
# What fusion and weighing read of each candidate: every path's statement selects these with
# its ids (and the distance to the query vector), so no statement after the paths fetches them.
_WEIGHT_FIELDS = (
    "type", "source", "confidence", "disputed", "pinned", "user_verified", "stale_at",
    "decay_half_life_days", "last_accessed_at", "created_at", "related_files",
)  # fmt: skip
_ROW_FIELDS = (*_WEIGHT_FIELDS, "distance")
Row = dict[str, Any]
Found = list[tuple[str, float, Row]]  # a path's (id, score, row) best first
# What a result carries: every column but the two heavy ones.
_RESULT_FIELDS = [f for f in Memory._meta.concrete_fields if f.attname not in ("embedding", "search_vector")]
# Where each result column goes in a full row of the model's fields (the heavy ones deferred):
# Model.from_db takes that row as it is, instead of matching every field's name in a list.
_ALL_NAMES = [f.attname for f in Memory._meta.concrete_fields]
_RESULT_SLOTS = [_ALL_NAMES.index(f.attname) for f in _RESULT_FIELDS]
_USAGE_FIELDS = MemoryUsage._meta.concrete_fields
_USAGE_NAMES = [f.attname for f in _USAGE_FIELDS]


@dataclass
class Hit:
    memory: Memory
    rank: int
    ranks: dict[str, int | None]
    components: dict[str, float | None]
    boost_reason: str | None
    stale: bool

    @property
    def citation(self) -> str:
        return citation(str(self.memory.id), self.memory.citation_text)

    @property
    def score(self) -> float:
        return float(self.components["score"] or 0.0)


@dataclass
class SearchResult:
    query: str
    query_kind: str
    phase: str
    weights: dict[str, float]
    hits: list[Hit]
    candidates: dict[str, int]
    timings_ms: dict[str, float]
    reranker: str
    rankings: dict[str, list[str]] = field(default_factory=dict)
    rrf_weights: dict[str, float] = field(default_factory=dict)
    hyde: dict[str, Any] = field(default_factory=lambda: hyde.Outcome("not_run").as_dict())

    def as_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "query_kind": self.query_kind,
            "phase": self.phase,
            "weights": self.weights,
            "rrf_weights": self.rrf_weights,
            "results": [
                {
                    "rank": hit.rank,
                    "memory": hit.memory,
                    "ranks": hit.ranks,
                    "components": hit.components,
                    "boost_reason": hit.boost_reason,
                    "stale": hit.stale,
                    "citation": hit.citation,
                }
                for hit in self.hits
            ],
            "candidates": self.candidates,
            "timings_ms": self.timings_ms,
            "reranker": self.reranker,
            "hyde": self.hyde,
        }


class _Clock:
    def __init__(self) -> None:
        self.start = self.mark = time.perf_counter()
        self.timings: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round((now - self.mark) * 1000, 3)
        self.mark = now

    def total(self) -> dict[str, float]:
        self.timings["total"] = round((time.perf_counter() - self.start) * 1000, 3)
        return self.timings


# ---------------------------------------------------------------- candidate paths


# The paths' statements are written out over memories_memory under the search's tenant filter,
# which is compiled from the visible-memories queryset once: building and compiling a queryset
# per path cost ~0.8 ms of Python each (the keyword one ~1.7), held under the GIL while the
# paths run at once.
# The decay clock lives in the memory's usage row: a subquery per row a statement returns.


def _weight_field(name: str):
    model = MemoryUsage if name == "last_accessed_at" else Memory
    return model._meta.get_field(name)


_ROW_COLUMNS = ", ".join(
    LAST_ACCESSED_SQL if name == "last_accessed_at" else _weight_field(name).column for name in _WEIGHT_FIELDS
)


@dataclass(frozen=True)
class Scope:
    """A memories queryset's WHERE clause as SQL over memories_memory (no joins) and parameters."""

    sql: str
    params: tuple[Any, ...]

    @classmethod
    def of(cls, memories: QuerySet) -> Scope:
        query = memories.query
        joined = {alias for alias, refs in query.alias_refcount.items() if refs} - {Memory._meta.db_table}
        if joined:  # (joins the filter set up and trimmed again stay in the alias map, unreferenced)
            raise ValueError(f"a search scope filters memories_memory alone, not {sorted(joined)}")
        try:
            sql, params = query.get_compiler(using=memories.db).compile(query.where)
        except EmptyResultSet:  # .none()
            return cls("FALSE", ())
        return cls(sql or "TRUE", tuple(params))


def _rows(sql: str, params: Sequence[Any], *, first: int = 1) -> list[tuple]:
    """The statement's rows, whose columns from `first` on are _ROW_FIELDS, each field's value
    as the ORM would give it."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    converters = _row_converters()
    if converters:
        rows = [tuple(_convert(row, converters, first)) for row in rows]
    return rows


@functools.cache
def _row_converters() -> tuple[tuple[int, tuple[Callable, ...]], ...]:
    fields = [_weight_field(name) for name in _WEIGHT_FIELDS]
    return tuple(
        (i, tuple(c)) for i, field in enumerate(fields) if (c := field.get_db_converters(connection))
    )


def _convert(row: Sequence[Any], converters, first: int) -> list:
    values = list(row)
    for i, field_converters in converters:
        for converter in field_converters:
            values[first + i] = converter(values[first + i], None, connection)
    return values


def _found(rows: Iterable[tuple], score: Callable[[Row], float]) -> Found:
    """(id, score, row) from statement rows laid out as (id, *_ROW_FIELDS)."""
    found = []
    for memory_id, *values in rows:
        row = dict(zip(_ROW_FIELDS, values, strict=True))
        found.append((str(memory_id), score(row), row))
    return found


def dense_path(
    scope: Scope, vector: np.ndarray, *, model_id: str, limit: int = DENSE_TOP, matryoshka: bool = False
) -> Found:
    """(id, cosine, row) nearest first in `scope`, through the HNSW index of this model's
    dimensions (the session's iterative-scan settings apply: vectors.set_session_search_params),
    or for a Matryoshka model its prefix index, the full vectors ordering its candidates."""
    dims = int(len(vector))
    statement = functools.partial(
        nearest,
        dims,
        columns=f"id, {_ROW_COLUMNS}",
        where=f"{scope.sql} AND embedding_dims = %s AND embedding_model = %s",
        params=[*scope.params, dims, model_id],
        limit=limit,
        query_params=[vector_literal(vector)],
        matryoshka=matryoshka,
    )
    rows = _rows(*statement())
    if len(rows) < limit:
        # An index scan can come back short of rows the scope holds: pgvector's iterative scan
        # gives up after hnsw.max_scan_tuples or its memory budget, and an HNSW graph need not
        # reach every element from the query's side. Short means the scope is small or the
        # scan gave up; either way every row of it is measured (cheap for a small scope).
        rows = _rows(*statement(exact=True))
    return _found(rows, lambda row: 1.0 - float(row["distance"]))


def _query_lexemes(query: str, project: Project) -> tuple[dict[str, int], int]:
    """Every lexeme the query can match (verbatim identifiers + english-stemmed words) with its
    document frequency in the project, and the project's memory count."""
    terms = query_terms(query)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH q AS (
                SELECT DISTINCT unnest(%s::text[] || tsvector_to_array(to_tsvector('english', %s))) AS term
            )
            SELECT q.term, coalesce(t.df, 0) FROM q
            LEFT JOIN memories_termstat t ON t.project_id = %s AND t.term = q.term
            UNION ALL
            SELECT '', coalesce((SELECT df FROM memories_termstat WHERE project_id = %s AND term = ''), 0)
            """,
            [terms.whole, terms.words, str(project.id), str(project.id)],
        )
        rows = cursor.fetchall()
    n_docs = 0
    dfs: dict[str, int] = {}
    for term, df in rows:
        if term == "":
            n_docs = int(df)
        elif len(term) <= 200:
            dfs[term] = int(df)
    return dfs, n_docs


def keyword_candidates(
    scope: Scope, query: str, project: Project, *, columns: str = "", params: Sequence[Any] = (), limit: int
) -> tuple[str, list[Any], dict[str, int], int]:
    """The keyword path's statement: memories holding the query's rarer lexemes (found through the
    organization's own lexemes: TENANT_MATCH), best
    `ts_rank` first, as (id, length, the query lexemes each holds with their weights, *columns);
    plus every query lexeme's document frequency and the project's memory count. `columns` (with
    their `params`) follow the fixed ones. The statement is empty when the query holds no lexeme
    (only stop words, punctuation or control characters)."""
    dfs, n_docs = _query_lexemes(query, project)
    if not dfs:
        return "", [], dfs, n_docs
    selection = {term: max(df, 1) for term, df in dfs.items()}
    filter_terms = select_filter_terms(selection, max(n_docs, 1))
    hits = (
        "(SELECT array_agg(u.lexeme || ':' || array_to_string(u.weights, ''))"
        " FROM unnest(search_vector) u WHERE u.lexeme = ANY(%s::text[]))"
    )
    sql = (
        f"SELECT id, length(search_vector), {hits}{', ' if columns else ''}{columns} FROM memories_memory"
        f" WHERE {scope.sql} AND {TENANT_MATCH}"
        " ORDER BY ts_rank(search_vector, %s::tsquery) DESC, id LIMIT %s"
    )
    return (
        sql,
        [
            list(dfs),
            *params,
            *scope.params,
            project.organization_id,
            filter_terms,
            tsquery_any(filter_terms),
            limit,
        ],
        dfs,
        n_docs,
    )


def keyword_path(
    scope: Scope,
    query: str,
    project: Project,
    *,
    vector: np.ndarray | None = None,
    model_id: str = "",
    limit: int = KEYWORD_TOP,
) -> tuple[Found, float]:
    """(id, BM25, row) best first, and the BM25 of the query's ideal match (the scale fusion
    reads the scores on): PostgreSQL finds candidates by the query's rarer lexemes, BM25 over
    all query lexemes (field-weighted, project DF) ranks them."""
    distance, distance_params = _distance_sql(vector, model_id)
    sql, params, dfs, n_docs = keyword_candidates(
        scope,
        query,
        project,
        columns=f"{_ROW_COLUMNS}, {distance}",
        params=distance_params,
        limit=KEYWORD_POOL,
    )
    if not sql:
        return [], 0.0
    candidates = []
    row_of: dict[str, list] = {}
    for memory_id, doclen, hits, *row in _rows(sql, params, first=3):
        matches: dict[str, float] = {}
        for hit in hits or ():
            lexeme, _, weights = hit.rpartition(":")
            matches[lexeme] = weighted_tf(weights or "D")
        row_of[key := str(memory_id)] = row
        candidates.append(Candidate(memory_id=key, length=int(doclen or 1), matches=matches))
    ranked = bm25(candidates, dfs, max(n_docs, 1))[:limit]
    found = [(i, score, dict(zip(_ROW_FIELDS, row_of[i], strict=True))) for i, score in ranked]
    return found, reference_score(dfs, n_docs)


def graph_reach(
    query: str, kind: str, files: Sequence[str], named: Sequence[str], neighbours: dict[str, float]
) -> dict[str, float]:
    """The files the graph path credits and how strongly: the neighbours of the files in play
    and of the files the query names, and at full strength, unless the query is structural (who
    imports it, what it calls, what a change affects: answered by the neighbours, not by the
    file), the files in play themselves (a memory on the file an agent is working in is as close
    as the graph can place it) and the files named, unless the question is how they relate
    ("who imports core/paginator.py" names a path, so it reads as an identifier query)."""
    if kind == "structural":
        return neighbours
    credited = list(files)
    if not fusion.asks_about_relations(query):
        credited += [f for f in named if f not in files]
    return {**neighbours, **dict.fromkeys(credited, 1.0)}


def graph_path(
    scope: Scope,
    neighbours: dict[str, float],
    *,
    organization_id: UUID,
    vector: np.ndarray | None = None,
    model_id: str = "",
    limit: int = GRAPH_TOP,
) -> Found:
    """(id, strength, row) for memories attached to neighbours of the files in play: the closest
    neighbour's weight plus a little for each further one, capped at 1. Among equally strong
    ones (every depth-1 import neighbour weighs the same) the closest in meaning comes first,
    when the query has a vector."""
    if not neighbours:
        return []
    distance, distance_params = _distance_sql(vector, model_id)
    rows = _rows(
        f"SELECT id, {_ROW_COLUMNS}, {distance} FROM memories_memory"
        f" WHERE {scope.sql} AND {TENANT_FILES}"
        " ORDER BY created_at DESC, id DESC LIMIT 500",
        [*distance_params, *scope.params, organization_id, list(neighbours)],
    )

    def strength(row: Row) -> float:
        weights = sorted((neighbours[f] for f in row["related_files"] if f in neighbours), reverse=True)
        return min(1.0, weights[0] + 0.1 * sum(weights[1:]))

    scored = _found(rows, strength)

    def closeness(row: Row) -> float:
        return 1.0 - float(row["distance"]) if row["distance"] is not None else -1.0

    scored.sort(key=lambda found: (-round(found[1], 3), -closeness(found[2]), found[0]))
    return scored[:limit]


# ---------------------------------------------------------------- rerank


def _cohere_rerank(query: str, documents: list[str], keep: int) -> list[tuple[int, float]]:
    import cohere

    client = cohere.ClientV2(
        api_key=settings.COHERE_API_KEY, base_url=settings.COHERE_BASE_URL or None, timeout=10
    )
    response = client.rerank(model=settings.COHERE_RERANK_MODEL, query=query, documents=documents, top_n=keep)
    return [(item.index, float(item.relevance_score)) for item in response.results]


def _distance_sql(vector: np.ndarray | None, model_id: str) -> tuple[str, list[Any]]:
    """Cosine distance to `vector` for memories embedded by this model at its dimensions, else
    NULL (vectors of different models are never compared; no vector, no distance)."""
    if vector is None:
        return "NULL::float", []
    dims = int(len(vector))
    sql = (
        f"CASE WHEN embedding_dims = %s AND embedding_model = %s THEN {distance_expr(dims, 'embedding')} END"
    )
    return sql, [dims, model_id, vector_literal(vector)]


def _timed(fn: Callable[[], T]) -> Callable[[], tuple[T, float]]:
    def run() -> tuple[T, float]:
        started = time.perf_counter()
        result = fn()
        return result, round((time.perf_counter() - started) * 1000, 3)

    return run


def _results(ids: list[str], principal: Principal) -> dict[str, Memory]:
    """The result memories by id: one statement, instances made as a queryset makes them
    (Model.from_db after each field's database converters), relations prefetched only for
    the ones that have any (the others get the empty set a prefetch would leave, without its
    ~0.15 ms an instance)."""
    relations = "EXISTS (SELECT 1 FROM memories_memoryrelation r WHERE r.memory_id = m.id)"
    usage = ", ".join(f"u.{f.column}" for f in _USAGE_FIELDS)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {relations}, {', '.join(f'm.{f.column}' for f in _RESULT_FIELDS)}, {usage}"
            " FROM memories_memory m LEFT JOIN memories_memoryusage u ON u.memory_id = m.id"
            " WHERE m.id = ANY(%s::uuid[])",
            [ids],
        )
        rows = cursor.fetchall()
    fields = [*_RESULT_FIELDS, *_USAGE_FIELDS]
    converters = [(i, c) for i, f in enumerate(fields) if (c := f.get_db_converters(connection))]
    memories = {}
    has_relations = set()
    for related, *values in rows:
        values = _convert(values, converters, 0)
        full: list[Any] = [DEFERRED] * len(_ALL_NAMES)
        own, used = values[: len(_RESULT_FIELDS)], values[len(_RESULT_FIELDS) :]
        for slot, value in zip(_RESULT_SLOTS, own, strict=True):
            full[slot] = value
        memory = Memory.from_db(connection.alias, _ALL_NAMES, full)
        # its usage row as select_related would attach it (None: it has none yet)
        usage_row = None
        if used[0] is not None:
            usage_row = MemoryUsage.from_db(connection.alias, _USAGE_NAMES, used)
        Memory.usage_row.related.set_cached_value(memory, usage_row)
        memories[str(memory.id)] = memory
        if related:
            has_relations.add(str(memory.id))
    if has_relations:  # (building the prefetch's queryset alone takes ~1 ms)
        prefetch_related_objects(
            [m for i, m in memories.items() if i in has_relations], relations_seen_by(principal)
        )
    for memory_id, memory in memories.items():
        if memory_id not in has_relations:  # what a prefetch that found nothing leaves behind
            empty = MemoryRelation.objects.none()
            empty._result_cache, empty._prefetch_done = [], True
            memory._prefetched_objects_cache = {"relations": empty}
    return memories


# ---------------------------------------------------------------- the pipeline


@dataclass(frozen=True)
class SearchRequest:
    """What is asked: by whom, in which project, the query and the files in play, the phase it
    is asked in, and what may come back (how many, of which types, stale ones or not).
    `query_kind` overrides the detected kind; `as_of` is the moment confidence decays to (now by
    default): the evaluation ranks as of the moment it loaded its set, so how long a run takes
    cannot move a near-tie. `not_from_session` leaves out what that session alone wrote (its
    promotions and notes): an agent is not handed its own words back as the team's knowledge."""

    principal: Principal
    project: Project
    query: str
    files: Sequence[str] = ()
    phase: str | None = None
    limit: int = 8
    query_kind: str | None = None
    types: Sequence[str] | None = None
    include_stale: bool = True
    as_of: datetime | None = None
    not_from_session: str = ""


@dataclass(frozen=True)
class Stages:
    """Which stages run: all of them by default. The evaluation and the benchmarks switch paths,
    the boost, the weighting and the rerank off to compare them; proactive callers (/context,
    session start) switch HyDE off, since an agent is never kept waiting on an LLM.
    `query_vector` replaces the query's own embedding (HyDE's second pass, and benchmarks that
    embed their queries beforehand); `hypothetical` is HyDE's answer, whose MaxSim the late
    interaction averages with the query's as the vector averages the two embeddings."""

    paths: Sequence[str] = fusion.PATHS
    boost: bool = True
    weigh: bool = True
    rerank: bool = True
    hyde: bool = True
    query_vector: np.ndarray | None = None
    hypothetical: str = ""


ALL_STAGES = Stages()
NO_HYDE = Stages(hyde=False)


def search(request: SearchRequest, stages: Stages = ALL_STAGES) -> SearchResult:
    """Rank the memories that apply in the request's project for its principal against its
    query and files, through the stages `stages` lets run."""
    principal, project, query, phase = request.principal, request.project, request.query, request.phase
    limit, types, as_of = request.limit, request.types, request.as_of
    paths, boost, weigh, rerank = stages.paths, stages.boost, stages.weigh, stages.rerank
    query_vector, hypothetical = stages.query_vector, stages.hypothetical
    from apps.memories.embedding.providers import embed_query, get_provider

    clock = _Clock()
    files = clean_paths(request.files)
    phase_name = universal_phase(phase)
    kind = request.query_kind or fusion.detect_query_kind(query, files)
    weights = {p: w for p, w in fusion.FUSION_WEIGHTS[kind].items() if p in paths}
    rrf_weights = {p: w for p, w in fusion.RRF_WEIGHTS[kind].items() if p in paths}
    # Files named in the query ("… in django/core/paginator.py") are in play for the graph too.
    named_files = fusion.files_in_query(query)
    graph_files = list(dict.fromkeys([*files, *named_files]))
    base = memories_visible(principal=principal, project=project).active()
    if types:
        base = base.filter(type__in=list(types))
    if not request.include_stale:
        base = base.filter(stale_at__isnull=True)
    if request.not_from_session:
        base = without_session_only(base, request.not_from_session)
    scope = Scope.of(base)
    clock.lap("prepare")

    provider = get_provider()
    late_texts = [t for t in (query, hypothetical) if t.strip()]  # (an empty hypothetical is left out)
    # The precision model's view of the query, for a local rerank of a question the code graph
    # does not decide: started first, on its own thread (precision.py), so that its embedding (the
    # longest step of a query not seen before) runs beside the query's own embedding and the paths.
    second_view = None
    if (
        rerank
        and "dense" in paths
        and query.strip()
        and kind != "structural"
        and provider.late_interaction
        and not settings.COHERE_API_KEY
        and precision.provider() is not None
    ):
        second_view = precision.query_vectors_later([query_embedding_text(t) for t in late_texts])
    vector = None
    if "dense" in paths and query.strip():
        vector = (
            query_vector if query_vector is not None else embed_query(query_embedding_text(query), provider)
        )
        if not np.any(vector) or not np.isfinite(vector).all():
            vector = None  # nothing in the query to embed (the hashing provider's ":"): no direction
        clock.lap("embed")
    if vector is None and second_view is not None:
        second_view.cancel()  # (no cosine to re-weigh: the rerank does not read it)
        second_view = None
    # The boost asks for the neighbours of the top results' files; when those are the files
    # already asked about (one memory about the file in play, say), the first answer serves.
    asked: dict[frozenset[str], dict[str, float]] = {}

    def neighbours_of(in_play: list[str]) -> dict[str, float]:
        key = frozenset(in_play)
        if key not in asked:
            asked[key] = file_neighbours(project.id, in_play)[0]
        return asked[key]

    runs: dict[str, Callable[[], Found]] = {}
    if vector is not None:
        runs["dense"] = lambda: dense_path(
            scope,
            vector,
            model_id=provider.model_id,
            limit=max(DENSE_TOP, 2 * limit),
            matryoshka=provider.matryoshka,
        )
    if "graph" in paths and graph_files:
        runs["graph"] = lambda: graph_path(
            scope,
            graph_reach(query, kind, files, named_files, neighbours_of(graph_files)),
            organization_id=project.organization_id,
            vector=vector,
            model_id=provider.model_id,
        )
    # The dense and graph paths run on connections of their own while this thread runs the
    # keyword path (concurrent_reads.py); each reports its own time, `paths` the time of all three.
    waiting = {name: concurrent_reads.start(_timed(run)) for name, run in runs.items()}
    found: dict[str, Found] = {}
    keyword_reference = 0.0
    if "keyword" in paths and query.strip():
        (found["keyword"], keyword_reference), clock.timings["keyword"] = _timed(
            lambda: keyword_path(scope, query, project, vector=vector, model_id=provider.model_id)
        )()
    for name, result in waiting.items():
        found[name], clock.timings[name] = result()
    clock.lap("paths")

    rankings = {path: [(i, score) for i, score, _ in rows] for path, rows in found.items()}
    ranked_ids = {path: [i for i, _ in ranking] for path, ranking in rankings.items()}
    info = {i: row for rows in found.values() for i, _, row in rows}
    cosines = {i: 1.0 - float(row["distance"]) for i, row in info.items() if row["distance"] is not None}
    rrf = fusion.weighted_rrf(ranked_ids, rrf_weights)
    fused = fusion.score_fusion(
        cosines=cosines,
        keyword=dict(rankings.get("keyword", [])),
        graph=dict(rankings.get("graph", [])),
        weights=weights,
        keyword_reference=keyword_reference,
    )
    ordered = sorted((i for i in fused if i in info), key=lambda i: (-fused[i], i))
    keyword_scores = dict(rankings.get("keyword", []))
    graph_scores = dict(rankings.get("graph", []))
    keyword_scale = fusion.keyword_scale(keyword_scores, keyword_reference) or 1.0
    clock.lap("fuse")

    boosts: dict[str, fusion.Boost] = {}
    if boost and len(ordered) > fusion.BOOST_TOP_K:
        top_files = list(
            dict.fromkeys(f for i in ordered[: fusion.BOOST_TOP_K] for f in info[i]["related_files"])
        )
        neighbours_of_top = neighbours_of(top_files)
        boosts = fusion.neighbourhood_boost(
            ordered, fused, {i: info[i]["related_files"] for i in ordered}, neighbours_of_top
        )
        amounts = {i: b.amount for i, b in boosts.items()}
        boost_listeners.boost_observed(project.id, boost_listeners.top_changed(ordered, fused, amounts))
    clock.lap("boost")

    now = as_of or timezone.now()
    phase_table = phase_weights_for(project.id) if weigh else None
    components: dict[str, dict[str, float | None]] = {}
    cosine_worth: dict[str, float] = {}  # what a unit of cosine adds to each stage-3 score
    for memory_id in ordered:
        row = info[memory_id]
        boosted = fused[memory_id] + (boosts[memory_id].amount if memory_id in boosts else 0.0)
        age = (now - (row["last_accessed_at"] or row["created_at"])).total_seconds() / 86400
        confidence = fusion.decayed_confidence(
            row["confidence"],
            age_days=age,
            half_life_days=row["decay_half_life_days"],
            pinned=row["pinned"],
            user_verified=row["user_verified"],
        )
        w = fusion.weighting(
            phase=phase_name,
            memory_type=row["type"],
            source=row["source"],
            confidence=confidence,
            disputed=row["disputed"],
            phase_weights=phase_table,
        )
        components[memory_id] = {
            "rrf": rrf.get(memory_id, 0.0),  # (rounded with the others when a hit is made)
            "fused": fused[memory_id],
            "cosine": cosines.get(memory_id),
            # each path's evidence as fusion reads it (0 where the path did not find the memory)
            "keyword": keyword_scores.get(memory_id, 0.0) / keyword_scale,
            "graph": min(max(graph_scores.get(memory_id, 0.0), 0.0), 1.0),
            "boost": boosted - fused[memory_id],
            "phase_weight": w.phase_weight,
            "source_trust": w.source_trust,
            "confidence": round(confidence, 4),
            "dispute": w.dispute,
            "score": fusion.weighted_score(boosted, w.factor) if weigh else boosted,
            "late_interaction": None,
            "precision": None,
            "rerank": None,
        }
        cosine_worth[memory_id] = weights.get("dense", 0.0) * (fusion.prior(w.factor) if weigh else 1.0)
    ordered.sort(key=lambda i: (-float(components[i]["score"] or 0.0), i))
    clock.lap("weigh")

    hyde_outcome = hyde.Outcome("not_run")
    if vector is not None and query_vector is None:
        if not stages.hyde:
            hyde_outcome = hyde.Outcome("disabled")
        else:
            # Judged on the stage-3 scores, before a rerank the second pass would repeat (the
            # top 3 however few were asked for: a search for one result is no less sure).
            scores = [float(components[i]["score"] or 0.0) for i in ordered[: max(limit, hyde.MIN_CONFIDENT)]]
            hyde_outcome = hyde.hypothetical(query, kind, scores, tenant=str(project.organization_id))
            if hyde_outcome.text:
                first_pass = round((clock.mark - clock.start) * 1000, 3)
                combined = hyde.combine(vector, embed_query(hyde_outcome.text, provider))
                clock.lap("hyde")  # the chat call and the hypothetical's embedding
                second = search(
                    replace(request, files=files, query_kind=kind),
                    replace(stages, query_vector=combined, hypothetical=hyde_outcome.text),
                )
                # The second pass's stages (its results), what the first pass and HyDE took, in all.
                second.timings_ms.update(
                    first_pass=first_pass, hyde=clock.timings["hyde"], total=clock.total()["total"]
                )
                second.hyde = hyde_outcome.as_dict()
                return second
            clock.lap("hyde")

    reranker = "none"
    if rerank and ordered:
        ordered, reranker = _rerank(
            query,
            ordered,
            components,
            files=graph_files,
            limit=limit,
            cosine_worth=cosine_worth,
            late_texts=late_texts,
            second_view=second_view,
        )
    clock.lap("rerank")

    final = ordered[:limit]
    memories = _results(final, principal)
    path_rank = {path: {i: r for r, i in enumerate(ids, start=1)} for path, ids in ranked_ids.items()}
    hits = [
        Hit(
            memory=memories[memory_id],
            rank=position,
            ranks={p: path_rank.get(p, {}).get(memory_id) for p in fusion.PATHS},
            components={
                k: (round(v, 6) if isinstance(v, float) else v) for k, v in components[memory_id].items()
            },
            boost_reason=boosts[memory_id].reason if memory_id in boosts else None,
            stale=info[memory_id]["stale_at"] is not None,
        )
        for position, memory_id in enumerate(final, start=1)
        if memory_id in memories
    ]
    clock.lap("load")
    return SearchResult(
        query=query,
        query_kind=kind,
        phase=phase_name,
        weights=weights,
        hits=hits,
        candidates={**{p: len(r) for p, r in rankings.items()}, "fused": len(fused)},
        timings_ms=latency.record(project.id, "search", clock.total()),
        reranker=reranker,
        rankings=ranked_ids,
        rrf_weights=rrf_weights,
        hyde=hyde_outcome.as_dict(),
    )


def _rerank(
    query: str,
    ordered: list[str],
    components: dict[str, dict[str, float | None]],
    *,
    files: Sequence[str],
    limit: int,
    cosine_worth: dict[str, float],
    late_texts: Sequence[str],
    second_view: Future | None = None,
) -> tuple[list[str], str]:
    """Rerank the top 20 (or `limit`, if larger) and keep them ahead of the rest. `second_view`:
    the precision model's vectors of `late_texts`, coming (precision.query_vectors_later)."""
    head = ordered[: max(RERANK_TOP, limit)]
    tail = ordered[len(head) :]
    if settings.COHERE_API_KEY:
        contents = dict(Memory.objects.filter(id__in=head).values_list("id", "content"))
        documents = [contents[UUID(i)] for i in head]
        try:
            reranked = _cohere_rerank(query, documents, len(head))
        except Exception:
            logger.exception("Cohere rerank failed; using the local precision stage")
        else:
            for index, relevance in reranked:
                components[head[index]]["rerank"] = round(relevance, 6)
            picked = [head[index] for index, _ in reranked]
            return picked + [i for i in head if i not in set(picked)] + tail, "cohere"
    identifiers = fusion.identifier_tokens(query, files)
    lexemes: dict[str, set[str]] = {}
    if identifiers:
        # Which of the query's identifiers each memory names, read off its search vector (the
        # whole tokens of its citation, tags, content, files and modules, indexed as they are)
        # instead of tokenizing its fields again here (~0.3 ms a memory).
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, ARRAY(SELECT u.lexeme FROM unnest(search_vector) u"
                " WHERE u.lexeme = ANY(%s::text[])) FROM memories_memory WHERE id = ANY(%s::uuid[])",
                [sorted({i.lower() for i in identifiers}), head],
            )
            lexemes = {str(memory_id): set(named) for memory_id, named in cursor.fetchall()}
    # (Late interaction re-weighs the cosine: nothing to do where no path measured one.)
    with_cosine = [i for i in head if components[i]["cosine"] is not None]
    late_scores, second_scores = _late_interaction(late_texts, with_cosine, second_view)
    items = []
    for i in head:
        components[i]["late_interaction"] = late_scores.get(i)
        components[i]["precision"] = second_scores.get(i)
        items.append(
            fusion.RerankInput(
                memory_id=i,
                score=float(components[i]["score"] or 0.0),
                identifier_match=fusion.identifier_match(identifiers, lexemes.get(i, ())),
                cosine=components[i]["cosine"],
                late_interaction=late_scores.get(i),
                cosine_worth=cosine_worth.get(i, 0.0),
                precision=second_scores.get(i),
            )
        )
    reranked_local = fusion.local_precision_rerank(items, keep=len(head))
    for memory_id, value in reranked_local:
        components[memory_id]["rerank"] = round(value, 6)
    return [i for i, _ in reranked_local] + tail, "local"


# ---------------------------------------------------------------- context packing


def _late_interaction(
    texts: Sequence[str], ids: list[str], second_view: Future | None = None
) -> tuple[dict[str, float], dict[str, float]]:
    """MaxSim of the query's tokens against each memory's stored tokens (late_interaction.py), for the
    memories whose tokens the configured model wrote; none when it offers no token embeddings or
    the query has no word piece to match. Several texts (HyDE's query and hypothetical answer):
    the mean of their MaxSims. Second: where `second_view` brings the precision model's vectors
    of the texts, its cosine with each memory's stored vector of that model (the mean, likewise);
    none where MaxSim has none, or the precision model failed (logged)."""
    from apps.memories.embedding.providers import get_provider, query_tokens

    provider = get_provider()
    texts = [query_embedding_text(t) for t in texts if t.strip()]
    if not provider.late_interaction or not ids or not texts:
        return {}, {}
    wanted = [query_tokens(text, provider) for text in texts]
    if not all(tokens is not None and len(tokens) for tokens in wanted):
        return {}, {}
    second_vectors = None
    if second_view is not None:
        try:
            second_vectors = np.stack(second_view.result(timeout=settings.PRECISION_QUERY_WAIT_SECONDS))
        except TimeoutError:  # (a process's first search, while the model loads)
            logger.info("The precision model's query vector is late; reranking without it")
        except precision.ModelUnavailable:
            pass  # (logged where it failed to load)
        except Exception:
            logger.exception("The precision model could not embed the query; reranking without it")
    # Binary results: a head's tokens are ~0.8 MB, which the text protocol doubles and hex-decodes.
    connection.ensure_connection()
    with psycopg.Cursor(connection.connection) as cursor:
        cursor.execute(
            f"SELECT memory_id::text, data, CASE WHEN precision_model = %s THEN precision END"
            f" FROM {MemoryTokens._meta.db_table} WHERE memory_id = ANY(%s::uuid[]) AND model_id = %s",
            # (the precision vectors only where the rerank will read them: ~3 KB a memory)
            [precision.MODEL_ID if second_vectors is not None else None, ids, provider.model_id],
            binary=True,
        )
        rows = cursor.fetchall()
    if not rows:
        return {}, {}
    documents = [data for _, data, _ in rows]
    per_text = [late_interaction.maxsim_packed(tokens, documents, provider.dimensions) for tokens in wanted]
    maxsims = {
        memory_id: float(np.mean(scores)) for (memory_id, _, _), *scores in zip(rows, *per_text, strict=True)
    }
    seconds = {}
    if second_vectors is not None:
        for memory_id, _, data in rows:
            if data is not None and len(data) == precision.DIMENSIONS * 4:  # (float32s)
                seconds[memory_id] = float(np.mean(second_vectors @ precision.unpack(bytes(data))))
    return maxsims, seconds
