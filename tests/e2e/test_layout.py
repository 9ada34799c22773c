"""In the browser, on a phone-sized screen: what opens or grows stays inside the screen, and the
page does not scroll sideways."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.governance.models import Notification
from tests.memories.factories import make_memory

PHONE = {"width": 390, "height": 844}


@pytest.fixture(autouse=True)
def hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"


def page_width(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


def test_on_a_phone_the_notifications_menu_opens_inside_the_screen(page_as, alice):
    """The panel hung off its summary's right edge with a 20rem minimum: it opened at x = -100."""
    Notification.objects.create(
        organization=alice.org,
        project=alice.project,
        user=alice.user,
        kind="dispute.opened",
        title="Dispute in Acme API: Bob disputes “verify_jwt rejects tokens whose clock skew exceeds 30 s”",
        url=f"/o/{alice.org.slug}/p/{alice.project.slug}/disputes/",
    )
    page = page_as(alice)
    page.set_viewport_size(PHONE)
    page.goto(f"/o/{alice.org.slug}/p/{alice.project.slug}/memories/")
    page.get_by_label("Notifications, 1 unread").click()
    panel = page.locator(".notifications-dropdown")
    expect(panel).to_be_visible()
    box = panel.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], box
    assert page_width(page) <= PHONE["width"]


def test_on_a_wide_screen_the_notifications_menu_still_drops_below_its_summary(page_as, alice):
    page = page_as(alice)
    page.goto(f"/o/{alice.org.slug}/p/{alice.project.slug}/memories/")
    summary = page.get_by_label("Notifications, 0 unread")
    summary.click()
    panel = page.locator(".notifications-dropdown")
    expect(panel).to_be_visible()
    anchor, box = summary.bounding_box(), panel.bounding_box()
    assert abs((box["x"] + box["width"]) - (anchor["x"] + anchor["width"])) <= 1, (anchor, box)
    assert box["y"] >= anchor["y"] + anchor["height"], (anchor, box)


def test_on_a_phone_a_long_related_file_path_stays_inside_its_card(page_as, alice):
    path = "services/" + "/".join(["a_rather_long_directory_name_for_this_test"] * 4) + "/settings_loader.py"
    memory = make_memory(alice, content="The loader reads settings once.", related_files=[path])
    page = page_as(alice)
    page.set_viewport_size(PHONE)
    base = f"/o/{alice.org.slug}/p/{alice.project.slug}"
    for url in (f"{base}/memories/", f"{base}/memories/{memory.id}/"):
        page.goto(url)
        card = page.locator(f"#memory-{memory.id}")
        expect(card.get_by_text("settings_loader.py")).to_be_visible()
        box = card.bounding_box()
        assert box is not None and box["x"] + box["width"] <= PHONE["width"], (url, box)
        assert page_width(page) <= PHONE["width"], url
