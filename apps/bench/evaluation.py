"""Retrieval metrics over graded relevance (recall@k, nDCG@10 with gain 2^grade − 1, MRR) and
the BM25 baseline the evaluation compares against. Pure: no Django."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import fmean

METRICS = ("recall@5", "recall@10", "ndcg@10", "mrr")


def recall_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    wanted = {key for key, grade in relevant.items() if grade > 0}
    if not wanted:
        return 0.0
    return len(wanted & set(ranked[:k])) / len(wanted)


def ndcg_at(ranked: Sequence[str], relevant: Mapping[str, int], k: int = 10) -> float:
    def dcg(grades: Sequence[int]) -> float:
        return sum((2**g - 1) / math.log2(i + 2) for i, g in enumerate(grades))

    ideal = dcg(sorted(relevant.values(), reverse=True)[:k])
    return dcg([relevant.get(key, 0) for key in ranked[:k]]) / ideal if ideal else 0.0


def reciprocal_rank(ranked: Sequence[str], relevant: Mapping[str, int]) -> float:
    for position, key in enumerate(ranked, start=1):
        if relevant.get(key, 0) > 0:
            return 1.0 / position
    return 0.0


def query_metrics(ranked: Sequence[str], relevant: Mapping[str, int]) -> dict[str, float]:
    return {
        "recall@5": recall_at(ranked, relevant, 5),
        "recall@10": recall_at(ranked, relevant, 10),
        "ndcg@10": ndcg_at(ranked, relevant, 10),
        "mrr": reciprocal_rank(ranked, relevant),
    }


def summarise(per_query: Sequence[tuple[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Mean of each metric per query kind and over all queries ('all')."""
    kinds = sorted({kind for kind, _ in per_query})
    out = {}
    for kind in [*kinds, "all"]:
        rows = [m for k, m in per_query if kind in ("all", k)]
        out[kind] = {name: round(fmean(r[name] for r in rows), 4) if rows else 0.0 for name in METRICS}
    return out


class BM25Baseline:
    """bm25s with English stopwords over each memory's content plus its related file paths."""

    def __init__(self, keys: Sequence[str], texts: Sequence[str]) -> None:
        import bm25s

        self.keys = list(keys)
        self.retriever = bm25s.BM25()
        self.retriever.index(
            bm25s.tokenize(list(texts), stopwords="en", show_progress=False), show_progress=False
        )

    def rank(self, query: str, k: int = 10) -> list[str]:
        import bm25s

        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        k = min(k, len(self.keys))
        results, scores = self.retriever.retrieve(tokens, k=k, show_progress=False)
        return [self.keys[int(i)] for i, s in zip(results[0], scores[0], strict=True) if s > 0]
