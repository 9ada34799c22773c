"""Ask's written answer, through the page: the real openai SDK against the fake OpenAI server on
127.0.0.1; without an LLM, the ranked memories alone."""

from __future__ import annotations

import pytest

from apps.review.answering import Cited, read_answer
from tests.memories.conftest import fake_openai  # noqa: F401  (the fake OpenAI server)
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db

QUESTION = "what does verify_jwt reject?"


@pytest.fixture
def llm(fake_openai, settings):  # noqa: F811
    # (HyDE would ask the same fake, which answers every chat alike: Ask's own call is tested here.)
    settings.SEARCH_HYDE = False
    return fake_openai


@pytest.fixture
def jwt(alice):
    return make_memory(
        alice,
        content="verify_jwt rejects tokens whose clock skew exceeds 30 s.",
        citation_text="JWT skew limit",
    )


def _ask(signed_in, alice, base, question: str = QUESTION) -> str:
    response = signed_in(alice).get(f"{base}/ask/", {"q": question})
    assert response.status_code == 200
    return response.content.decode()


def _chats(llm) -> list[dict]:
    return [r for r in llm.requests if r["path"].endswith("/chat/completions")]


def test_without_an_llm_the_page_lists_the_memories_alone(alice, signed_in, base, jwt, settings):
    settings.OPENAI_API_KEY = ""
    page = _ask(signed_in, alice, base)
    assert 'data-testid="written-answer"' not in page
    assert f"[Memory #{str(jwt.id)[:8]}: JWT skew limit]" in page


def test_an_answer_is_written_from_the_memories_and_cites_them(alice, signed_in, base, jwt, llm):
    llm.answer = "It rejects tokens whose clock skew is over 30 seconds [1]."
    page = _ask(signed_in, alice, base)
    (chat,) = _chats(llm)
    assert chat["auth"] == "Bearer test-openai-key"
    asked = chat["messages"][-1]["content"]
    assert "[1] (gotcha) verify_jwt rejects tokens whose clock skew exceeds 30 s." in asked
    assert asked.endswith(f"Question: {QUESTION}")
    assert 'data-status="answered"' in page
    assert "It rejects tokens whose clock skew is over 30 seconds" in page
    detail = f'href="{base}/memories/{jwt.id}/"'
    answer = page.split('data-testid="written-answer"')[1].split('data-testid="answer"')[0]
    assert (
        detail in answer
        and f'[1] <a class="cite" {detail}>[Memory #{str(jwt.id)[:8]}: JWT skew limit]' in answer
    )
    ranked = page.split('data-testid="answer"')[-1]  # the ranked list, beneath
    assert detail in ranked and "verify_jwt rejects tokens whose clock skew exceeds 30 s." in ranked


def test_i_dont_know_when_the_memories_do_not_cover_it(alice, signed_in, base, jwt, llm):
    llm.answer = "I don't know."
    page = _ask(signed_in, alice, base)
    assert 'data-status="unknown"' in page and "I don't know." in page
    assert f'href="{base}/memories/{jwt.id}/"' in page.split('data-testid="answer"')[-1]


def test_an_answer_citing_no_memory_it_was_given_is_not_shown(alice, signed_in, base, jwt, llm):
    llm.answer = "Tokens are checked by the gateway [4]."
    page = _ask(signed_in, alice, base)
    assert 'data-status="unknown"' in page and "checked by the gateway" not in page


def test_an_llm_error_still_shows_the_memories(alice, signed_in, base, jwt, llm):
    llm.mode = "error"
    page = _ask(signed_in, alice, base)
    assert len(_chats(llm)) == 1
    assert 'data-status="failed"' in page and "No answer could be written just now" in page
    assert f'href="{base}/memories/{jwt.id}/"' in page.split('data-testid="answer"')[-1]


def test_nothing_retrieved_asks_the_llm_nothing(alice, signed_in, base, llm):
    llm.answer = "Zebras [1]."
    page = _ask(signed_in, alice, base, "zebra quaternion")
    assert "Nothing remembered about that" in page and 'data-testid="written-answer"' not in page
    assert _chats(llm) == []


def test_the_answers_text_is_escaped(alice, signed_in, base, jwt, llm):
    llm.answer = "It rejects <script>alert(1)</script> skewed tokens [1]."
    page = _ask(signed_in, alice, base)
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page


MEMORIES = [Cited(f"id{n}", f"[Memory #id{n}: c{n}]", "gotcha", f"fact {n}") for n in range(1, 4)]


def test_citations_are_read_as_numbers_of_the_memories_given():
    answer = read_answer("A [2, 1]. B [3][9].\n C [2].", MEMORIES)
    assert answer.status == "answered"
    assert [s.number for s in answer.sources] == [2, 1, 3]
    assert [p.text or p.source.number for p in answer.parts] == ["A ", 2, 1, ". B ", 3, ". C ", 2, "."]


@pytest.mark.parametrize(
    "text", ["", "I don’t know.", "I do not know what that is [1].", "No citation here."]
)
def test_what_reads_as_not_knowing(text):
    assert read_answer(text, MEMORIES).status == "unknown"


def test_an_llm_that_does_not_answer_in_time_leaves_the_memories(alice, signed_in, base, jwt, llm, settings):
    settings.ASK_ANSWER_TIMEOUT_MS = 300
    llm.mode = "hang"
    page = _ask(signed_in, alice, base)
    assert 'data-status="failed"' in page
    assert f'href="{base}/memories/{jwt.id}/"' in page.split('data-testid="answer"')[-1]
