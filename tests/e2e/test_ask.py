"""Ask in a browser, with an LLM configured: a daphne of its own pointed at the fake OpenAI server
on 127.0.0.1, the question asked through the page's htmx form, the written answer above the
ranked memories; and when the LLM fails, the memories alone."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer

import pytest
from django.conf import settings
from playwright.sync_api import expect

from tests.e2e.conftest import HASHING_EMBEDDINGS, daphne_of_test_database, session_cookie
from tests.memories.conftest import _FakeOpenAI
from tests.memories.factories import make_memory


@pytest.fixture(autouse=True)
def hashing_embeddings(settings):
    """Memories made here embed as the server below searches: with the hashing provider."""
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384


@pytest.fixture(scope="module")
def fake_llm():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def llm_url(django_db_setup, django_db_blocker, fake_llm):
    with daphne_of_test_database(
        django_db_blocker,
        **HASHING_EMBEDDINGS,
        OPENAI_API_KEY="test-openai-key",
        OPENAI_BASE_URL=fake_llm,
        SEARCH_HYDE="0",  # (the fake answers every chat alike: only Ask's own call here)
    ) as url:
        yield url


@pytest.fixture
def ask_page(browser, llm_url, transactional_db, alice):
    _FakeOpenAI.requests, _FakeOpenAI.mode, _FakeOpenAI.answer = [], "ok", ""
    context = browser.new_context(base_url=llm_url, viewport={"width": 1280, "height": 860})
    context.set_default_timeout(15_000)
    context.add_cookies(
        [{"name": settings.SESSION_COOKIE_NAME, "value": session_cookie(alice), "url": llm_url}]
    )
    page = context.new_page()
    page.goto(f"/o/{alice.org.slug}/p/{alice.project.slug}/ask/")
    yield page
    context.close()


def _ask(page, question: str) -> None:
    page.get_by_label("Ask what this project's memory knows").fill(question)
    page.get_by_role("button", name="Ask").click()


def test_the_answer_is_written_above_the_memories_it_cites(ask_page, alice, screenshot):
    memory = make_memory(
        alice,
        content="verify_jwt rejects tokens whose clock skew exceeds 30 s.",
        citation_text="JWT skew limit",
    )
    _FakeOpenAI.answer = "It rejects tokens whose clock skew is over 30 seconds [1]."
    _ask(ask_page, "what does verify_jwt reject?")
    written = ask_page.get_by_test_id("written-answer")
    expect(written).to_contain_text("It rejects tokens whose clock skew is over 30 seconds")
    expect(written).to_have_attribute("data-status", "answered")
    cite = written.get_by_role("link", name="[1]")
    expect(cite).to_have_attribute(
        "href", f"/o/{alice.org.slug}/p/{alice.project.slug}/memories/{memory.id}/"
    )
    expect(ask_page.get_by_test_id("answer-sources")).to_contain_text(
        f"[Memory #{str(memory.id)[:8]}: JWT skew limit]"
    )
    ranked = ask_page.get_by_test_id("answer")
    expect(ranked).to_contain_text("verify_jwt rejects tokens whose clock skew exceeds 30 s.")
    screenshot(ask_page, "ask-answer")

    _FakeOpenAI.mode = "error"
    _ask(ask_page, "what does verify_jwt reject exactly?")
    expect(written).to_have_attribute("data-status", "failed")
    expect(written).to_contain_text("No answer could be written just now")
    expect(ranked).to_contain_text("verify_jwt rejects tokens whose clock skew exceeds 30 s.")


def test_i_dont_know_keeps_the_closest_memories_beneath(ask_page, alice):
    make_memory(alice, content="verify_jwt rejects tokens whose clock skew exceeds 30 s.")
    _FakeOpenAI.answer = "I don't know."
    _ask(ask_page, "what does verify_jwt reject?")
    written = ask_page.get_by_test_id("written-answer")
    expect(written).to_have_attribute("data-status", "unknown")
    expect(written).to_contain_text("I don't know.")
    expect(ask_page.get_by_test_id("answer")).to_contain_text("verify_jwt rejects tokens")
