"""In the browser: signing in, exporting my data and reading the file, deleting my account and
changing my mind."""

from __future__ import annotations

import json
from pathlib import Path

from apps.tenants.models import User
from tests.conftest import PASSWORD
from tests.memories.factories import make_memory


def test_sign_in_with_the_form_lands_on_my_project(page_as, alice, screenshot):
    page = page_as()
    page.goto("/accounts/login/")
    screenshot(page, "sign-in")
    page.fill("input[name=login]", "alice@acme.test")
    page.fill("input[name=password]", PASSWORD)
    page.get_by_role("button", name="Sign In").click()
    page.wait_for_url(f"**/o/acme/p/{alice.project.slug}/")
    assert page.locator("nav.crumbs").inner_text().split() == ["Acme", "/", "Acme", "API"]


def test_export_my_data_downloads_a_json_file_that_parses(page_as, alice, screenshot, settings):
    settings.EMBEDDING_PROVIDER = "hashing"
    memory = make_memory(alice, content="Run migrations before the seed script.", type="gotcha")
    page = page_as(alice)
    page.goto("/account/data/")
    page.get_by_label("JSON (complete, machine-readable)").check()
    page.get_by_role("button", name="Request export").click()
    row = page.locator("#exports tbody tr").first
    assert "Ready" in row.inner_text()
    screenshot(page, "account-data")
    with page.expect_download() as info:
        row.get_by_role("link", name="Download").click()
    download = info.value
    assert download.suggested_filename.startswith("memorysaas-my-data-")
    data = json.loads(Path(download.path()).read_text(encoding="utf-8"))
    assert data["profile"]["email"] == "alice@acme.test"
    assert [m["id"] for m in data["memories"]] == [str(memory.id)]


def test_delete_my_account_then_cancel(page_as, alice, bob):
    page = page_as(bob)
    page.goto("/account/data/")
    page.get_by_label("Type your email address to confirm").fill("bob@acme.test")
    page.get_by_role("button", name="Delete my account").click()
    banner = page.locator(".flash.warning").first
    assert "scheduled for deletion" in banner.inner_text()
    assert User.objects.get(pk=bob.user.pk).deletion_requested_at is not None

    page.get_by_role("button", name="Cancel deletion").click()
    assert "Deletion cancelled" in page.locator(".messages").inner_text()
    assert page.get_by_role("button", name="Delete my account").is_visible()
    assert User.objects.get(pk=bob.user.pk).deletion_requested_at is None
