"""In the browser: the members page asks before removing someone or leaving, and its role
selects' labels stay off screen."""

from __future__ import annotations

from playwright.sync_api import expect

from apps.tenants.models import Membership


def test_removing_a_member_asks_first_and_a_dismissal_keeps_them(page_as, alice, bob):
    page = page_as(alice)
    page.goto(f"/o/{alice.org.slug}/members/")
    row = page.get_by_role("row").filter(has_text="bob@acme.test")
    asked: list[str] = []

    def dismiss(dialog):
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    row.get_by_role("button", name="Remove").click()
    assert asked == ["Remove Bob (bob@acme.test) from Acme? Their API keys and devices in Acme are revoked."]
    expect(row).to_be_visible()

    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Remove").click()
    expect(page.get_by_role("row").filter(has_text="bob@acme.test")).to_have_count(0)
    assert not Membership.objects.filter(user=bob.user, organization=alice.org).exists()


def test_the_role_selects_label_takes_no_room_on_screen(page_as, alice, bob):
    page = page_as(alice)
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"/o/{alice.org.slug}/members/")
    membership = Membership.objects.get(user=bob.user)
    label = page.locator(f'label[for="role-{membership.pk}"]')
    box = label.bounding_box()
    assert box is not None and box["width"] <= 1 and box["height"] <= 1, box
    assert page.get_by_label("Role of bob@acme.test").is_enabled()
