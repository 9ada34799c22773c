"""In the browser: a sync conflict side by side — base, the device's version, the server's —
decided with an edited merge; a decision against a memory that changed meanwhile is refused and
shows the new state; a viewer sees the conflict but no way to decide it."""

from __future__ import annotations

from playwright.sync_api import expect

from apps.memories.models import Memory, MemoryVersion
from apps.memories.services import memory_update
from apps.sync.conflicts import conflict_record
from apps.tenants.roles import Role
from tests.memories.factories import make_memory


def _waiting_conflict(alice, bob):
    memory = make_memory(alice, content="Deploys run at 10:00.", tags=["deploy"])
    memory_update(memory=memory, actor=alice.principal, changes={"content": "Deploys run at 09:30."})
    memory = Memory.objects.get(id=memory.id)
    mine = {"content": "Deploys run at 11:00.", "tags": ["deploy", "ops"]}
    return memory, conflict_record(
        memory=memory, actor=bob.principal, base_version=1, mine=mine, fields=["content"]
    )


def test_a_conflict_is_shown_side_by_side_and_decided_with_a_merge(page_as, alice, bob, screenshot):
    memory, conflict = _waiting_conflict(alice, bob)
    page = page_as(alice)
    page.goto(f"/o/{alice.org.slug}/p/{alice.project.slug}/conflicts/")
    page.get_by_role("link", name="Deploys run at 09:30.").click()

    row = page.locator("tr[data-field='content']")
    expect(row.locator("td.base")).to_have_text("Deploys run at 10:00.")
    expect(row.locator("td.mine")).to_have_text("Deploys run at 11:00.")
    expect(row.locator("td.theirs")).to_have_text("Deploys run at 09:30.")
    expect(row).to_contain_text("both changed")
    expect(page.locator("tr[data-field='tags'] td.mine")).to_contain_text("ops")
    screenshot(page, "sync-conflict")

    page.get_by_label("Merged text").fill("Deploys run at 09:30, or 11:00 on Fridays.")
    page.get_by_label("Merged tags (comma-separated)").fill("deploy, ops")
    # (the merge re-embeds the memory in the server's request: on a busy machine the first
    # embedding loads the model, so the answer may take longer than a click's usual wait)
    with page.expect_navigation(timeout=120_000):
        page.get_by_role("button", name="Save the merge").click(no_wait_after=True)
    expect(page.get_by_text("Conflict resolved")).to_be_visible()
    expect(page.get_by_text("No conflicts waiting")).to_be_visible()
    stored = Memory.objects.get(id=memory.id)
    assert (stored.content, stored.tags) == ("Deploys run at 09:30, or 11:00 on Fridays.", ["deploy", "ops"])
    assert MemoryVersion.objects.filter(memory=stored, change="conflict_resolved").exists()


def test_a_decision_against_a_memory_that_moved_on_is_refused(page_as, alice, bob):
    memory, conflict = _waiting_conflict(alice, bob)
    page = page_as(bob)
    page.goto(f"/o/{alice.org.slug}/p/{alice.project.slug}/conflicts/{conflict.id}/")
    memory_update(
        memory=Memory.objects.get(id=memory.id),
        actor=alice.principal,
        changes={"content": "Deploys run at 08:00."},
    )
    page.get_by_role("button", name="Keep mine").click()
    expect(page.get_by_role("alert")).to_contain_text("changed since you looked")
    expect(page.locator("tr[data-field='content'] td.theirs")).to_have_text("Deploys run at 08:00.")
    assert Memory.objects.get(id=memory.id).content == "Deploys run at 08:00."

    page.get_by_role("button", name="Keep theirs").click()  # (now against the version shown)
    expect(page.get_by_text("Conflict resolved")).to_be_visible()


def test_a_viewer_sees_the_conflict_but_cannot_decide_it(page_as, alice, bob, person_with_role):
    _memory, conflict = _waiting_conflict(alice, bob)
    viewer = person_with_role(Role.VIEWER)
    page = page_as(viewer)
    page.goto(f"/o/{alice.org.slug}/p/{alice.project.slug}/conflicts/{conflict.id}/")
    expect(page.locator("tr[data-field='content'] td.mine")).to_have_text("Deploys run at 11:00.")
    expect(page.get_by_role("button", name="Keep mine")).to_have_count(0)
    expect(page.get_by_text("Only the person whose device made the change")).to_be_visible()
