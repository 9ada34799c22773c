"""Search latency and filtered-ANN recall on a synthetic corpus (README: "Benchmarks — memories").

Builds `--memories` synthetic memories over `--projects` projects (four per organization, 8% of
memories org-scoped). Memories vary `--bases` template sentences (an identifier and a file
appended to each); a memory's vector is the real embedding of its base sentence, jittered to
cosine ≈ 0.85, so neighbourhoods have the model's geometry without embedding 100K sentences.
Then, over
`--queries` queries (real query embeddings), it times:

- dense_unfiltered: raw psycopg top-10 over the whole table (HNSW);
- dense: raw top-10 with our tenant filter (the SQL `search()` runs: pgvector iterative scan);
- keyword: raw full-text top-20 under the tenant filter;
- pipeline: `search()` in-process without the reranker or HyDE (query vectors already embedded
  — the embedding itself is reported as embed_p50_ms);
- http: POST /api/v1/projects/{id}/search through Django's full request stack (same switches);
- context: POST /api/v1/projects/{id}/context (phase implement, the query as the task): search
  with the local precision stage (its late interaction reads each memory's stored token
  embeddings: those of its base sentence), packing and the access bookkeeping of every injected memory;
  the task's embeddings (MiniLM's, and the precision model's for the rerank: a memory's
  precision vector is its base sentence's too) come from the query cache, as the http search's
  does (precision_embed_p50_ms: what the precision model took for a query, uncached);

- http_cold: POST /api/v1/projects/{id}/search over real HTTP to a daphne of its own (as `make run`
  serves it: DEBUG off, both local models loaded at its start), `--cold` queries none of which it
  has seen before, one at a time, with the API's defaults (the local rerank with the precision
  model): both query embeddings, the whole pipeline and the JSON, as a client waits for them,
  and http_cold_server_cpu_ms, the server process's CPU time per search (skipped when the
  command runs inside a transaction, which another process cannot see);

and filtered_recall_at_10: the filtered ANN top-10 against an exact scan under the same filter.
Everything is timed with DEBUG off, as production runs (`manage.py` defaults to the development
settings, whose debug cursor records every statement).
With --json the last line is one JSON object. Bench organizations are deleted unless --keep.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from typing import Any

import httpx
import numpy as np
import psutil
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.db.models import FloatField
from django.db.models.expressions import RawSQL
from django.test import Client
from django.test.utils import override_settings

from apps.bench.daphne import Server
from apps.bench.synthetic import Corpus
from apps.memories.embedding import precision
from apps.memories.embedding.providers import embed_query, get_provider
from apps.memories.search import Scope, SearchRequest, Stages, keyword_candidates, late_interaction, search
from apps.memories.search.keyword import index_memory
from apps.memories.selectors import memories_visible
from apps.memories.services import rebuild_term_stats
from apps.memories.vectors import (
    distance_expr,
    ensure_hnsw_index,
    index_name,
    set_search_params,
    vector_literal,
)
from apps.tenants.models import Organization, Project
from apps.tenants.principal import SYSTEM
from apps.tenants.services import api_key_create, organization_limits_lift

WARM_SECONDS = 180.0  # at most, for the server started for the cold HTTP searches to load its models
_STAGE_COLUMNS = "id, org, project, type, content, scope, related_files, emb, lit, a, c, citation, base"


def _p(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 3) if values else 0.0


# What the corpus writes (and `/context` adds to while measuring): vacuumed when it goes.
_CORPUS_TABLES = "memories_memory, memories_memorytokens, memories_memoryusage"


def _settle() -> str:
    """Leave the freshly loaded corpus as a running service's would be before measuring: planner
    statistics, and, outside a transaction, vacuumed (autovacuum would otherwise visit the
    ~1.5 GB of new token rows in the middle of the measurements, on the same two cores) and
    checkpointed (else the checkpointer spreads the load's dirty pages over the next minutes)."""
    with connection.cursor() as cursor:
        if connection.in_atomic_block:  # (a test runs the command inside one)
            cursor.execute(f"ANALYZE {_CORPUS_TABLES}")
            return "analyzed"
        cursor.execute(f"VACUUM ANALYZE {_CORPUS_TABLES}")
        cursor.execute(
            "SELECT rolsuper OR pg_has_role(current_user, 'pg_checkpoint', 'MEMBER')"
            " FROM pg_roles WHERE rolname = current_user"
        )
        if not cursor.fetchone()[0]:
            return "vacuumed and analyzed (no CHECKPOINT: the role may not run one)"
        cursor.execute("CHECKPOINT")
    return "vacuumed, analyzed and checkpointed"


class Command(BaseCommand):
    help = "Benchmark dense, keyword, pipeline and HTTP search latency and filtered-ANN recall."

    def add_arguments(self, parser):
        parser.add_argument("--memories", type=int, default=100_000)
        parser.add_argument("--projects", type=int, default=20)
        parser.add_argument("--queries", type=int, default=200)
        parser.add_argument("--bases", type=int, default=2000)
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument(
            "--cold", type=int, default=100, help="Queries never seen before, over HTTP (0: none)."
        )
        parser.add_argument("--json", action="store_true", help="End with one JSON line.")
        parser.add_argument("--keep", action="store_true", help="Keep the bench organizations.")

    def handle(self, *args, **opts):
        self.say = self.stdout.write
        self.server_settings = os.environ.get("DJANGO_SETTINGS_MODULE", "memorysaas.settings.local")
        logging.getLogger("httpx").setLevel(logging.WARNING)  # (a line per request otherwise)
        provider = get_provider()
        corpus = Corpus(opts["seed"])
        bases = corpus.bases(opts["bases"])
        started = time.perf_counter()
        base_tokens: list[bytes] = []
        base_second: list[bytes | None] = [None] * len(bases)
        if provider.late_interaction:  # a memory's tokens are its base sentence's, for the rerank
            base_vectors, token_rows = provider.embed_with_tokens([text for text, _ in bases])
            base_tokens = [late_interaction.pack(rows) for rows in token_rows]
            if precision.provider() is not None:  # and so is its precision model's vector
                second = precision.provider().embed([text for text, _ in bases])
                base_second = [precision.pack(vector) for vector in second]
        else:
            base_vectors = provider.embed([text for text, _ in bases])
        self.say(f"embedded {len(bases)} base sentences in {time.perf_counter() - started:.1f}s")
        memories = corpus.memories(opts["memories"], bases)
        rng = np.random.default_rng(opts["seed"])
        vectors = base_vectors[[m.base for m in memories]]
        vectors = vectors + rng.normal(0, 0.0316, vectors.shape).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)

        orgs, projects = self._tenants(opts["projects"])
        try:
            self._load(memories, vectors, projects, provider.model_id, rng, base_tokens, base_second)
            with override_settings(DEBUG=False, ALLOWED_HOSTS=[*settings.ALLOWED_HOSTS, "127.0.0.1"]):
                result = self._measure(corpus, bases, projects, opts["queries"], provider, rng)
            result.update(self._http_cold(corpus, bases, projects, opts["cold"], rng))
        finally:
            if not opts["keep"]:
                started = time.perf_counter()
                for org in orgs:
                    org.delete()
                if not connection.in_atomic_block:  # (a test runs the command inside one)
                    with connection.cursor() as cursor:
                        # The index drops dead entries, and the next run's measurements do not
                        # share the cores with autovacuum working through this corpus's tokens.
                        cursor.execute(f"VACUUM ANALYZE {_CORPUS_TABLES}")
                self.say(f"cleaned up in {time.perf_counter() - started:.1f}s")
        result.update(memories=opts["memories"], projects=opts["projects"], queries=opts["queries"])
        for key, value in result.items():
            self.say(f"{key:>26}: {value}")
        if opts["json"]:
            self.stdout.write(json.dumps(result, sort_keys=True))

    # ------------------------------------------------------------ setup

    def _tenants(self, count: int) -> tuple[list[Organization], list[Project]]:
        suffix = uuid.uuid4().hex[:6]
        orgs, projects = [], []
        for n in range(count):
            if n % 4 == 0:
                orgs.append(
                    Organization.objects.create(
                        name=f"bench {suffix} {n // 4}", slug=f"bench-{suffix}-{n // 4}"
                    )
                )
                organization_limits_lift(organization=orgs[-1])
            projects.append(
                Project.objects.create(organization=orgs[-1], name=f"bench {n}", slug=f"bench-{suffix}-p{n}")
            )
        return orgs, projects

    def _load(
        self,
        memories,
        vectors,
        projects: list[Project],
        model_id: str,
        rng,
        base_tokens: list[bytes],
        base_second: list[bytes | None],
    ) -> None:
        started = time.perf_counter()
        owners = rng.integers(0, len(projects), len(memories))
        org_scoped = rng.random(len(memories)) < 0.08
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM memories_memory")
            others = cursor.fetchone()[0]
        # A big load into a dev or CI database: build the index once after loading.
        rebuild_index = others < 10_000 and len(memories) >= 10_000
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                "CREATE TEMP TABLE bench_stage (id uuid, org uuid, project uuid, type text, content text,"
                " scope text, related_files varchar[], emb text, lit text, a text, c text, citation text,"
                " base int)"
                " ON COMMIT DROP"
            )
            with cursor.cursor.copy(f"COPY bench_stage ({_STAGE_COLUMNS}) FROM STDIN") as copy:
                for memory, vector, owner, org_scope in zip(
                    memories, vectors, owners, org_scoped, strict=True
                ):
                    project = projects[int(owner)]
                    indexed = index_memory(content=memory.content, related_files=memory.related_files)
                    copy.write_row(
                        (
                            uuid.uuid4(),
                            project.organization_id,
                            project.id,
                            memory.type,
                            memory.content,
                            "org" if org_scope else "project",
                            memory.related_files,
                            "[" + ",".join(f"{x:.6f}" for x in vector.tolist()) + "]",
                            indexed.whole_literal,
                            indexed.words_b,
                            indexed.words_c,
                            memory.content[:39],
                            memory.base,
                        )
                    )
            self.say(f"staged {len(memories)} rows in {time.perf_counter() - started:.1f}s")
            if rebuild_index:
                cursor.execute(f"DROP INDEX IF EXISTS {index_name(len(vectors[0]))}")
            cursor.execute(
                """
                INSERT INTO memories_memory (
                    id, organization_id, project_id, type, content, source, scope, confidence, tags,
                    related_files, related_modules, payload, citation_text, methodology, session_id,
                    provenance_session_ids, commit_sha, target_node_id, impacted_node_ids, needs_review,
                    user_verified, pinned, deprecated, disputed, chunk_type, context_prefix,
                    used_count, helpful_count, flag_count, secrets_redacted,
                    secret_kinds, embedding, embedding_model, embedding_dims, embedding_status,
                    embedding_error, embedded_at, search_vector, decay_half_life_days,
                    version, created_at, updated_at)
                SELECT id, org, project, type, content, 'agent_explicit', scope, 0.8, '{}', related_files,
                    '{}', '{}'::jsonb, citation, '', '', '{}', '', '', '{}', false, false, false, false,
                    false, '', '', 0, 0, 0, false, '{}', emb::vector, %s, %s, 'ready', '', now(),
                    lit::tsvector || setweight(to_tsvector('english', a), 'B')
                        || setweight(to_tsvector('english', c), 'C'),
                    NULL, 1, now(), now()
                FROM bench_stage
                """,
                [model_id, len(vectors[0])],
            )
            if base_tokens:
                cursor.execute(
                    "CREATE TEMP TABLE bench_tokens (base int, data bytea, second bytea) ON COMMIT DROP"
                )
                with cursor.cursor.copy("COPY bench_tokens (base, data, second) FROM STDIN") as copy:
                    for base, (data, second) in enumerate(zip(base_tokens, base_second, strict=True)):
                        copy.write_row((base, data, second))
                cursor.execute(
                    "INSERT INTO memories_memorytokens (memory_id, model_id, data, precision_model, precision)"
                    " SELECT s.id, %s, t.data, CASE WHEN t.second IS NULL THEN '' ELSE %s END, t.second"
                    " FROM bench_stage s JOIN bench_tokens t USING (base)",
                    [model_id, precision.MODEL_ID],
                )
        self.say(f"inserted {len(memories)} memories in {time.perf_counter() - started:.1f}s")
        started = time.perf_counter()
        if rebuild_index:
            with connection.cursor() as cursor:
                cursor.execute("SET maintenance_work_mem = '1GB'")
                cursor.execute("SET max_parallel_maintenance_workers = 2")
                ensure_hnsw_index(len(vectors[0]))
                cursor.execute("RESET maintenance_work_mem")
        for project in projects:
            rebuild_term_stats(project=project)
        self.say(f"index and term stats in {time.perf_counter() - started:.1f}s")
        started = time.perf_counter()
        self.say(f"{_settle()} in {time.perf_counter() - started:.1f}s")

    # ------------------------------------------------------------ measurement

    def _timed(self, sql: str, params: list[Any], *, settings: str = "ann") -> tuple[list, float]:
        with transaction.atomic(), connection.cursor() as cursor:
            if settings == "ann":
                set_search_params(cursor)
            elif settings == "exact":
                cursor.execute("SET LOCAL enable_indexscan = off")
                cursor.execute("SET LOCAL enable_bitmapscan = on")
            started = time.perf_counter()
            cursor.execute(sql, params)
            rows = cursor.fetchall()
            return rows, (time.perf_counter() - started) * 1000

    def _dense_sql(self, project: Project, vector: np.ndarray, model_id: str) -> tuple[str, list]:
        dims = len(vector)
        qs = (
            memories_visible(principal=SYSTEM, project=project)
            .active()
            .filter(embedding_dims=dims, embedding_model=model_id)
            .annotate(
                distance=RawSQL(distance_expr(dims), [vector_literal(vector)], output_field=FloatField())
            )
            .order_by("distance")
            .values_list("id", flat=True)[:10]
        )
        sql, params = qs.query.sql_with_params()
        return sql, list(params)

    def _keyword_sql(self, project: Project, query: str) -> tuple[str, list]:
        base = memories_visible(principal=SYSTEM, project=project).active()
        sql, params, _, _ = keyword_candidates(Scope.of(base), query, project, limit=20)
        return sql, params

    def _measure(self, corpus: Corpus, bases, projects: list[Project], count: int, provider, rng) -> dict:
        queries = corpus.queries(count, bases)
        self.queries_seen = [text for text, _ in queries]
        targets = [projects[int(i)] for i in rng.integers(0, len(projects), count)]
        started = time.perf_counter()
        embed_times, second_times = [], []
        vectors = []
        second = provider.late_interaction and precision.provider() is not None
        for text, _files in queries:
            t0 = time.perf_counter()
            vectors.append(embed_query(text, provider))
            embed_times.append((time.perf_counter() - t0) * 1000)
            if second:  # the context's rerank takes it from the query cache too
                t0 = time.perf_counter()
                precision.embed_query(text)
                second_times.append((time.perf_counter() - t0) * 1000)
        self.say(f"embedded {count} queries in {time.perf_counter() - started:.1f}s")
        dims = len(vectors[0])
        unfiltered_sql = (
            f"SELECT id FROM memories_memory WHERE embedding_dims = {dims} "
            f"ORDER BY {distance_expr(dims)} LIMIT 10"
        )
        times: dict[str, list[float]] = {
            k: [] for k in ("unfiltered", "dense", "keyword", "pipeline", "http", "context")
        }
        injected: list[int] = []
        recalls = []
        stages: dict[str, list[float]] = {}
        keys = {p.organization_id: self._api_key(p.organization) for p in projects}
        client = Client()
        for warm in (True, False):
            for (text, files), project, vector in zip(
                queries[: 10 if warm else None], targets, vectors, strict=False
            ):
                literal = vector_literal(vector)
                _, ms = self._timed(unfiltered_sql, [literal])
                times["unfiltered"].append(ms)
                sql, params = self._dense_sql(project, vector, provider.model_id)
                ann, ms = self._timed(sql, params)
                times["dense"].append(ms)
                exact, _ = self._timed(sql, params, settings="exact")
                if exact:
                    recalls.append(len({r[0] for r in ann} & {r[0] for r in exact}) / len(exact))
                sql, params = self._keyword_sql(project, text)
                _, ms = self._timed(sql, params, settings="plain")
                times["keyword"].append(ms)
                t0 = time.perf_counter()
                found = search(
                    SearchRequest(principal=SYSTEM, project=project, query=text, files=files, limit=10),
                    Stages(rerank=False, hyde=False),
                )
                times["pipeline"].append((time.perf_counter() - t0) * 1000)
                for stage, ms in found.timings_ms.items():
                    stages.setdefault(stage, []).append(ms)
                key = keys[project.organization_id]
                search_body = {"query": text, "files": files, "limit": 10, "rerank": False, "hyde": False}
                self._post(client, key, f"projects/{project.id}/search", search_body, times["http"])
                context_body = {"phase": "implement", "task": text, "files": files}
                context = self._post(
                    client, key, f"projects/{project.id}/context", context_body, times["context"]
                )
                injected.append(len(context["memories"]))
            if warm:
                times = {k: [] for k in times}
                recalls = []
                stages = {}
                injected = []
        return {
            "embed_p50_ms": _p(embed_times, 50),
            "precision_embed_p50_ms": _p(second_times, 50) if second_times else None,
            "dense_unfiltered_p95_ms": _p(times["unfiltered"], 95),
            "dense_p50_ms": _p(times["dense"], 50),
            "dense_p95_ms": _p(times["dense"], 95),
            "keyword_p50_ms": _p(times["keyword"], 50),
            "keyword_p95_ms": _p(times["keyword"], 95),
            "pipeline_p50_ms": _p(times["pipeline"], 50),
            "pipeline_p95_ms": _p(times["pipeline"], 95),
            # The relative target: the pipeline's p95 within 15 ms of raw dense + keyword.
            "pipeline_p95_limit_ms": round(_p(times["dense"], 95) + _p(times["keyword"], 95) + 15, 3),
            "http_p95_ms": _p(times["http"], 95),
            "http_requests": len(times["http"]),
            "context_p50_ms": _p(times["context"], 50),
            "context_p95_ms": _p(times["context"], 95),
            "context_memories_p50": _p(injected, 50),
            "pipeline_stage_p50_ms": {stage: _p(values, 50) for stage, values in stages.items()},
            "filtered_recall_at_10": round(float(np.mean(recalls)), 4) if recalls else None,
        }

    def _http_cold(self, corpus: Corpus, bases, projects: list[Project], count: int, rng) -> dict:
        """p50/p95 of searches for queries the server has never seen, over HTTP, one at a time."""
        empty = {
            "http_cold_p50_ms": None,
            "http_cold_p95_ms": None,
            "http_cold_requests": 0,
            "http_cold_server_cpu_ms": None,
        }
        if count < 1 or connection.in_atomic_block:  # (a test's transaction: the server would see nothing)
            return empty
        keys = {p.organization_id: self._api_key(p.organization) for p in projects}
        seen = set(self.queries_seen)

        def fresh():
            while True:
                for query in corpus.queries(count, bases):
                    if query[0] not in seen:
                        seen.add(query[0])
                        yield query

        queries = fresh()
        server = Server(
            settings_module=self.server_settings, env={"RATE_LIMIT_ENABLED": "0"}, name="bench-search"
        )
        times: list[float] = []
        try:
            server.wait_until_serving()
            with httpx.Client(base_url=server.url, timeout=30) as client:

                def cold_search() -> tuple[float, dict]:
                    text, files = next(queries)
                    project = projects[int(rng.integers(0, len(projects)))]
                    started = time.perf_counter()
                    response = client.post(
                        f"/api/v1/projects/{project.id}/search",
                        json={"query": text, "files": files, "limit": 10},
                        headers={"Authorization": f"Bearer {keys[project.organization_id]}"},
                    )
                    elapsed = (time.perf_counter() - started) * 1000
                    if response.status_code != 200:
                        raise CommandError(f"search answered {response.status_code}: {response.text[:300]}")
                    return elapsed, response.json()

                # The server loads both models in the background at its start, and a search
                # meanwhile reranks without the precision model: warm until one used it.
                started = time.monotonic()
                while time.monotonic() - started < WARM_SECONDS:
                    _, body = cold_search()
                    if any(hit["components"].get("precision") is not None for hit in body["results"]):
                        break
                self.say(f"warmed the server in {time.monotonic() - started:.1f}s")
                # The server's CPU time per search as well: on a machine other work shares, the
                # wall-clock figures measure the machine's load as much as the search.
                cpu = psutil.Process(server.process.pid)
                spent = sum(cpu.cpu_times()[:2])
                times = [cold_search()[0] for _ in range(count)]
                spent = sum(cpu.cpu_times()[:2]) - spent
        finally:
            server.stop()
        return {
            "http_cold_p50_ms": _p(times, 50),
            "http_cold_p95_ms": _p(times, 95),
            "http_cold_requests": len(times),
            "http_cold_server_cpu_ms": round(spent * 1000 / len(times), 1),
        }

    @staticmethod
    def _post(client: Client, key: str, path: str, body: dict, times: list[float]) -> dict:
        """POST `body` to the API as `key`, append the time it took to `times`, return the JSON."""
        started = time.perf_counter()
        response = client.post(
            f"/api/v1/{path}",
            json.dumps(body),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {key}",
            HTTP_HOST="127.0.0.1",
        )
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, response.content[:300]
        return response.json()

    def _api_key(self, organization: Organization) -> str:
        _, full = api_key_create(
            organization=organization,
            actor=SYSTEM,
            name="bench",
            scopes=["memories:read"],
            check_permission=False,
        )
        return full
