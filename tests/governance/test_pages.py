"""Dispute and notification pages, end to end through the Django test client."""

from __future__ import annotations

import pytest

from apps.governance.models import Dispute, Notification
from apps.tenants.roles import Role
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db


@pytest.fixture
def memory(alice):
    return make_memory(alice, content="The cache key includes the locale.")


def _client(session_client, person):
    return session_client(person, enforce_csrf=False).client


def test_member_opens_steward_resolves_through_the_pages(
    session_client, alice, bob, person_with_role, memory
):
    steward = person_with_role(Role.STEWARD)
    base = f"/o/{alice.org.slug}/p/{alice.project.slug}"
    as_bob = _client(session_client, bob)
    form = as_bob.get(f"{base}/memories/{memory.id}/dispute/").content.decode()
    assert "Open dispute" in form and f'href="{base}/memories/{memory.id}/"' in form
    response = as_bob.post(f"{base}/memories/{memory.id}/dispute/", {"reason": "It does not, since v2."})
    dispute = Dispute.objects.get()
    assert response.status_code == 302 and response["Location"] == f"{base}/disputes/{dispute.id}/"
    page = as_bob.get(response["Location"]).content.decode()
    assert 'data-testid="disputed-badge"' in page and "It does not, since v2." in page
    assert f'href="{base}/memories/{memory.id}/"' in page
    assert "Resolve dispute" not in page

    as_steward = _client(session_client, steward)
    assert str(dispute.id) in as_steward.get(f"{base}/disputes/").content.decode()
    home = as_steward.get(f"{base}/").content.decode()
    assert 'data-testid="unread-count">1<' in home and "Disputes</a>" in home
    as_steward.post(f"{base}/disputes/{dispute.id}/comment/", {"body": "Checking."})
    as_steward.post(
        f"{base}/disputes/{dispute.id}/resolve/",
        {"resolution": "update", "content": "The cache key no longer includes the locale.", "note": "v2"},
    )
    page = as_bob.get(f"{base}/disputes/{dispute.id}/").content.decode()
    assert "Memory updated" in page and "Checking." in page and 'data-testid="disputed-badge"' not in page
    memory.refresh_from_db()
    assert memory.content.startswith("The cache key no longer") and not memory.disputed


def test_pages_enforce_roles(session_client, alice, person_with_role, memory):
    base = f"/o/{alice.org.slug}/p/{alice.project.slug}"
    viewer = _client(session_client, person_with_role(Role.VIEWER))
    assert viewer.get(f"{base}/disputes/").status_code == 200
    assert viewer.get(f"{base}/memories/{memory.id}/dispute/").status_code == 403
    member = _client(session_client, person_with_role(Role.MEMBER))
    member.post(f"{base}/memories/{memory.id}/dispute/", {"reason": "Wrong."})
    dispute = Dispute.objects.get()
    assert member.post(f"{base}/disputes/{dispute.id}/resolve/", {"resolution": "reject"}).status_code == 403
    assert viewer.post(f"{base}/disputes/{dispute.id}/comment/", {"body": "x"}).status_code == 403


def test_empty_reason_is_shown_back(session_client, alice, memory):
    base = f"/o/{alice.org.slug}/p/{alice.project.slug}"
    response = _client(session_client, alice).post(f"{base}/memories/{memory.id}/dispute/", {"reason": "  "})
    assert response.status_code == 422 and "Say why" in response.content.decode()


def test_notification_page_opens_and_marks_read(session_client, alice, bob, memory):
    base = f"/o/{alice.org.slug}/p/{alice.project.slug}"
    _client(session_client, bob).post(f"{base}/memories/{memory.id}/dispute/", {"reason": "Wrong."})
    as_alice = _client(session_client, alice)
    item = Notification.objects.get(user=alice.user)
    assert item.title in as_alice.get("/notifications/").content.decode()
    response = as_alice.get(f"/notifications/{item.pk}/")
    assert response.status_code == 302 and response["Location"] == item.url
    item.refresh_from_db()
    assert item.read
    assert as_alice.post("/notifications/read/").status_code == 302


def test_a_nul_character_in_a_new_dispute_is_shown_back_and_opens_nothing(session_client, alice, memory):
    base = f"/o/{alice.org.slug}/p/{alice.project.slug}"
    response = _client(session_client, alice).post(
        f"{base}/memories/{memory.id}/dispute/", {"reason": "Wrong\x00 since v2."}
    )
    assert response.status_code == 422 and "Null characters are not allowed." in response.content.decode()
    assert not Dispute.objects.exists()
    memory.refresh_from_db()
    assert not memory.disputed


