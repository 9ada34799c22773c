"""Late interaction (ColBERT's MaxSim) over the local model's token embeddings, for the local
precision rerank. Pure: numpy (and threadpoolctl, to keep its BLAS on one thread), no Django.

A memory's single vector is the mean of its tokens, so a query that words one part of it
differently is compared with all of it at once. MaxSim keeps the tokens apart: each query token
finds its closest token in the memory, and the memory scores the mean of those similarities.
all-MiniLM-L6-v2 was trained for the pooled vector, not for MaxSim, so its token space is used
zero-shot. On the dev set, MaxSim alone over all memories scored nDCG@10 0.748 against the pooled
cosine's 0.724 (README, benchmarks).

Storage: each token row is quantized to int8, scaled to its own peak (384 bytes a token, ~37 KB
for a typical memory of ~100 tokens); the MaxSim of the quantized rows matches the float rows'
to the third decimal. Query tokens that are only punctuation or the model's [CLS] and
[SEP] markers are dropped: they match punctuation anywhere and say nothing about the topic.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
from threadpoolctl import threadpool_limits

_SPECIAL = frozenset({"[CLS]", "[SEP]", "[PAD]", "[UNK]"})


def normalise_rows(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


def pack(matrix: np.ndarray) -> bytes:
    """Token rows (n × d floats) as n × d int8 values, each row scaled to ±127. A row's scale is
    not kept: MaxSim compares directions only, and a row's direction survives the rounding."""
    matrix = np.asarray(matrix, dtype=np.float32)
    peaks = np.abs(matrix).max(axis=1, keepdims=True)
    peaks[peaks == 0] = 1.0
    return np.rint(matrix * (127.0 / peaks)).astype(np.int8).tobytes()


def unpack(data: bytes, dims: int) -> np.ndarray:
    """The L2-normalised token rows `pack` stored (d = `dims`)."""
    if len(data) % dims:
        raise ValueError(f"{len(data)} bytes are not whole token rows of {dims} dimensions")
    return normalise_rows(np.frombuffer(data, dtype=np.int8).reshape(-1, dims))


def content_positions(tokens: Sequence[str]) -> list[int]:
    """Positions of the word pieces that carry a letter or digit (not [CLS], [SEP], [UNK],
    punctuation)."""
    return [
        position
        for position, token in enumerate(tokens)
        if token not in _SPECIAL and any(ch.isalnum() for ch in token)
    ]


def maxsim(query: np.ndarray, document: np.ndarray) -> float:
    """Mean over the query's tokens of the best cosine with any of the document's tokens (rows
    L2-normalised); 0 when either side has no tokens."""
    if not len(query) or not len(document):
        return 0.0
    return float((query @ document.T).max(axis=1).mean())


@functools.cache
def _one_blas_thread() -> None:
    """numpy's OpenBLAS on one thread in this process: its pool, waking beside the models' and
    PostgreSQL's on two cores, stalled one product in ten by 10–15 ms (a head's product is a few
    million multiplications: one thread does it in well under a millisecond)."""
    threadpool_limits(limits=1, user_api="blas")


def maxsim_packed(query: np.ndarray, documents: Sequence[bytes], dims: int) -> list[float]:
    """`maxsim` of the query against each packed document, in one product over all their tokens
    (a rerank head of 20 memories: ~2,000 token rows)."""
    if not len(documents):
        return []
    counts = [len(data) // dims for data in documents]
    for data, count in zip(documents, counts, strict=True):
        if len(data) != count * dims:
            raise ValueError(f"{len(data)} bytes are not whole token rows of {dims} dimensions")
    if not len(query):
        return [0.0] * len(documents)
    rows = np.frombuffer(b"".join(documents), dtype=np.int8).reshape(-1, dims).astype(np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    norms[norms == 0] = 1.0
    _one_blas_thread()
    similarities = (np.ascontiguousarray(query, dtype=np.float32) @ rows.T) / norms
    starts = np.cumsum([0, *counts[:-1]])
    present = [i for i, count in enumerate(counts) if count]
    best = np.maximum.reduceat(similarities, starts[present], axis=1) if present else None
    scores = [0.0] * len(documents)
    for column, i in enumerate(present):
        scores[i] = float(best[:, column].mean())
    return scores
