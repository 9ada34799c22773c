"""The Lifecycle page in a browser: an admin sees the project's storage and what the next prune
retires, presses Prune now and Re-index and sees their effect; a member is not offered the page
and is refused it (403); an outsider gets 404. Saves docs/screenshots/lifecycle.png (with
UPDATE_SCREENSHOTS=1)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from playwright.sync_api import expect

from apps.memories.models import EmbeddingStatus, Memory
from tests.memories.factories import make_memory


def _url(person) -> str:
    return f"/o/{person.org.slug}/p/{person.project.slug}/lifecycle/"


def _weak(person) -> Memory:
    memory = make_memory(person, content="The staging proxy strips Authorization headers.", confidence=0.1)
    Memory.objects.filter(id=memory.id).update(created_at=timezone.now() - timedelta(days=90))
    return memory


def test_an_admin_prunes_now_and_re_indexes_from_the_page(alice, page_as, screenshot):
    weak = _weak(alice)
    make_memory(alice, content="Refund amounts are stored in cents.")
    failed = make_memory(alice, content="verifyJwt rejects a clock skew over 30 seconds.")
    Memory.objects.filter(id=failed.id).update(embedding=None, embedding_status=EmbeddingStatus.FAILED)

    page = page_as(alice)
    page.goto(f"/o/{alice.org.slug}/p/{alice.project.slug}/")
    page.get_by_role("link", name="Lifecycle", exact=True).click()
    storage = page.get_by_test_id("storage")
    expect(storage.locator("tr[data-part=memories] td").nth(1)).to_have_text("3")
    expect(storage.locator("tr[data-part=vectors] td").nth(1)).to_have_text("2")
    expect(page.get_by_test_id("rule-low_confidence")).to_have_text("1")
    expect(page.get_by_test_id("next-prune")).to_contain_text("The staging proxy strips")
    screenshot(page, "lifecycle")

    page.get_by_test_id("prune-now").click()
    expect(page.locator(".flash")).to_contain_text("Prune queued")
    expect(page.get_by_test_id("rule-low_confidence")).to_have_text("0")
    expect(page.get_by_test_id("next-prune")).not_to_contain_text("The staging proxy strips")
    assert Memory.objects.get(id=weak.id).deprecated

    page.get_by_test_id("reindex").click()
    expect(page.locator(".flash")).to_contain_text("Re-index queued")
    expect(page.get_by_test_id("storage").locator("tr[data-part=vectors] td").nth(1)).to_have_text("3")
    assert Memory.objects.get(id=failed.id).embedding_status == EmbeddingStatus.READY

    page.set_viewport_size({"width": 390, "height": 844})  # on a phone: nothing scrolls sideways
    widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], widths


def test_a_member_is_not_offered_the_page_and_is_refused_it(alice, bob, page_as):
    weak = _weak(alice)
    page = page_as(bob)
    page.goto(f"/o/{alice.org.slug}/p/{alice.project.slug}/")
    expect(page.get_by_role("link", name="Insights", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="Lifecycle", exact=True)).to_have_count(0)
    response = page.goto(_url(alice))
    assert response is not None and response.status == 403
    assert not Memory.objects.get(id=weak.id).deprecated


def test_an_outsider_gets_404(alice, charlie, page_as):
    page = page_as(charlie)
    response = page.goto(_url(alice))
    assert response is not None and response.status == 404
