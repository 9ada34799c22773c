"""Evaluate retrieval on a graded set (see ../shared/eval/README.md for the format).

Loads the set's memories into a fresh project (embedded with the configured provider), indexes
the codebase into the graph when the graph app offers `index_directory`, runs every query
through keyword-only, dense-only, hybrid (RRF), hybrid+boost and the full pipeline, computes a
bm25s baseline over the same texts and prints a table per configuration and kind; with --json it
ends with one JSON line. --misses also lists every relevant memory the full pipeline leaves out of
its top 5, with its rank there and in each path (what to read when a figure drops). HyDE (when
an LLM is configured) runs in the full pipeline only, so the single paths and hybrids stay
comparable with and without it. The project is deleted afterwards unless --keep.
"""

from __future__ import annotations

import json as _json
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.test.utils import override_settings

from apps.bench import evaluation
from apps.memories.search import ALL_STAGES, SearchRequest, Stages, search
from apps.memories.search.fusion import PATHS
from apps.memories.services import memories_create_batch
from apps.memories.validation import MemoryDraft
from apps.tenants.models import Organization, Project
from apps.tenants.principal import SYSTEM

MISS_DEPTH = 50  # how deep --misses looks for a relevant memory in the full pipeline's ranking

# HyDE runs in the full pipeline only (and only with an LLM configured).
CONFIGS: dict[str, Stages] = {
    "keyword": Stages(paths=("keyword",), boost=False, weigh=False, rerank=False, hyde=False),
    "dense": Stages(paths=("dense",), boost=False, weigh=False, rerank=False, hyde=False),
    "hybrid": Stages(boost=False, weigh=False, rerank=False, hyde=False),
    "hybrid+boost": Stages(weigh=False, rerank=False, hyde=False),
    "full": ALL_STAGES,
}


def _draft(memory: dict[str, Any]) -> MemoryDraft:
    fields = (
        "type",
        "content",
        "related_files",
        "related_modules",
        "tags",
        "source",
        "confidence",
        "citation_text",
    )
    return MemoryDraft(**{name: memory[name] for name in fields if name in memory})


def _ask(project: Project, query: dict[str, Any], *, limit: int, as_of: datetime, stages: Stages):
    """One of the set's queries through the pipeline as the system sees the project, with
    confidence decayed to `as_of` (the moment the set was loaded): decayed to each query's own
    moment, a slow run's memories lost ~3e-5 of confidence more than a quick one's, enough to
    swap a near-tie (the blind set's cq14, ranks 9 and 10) and move its figures by 0.002."""
    request = SearchRequest(
        principal=SYSTEM,
        project=project,
        query=query["query"],
        files=query.get("files_in_play", []),
        phase=query.get("phase"),
        limit=limit,
        as_of=as_of,
    )
    return search(request, stages)


def _index_codebase(project: Project, codebase: str, out, source: str | None = None) -> str:
    """Index the codebase the set names (e.g. django==5.2.19) into the graph: the installed
    package, or the package directory under `source` when given. A codebase that cannot be
    found is reported, not fatal: the graph path then has co-mention neighbours only."""
    try:
        from apps.graph.services import index_directory
    except ImportError:
        return "graph app offers no index_directory: structural queries use co-mention neighbours only"
    import importlib.metadata
    import importlib.util

    if not codebase:
        return "the set names no codebase: no graph is indexed"
    package, _, wanted = codebase.partition("==")
    if source:
        root = Path(source)
        if not (root / package).is_dir():
            return f"no {package}/ under {root}: no graph is indexed"
        version = "from --source"
    else:
        try:
            spec = importlib.util.find_spec(package)
        except ModuleNotFoundError:  # a dotted name whose parent package is missing
            spec = None
        if spec is None or not spec.origin:
            return f"{package} is not installed (pass --source): no graph is indexed"
        root = Path(spec.origin).parent.parent
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = "unknown version"
        if wanted and version != wanted:
            version = f"{version}, the set names {wanted}"
    started = time.perf_counter()
    # Index from the package's parent with `include`, so graph paths carry the package prefix
    # (`django/db/models/query.py`) exactly as the memories' related_files do.
    result = index_directory(project, str(root), include=[package])
    return (
        f"indexed {package} ({version}; {result.files} files, {result.edges} edges) from {root}"
        f" in {time.perf_counter() - started:.1f}s"
    )


