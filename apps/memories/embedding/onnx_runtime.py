"""The local model's transformer run by ONNX Runtime instead of torch: the same weights, the same
numbers (within 1e-6), in about half the time for a query.

A short query through all-MiniLM-L6-v2 is ~0.4 GFLOP; on one thread torch spent most of its
13–19 ms p50 in Python module calls and per-operator dispatch around small matrix products.
ONNX Runtime runs the traced graph in one call: 6–8 ms on the same machine (README, benchmarks).

The graph is traced from the packaged model once (torch.onnx, ~2 s) and kept under
`EMBEDDING_ONNX_DIR`, named by a digest of the weights and of the torch and transformers that
traced it, so a model or library upgrade traces again. Nothing is downloaded. A loaded graph is
checked against torch on a padded probe batch before it is used: a graph that disagrees (a
damaged file, a tracer that baked in a shape) is traced again, and if it still disagrees the
caller keeps torch.

Torch answers the probe once, beside the graph it checked (`<graph>.probe.npz`): a process that
finds both loads the graph and the model's own tokenizer (its tokenizer.json, through the
`tokenizers` library sentence-transformers uses underneath) and checks the graph against that
answer, without importing torch, transformers or sentence-transformers (~1 GB of a process's
memory at rest, and seconds of its start).
"""

from __future__ import annotations

import contextlib
import copy
import ctypes
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
import time
import warnings
from importlib import metadata
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

# Two texts of different lengths: the trace and the check both see a padded batch, so a graph
# that dropped the attention mask cannot pass.
PROBE = ["Deploys rotate the cache key prefix.", "x"]
TOLERANCE = 1e-4  # float32 reorderings differ by ~2e-7; a wrong mask or weight by far more


