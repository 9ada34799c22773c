"""Int8 copies of a local model's ONNX graph, for queries only.

A query not seen before waits for the precision model's forward pass, the longest step of a cold
search. ONNX Runtime's dynamic quantization (int8 weights, activations quantized per run) makes
that pass about three times cheaper on CPU cores with int8 dot-product instructions. Only
queries use the copy: memories keep the float graph's vectors, so nothing stored changes, and a
query's int8 vector is compared with them as the float one was (the copy keeps the cosines to
the float vectors within a few thousandths; README, benchmarks).

The copy is made from the float graph already on disk (onnxruntime.quantization, seconds, no
download), kept beside it named by the recipe below and ONNX Runtime's version, and checked
before use against torch's answer to the probe that the float graph keeps
(onnx_runtime.probe_path): a copy whose pooled vectors drift from torch's is not used, and the
caller keeps the float graph.

What is quantized: the matrix products with a weight operand, each weight with a scale per
output channel. Some of them stay in float32: in all-mpnet-base-v2 the feed-forward output
layers of the middle and upper blocks (6 to 10) read activations with large outliers, which
one per-tensor scale cannot hold; quantized, they alone moved the pooled vectors by a tenth.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from importlib import metadata
from pathlib import Path

import numpy as np

from apps.memories.embedding import onnx_runtime

logger = logging.getLogger(__name__)

RECIPE = "int8pc1"  # named in the file: a change of recipe makes a new copy
# The pooled cosine to torch's on each probe text a usable copy keeps (a sound copy of either
# model keeps > 0.97; one with the outlier layers quantized falls under 0.91).
MIN_PROBE_COSINE = 0.95
# Per model: the weight products kept in float32 (node names as torch's exporter writes them).
KEEP_FLOAT = {
    "mpnet": re.compile(r"/encoder/layer\.(6|7|8|9|10)/output/dense/MatMul$"),
    "minilm": None,
}


def path_for(graph: Path) -> Path:
    """Where the int8 copy of `graph` lives (beside it)."""
    version = metadata.version("onnxruntime")
    return graph.with_name(f"{graph.name.removesuffix('.onnx')}.{RECIPE}-ort{version}.onnx")


def _float_nodes(graph: Path, keep: re.Pattern[str] | None) -> list[str]:
    import onnx

    if keep is None:
        return []
    model = onnx.load(str(graph), load_external_data=False)
    return [node.name for node in model.graph.node if node.op_type == "MatMul" and keep.search(node.name)]


def _not_preprocessing_advice(record: logging.LogRecord) -> bool:
    # (the quantizer advises shape inference first, for static quantization's calibration: a
    # dynamic quantization of a traced graph has no use for it)
    return "pre-processing before quantization" not in record.getMessage()


def make(graph: Path, target: Path, keep: re.Pattern[str] | None) -> None:
    """Quantize `graph` into `target` (written whole or not at all)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    handle, temporary = tempfile.mkstemp(dir=graph.parent, prefix=target.name, suffix=".part")
    os.close(handle)
    logging.getLogger().addFilter(_not_preprocessing_advice)  # (it logs on the root logger)
    try:
        quantize_dynamic(
            str(graph),
            temporary,
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul"],
            nodes_to_exclude=_float_nodes(graph, keep),
            # (a product of two activations, attention's, keeps float: quantizing it per run
            # costs more than it saves on short texts)
            extra_options={"MatMulConstBOnly": True},
        )
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    finally:
        logging.getLogger().removeFilter(_not_preprocessing_advice)
        if os.path.exists(temporary):
            os.unlink(temporary)


def probe_cosines(encoder: onnx_runtime.OnnxEncoder, probe: dict[str, np.ndarray]) -> list[float]:
    """The cosine of the encoder's mean-pooled vector with torch's, for each probe text."""
    got = encoder.hidden(probe["input_ids"], probe["attention_mask"])
    cosines = []
    for row, expected, mask in zip(got, probe["hidden"], probe["attention_mask"].astype(bool), strict=True):
        a, b = row[mask].mean(axis=0), expected[mask].mean(axis=0)
        cosines.append(float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b))))
    return cosines


def load(
    graph: Path, name: str, threads: int, tokenizer: onnx_runtime.Tokenizer
) -> onnx_runtime.OnnxEncoder | None:
    """The checked int8 copy of the float `graph` of model `name` (made first where needed), or
    None where it cannot be had or drifts from torch's probe answer (the caller keeps the float
    graph; the reason is logged)."""
    target = path_for(graph)
    probe_file = onnx_runtime.probe_path(graph)
    try:
        if not probe_file.exists():
            logger.warning("no int8 query graph for %s: the float graph has no kept probe answer", name)
            return None
        if not target.exists():
            onnx_runtime.remove_stale_parts(graph.parent, target.name)
            make(graph, target, KEEP_FLOAT.get(name))
        with np.load(probe_file) as kept:
            probe = {key: kept[key] for key in ("input_ids", "attention_mask", "hidden")}
        encoder = onnx_runtime.OnnxEncoder(target, threads)
        cosines = probe_cosines(encoder, probe)
        if min(cosines) < MIN_PROBE_COSINE:
            logger.warning("the int8 query graph %s drifts from torch (probe cosines %s)", target, cosines)
            return None
    except Exception:
        logger.warning("the int8 query graph of %s could not be made or loaded", name, exc_info=True)
        return None
    encoder.tokenizer = tokenizer
    return encoder
