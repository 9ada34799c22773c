"""The local model on ONNX Runtime: the same vectors and token embeddings as on torch, a graph
traced once and kept, and torch kept whenever no graph agrees with it."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import torch
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError

from apps.memories.checks import embedding_settings
from apps.memories.embedding import onnx_runtime, providers
from apps.memories.embedding.providers import LocalMiniLM

TEXTS = [
    "Deploys rotate the cache key prefix; warm the cache before switching traffic.",
    "x",  # pads to the longest text of its batch
    "",
    "  QuerySet.iterator(chunk_size=2000) streams through a server-side cursor  ",
    "缓存键在每次部署时都会改变 🚀",
    "select_for_update() " * 200,  # past the model's 256 word pieces: cut as on torch
]


def _model():
    return providers._sentence_transformer()


def _hidden(model, texts):
    features = model.preprocess(texts)
    with torch.inference_mode():
        return (
            model[0]
            .auto_model(input_ids=features["input_ids"], attention_mask=features["attention_mask"])
            .last_hidden_state.numpy()
        )


@pytest.fixture
def onnx_dir(settings, tmp_path):
    settings.EMBEDDING_ONNX_DIR = str(tmp_path)
    settings.EMBEDDING_LOCAL_RUNTIME = "onnx"
    yield tmp_path
    providers._onnx_encoder.cache_clear()  # (each session holds its graph, ~90 MB)


def test_onnx_runtime_gives_the_vectors_and_token_embeddings_torch_gives(settings, onnx_dir):
    provider = LocalMiniLM()
    on_onnx = (
        provider.embed(TEXTS),
        provider.embed_with_tokens(TEXTS),
        provider.embed_with_tokens(TEXTS, query=True),
    )
    encoder = providers.local_encoder()
    assert isinstance(encoder, onnx_runtime.OnnxEncoder)  # the comparison is not torch with itself
    assert list(onnx_dir.glob("minilm-*.onnx")) == [encoder.path]
    assert encoder.session.get_session_options().enable_cpu_mem_arena is False
    # ... and what sentence-transformers itself makes of the texts, as vectors were stored before
    encoded = _model().encode(TEXTS, normalize_embeddings=True, show_progress_bar=False)
    assert np.abs(on_onnx[0] - encoded).max() < 1e-5

    settings.EMBEDDING_LOCAL_RUNTIME = "torch"
    on_torch = (
        provider.embed(TEXTS),
        provider.embed_with_tokens(TEXTS),
        provider.embed_with_tokens(TEXTS, query=True),
    )

    assert on_onnx[0].shape == (len(TEXTS), 384)
    assert np.abs(on_onnx[0] - on_torch[0]).max() < 1e-5
    assert np.allclose(np.linalg.norm(on_onnx[0], axis=1), 1.0, atol=1e-5)
    for (vectors, tokens), (torch_vectors, torch_tokens) in zip(on_onnx[1:], on_torch[1:], strict=True):
        assert np.abs(vectors - torch_vectors).max() < 1e-5
        assert [t.shape for t in tokens] == [t.shape for t in torch_tokens]
        assert (
            max(float(np.abs(a - b).max()) for a, b in zip(tokens, torch_tokens, strict=True) if a.size)
            < 1e-5
        )
    assert on_onnx[1][1][-1].shape == (254, 384)  # 256 pieces less [CLS] and [SEP]


def test_tracing_leaves_the_process_model_answering_as_before(tmp_path):
    model = _model()
    before = _hidden(model, onnx_runtime.PROBE)
    abandoned, writing = tmp_path / "graph.onnx1234.part", tmp_path / "graph.onnx5678.part"
    foreign = tmp_path / "download.part"  # (not a trace: not this module's to remove)
    for part in (abandoned, writing, foreign):
        part.write_bytes(b"partial")
    for part in (abandoned, foreign):
        os.utime(part, (time.time() - 7200, time.time() - 7200))
    onnx_runtime.export(model, tmp_path / "graph.onnx")
    assert np.array_equal(_hidden(model, onnx_runtime.PROBE), before)
    # no part file of its own left behind, an abandoned trace removed, one in progress kept
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "download.part",
        "graph.onnx",
        "graph.onnx5678.part",
    ]


def test_threads_that_first_embed_together_trace_the_graph_once(settings, onnx_dir, monkeypatch):
    traced, trace = [], onnx_runtime.export
    monkeypatch.setattr(onnx_runtime, "export", lambda model, path: traced.append(path) or trace(model, path))
    start, results = threading.Barrier(4), []

    def first_embed():
        start.wait()
        results.append(LocalMiniLM().embed(TEXTS[:2]))

    threads = [threading.Thread(target=first_embed) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(traced) == 1 and len(results) == 4
    assert isinstance(providers.local_encoder(), onnx_runtime.OnnxEncoder)
    assert all(np.array_equal(result, results[0]) for result in results)


def test_a_kept_graph_is_loaded_and_a_damaged_one_traced_again(tmp_path, monkeypatch):
    model, model_dir = _model(), providers._model_dir()
    first = onnx_runtime.load(model, model_dir, tmp_path, 1)
    assert first is not None
    traced, trace = [], onnx_runtime.export
    monkeypatch.setattr(onnx_runtime, "export", lambda model, path: traced.append(path) or trace(model, path))
    assert onnx_runtime.load(model, model_dir, tmp_path, 1) is not None
    assert traced == []  # the kept graph, not a new trace

    first.path.write_bytes(b"not an onnx graph")
    again = onnx_runtime.load(model, model_dir, tmp_path, 1)
    assert again is not None and len(traced) == 1
    assert again.path.stat().st_size > 10_000_000
    assert onnx_runtime.agrees(again, model)


def test_torch_is_kept_when_no_graph_agrees_with_it(settings, onnx_dir, monkeypatch, caplog):
    monkeypatch.setattr(onnx_runtime, "agrees", lambda encoder, model: False)
    with caplog.at_level(logging.WARNING, logger="apps.memories.embedding.onnx_runtime"):
        encoder = providers.local_encoder()
    assert encoder is None
    assert "disagrees with torch" in caplog.text and "runs on torch" in caplog.text

    settings.EMBEDDING_TORCH_THREADS = 1
    vectors = LocalMiniLM().embed(TEXTS[:2])  # on torch, through the cached None
    settings.EMBEDDING_LOCAL_RUNTIME = "torch"
    assert np.abs(vectors - LocalMiniLM().embed(TEXTS[:2])).max() < 1e-6


def test_an_unknown_runtime_or_provider_is_a_configuration_error_found_at_start(settings):
    with pytest.raises(ValueError, match="EMBEDDING_LOCAL_RUNTIME must be onnx or torch"):
        providers.local_encoder("tensorrt")
    assert embedding_settings(None) == []
    settings.EMBEDDING_LOCAL_RUNTIME, settings.EMBEDDING_PROVIDER = "", "cohere"
    assert [error.id for error in embedding_settings(None)] == ["memories.E001"]
    settings.EMBEDDING_PROVIDER = "openai"  # the local model's runtime is not used
    assert embedding_settings(None) == []
    settings.EMBEDDING_PROVIDER = "local"
    assert [error.id for error in embedding_settings(None)] == ["memories.E002"]
    with pytest.raises(SystemCheckError, match="EMBEDDING_LOCAL_RUNTIME is ''"):
        call_command("check")


def test_bench_embed_prints_both_runtimes_and_how_far_apart_they_are(onnx_dir, capsys):
    call_command("bench_embed", "--rounds", "1", "--json")
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["queries"] == 45 and figures["memories"] == 120
    for key in (
        "torch_query_p50_ms",
        "onnx_query_p50_ms",
        "onnx_query_p95_ms",
        "torch_batch_s",
        "onnx_batch_s",
    ):
        assert figures[key] > 0
    assert figures["query_p50_ratio"] == round(
        figures["torch_query_p50_ms"] / figures["onnx_query_p50_ms"], 2
    )
    assert figures["max_vector_difference"] < 1e-5 and figures["max_token_difference"] < 1e-5
    assert "precision_query_p50_ms" not in figures  # (the hashing provider: no precision model)
    with pytest.raises(CommandError, match="--rounds must be at least 1"):
        call_command("bench_embed", "--rounds", "0")


def test_prepare_embeddings_traces_the_graph_ahead_of_first_use(settings, onnx_dir, capsys, monkeypatch):
    call_command("prepare_embeddings")
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["runtime"] == "onnx" and summary["graph"].startswith(str(onnx_dir))
    assert [str(p) for p in onnx_dir.glob("minilm-*.onnx")] == [summary["graph"]]

    settings.EMBEDDING_ONNX_DIR = str(onnx_dir / "other")
    monkeypatch.setattr(onnx_runtime, "agrees", lambda encoder, model: False)
    with pytest.raises(CommandError, match="No ONNX graph agrees with torch"):
        call_command("prepare_embeddings")


# ---------------------------------------------------------------- processes without torch

_CHILD = """
import json, sys
import django
django.setup()
loaded = lambda: sorted(m for m in ("torch", "transformers", "sentence_transformers", "onnxruntime")
                        if m in sys.modules)
