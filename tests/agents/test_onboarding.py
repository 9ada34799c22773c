"""A newcomer's welcome: the project's five most important memories (pinned first, then by
confidence weighted by use), on their first dashboard visit and in their first agent session
(/context or the SessionStart hook), once each; nothing for someone who has been around."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.memories.models import Memory
from apps.tenants.models import Membership, OnboardingServed
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db


@pytest.fixture
def knowledge(alice):
    """Seven memories; the five that matter most, in order: pinned, then confidence × use."""
    pinned = make_memory(alice, content="Never run migrations by hand in production.", confidence=0.6)
    used = make_memory(alice, content="The billing worker retries three times.", confidence=0.8)
    confident = make_memory(alice, content="Orders are soft-deleted, never removed.", confidence=0.95)
    middling = [make_memory(alice, content=f"Minor detail number {n}.", confidence=0.7) for n in range(3)]
    retired = make_memory(alice, content="The old cache layer lives in legacy/.", confidence=0.99)
    Memory.objects.filter(id=pinned.id).update(pinned=True)
    Memory.objects.filter(id=used.id).update(used_count=40)
    Memory.objects.filter(id=retired.id).update(deprecated=True)
    # All of it was there before bob joined (what comes after, he sees arrive).
    Memory.objects.filter(project=alice.project).update(created_at=timezone.now() - timedelta(days=2))
    return [pinned.id, used.id, confident.id, *[m.id for m in middling[:2]]]


def test_a_newcomers_first_dashboard_visit_shows_the_five_that_matter_most_once(
    bob, knowledge, session_client
):
    page = session_client(bob)
    url = f"/o/{bob.org.slug}/p/{bob.project.slug}/"
    first = page.get(url)
    assert first.status_code == 200
    shown = [m.id for m in first.context["welcome"]]
    assert shown[:3] == knowledge[:3] and len(shown) == 5
    assert "New here? The memories that matter most" in first.content.decode()
    assert "legacy/" not in first.content.decode()  # (deprecated: never in a welcome)
    again = page.get(url)
    assert again.context["welcome"] == [] and "New here?" not in again.content.decode()


def test_a_newcomers_first_context_carries_the_welcome_once(bob, knowledge, api_client):
    api = api_client(bob.key)
    first = api.post(f"projects/{bob.project.id}/context", {"phase": "implement", "task": "add a refund"})
    assert first.status_code == 200, first.content
    body = first.json()
    assert body["onboarding"][:3] == [str(i) for i in knowledge[:3]] and len(body["onboarding"]) == 5
    assert body["text"].startswith("New to this project? The memories that matter most here:")
    assert f"[Memory #{str(knowledge[0])[:8]}:" in body["text"]
    second = api.post(f"projects/{bob.project.id}/context", {"phase": "implement", "task": "add a refund"})
    assert second.json()["onboarding"] == [] and "New to this project" not in second.json()["text"]
    # The dashboard's welcome is its own: still due.
    assert not OnboardingServed.objects.filter(user=bob.user, surface="dashboard").exists()


def test_the_session_start_hook_welcomes_a_newcomer_once(bob, knowledge, api_client, memory_group):
    api = api_client(bob.key)

    def session_start(session_id):
        payload = {
            "session_id": session_id,
            "hook_event_name": "SessionStart",
            "cwd": "/home/bob/acme",
            "source": "startup",
        }
        response = api.post(f"hooks/claude-code?project={bob.project.id}", payload)
        assert response.status_code == 200, response.content
        return response.json().get("hookSpecificOutput", {}).get("additionalContext", "")

    first = session_start("cc-onboard-1")
    assert "New to this project? The memories that matter most here:" in first
    assert "Never run migrations by hand in production." in first
    assert "New to this project" not in session_start("cc-onboard-2")
    served = OnboardingServed.objects.get(user=bob.user, project=bob.project, surface="agent")
    assert served.memory_ids[:3] == [str(i) for i in knowledge[:3]]


def test_memories_made_after_a_newcomer_joined_are_not_their_welcome(bob, alice, api_client):
    make_memory(alice, content="Written after bob joined.", confidence=0.99)
    body = (
        api_client(bob.key)
        .post(f"projects/{bob.project.id}/context", {"phase": "implement", "task": "x"})
        .json()
    )
    assert body["onboarding"] == [] and not OnboardingServed.objects.exists()


def test_someone_who_joined_long_ago_gets_no_welcome(bob, knowledge, api_client):
    Membership.objects.filter(user=bob.user).update(created_at=timezone.now() - timedelta(days=90))
    body = (
        api_client(bob.key)
        .post(f"projects/{bob.project.id}/context", {"phase": "implement", "task": "x"})
        .json()
    )
    assert body["onboarding"] == [] and not OnboardingServed.objects.exists()
