"""A Claude Code session shows up on an open Sessions page as its hooks arrive: the agent's
first prompt opens it (running, with the prompt as its task) and SessionEnd completes it, with
no reload. This is what a user checks right after pasting the hooks block."""

from __future__ import annotations

import re
import uuid

import pytest
from playwright.sync_api import expect

from tests.e2e.test_pages import base_of
from tests.e2e.test_sessions import api


@pytest.fixture(autouse=True)
def hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"


def hook(live_url, person, event: str, session_id: str, **fields):
    payload = {
        "session_id": session_id,
        "transcript_path": f"/home/dev/.claude/projects/-home-dev-shop/{session_id}.jsonl",
        "cwd": "/home/dev/shop",
        "permission_mode": "default",
        "hook_event_name": event,
        **fields,
    }
    response = api(live_url, person, "POST", f"hooks/claude-code?project={person.project.id}", json=payload)
    assert response.status_code == 200, response.text
    return response


def test_a_claude_code_session_appears_live(page_as, live_url, alice):
    page = page_as(alice)
    page.goto(f"{base_of(alice)}/sessions/")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    rows = page.get_by_test_id("session-row")
    expect(rows).to_have_count(0)
    page.evaluate("window.__sameDocument = true")

    session_id = str(uuid.uuid4())
    hook(live_url, alice, "SessionStart", session_id, source="startup", model="claude-sonnet-4-6")
    hook(live_url, alice, "UserPromptSubmit", session_id, prompt="Make checkout emails go out once")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(re.compile("running|Make checkout emails go out once"))

    hook(live_url, alice, "SessionEnd", session_id, reason="logout")
    expect(rows.first).not_to_contain_text("running")
    assert page.evaluate("window.__sameDocument") is True
