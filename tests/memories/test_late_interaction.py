"""Late interaction: token embeddings stored with the vector, MaxSim in the local rerank."""

from __future__ import annotations

import json
from io import StringIO

import numpy as np
import pytest
from django.core.management import call_command

from apps.memories.embedding import providers
from apps.memories.embedding.providers import (
    LocalMiniLM,
    embed_cached,
    embed_cached_with_tokens,
    get_provider,
)
from apps.memories.models import EmbeddingCache, MemoryTokens
from apps.memories.search import NO_HYDE, SearchRequest, Stages, fusion, late_interaction, search
from apps.memories.services import embedding_text, memory_delete, memory_update
from tests.memories.factories import make_memory

MINILM = "sentence-transformers/all-MiniLM-L6-v2"

# ---------------------------------------------------------------- on plain data


def test_packed_tokens_come_back_as_the_same_unit_rows():
    rows = np.random.default_rng(7).normal(size=(37, 384)).astype(np.float32)
    data = late_interaction.pack(rows)
    assert len(data) == 37 * 384  # one signed byte a dimension
    back = late_interaction.unpack(data, 384)
    assert back.shape == (37, 384)
    expected = late_interaction.normalise_rows(rows)
    assert np.allclose(np.linalg.norm(back, axis=1), 1.0, atol=1e-5)
    assert float(np.min(np.sum(back * expected, axis=1))) > 0.999


def test_unpacking_bytes_that_are_not_whole_rows_is_refused():
    with pytest.raises(ValueError, match="not whole token rows"):
        late_interaction.unpack(late_interaction.pack(np.ones((2, 8)))[:-1], 8)


def test_maxsim_over_packed_documents_matches_it_over_float_rows():
    rng = np.random.default_rng(3)
    query = late_interaction.normalise_rows(rng.normal(size=(6, 32)))
    documents = [rng.normal(size=(n, 32)) for n in (5, 1, 12)]
    packed = [late_interaction.pack(documents[0]), b"", *(late_interaction.pack(d) for d in documents[1:])]
    scores = late_interaction.maxsim_packed(query, packed, 32)
    expected = [late_interaction.maxsim(query, late_interaction.normalise_rows(d)) for d in documents]
    expected.insert(1, 0.0)  # a memory without tokens scores nothing
    assert scores == pytest.approx(expected, abs=2e-3)
    assert late_interaction.maxsim_packed(query, [], 32) == []
    with pytest.raises(ValueError, match="not whole token rows"):
        late_interaction.maxsim_packed(query, [packed[0][:-3]], 32)


def test_only_word_pieces_with_a_letter_or_digit_are_query_tokens():
    pieces = ["[CLS]", "select", "_", "for", "##_", "update", "(", ")", "—", "e108", "[SEP]"]
    assert late_interaction.content_positions(pieces) == [1, 3, 5, 9]


def test_maxsim_is_the_mean_best_match_of_each_query_token():
    a, b, c = np.eye(3, dtype=np.float32)
    assert late_interaction.maxsim(np.stack([a, b]), np.stack([b, a, c])) == pytest.approx(1.0)
    assert late_interaction.maxsim(np.stack([a, b]), np.stack([a, c])) == pytest.approx(0.5)
    assert late_interaction.maxsim(np.zeros((0, 3)), np.stack([a])) == 0.0


def test_late_interaction_replaces_half_the_cosine_in_the_local_rerank():
    ahead = fusion.RerankInput("a", score=0.60, cosine=0.50, late_interaction=0.50, cosine_worth=1.0)
    closer = fusion.RerankInput("b", score=0.55, cosine=0.45, late_interaction=0.75, cosine_worth=1.0)
    ranked = fusion.local_precision_rerank([ahead, closer], keep=2)
    assert [i for i, _ in ranked] == ["b", "a"]
    assert dict(ranked)["b"] == pytest.approx(0.55 + 0.5 * (0.75 - 0.45))
    # Without stored tokens (or a cosine) the stage-3 order stands.
    unknown = fusion.RerankInput("b", score=0.55, cosine=0.45, late_interaction=None, cosine_worth=1.0)
    assert [i for i, _ in fusion.local_precision_rerank([ahead, unknown], keep=2)] == ["a", "b"]


# ---------------------------------------------------------------- stored with the vector