@pytest.mark.parametrize(
    ("action", "fields"),
    [
        ("comment", {"body": "Checking\x00."}),
        ("resolve", {"resolution": "reject", "note": "Still\x00 true."}),
        ("resolve", {"resolution": "update", "content": "The cache key\x00 has no locale."}),
    ],
)
def test_a_nul_character_in_the_dispute_thread_is_refused_with_a_message(
    session_client, alice, bob, memory, action, fields
):
    from apps.governance import services

    dispute = services.dispute_open(memory=memory, actor=bob.principal, reason="Not since v2.")
    memory.refresh_from_db()
    version = memory.version
    base = f"/o/{alice.org.slug}/p/{alice.project.slug}"
    client = _client(session_client, alice)
    response = client.post(f"{base}/disputes/{dispute.id}/{action}/", fields)
    assert response.status_code == 422
    assert "Null characters are not allowed." in response.content.decode()
    dispute.refresh_from_db()
    memory.refresh_from_db()
    assert dispute.is_open and list(dispute.comments.values_list("kind", flat=True)) == ["opened"]
    assert memory.content == "The cache key includes the locale." and memory.version == version


def test_a_refused_resolution_shows_the_page_again_with_what_the_steward_wrote(
    session_client, alice, bob, person_with_role, memory
):
    """A refused resolution redirected to the page: the steward's note was gone."""
    from apps.governance import services

    dispute = services.dispute_open(memory=memory, actor=bob.principal, reason="Not since v2.")
    base = f"/o/{alice.org.slug}/p/{alice.project.slug}"
    steward = _client(session_client, person_with_role(Role.STEWARD))
    posted = {
        "content": "The cache key has no locale since v2.",
        "note": "Checked the v2 changelog & the code.",
    }
    response = steward.post(f"{base}/disputes/{dispute.id}/resolve/", posted)
    page = response.content.decode()
    assert response.status_code == 422 and "Choose how to resolve the dispute." in page
    assert ">Checked the v2 changelog &amp; the code.</textarea>" in page
    assert ">The cache key has no locale since v2.</textarea>" in page
    dispute.refresh_from_db()
    assert dispute.is_open


def test_a_resolution_of_a_dispute_closed_meanwhile_says_so_and_keeps_the_note(
    session_client, alice, bob, person_with_role, memory
):
    from apps.governance import services

    dispute = services.dispute_open(memory=memory, actor=bob.principal, reason="Not since v2.")
    services.dispute_resolve(dispute=dispute, actor=alice.principal, resolution="reject", note="Still true.")
    base = f"/o/{alice.org.slug}/p/{alice.project.slug}"
    steward = _client(session_client, person_with_role(Role.STEWARD))
    response = steward.post(
        f"{base}/disputes/{dispute.id}/resolve/", {"resolution": "deprecate", "note": "Retire it."}
    )
    page = response.content.decode()
    assert response.status_code == 422 and "resolved meanwhile" in page
    assert ">Retire it.</textarea>" in page and 'value="deprecate" required checked' in page
    assert "Override</button>" not in page
    dispute.refresh_from_db()
    assert dispute.resolution == "reject"


def test_a_refused_comment_keeps_its_text(session_client, alice, bob, memory):
    from apps.governance import services

    dispute = services.dispute_open(memory=memory, actor=bob.principal, reason="Not since v2.")
    base = f"/o/{alice.org.slug}/p/{alice.project.slug}"
    client = _client(session_client, alice)
    response = client.post(f"{base}/disputes/{dispute.id}/comment/", {"body": "Looked at the cron\x00 job."})
    page = response.content.decode()
    assert response.status_code == 422 and 'data-testid="comment-error"' in page
    assert ">Looked at the cron" in page


def test_a_nul_character_in_a_trust_change_reason_changes_nothing(session_client, alice):
    from apps.governance.models import ProjectTrust, TrustChange

    base = f"/o/{alice.org.slug}/p/{alice.project.slug}"
    client = _client(session_client, alice)
    response = client.post(f"{base}/trust/set/", {"level": "1", "reason": "Careful\x00 now."})
    assert response.status_code == 302 and response["Location"] == f"{base}/trust/"
    assert "Null characters are not allowed." in client.get(response["Location"]).content.decode()
    assert not TrustChange.objects.exists() and not ProjectTrust.objects.exists()
