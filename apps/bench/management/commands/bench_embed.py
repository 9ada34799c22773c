"""The local model on ONNX Runtime against the same model on torch, measured in one run.

`python manage.py bench_embed [--rounds 5] [--json]` embeds the queries and the memories of
evals/code_memory_check.json (45 queries, 120 memories) as search and the embedding task do:
- a query alone, with its token embeddings (what a search waits for), each query on one runtime
  and then the other, so both see the machine in the same state;
- the memories all in one call, with token embeddings, as the embedding task hands them over
  (torch batches them 32 at a time, ONNX Runtime runs them one at a time);
and prints the p50/p95 of a query, the seconds for all memories, the ratios (torch / ONNX) and the
largest difference between the two runtimes' vectors and token providers. Both runtimes use
`EMBEDDING_TORCH_THREADS` threads. Where the precision stage's second model is configured, it
also times that model on the configured runtime: a query alone and the memories in one call.
`--json` prints one JSON object on the last line.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.test import override_settings

from apps.memories.embedding import precision, providers

DATASET = Path(settings.BASE_DIR) / "evals" / "code_memory_check.json"
RUNTIMES = ("torch", "onnx")


def _p(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 2)


class Command(BaseCommand):
    help = "Time the local embedding model on ONNX Runtime against torch (queries and batches)."

    def add_arguments(self, parser):
        parser.add_argument("--rounds", type=int, default=5, help="Times each query is embedded per runtime.")
        parser.add_argument("--json", action="store_true", dest="as_json")

    def handle(self, *args, rounds: int, as_json: bool, **options):
        if rounds < 1:
            raise CommandError("--rounds must be at least 1.")
        with open(DATASET, encoding="utf-8") as handle:
            data = json.load(handle)
        queries = [item["query"] for item in data["queries"]]
        memories = [item["content"] for item in data["memories"]]
        provider = providers.LocalMiniLM()
        if providers.local_encoder("onnx") is None:
            raise CommandError("No usable ONNX graph (see the warnings above): nothing to compare.")

        query_ms: dict[str, list[float]] = {runtime: [] for runtime in RUNTIMES}
        results: dict[str, tuple] = {}
        for runtime in RUNTIMES:  # warm both: the first call of each pays for loading
            with override_settings(EMBEDDING_LOCAL_RUNTIME=runtime):
                provider.embed_with_tokens(queries[:2], query=True)
        for _ in range(rounds):
            for query in queries:
                for runtime in RUNTIMES:
                    with override_settings(EMBEDDING_LOCAL_RUNTIME=runtime):
                        started = time.perf_counter()
                        provider.embed_with_tokens([query], query=True)
                        query_ms[runtime].append((time.perf_counter() - started) * 1000)
        batch_seconds = {}
        for runtime in RUNTIMES:
            with override_settings(EMBEDDING_LOCAL_RUNTIME=runtime):
                started = time.perf_counter()
                results[runtime] = provider.embed_with_tokens(memories)
                batch_seconds[runtime] = round(time.perf_counter() - started, 3)
        (torch_vectors, torch_tokens), (onnx_vectors, onnx_tokens) = results["torch"], results["onnx"]
        summary = {
            "queries": len(queries) * rounds,
            "memories": len(memories),
            "threads": settings.EMBEDDING_TORCH_THREADS,
            "torch_query_p50_ms": _p(query_ms["torch"], 50),
            "torch_query_p95_ms": _p(query_ms["torch"], 95),
            "onnx_query_p50_ms": _p(query_ms["onnx"], 50),
            "onnx_query_p95_ms": _p(query_ms["onnx"], 95),
            "query_p50_ratio": round(_p(query_ms["torch"], 50) / _p(query_ms["onnx"], 50), 2),
            "torch_batch_s": batch_seconds["torch"],
            "onnx_batch_s": batch_seconds["onnx"],
            "batch_ratio": round(batch_seconds["torch"] / batch_seconds["onnx"], 2),
            "max_vector_difference": float(np.abs(torch_vectors - onnx_vectors).max()),
            "max_token_difference": max(
                float(np.abs(a - b).max()) for a, b in zip(torch_tokens, onnx_tokens, strict=True) if a.size
            ),
        }
        if precision.enabled():
            summary.update(self._precision(queries, memories, rounds))
        for key, value in summary.items():
            self.stdout.write(f"{key:>24}  {value}")
        if as_json:
            self.stdout.write(json.dumps(summary))

    def _precision(self, queries: list[str], memories: list[str], rounds: int) -> dict[str, float]:
        """The precision model (precision.py) on its configured runtime: a query alone, as the
        rerank embeds it beside the paths, and the memories as the embedding task hands them over."""
        second = precision.LocalMPNet()
        second.embed(queries[:2])  # loading and, once per machine, unpacking and tracing
        times = []
        for _ in range(rounds):
            for query in queries:
                started = time.perf_counter()
                second.embed([query])
                times.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        second.embed(memories)
        return {
            "precision_query_p50_ms": _p(times, 50),
            "precision_query_p95_ms": _p(times, 95),
            "precision_batch_s": round(time.perf_counter() - started, 3),
        }