class Tokenizer:
    """The model's own fast tokenizer, read from its tokenizer.json with the model's word-piece
    limit: the ids sentence-transformers' preprocess gives for one text, without loading it."""

    def __init__(self, model_dir: Path) -> None:
        from tokenizers import Tokenizer as Fast

        config = json.loads((model_dir / "sentence_bert_config.json").read_text())
        self.max_length = int(config["max_seq_length"])
        self.fast = Fast.from_file(str(model_dir / "tokenizer.json"))
        # (the file's own settings pad and cut every text to 128 pieces: the model reads up to
        # max_seq_length, one text at a time here, unpadded)
        self.fast.no_padding()
        self.fast.enable_truncation(max_length=self.max_length)

    def encode(self, text: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """One text's ids and attention mask (batches of one) and its word pieces."""
        encoding = self.fast.encode(text)
        ids = np.asarray([encoding.ids], dtype=np.int64)
        return ids, np.ones_like(ids), list(encoding.tokens)


# glibc's threshold above which an allocation is its own mapping, given back to the system when
# freed. By default it rises with the largest block freed, up to 32 MB, and the heap keeps what a
# long text's activations took for good: a process that embedded a few 384-piece texts held ~200 MB
# more at rest. A fixed threshold keeps it from rising (a short query allocates below it).
_M_MMAP_THRESHOLD = -3
_MAPPED_FROM = 256 * 1024


@functools.cache
def _give_back_large_blocks() -> None:
    # (not glibc: its own allocator's policy stands)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, _MAPPED_FROM)  # (the C library in the process)


class OnnxEncoder:
    """The transformer's last hidden state for tokenized input, from an ONNX graph; `tokenizer`:
    the model's (set by load and load_kept)."""

    tokenizer: Tokenizer | None = None

    def __init__(self, path: Path, threads: int) -> None:
        import onnxruntime

        _give_back_large_blocks()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        # No memory arena: it keeps a batch's peak for good (one batch of 32 texts of 256 pieces
        # left a session at 687 MB against 175 without it, in every web and worker process),
        # and a query takes the same time without it.
        options.enable_cpu_mem_arena = False
        # Threads that wait sleep instead of spinning: a spinning pool takes the core the other
        # model, PostgreSQL or the other process needs (with two threads, spinning doubled a
        # query's CPU time on two busy cores and made it slower, not faster).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.path = path
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def hidden(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": input_ids.astype(np.int64), "attention_mask": attention_mask.astype(np.int64)}
        return self.session.run(None, feed)[0]

    def text_hidden(self, text: str) -> tuple[list[str], list[int], np.ndarray]:
        """One text's word pieces, ids and last hidden state (no padding)."""
        assert self.tokenizer is not None, "load() and load_kept() give an encoder its tokenizer"
        ids, mask, pieces = self.tokenizer.encode(text)
        return pieces, ids[0].tolist(), self.hidden(ids, mask)[0]


def graph_path(model_dir: Path, directory: Path, name: str = "minilm", weights: str = "") -> Path:
    """Where the graph traced from `model_dir`'s weights by this torch and transformers lives
    (`name`: the model's short name, which starts the file's; `weights`: their digest where the
    caller has already checked it, instead of hashing them again)."""
    digest = hashlib.sha256(weights.encode())
    for file in sorted(os.listdir(model_dir)) if not weights else ():
        if file.endswith((".safetensors", ".bin", "config.json")):
            with open(model_dir / file, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
    for package in ("torch", "transformers"):
        digest.update(f"{package}=={metadata.version(package)}".encode())
    return directory / f"{name}-{digest.hexdigest()[:20]}.onnx"


# One trace at a time in a process, whichever model: concurrent torch.onnx exports reset each
# other's global state (providers.py).
_EXPORT_LOCK = threading.Lock()


def export(model, path: Path) -> None:
    """Trace the sentence-transformers model's transformer to `path` (written whole or not at all:
    processes starting together each write their own file and rename it into place)."""
    import torch

    class _Hidden(torch.nn.Module):
        def __init__(self, transformer) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids, attention_mask):
            return self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    features = model.preprocess(PROBE)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_parts(path.parent, path.name.split("-")[0])
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".part")
    os.close(handle)
    try:
        # The tracer warns of every shape it reads as a constant; the check below is the judge.
        with _EXPORT_LOCK, torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                # A copy: tracing leaves the traced module answering differently (seen: hidden
                # states off by up to 4.8), and the process goes on using the original.
                _Hidden(copy.deepcopy(model[0].auto_model).eval()),
                (features["input_ids"], features["attention_mask"]),
                temporary,
                input_names=["input_ids", "attention_mask"],
                output_names=["last_hidden_state"],
                dynamic_axes={
                    "input_ids": {0: "batch", 1: "tokens"},
                    "attention_mask": {0: "batch", 1: "tokens"},
                    "last_hidden_state": {0: "batch", 1: "tokens"},
                },
                opset_version=17,
                dynamo=False,  # the TorchScript tracer: no onnxscript, and BERT has no control flow
            )
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def remove_stale_parts(directory: Path, prefix: str, older_than_seconds: float = 3600) -> None:
    """Work left by a process killed mid-way: part files of traces (~90–440 MB) or directories of
    unpacked models (precision.py), only those named `prefix…part`; a trace or an unpack takes
    seconds, so one an hour old is no other process's work in progress."""
    cutoff = time.time() - older_than_seconds
    for part in directory.glob(f"{prefix}*.part"):
        try:
            if part.stat().st_mtime < cutoff:
                shutil.rmtree(part) if part.is_dir() else part.unlink()
        except OSError:  # another process removed it first
            pass


def torch_probe(model) -> dict[str, np.ndarray]:
    """The padded probe batch as the model tokenizes it, and torch's hidden states for it."""
    import torch

    features = model.preprocess(PROBE)
    with torch.inference_mode():
        expected = (
            model[0]
            .auto_model(input_ids=features["input_ids"], attention_mask=features["attention_mask"])
            .last_hidden_state.numpy()
        )
    return {
        "input_ids": features["input_ids"].numpy(),
        "attention_mask": features["attention_mask"].numpy(),
        "hidden": expected,
    }