def _token_count(text: str) -> int:
    return len(providers._model().tokenizer(text, truncation=True, max_length=256)["input_ids"]) - 2


@pytest.mark.django_db
def test_embedding_a_memory_stores_its_token_embeddings_with_the_vector(alice, real_embeddings):
    memory = make_memory(alice, content="QuerySet.iterator() after prefetch_related() needs a chunk_size.")
    stored = MemoryTokens.objects.get(memory=memory)
    assert stored.model_id == MINILM
    tokens = late_interaction.unpack(bytes(stored.data), 384)
    assert len(tokens) == _token_count(embedding_text(memory))
    # The cache keeps them beside the vector, so unchanged text is not embedded again.
    assert EmbeddingCache.objects.exclude(tokens=None).filter(model_id=MINILM).count() == 1


@pytest.mark.django_db
def test_a_content_change_rewrites_the_tokens_and_deletion_removes_them(alice, real_embeddings):
    memory = make_memory(alice, content="The paginator clamps a page number past the end.")
    before = bytes(MemoryTokens.objects.get(memory=memory).data)
    memory_update(memory=memory, actor=alice.principal, changes={"content": "Admin search ANDs the words."})
    after = bytes(MemoryTokens.objects.get(memory=memory).data)
    assert after != before
    memory_delete(memory=memory, actor=alice.principal)
    assert not MemoryTokens.objects.filter(memory_id=memory.id).exists()


@pytest.mark.django_db
def test_unchanged_text_takes_vector_and_tokens_from_the_cache(real_embeddings, monkeypatch):
    texts = ["Durable atomic blocks cannot nest.", "select_for_update needs a transaction."]
    first_vectors, first_tokens = embed_cached_with_tokens(texts)
    calls = []
    monkeypatch.setattr(LocalMiniLM, "embed_with_tokens", lambda self, t, **k: calls.append(t))
    vectors, tokens = embed_cached_with_tokens(texts)
    assert calls == []
    assert np.allclose(vectors, first_vectors, atol=1e-6) and tokens == first_tokens


@pytest.mark.django_db
def test_a_cached_vector_without_tokens_is_embedded_again_and_completed(real_embeddings):
    text = "GeneratedField values are refreshed from the database only after refresh_from_db()."
    embed_cached([text])  # the observer's novelty check caches vectors alone
    assert EmbeddingCache.objects.get().tokens is None
    _, tokens = embed_cached_with_tokens([text])
    assert tokens[0] is not None and bytes(EmbeddingCache.objects.get().tokens) == tokens[0]


@pytest.mark.django_db
def test_a_provider_without_token_embeddings_stores_none_and_drops_other_models_tokens(
    alice, real_embeddings, settings
):
    memory = make_memory(alice, content="ManagementForm data is missing or has been tampered with.")
    assert MemoryTokens.objects.filter(memory=memory).exists()
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384
    out = StringIO()
    call_command("reembed", stdout=out)
    assert json.loads(out.getvalue())["embedded"] == 1
    assert not MemoryTokens.objects.filter(memory=memory).exists()
    hits = search(
        SearchRequest(principal=alice.principal, project=alice.project, query="ManagementForm tampered")
    ).hits
    assert hits and hits[0].components["late_interaction"] is None


@pytest.mark.django_db
def test_reembed_gives_memories_without_tokens_their_tokens(alice, real_embeddings):
    memory = make_memory(alice, content="bulk_update returns the number of rows matched.")
    MemoryTokens.objects.filter(memory=memory).delete()
    out = StringIO()
    call_command("reembed", stdout=out)
    assert json.loads(out.getvalue())["selected"] == 1
    assert MemoryTokens.objects.filter(memory=memory, model_id=MINILM).exists()
    call_command("reembed", stdout=(again := StringIO()))
    assert json.loads(again.getvalue())["selected"] == 0


# ---------------------------------------------------------------- in the search


