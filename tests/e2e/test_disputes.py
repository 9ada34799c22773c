"""In the browser: a member disputes a memory, the steward sees the notification, comments and
resolves it; the disputed badge comes and goes."""

from __future__ import annotations

import httpx
from playwright.sync_api import expect

from apps.governance.models import Dispute
from apps.memories.models import Memory
from apps.tenants.roles import Role
from tests.memories.factories import make_memory


def test_member_disputes_and_steward_resolves(page_as, alice, bob, person_with_role, screenshot, settings):
    settings.EMBEDDING_PROVIDER = "hashing"
    steward = person_with_role(Role.STEWARD)
    memory = make_memory(alice, content="The staging database is reset every night.", type="gotcha")
    base = f"/o/{alice.org.slug}/p/{alice.project.slug}"

    member = page_as(bob)
    member.goto(f"{base}/memories/{memory.id}/dispute/")
    member.get_by_label("Reason").fill("It is reset weekly, on Sundays.")
    member.get_by_role("button", name="Open dispute").click()
    member.wait_for_url(f"**{base}/disputes/*/")
    assert member.get_by_test_id("disputed-badge").is_visible()
    assert member.get_by_test_id("dispute-status").inner_text() == "Open"
    assert not member.get_by_role("button", name="Resolve dispute").is_visible()
    assert Memory.objects.get(pk=memory.pk).disputed

    page = page_as(steward)
    page.goto(f"{base}/disputes/")
    assert page.get_by_test_id("unread-count").inner_text() == "1"
    assert page.locator("table .badge.disputed").first.is_visible()
    screenshot(page, "disputes-list")
    page.get_by_role("link", name="The staging database is reset every night.").click()
    page.get_by_label("Comment").fill("Checked the cron: weekly.")
    page.get_by_role("button", name="Comment").click()
    assert "Checked the cron: weekly." in page.get_by_test_id("thread").inner_text()
    # "Dispute rejected": an update would re-embed the text, and the live server's embedding
    # provider is the real local model (tests/governance covers updates).
    page.get_by_role("radio", name="Dispute rejected").check()
    page.get_by_label("Note").fill("Cron says nightly after all.")
    screenshot(page, "dispute-detail")
    page.get_by_role("button", name="Resolve dispute").click()
    assert page.get_by_test_id("dispute-status").inner_text() == "Rejected"
    assert page.get_by_test_id("disputed-badge").count() == 0
    screenshot(page, "dispute-resolved")
    thread = page.get_by_test_id("thread").inner_text()
    assert (
        "Opened" in thread
        and "Dispute rejected. Cron says nightly" in thread
        and "It is reset weekly" in thread
    )

    dispute = Dispute.objects.get()
    assert dispute.status == "rejected" and dispute.resolved_by == steward.user
    assert not Memory.objects.get(pk=memory.pk).disputed


def test_a_new_dispute_shows_in_an_open_pages_notifications_without_a_reload(
    page_as, live_url, alice, bob, person_with_role, settings
):
    settings.EMBEDDING_PROVIDER = "hashing"
    steward = person_with_role(Role.STEWARD)
    memory = make_memory(alice, content="Backups run at midnight UTC.", type="gotcha")
    page = page_as(steward)
    page.goto(f"/o/{alice.org.slug}/p/{alice.project.slug}/memories/")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    assert page.get_by_test_id("unread-count").count() == 0
    opened = httpx.post(
        f"{live_url}/api/v1/memories/{memory.id}/disputes",
        json={"reason": "They run at 02:00 since the move."},
        headers={"Authorization": f"Bearer {bob.key}"},
        timeout=60,
    )
    assert opened.status_code == 201, opened.text
    expect(page.get_by_test_id("unread-count")).to_have_text("1")


def test_an_open_dispute_page_shows_the_outcome_when_someone_else_resolves_it(
    page_as, alice, bob, person_with_role, settings
):
    """The status badge sat outside the live region: the page still said "Open"."""
    settings.EMBEDDING_PROVIDER = "hashing"
    steward = person_with_role(Role.STEWARD)
    memory = make_memory(alice, content="Deploys freeze on Fridays.", type="gotcha")
    page = page_as(bob)
    page.goto(f"/o/{alice.org.slug}/p/{alice.project.slug}/memories/{memory.id}/dispute/")
    page.get_by_label("Reason").fill("The freeze was lifted in March.")
    page.get_by_role("button", name="Open dispute").click()
    expect(page.get_by_test_id("dispute-status")).to_have_text("Open")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    page.get_by_label("Comment").fill("Half-typed and not sent")

    other = page_as(steward)
    other.goto(page.url)
    other.get_by_role("radio", name="Dispute rejected").check()
    other.get_by_label("Note").fill("Still frozen.")
    other.get_by_role("button", name="Resolve dispute").click()
    expect(other.get_by_test_id("dispute-status")).to_have_text("Rejected")

    expect(page.get_by_test_id("dispute-status")).to_have_text("Rejected")
    expect(page.get_by_test_id("thread")).to_contain_text("Still frozen.")
    expect(page.get_by_label("Comment")).to_have_value("Half-typed and not sent")
