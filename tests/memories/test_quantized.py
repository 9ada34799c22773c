"""Int8 copies of the local models' graphs for queries: made once from the float graph and kept,
checked against torch's kept probe answer, close to the float vectors, and left unused (the float
graph answers) when they drift or are switched off."""

from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest

from apps.memories.embedding import onnx_runtime, precision, providers, quantized

QUERIES = [
    "the schema tool refuses to run because two teammates each added a change file",
    "QuerySet.iterator() chunk_size with prefetch_related",
    "x",
]


@pytest.fixture
def minilm_graph(settings, tmp_path):
    """The float MiniLM graph and its kept probe answer, copied to a directory of their own."""
    settings.EMBEDDING_LOCAL_RUNTIME = "onnx"
    encoder = providers.local_encoder()
    assert encoder is not None
    graph = tmp_path / encoder.path.name
    shutil.copy(encoder.path, graph)
    shutil.copy(onnx_runtime.probe_path(encoder.path), onnx_runtime.probe_path(graph))
    return graph, encoder.tokenizer


def test_a_copy_is_made_once_beside_the_float_graph_and_kept(minilm_graph, monkeypatch):
    graph, tokenizer = minilm_graph
    first = quantized.load(graph, "minilm", 1, tokenizer)
    assert first is not None and first.path == quantized.path_for(graph) and first.path.parent == graph.parent
    assert first.path.stat().st_size < graph.stat().st_size / 1.5  # int8 weights
    assert not list(graph.parent.glob("*.part"))

    def made_again(*args, **kwargs):
        raise AssertionError("the kept copy is quantized again")

    monkeypatch.setattr(quantized, "make", made_again)
    again = quantized.load(graph, "minilm", 1, tokenizer)
    assert again is not None and again.path == first.path


def test_a_copy_that_drifts_from_torch_is_not_used(minilm_graph, monkeypatch, caplog):
    graph, tokenizer = minilm_graph
    monkeypatch.setattr(quantized, "MIN_PROBE_COSINE", 0.99999)  # no int8 copy comes this close
    with caplog.at_level(logging.WARNING):
        assert quantized.load(graph, "minilm", 1, tokenizer) is None
    assert "drifts from torch" in caplog.text


def test_without_a_kept_probe_answer_there_is_no_copy(minilm_graph):
    graph, tokenizer = minilm_graph
    onnx_runtime.probe_path(graph).unlink()
    assert quantized.load(graph, "minilm", 1, tokenizer) is None
    assert not quantized.path_for(graph).exists()


def test_a_damaged_float_graph_gives_no_copy_and_no_error(minilm_graph):
    graph, tokenizer = minilm_graph
    graph.write_bytes(b"not a graph")
    assert quantized.load(graph, "minilm", 1, tokenizer) is None
    assert not quantized.path_for(graph).exists() and not list(graph.parent.glob("*.part"))


def test_the_precision_model_embeds_queries_with_its_int8_copy_and_memories_with_the_float_graph(
    real_embeddings, settings
):
    settings.PRECISION_QUERY_INT8 = True
    _, for_queries = precision.loaded(queries=True)
    _, for_memories = precision.loaded()
    assert for_queries is not None and quantized.RECIPE in for_queries.path.name
    assert for_memories is not None and quantized.RECIPE not in for_memories.path.name
    fast = precision.LocalMPNet(queries=True).embed(QUERIES)
    exact = precision.LocalMPNet().embed(QUERIES)
    cosines = (fast * exact).sum(axis=1)
    assert np.allclose(np.linalg.norm(fast, axis=1), 1.0, atol=1e-5)
    assert cosines.min() > 0.97 and not np.allclose(fast, exact)  # close, and not the float graph


def test_switched_off_queries_are_embedded_by_the_float_graph(real_embeddings, settings):
    settings.PRECISION_QUERY_INT8 = False
    _, for_queries = precision.loaded(queries=True)
    assert for_queries is precision.loaded()[1]
    exact = precision.LocalMPNet().embed(QUERIES[:1])
    assert np.allclose(precision.LocalMPNet(queries=True).embed(QUERIES[:1]), exact, atol=1e-6)
