"""Sessions in a browser: a session opened through the API appears in the open list without a
reload; its review shows what was applied and what is new; confirm all empties the review
queue and the count drops. Saves the sessions and session-review screenshots."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from apps.memories.models import Memory
from apps.observer import services as observer
from apps.observer.models import Session
from apps.observer.traces import Trace
from tests.e2e.test_pages import api, base_of
from tests.memories.factories import make_memory


@pytest.fixture(autouse=True)
def hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"


@pytest.fixture(autouse=True)
def memory_group(monkeypatch):
    monkeypatch.setattr(observer, "ab_group", lambda session_id, project=None: "full")


def finished_session(person) -> Session:
    """A build session that read, corrected itself twice, recorded a note and passed validation;
    two memories were injected into it along the way."""
    applied = [
        make_memory(
            person,
            content="Order totals are cached for 60 s; invalidate on refund.",
            related_files=["shop/totals.py"],
            confidence=0.9,
        ),
        make_memory(
            person,
            content="Money is integer cents, never floats.",
            type="decision",
            source="user_taught",
            confidence=0.95,
        ),
    ]
    session = observer.session_open(
        project=person.project,
        actor=person.principal,
        data={"task": "Fix refund totals on the order page", "client": "claude-code", "phase": "implement"},
    )
    trace = (
        Trace()
        .read("shop/orders.py")
        .read("shop/totals.py")
        .think("Actually, refund totals are computed in shop/refunds.py not shop/totals.py")
        .edit("shop/refunds.py")
        .bash("pytest shop", "1 failed", error=True)
        .think("Actually, the refund signal fires before commit, not after — use on_commit")
        .edit("shop/signals.py")
        .note(
            "gotcha", "Run the shop tests with -p no:randomly: fixtures share a cart.", ["shop/conftest.py"]
        )
        .bash("pytest shop", "12 passed")
    )
    observer.events_ingest(session=session, events=trace.events)
    observer.injection_record(session=session, memory_ids=[m.id for m in applied], notes_upto=0)
    observer.validation_record(session=session, actor=person.principal, passed=True, work_unit="", report="")
    observer.session_complete(session=session, outcome="success", steps=9)
    return Session.objects.get(id=session.id)


def test_review_a_session_and_confirm_all(page_as, live_url, alice, screenshot):
    session = finished_session(alice)
    pending = Memory.objects.filter(id__in=session.promoted_memory_ids, needs_review=True)
    waiting = pending.count()
    assert waiting >= 2
    base = base_of(alice)
    page = page_as(alice)

    page.goto(f"{base}/")
    page.get_by_role("complementary", name="Sections").get_by_role("link", name="Sessions").click()
    expect(page).to_have_url(re.compile(r"/sessions/$"))
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    rows = page.get_by_test_id("session-row")
    expect(rows).to_have_count(1)
    page.evaluate("window.__sameDocument = true")

    response = api(
        live_url,
        alice,
        "POST",
        f"projects/{alice.project.id}/sessions",
        json={"session_type": "build", "task": "Add rate limiting to the login view", "client": "cursor"},
    )
    assert response.status_code == 201, response.text
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("Add rate limiting to the login view")
    expect(rows.first).to_contain_text("running")
    assert page.evaluate("window.__sameDocument") is True
    screenshot(page, "sessions")

    rows.filter(has_text="Fix refund totals").get_by_role("link", name="Fix refund totals").click()
    expect(page.get_by_role("heading", name=re.compile("Session review"))).to_be_visible()
    expect(page.get_by_test_id("pending-count")).to_have_text(str(waiting))
    expect(page.get_by_test_id("applied")).to_contain_text("Order totals are cached")
    expect(page.get_by_test_id("applied").get_by_role("listitem")).to_have_count(2)
    screenshot(page, "session-review")

    page.get_by_role("button", name=re.compile(r"Confirm all")).click()
    expect(page.get_by_test_id("pending-count")).to_have_text("0")
    expect(page.get_by_test_id("nothing-pending")).to_be_visible()
    expect(page.locator("#review-title")).to_be_focused()  # not dropped on <body> with the button gone
    expect(page.locator("#toast")).to_contain_text(f"Confirmed {waiting} memories")
    assert not Memory.objects.filter(id__in=session.promoted_memory_ids, needs_review=True).exists()
    assert Memory.objects.filter(id__in=session.promoted_memory_ids, user_verified=True).count() >= waiting
