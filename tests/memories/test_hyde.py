"""HyDE through the real `openai` SDK against a fake OpenAI server on 127.0.0.1."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from apps.memories.search import SearchRequest, Stages, hyde, search
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db

PAGER = "The paginator raises EmptyPage for pages past the end of the result list."
QUESTION = "what goes wrong when someone asks for a page beyond the last one"


@pytest.fixture
def memories(alice):
    return {
        "pager": make_memory(alice, type="pattern", content=PAGER, related_files=["core/paginator.py"]),
        "jwt": make_memory(
            alice,
            content="verifyJwt rejects tokens whose clock skew exceeds 30 seconds.",
            related_files=["auth/tokens.ts"],
        ),
        "cache": make_memory(
            alice, content="Cache keys are versioned per deploy.", related_files=["cache.py"]
        ),
    }


def _search(alice, query, *, use_hyde=True, as_of=None):
    request = SearchRequest(
        principal=alice.principal, project=alice.project, query=query, limit=3, as_of=as_of
    )
    return search(request, Stages(hyde=use_hyde))


def _chat_requests(fake):
    return [r for r in fake.requests if r["path"].endswith("/chat/completions")]


def test_combine_is_the_unit_mean():
    q, h = np.array([1.0, 0.0], dtype=np.float32), np.array([0.0, 1.0], dtype=np.float32)
    assert hyde.combine(q, h) == pytest.approx([2**-0.5, 2**-0.5])
    assert hyde.combine(q, -q) == pytest.approx(q)  # degenerate: keep the query


def test_hyde_runs_and_moves_the_dense_query(alice, memories, fake_openai, settings):
    fake_openai.answer = PAGER
    plain = _search(alice, QUESTION, use_hyde=False)
    result = _search(alice, QUESTION)
    assert result.query_kind == "semantic"
    assert result.hyde == {"ran": True, "status": "ran", "hypothetical": PAGER}
    assert result.timings_ms["total"] >= result.timings_ms["first_pass"] + result.timings_ms["hyde"]
    (request,) = _chat_requests(fake_openai)
    assert request["auth"] == "Bearer test-openai-key"
    assert request["model"] == settings.OPENAI_CHAT_MODEL and request["max_tokens"] == hyde.MAX_TOKENS
    assert request["messages"][-1] == {"role": "user", "content": QUESTION}
    pager = str(memories["pager"].id)
    cosine = {str(h.memory.id): h.components["cosine"] for h in result.hits}
    plain_cosine = {str(h.memory.id): h.components["cosine"] for h in plain.hits}
    assert cosine[pager] > plain_cosine[pager] + 0.2
    assert result.rankings["dense"][0] == pager and result.hits[0].memory.id == memories["pager"].id

    again = _search(alice, f"  {QUESTION} ")
    assert again.hyde["status"] == "cached" and again.hyde["ran"]
    assert len(_chat_requests(fake_openai)) == 1  # cached by query text


def test_hydes_second_pass_ranks_as_of_the_moment_asked_for(alice, memories, fake_openai):
    fake_openai.answer = PAGER
    jwt = memories["jwt"]  # (a gotcha decays; a pattern does not)
    later = jwt.created_at + timedelta(days=jwt.decay_half_life_days)
    result = _search(alice, QUESTION, as_of=later)
    assert result.hyde["ran"]
    (hit,) = [h for h in result.hits if h.memory.id == jwt.id]
    assert hit.components["confidence"] == round(jwt.confidence / 2, 4)


def test_one_organizations_cached_answer_is_not_anothers(alice, charlie, memories, fake_openai):
    fake_openai.answer = PAGER
    assert _search(alice, QUESTION).hyde["status"] == "ran"
    elsewhere = search(
        SearchRequest(principal=charlie.principal, project=charlie.project, query=QUESTION, limit=3)
    )
    assert elsewhere.hyde["status"] == "ran"  # not "cached": that would tell charlie what alice asked
    assert len(_chat_requests(fake_openai)) == 2


def test_server_error_falls_back_without_a_5xx(alice, memories, fake_openai, api_client):
    fake_openai.mode = "error"
    url = f"projects/{alice.project.id}/search"
    response = api_client(alice.key).post(url, {"query": QUESTION})
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["hyde"] == {"ran": False, "status": "failed", "hypothetical": None}
    assert "hyde" in body["timings_ms"]
    plain = _search(alice, QUESTION, use_hyde=False)
    assert [r["memory"]["id"] for r in body["results"]] == [str(h.memory.id) for h in plain.hits]
    # A failed endpoint pauses HyDE rather than costing every query its timeout.
    second = api_client(alice.key).post(url, {"query": "another question about pages"}).json()
    assert second["hyde"]["status"] == "cooldown"
    assert len(_chat_requests(fake_openai)) == 1


def test_timeout_falls_back(alice, memories, fake_openai, settings, api_client):
    fake_openai.mode = "hang"
    settings.HYDE_TIMEOUT_MS = 200
    response = api_client(alice.key).post(f"projects/{alice.project.id}/search", {"query": QUESTION})
    assert response.status_code == 200, response.content
    assert response.json()["hyde"]["status"] == "failed"
    assert response.json()["results"]


def test_only_an_unsure_search_asks_for_a_hypothetical(fake_openai):
    """HyDE runs on an unsure search: fewer than 3 results scoring above 0.5 after every stage."""
    fake_openai.answer = PAGER
    assert hyde.hypothetical(QUESTION, "semantic", [0.9, 0.8, 0.51, 0.2]).status == "confident"
    assert _chat_requests(fake_openai) == []
    assert hyde.hypothetical(QUESTION, "semantic", [0.9, 0.8, 0.5, 0.2]).status == "ran"
    assert len(_chat_requests(fake_openai)) == 1


def test_a_confident_search_keeps_its_results_without_a_call(alice, memories, fake_openai, monkeypatch):
    fake_openai.answer = PAGER
    monkeypatch.setattr(hyde, "MIN_SCORE", -1.0)  # every result counts as sure
    result = _search(alice, QUESTION)
    assert result.hyde == {"ran": False, "status": "confident", "hypothetical": None}
    assert [h.memory.id for h in result.hits] == [
        h.memory.id for h in _search(alice, QUESTION, use_hyde=False).hits
    ]
    assert _chat_requests(fake_openai) == []


def test_a_search_for_one_result_is_judged_by_the_top_three(alice, memories, fake_openai, monkeypatch):
    fake_openai.answer = PAGER
    monkeypatch.setattr(hyde, "MIN_SCORE", -1.0)  # every result counts as sure
    assert search(
        SearchRequest(principal=alice.principal, project=alice.project, query=QUESTION, limit=1)
    ).hyde["status"] == ("confident")
    assert _chat_requests(fake_openai) == []


def test_an_unsure_search_is_reranked_once_after_hyde(alice, memories, fake_openai, fake_cohere):
    fake_openai.answer = PAGER
    result = _search(alice, QUESTION)
    assert result.hyde["status"] == "ran" and result.reranker == "cohere"
    assert len(fake_cohere.requests) == 1  # the first pass stops before its rerank


def test_context_injection_never_calls_the_llm(alice, memories, fake_openai, api_client):
    fake_openai.answer = PAGER
    response = api_client(alice.key).post(
        f"projects/{alice.project.id}/context", {"phase": "implement", "task": QUESTION}
    )
    assert response.status_code == 200, response.content
    assert response.json()["memories"]
    assert _chat_requests(fake_openai) == []
    assert _search(alice, QUESTION).hyde["status"] == "ran"  # the same text searched explicitly does


def test_identifier_queries_skip_hyde(alice, memories, fake_openai):
    fake_openai.answer = PAGER
    result = _search(alice, "verifyJwt clock skew")
    assert result.query_kind == "identifier"
    assert result.hyde == {"ran": False, "status": "skipped_kind", "hypothetical": None}
    assert _chat_requests(fake_openai) == []


def test_not_configured_means_not_called(alice, memories, fake_openai, settings, api_client):
    settings.OPENAI_API_KEY = ""
    fake_openai.answer = PAGER
    body = api_client(alice.key).post(f"projects/{alice.project.id}/search", {"query": QUESTION}).json()
    assert body["hyde"] == {"ran": False, "status": "not_configured", "hypothetical": None}
    assert fake_openai.requests == []


def test_switched_off_by_request_or_setting(alice, memories, fake_openai, settings, api_client):
    fake_openai.answer = PAGER
    url = f"projects/{alice.project.id}/search"
    assert api_client(alice.key).post(url, {"query": QUESTION, "hyde": False}).json()["hyde"]["ran"] is False
    settings.SEARCH_HYDE = False
    assert _search(alice, QUESTION).hyde["status"] == "disabled"
    assert _chat_requests(fake_openai) == []


def test_hyde_with_openai_embeddings(alice, fake_openai, settings):
    """Memories and both query vectors embedded through the SDK's embeddings call."""
    settings.EMBEDDING_PROVIDER = "openai"
    settings.EMBEDDING_DIMENSIONS = 64
    pager = make_memory(alice, type="pattern", content=PAGER, related_files=["core/paginator.py"])
    make_memory(alice, content="Cache keys are versioned per deploy.", related_files=["cache.py"])
    fake_openai.answer = PAGER
    result = _search(alice, QUESTION)
    assert result.hyde["ran"] and result.hits[0].memory.id == pager.id
    embedded = [r["input"] for r in fake_openai.requests if r["path"].endswith("/embeddings")]
    assert [PAGER] in embedded and all(
        r.get("dimensions") == 64 for r in fake_openai.requests if "input" in r
    )
