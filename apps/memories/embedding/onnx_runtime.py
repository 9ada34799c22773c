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
"""

from __future__ import annotations

import copy
import hashlib
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


class OnnxEncoder:
    """The transformer's last hidden state for tokenized input, from an ONNX graph."""

    def __init__(self, path: Path, threads: int) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        # No memory arena: it keeps a batch's peak for good (one batch of 32 texts of 256 pieces
        # left a session at 687 MB against 175 without it, in every web and worker process),
        # and a query takes the same time without it.
        options.enable_cpu_mem_arena = False
        self.path = path
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def hidden(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        feed = {"input_ids": input_ids.astype(np.int64), "attention_mask": attention_mask.astype(np.int64)}
        return self.session.run(None, feed)[0]


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


def agrees(encoder: OnnxEncoder, model) -> bool:
    """Whether the graph gives torch's hidden states for the padded probe batch."""
    import torch

    features = model.preprocess(PROBE)
    with torch.inference_mode():
        expected = (
            model[0]
            .auto_model(input_ids=features["input_ids"], attention_mask=features["attention_mask"])
            .last_hidden_state.numpy()
        )
    got = encoder.hidden(features["input_ids"].numpy(), features["attention_mask"].numpy())
    mask = features["attention_mask"].numpy().astype(bool)  # padded positions may differ
    return got.shape == expected.shape and float(np.abs(got[mask] - expected[mask]).max()) <= TOLERANCE


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
                return encoder
            logger.warning("the %s ONNX graph %s disagrees with torch", attempt, path)
        except Exception:
            logger.warning("the %s ONNX graph %s could not be used", attempt, path, exc_info=True)
    logger.warning("the local model %s runs on torch (slower): no usable ONNX graph", name)
    return None
