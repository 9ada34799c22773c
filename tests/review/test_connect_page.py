"""The dashboard's Connect page: the blocks it shows are the ones `memorysaas connect` writes, for
this server's address, and the key it makes for an agent can run every one of its snippets."""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client
from memorysaas_client.connect import blocks

from apps.tenants.models import ApiKey
from tests.conftest import ApiClient


@pytest.fixture(autouse=True)
def hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384


def page_url(person) -> str:
    return f"/o/{person.org.slug}/p/{person.project.slug}/connect/"


def signed_in(person) -> Client:
    client = Client()
    client.force_login(person.user, backend="django.contrib.auth.backends.ModelBackend")
    return client


def test_the_page_shows_each_agents_block_for_this_server(alice):
    page = signed_in(alice).get(page_url(alice))
    assert page.status_code == 200
    text = html.unescape(page.content.decode())
    for block in blocks("http://testserver", str(alice.project.id)).values():
        assert block.strip() in text
    assert "memorysaas login --url http://testserver" in text and "memorysaas connect claude-code" in text
    assert "Make a key for an agent" in text


def test_the_key_made_there_runs_every_snippet_on_the_page(alice):
    made = signed_in(alice).post(page_url(alice))
    assert made.status_code == 200 and made["Cache-Control"] == "no-store"
    key = re.search(r"export MEMORYSAAS_KEY=(msk_\w+)", made.content.decode()).group(1)
    stored = ApiKey.objects.get(prefix=key.split("_")[1])
    assert stored.project_id == alice.project.id

    agent = ApiClient(key)
    project = f"projects/{alice.project.id}"
    recorded = agent.post(f"{project}/memories", {"type": "gotcha", "content": "verify_jwt rejects tokens skewed over 30 s", "related_files": ["auth/tokens.py"]})  # fmt: skip
    assert recorded.status_code == 201, recorded.content
    assert agent.post(f"{project}/search", {"query": "jwt clock skew"}).status_code == 200
    context = {"phase": "implement", "task": "add rate limiting to the login view", "token_budget": 1200}
    assert agent.post(f"{project}/context", context).status_code == 200
    session = agent.post(f"{project}/sessions", {"session_type": "build", "task": "add rate limiting"})
    assert session.status_code == 201, session.content
    events = [{"seq": 1, "type": "reasoning", "step": 1, "text": "MEMORY:gotcha:login needs a limit"}]
    assert agent.post(f"sessions/{session.json()['id']}/events", {"events": events}).status_code in (200, 202)
    hook = {
        "session_id": "cc-1",
        "hook_event_name": "UserPromptSubmit",
        "cwd": "/repo",
        "prompt": "fix login",
    }
    assert (
        agent.post("hooks/claude-code", hook).status_code == 200
    )  # (the hooks' URL, no ?project: the key's)
    assert agent.post(f"memories/{recorded.json()['id']}/feedback", {"kind": "helpful"}).status_code == 200


def test_a_member_who_cannot_make_keys_is_shown_the_login_route(bob):
    page = signed_in(bob).get(page_url(bob))
    assert page.status_code == 200
    assert b"Make a key for an agent" not in page.content and b"memorysaas login" in page.content
    assert signed_in(bob).post(page_url(bob)).status_code == 403
    assert not ApiKey.objects.filter(name__startswith="Agent:").exists()