if sys.argv[1] == "embed":
    from apps.memories.embedding import precision
    from apps.memories.embedding.providers import LocalMiniLM
    vectors, tokens = LocalMiniLM().embed_with_tokens([sys.argv[2]], query=True)
    second = precision.LocalMPNet().embed([sys.argv[2]])
    print(json.dumps({"loaded": loaded(), "vector": vectors[0].tolist(), "tokens": tokens[0].tolist(),
                      "second": second[0].tolist()}))
else:  # what a worker loads to run any task, and the URLs a web process serves
    import importlib
    import memorysaas.urls
    from django.apps import apps
    for config in apps.get_app_configs():
        if config.name.startswith("apps."):
            try:
                importlib.import_module(f"{config.name}.tasks")
            except ModuleNotFoundError as error:
                if error.name != f"{config.name}.tasks":
                    raise
    print(json.dumps({"loaded": loaded()}))
"""


def _child(*args: str, onnx_dir, warm: bool = False) -> dict:
    from tests.processes import database_url

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memorysaas.settings.test",
        "DATABASE_URL": database_url(),
        "EMBEDDING_PROVIDER": "local",
        "EMBEDDING_LOCAL_RUNTIME": "onnx",
        "EMBEDDING_ONNX_DIR": str(onnx_dir),
        "MODELS_WARM_AT_START": "1" if warm else "0",
    }
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.django_db
def test_a_process_that_finds_the_kept_graphs_embeds_without_torch(settings, onnx_dir):
    from apps.memories.embedding import precision

    settings.EMBEDDING_PROVIDER = "local"
    text = "Deploys rotate the cache key prefix; warm the cache before switching traffic."
    vectors, tokens = LocalMiniLM().embed_with_tokens([text], query=True)  # traced and checked here
    second = precision.LocalMPNet().embed([text])
    assert sorted(p.name.split("-")[0] for p in onnx_dir.glob("*.probe.npz")) == ["minilm", "mpnet"]

    child = _child("embed", text, onnx_dir=onnx_dir)

    assert child["loaded"] == ["onnxruntime"]  # no torch, transformers or sentence-transformers
    assert np.abs(np.array(child["vector"]) - vectors[0]).max() < 1e-6
    assert np.abs(np.array(child["tokens"]) - tokens[0]).max() < 1e-6
    assert np.abs(np.array(child["second"]) - second[0]).max() < 1e-6


@pytest.mark.django_db
def test_a_process_that_never_embeds_loads_no_model(onnx_dir):
    assert _child("worker", onnx_dir=onnx_dir)["loaded"] == []


def test_a_kept_graph_whose_kept_answer_disagrees_is_checked_on_torch_again(onnx_dir):
    model_dir = providers._model_dir()
    first = onnx_runtime.load(_model(), model_dir, onnx_dir, 1)
    assert first is not None and onnx_runtime.load_kept(model_dir, onnx_dir, 1) is not None
    probe = onnx_runtime.probe_path(first.path)
    with np.load(probe) as kept:
        wrong = {key: kept[key] for key in kept.files}
    wrong["hidden"] = wrong["hidden"] + 0.01
    np.savez(probe, **wrong)

    assert onnx_runtime.load_kept(model_dir, onnx_dir, 1) is None
    assert onnx_runtime.load(_model(), model_dir, onnx_dir, 1) is not None  # (torch writes it anew)
    assert onnx_runtime.load_kept(model_dir, onnx_dir, 1) is not None