def _matches(encoder: OnnxEncoder, probe: dict[str, np.ndarray]) -> bool:
    got = encoder.hidden(probe["input_ids"], probe["attention_mask"])
    expected = probe["hidden"]
    mask = probe["attention_mask"].astype(bool)  # padded positions may differ
    return got.shape == expected.shape and float(np.abs(got[mask] - expected[mask]).max()) <= TOLERANCE


def agrees(encoder: OnnxEncoder, model) -> bool:
    """Whether the graph gives torch's hidden states for the padded probe batch (torch's answer
    is then kept beside the graph, for load_kept)."""
    probe = torch_probe(model)
    if not _matches(encoder, probe):
        return False
    _keep_probe(encoder.path, probe)
    return True


def probe_path(graph: Path) -> Path:
    return graph.with_name(graph.name.removesuffix(".onnx") + ".probe.npz")


def _keep_probe(graph: Path, probe: dict[str, np.ndarray]) -> None:
    """torch's answer to the probe beside the graph (written whole or not at all)."""
    handle, temporary = tempfile.mkstemp(dir=graph.parent, prefix=graph.name, suffix=".part")
    try:
        with os.fdopen(handle, "wb") as out:
            np.savez(out, **probe)
        os.chmod(temporary, 0o644)
        os.replace(temporary, probe_path(graph))
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def _tokenizer_agrees(tokenizer: Tokenizer, probe: dict[str, np.ndarray]) -> bool:
    """Whether the tokenizer gives each probe text the ids the model's preprocess gave it."""
    for text, ids, mask in zip(PROBE, probe["input_ids"], probe["attention_mask"], strict=True):
        if tokenizer.encode(text)[0][0].tolist() != ids[mask.astype(bool)].tolist():
            return False
    return True


def load_kept(
    model_dir: Path, directory: Path, threads: int, name: str = "minilm", weights: str = ""
) -> OnnxEncoder | None:
    """The kept graph of the model in `model_dir`, checked against torch's kept answer to the
    probe, with the model's tokenizer; torch is not imported. None where there is no graph, no
    kept answer, or they disagree (the caller then loads the model on torch: load())."""
    path = graph_path(model_dir, directory, name, weights)
    if not path.exists() or not probe_path(path).exists():
        return None
    try:
        with np.load(probe_path(path)) as kept:
            probe = {key: kept[key] for key in ("input_ids", "attention_mask", "hidden")}
        encoder = OnnxEncoder(path, threads)
        encoder.tokenizer = Tokenizer(model_dir)
        if _matches(encoder, probe) and _tokenizer_agrees(encoder.tokenizer, probe):
            return encoder
        logger.warning("the kept ONNX graph %s disagrees with torch's kept answer", path)
    except Exception:
        logger.warning("the kept ONNX graph %s could not be used without torch", path, exc_info=True)
    return None


def load(
    model, model_dir: Path, directory: Path, threads: int, name: str = "minilm", weights: str = ""
) -> OnnxEncoder | None:
    """The checked ONNX encoder of `model` (traced first where needed), or None where it cannot be
    had; the reason is logged and the caller runs torch. (`name`, `weights`: see graph_path.)"""
    path = graph_path(model_dir, directory, name, weights)
    for attempt in ("kept", "traced") if path.exists() else ("traced",):
        try:
            if attempt == "traced":
                export(model, path)
            encoder = OnnxEncoder(path, threads)
            if agrees(encoder, model):
                encoder.tokenizer = Tokenizer(model_dir)
                return encoder
            logger.warning("the %s ONNX graph %s disagrees with torch", attempt, path)
        except Exception:
            logger.warning("the %s ONNX graph %s could not be used", attempt, path, exc_info=True)
    logger.warning("the local model %s runs on torch (slower): no usable ONNX graph", name)
    return None