@pytest.mark.django_db
def test_the_local_rerank_reports_maxsim_and_blends_it_into_the_score(alice, real_embeddings, settings):
    settings.PRECISION_MODEL = "none"  # MaxSim alone (test_precision.py: with the second model)
    on_topic = make_memory(
        alice,
        content="QuerySet.iterator() with prefetch_related() raises ValueError unless chunk_size is given.",
    )
    off_topic = make_memory(alice, content="list_display entries may follow '__' lookups since Django 5.1.")
    result = search(
        SearchRequest(
            principal=alice.principal,
            project=alice.project,
            query="streaming a big queryset in batches while prefetching related rows",
        ),
        NO_HYDE,
    )
    assert result.query_kind == "semantic" and result.reranker == "local"
    parts = {hit.memory.id: hit.components for hit in result.hits}
    assert parts[on_topic.id]["late_interaction"] > parts[off_topic.id]["late_interaction"] > 0
    for c in parts.values():  # no identifiers in the query: the rerank is the score plus the blend
        prior = fusion.prior(c["phase_weight"] * c["source_trust"] * c["confidence"] * c["dispute"])
        blend = fusion.LATE_INTERACTION_SHARE * prior * (c["late_interaction"] - c["cosine"])
        assert c["rerank"] == pytest.approx(c["score"] + blend, abs=1e-5)
    assert [hit.memory.id for hit in result.hits][0] == on_topic.id


@pytest.mark.django_db
def test_a_search_without_the_rerank_has_no_late_interaction(alice, real_embeddings):
    make_memory(alice, content="A durable atomic block cannot be nested within another atomic block.")
    result = search(
        SearchRequest(principal=alice.principal, project=alice.project, query="nested durable atomic"),
        Stages(rerank=False),
    )
    assert get_provider().late_interaction
    assert result.hits and result.hits[0].components["late_interaction"] is None


def test_a_head_memory_without_tokens_gets_the_heads_mean_gap_not_a_penalty():
    with_tokens = [
        fusion.RerankInput("a", score=0.60, cosine=0.50, late_interaction=0.60, cosine_worth=1.0),
        fusion.RerankInput("b", score=0.50, cosine=0.40, late_interaction=0.46, cosine_worth=1.0),
    ]
    older = fusion.RerankInput("c", score=0.58, cosine=0.48, late_interaction=None, cosine_worth=1.0)
    ranked = dict(fusion.local_precision_rerank([*with_tokens, older], keep=3))
    assert ranked["c"] == pytest.approx(0.58 + 0.5 * (0.10 + 0.06) / 2)
    # With no tokens in the whole head there is nothing to blend.
    alone = fusion.local_precision_rerank([fusion.RerankInput("c", 0.58, cosine=0.48)], keep=1)
    assert alone == [("c", pytest.approx(0.58))]


@pytest.mark.django_db
def test_a_query_with_no_word_piece_leaves_the_scores_alone(alice, real_embeddings):
    make_memory(alice, content="Paginator.page() raises EmptyPage past the last page (?!).")
    result = search(SearchRequest(principal=alice.principal, project=alice.project, query="?!"), NO_HYDE)
    assert result.hits
    for hit in result.hits:
        assert hit.components["late_interaction"] is None
        assert hit.components["rerank"] == pytest.approx(hit.components["score"], abs=1e-6)


@pytest.mark.django_db
def test_a_keyword_only_search_reads_no_tokens(alice, real_embeddings):
    make_memory(alice, content="select_for_update() outside atomic() raises TransactionManagementError.")
    result = search(
        SearchRequest(principal=alice.principal, project=alice.project, query="select_for_update"),
        Stages(paths=("keyword",)),
    )
    assert result.hits and result.hits[0].components["cosine"] is None
    assert result.hits[0].components["late_interaction"] is None


@pytest.mark.django_db
def test_hydes_second_pass_averages_the_maxsim_of_query_and_hypothetical(alice, real_embeddings, fake_openai):
    from apps.memories.embedding.providers import query_tokens

    pager = make_memory(alice, content="The paginator raises EmptyPage for pages past the end of the list.")
    make_memory(alice, content="Cache keys are versioned per deploy.")
    question, answer = "asking for a page beyond the last one", "Paginator.page() raises EmptyPage."
    fake_openai.answer = answer
    result = search(SearchRequest(principal=alice.principal, project=alice.project, query=question, limit=3))
    assert result.hyde["ran"]
    stored = late_interaction.unpack(bytes(MemoryTokens.objects.get(memory=pager).data), 384)
    expected = (
        late_interaction.maxsim(query_tokens(question), stored)
        + late_interaction.maxsim(query_tokens(answer), stored)
    ) / 2
    (hit,) = [h for h in result.hits if h.memory.id == pager.id]
    assert hit.components["late_interaction"] == pytest.approx(expected, abs=1e-5)