class Command(BaseCommand):
    help = "Evaluate retrieval (recall@5/10, nDCG@10, MRR per query kind) against a graded set."

    def add_arguments(self, parser):
        default = Path(__file__).resolve().parents[5] / "shared" / "eval" / "code_memory_dev.json"
        parser.add_argument("--dataset", default=str(default))
        parser.add_argument("--keep", action="store_true", help="Keep the evaluation project.")
        parser.add_argument(
            "--source", help="Directory holding the codebase's package (default: the installed one)."
        )
        parser.add_argument("--json", action="store_true", help="End with one JSON line.")
        parser.add_argument(
            "--misses",
            action="store_true",
            help="List relevant memories outside the full pipeline's top 5, with their rank in each path.",
        )
        parser.add_argument("--quiet", action="store_true", help="Only the JSON line (implies --json).")

    def handle(
        self,
        *args,
        dataset: str,
        keep: bool,
        quiet: bool,
        json: bool = False,
        source: str | None = None,
        misses: bool = False,
        **options,
    ):
        path = Path(dataset)
        if not path.exists():
            raise CommandError(f"No dataset at {path}")
        data = _json.loads(path.read_text())
        say = (lambda *a: None) if quiet else (lambda text: self.stdout.write(text))
        suffix = uuid.uuid4().hex[:8]
        org = Organization.objects.create(name=f"eval {suffix}", slug=f"eval-{suffix}")
        project = Project.objects.create(organization=org, name=f"eval {path.stem}", slug=f"eval-{suffix}")
        try:
            # Every query waits for the precision model's vector, however busy the machine: the
            # figures are the ranking's, not a timing's (a search gives up after a second).
            with override_settings(PRECISION_QUERY_WAIT_SECONDS=None):
                result = self._run(data, project, say, source, misses=misses)
        finally:
            if not keep:
                org.delete()
        if json or quiet:
            self.stdout.write(_json.dumps(result, sort_keys=True))

    def _run(
        self, data: dict[str, Any], project: Project, say, source: str | None = None, *, misses: bool = False
    ) -> dict[str, Any]:
        started = time.perf_counter()
        with override_settings(EMBEDDING_MODE="sync"), transaction.atomic():
            created = memories_create_batch(
                project=project, actor=SYSTEM, drafts=[_draft(m) for m in data["memories"]]
            )
        loaded_at = max(m.created_at for m in created)
        key_of = {str(m.id): spec["key"] for m, spec in zip(created, data["memories"], strict=True)}
        say(f"loaded {len(created)} memories in {time.perf_counter() - started:.1f}s")
        say(_index_codebase(project, data.get("codebase", ""), say, source))

        baseline = evaluation.BM25Baseline(
            [m["key"] for m in data["memories"]],
            [" ".join([m["content"], *m.get("related_files", [])]) for m in data["memories"]],
        )
        per_config: dict[str, list[tuple[str, dict[str, float]]]] = {name: [] for name in [*CONFIGS, "bm25"]}
        latencies: list[float] = []
        hyde_ran = 0
        for query in data["queries"]:
            relevant = query["relevant"]
            ranked = baseline.rank(query["query"], 10)
            per_config["bm25"].append((query["kind"], evaluation.query_metrics(ranked, relevant)))
            for name, stages in CONFIGS.items():
                result = _ask(project, query, limit=10, as_of=loaded_at, stages=stages)
                if name == "full":
                    latencies.append(result.timings_ms["total"])
                    hyde_ran += bool(result.hyde["ran"])
                keys = [key_of[str(hit.memory.id)] for hit in result.hits]
                per_config[name].append((query["kind"], evaluation.query_metrics(keys, relevant)))

        summary = {name: evaluation.summarise(rows) for name, rows in per_config.items()}
        self._table(summary, say)
        full = summary["full"]["all"]["ndcg@10"]
        best_single = max(summary[p]["all"]["ndcg@10"] for p in ("keyword", "dense"))
        bm25 = summary["bm25"]["all"]["ndcg@10"]
        checks = {
            "full_vs_best_single_path": round(full / best_single, 3) if best_single else None,
            "full_vs_bm25": round(full / bm25, 3) if bm25 else None,
            "identifier_recall@5": summary["full"].get("identifier", {}).get("recall@5"),
        }
        say(
            f"full nDCG@10 = {checks['full_vs_best_single_path']} × best single path (target ≥ 1.15), "
            f"{checks['full_vs_bm25']} × BM25 (target ≥ 1.2); identifier recall@5 = "
            f"{checks['identifier_recall@5']} (target ≥ 0.9)"
        )
        say(f"HyDE ran for {hyde_ran} of {len(data['queries'])} queries (full pipeline only)")
        if misses:
            self._misses(data["queries"], project, key_of, say, loaded_at)
        latencies.sort()
        return {
            "dataset": data.get("codebase", ""),
            "memories": len(created),
            "queries": len(data["queries"]),
            "metrics": summary,
            "checks": checks,
            "hyde_queries": hyde_ran,
            "full_pipeline_p50_ms": round(latencies[len(latencies) // 2], 2) if latencies else None,
        }

    def _misses(
        self,
        queries: list[dict[str, Any]],
        project: Project,
        key_of: dict[str, str],
        say,
        loaded_at: datetime,
    ) -> None:
        """Each relevant memory outside the full pipeline's top 5: its rank there (of the top
        MISS_DEPTH) and in each path's candidate list ('-' where the path did not find it)."""
        say(f"\nrelevant memories outside the full pipeline's top 5 (ranks up to {MISS_DEPTH})")
        found_any = False
        for query in queries:
            result = _ask(project, query, limit=MISS_DEPTH, as_of=loaded_at, stages=CONFIGS["full"])
            full = {key_of[str(hit.memory.id)]: hit.rank for hit in result.hits}
            paths = {
                path: {key_of.get(i, i): rank for rank, i in enumerate(ids, start=1)}
                for path, ids in result.rankings.items()
            }
            for key, grade in sorted(query["relevant"].items(), key=lambda pair: (-pair[1], pair[0])):
                if full.get(key, MISS_DEPTH + 1) <= 5:
                    continue
                found_any = True
                ranks = " · ".join(f"{p} {paths.get(p, {}).get(key, '-')}" for p in PATHS)
                say(
                    f"  {query['key']} {query['kind']} ({result.query_kind}) {key} grade {grade}: "
                    f"full {full.get(key, '-')} · {ranks}"
                )
        if not found_any:
            say("  none")

    def _table(self, summary: dict[str, dict[str, dict[str, float]]], say) -> None:
        kinds = sorted({kind for per_kind in summary.values() for kind in per_kind})
        for kind in kinds:
            say(f"\n{kind}")
            say(f"  {'config':<14}" + "".join(f"{m:>11}" for m in evaluation.METRICS))
            for name, per_kind in summary.items():
                row = per_kind.get(kind, {})
                say(f"  {name:<14}" + "".join(f"{row.get(m, 0.0):>11.3f}" for m in evaluation.METRICS))
