"""In the browser: an admin builds a team on the teams page — creates it, names it again, adds a
member, moves a project in — is told why a team that owns projects cannot be deleted, and takes a
member off it: that person's open live-update socket on the team's project closes."""

from __future__ import annotations

import json

from django.conf import settings
from playwright.sync_api import expect
from websockets.sync.client import connect

from apps.tenants.models import AuditLog, Team, TeamMembership
from tests.e2e.conftest import session_cookie


def test_an_admin_manages_a_team_and_a_removed_member_loses_its_project_at_once(
    page_as, live_url, alice, bob, screenshot
):
    page = page_as(alice)
    page.goto(f"/o/{alice.org.slug}/teams/")
    expect(page.get_by_text("No teams yet")).to_be_visible()
    page.get_by_label("New team name").fill("Payments")
    page.get_by_role("button", name="Create team").click()
    expect(page.get_by_role("heading", name="Payments")).to_be_visible()

    page.get_by_label("New name of Payments").fill("Billing")
    page.get_by_role("button", name="Rename").click()
    card = page.locator("section[data-team='payments']")
    expect(card.get_by_role("heading", name="Billing")).to_be_visible()

    card.get_by_label("Add a member to Billing").select_option("bob@acme.test")
    card.get_by_role("button", name="Add member").click()
    expect(card.locator(".team-members")).to_contain_text("bob@acme.test")
    card.get_by_label("Move a project into Billing").select_option(label="Acme API")
    card.get_by_role("button", name="Move project here").click()
    expect(card.locator(".team-projects")).to_contain_text("Acme API")

    # A team that owns projects is not deleted: the page says why and what to do.
    page.once("dialog", lambda dialog: dialog.accept())
    card.get_by_role("button", name="Delete team").click()
    expect(page.get_by_text("still owns 1 project(s): Acme API")).to_be_visible()
    assert Team.objects.filter(organization=alice.org, slug="payments").exists()
    screenshot(page, "teams")

    # Bob has the team's project open (his live-update socket); taking him off the team closes it.
    ws_url = live_url.replace("http://", "ws://") + f"/ws/projects/{alice.project.id}/"
    headers = {"Cookie": f"{settings.SESSION_COOKIE_NAME}={session_cookie(bob)}", "Origin": live_url}
    with connect(ws_url, additional_headers=headers) as socket:
        assert json.loads(socket.recv(timeout=30))["event"] == "hello"
        page.once("dialog", lambda dialog: dialog.accept())
        card.get_by_role("button", name="Remove bob@acme.test from Billing").click()
        expect(card.get_by_text("No members yet.")).to_be_visible()
        closed = _closed_code(socket)
    assert closed == 4404
    assert not TeamMembership.objects.filter(user=bob.user).exists()

    bob_page = page_as(bob)
    response = bob_page.goto(f"/o/{alice.org.slug}/p/{alice.project.slug}/")
    assert response is not None and response.status == 404

    page.once("dialog", lambda dialog: dialog.accept())
    card.get_by_role("button", name="Take Acme API out of Billing").click()
    expect(card.locator(".team-projects")).to_have_count(0)
    page.once("dialog", lambda dialog: dialog.accept())
    card.get_by_role("button", name="Delete team").click()
    expect(page.get_by_text("Deleted Billing.")).to_be_visible()
    actions = set(AuditLog.objects.filter(organization=alice.org).values_list("action", flat=True))
    assert {"team.created", "team.renamed", "team.member_added", "team.member_removed"} <= actions
    assert {"project.team_changed", "team.deleted"} <= actions


def _closed_code(socket) -> int | None:
    """Read until the server closes the socket (events may come first); its close code."""
    from websockets.exceptions import ConnectionClosed

    try:
        while True:
            socket.recv(timeout=30)
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd is not None else None
