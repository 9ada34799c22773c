"""The Lifecycle page's buttons through the Django client: an admin's POST queues the work and
comes back to the page; a member's is refused (403) and an outsider's is a 404, changing
nothing; a GET on a button's address is refused (405)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.memories.models import Memory
from apps.tenants.models import AuditLog
from tests.memories.factories import make_memory


def _url(project, tail: str = "") -> str:
    return f"/o/{project.organization.slug}/p/{project.slug}/lifecycle/{tail}"


@pytest.fixture
def weak(alice) -> Memory:
    memory = make_memory(alice, content="Weak and forgotten.", confidence=0.1)
    Memory.objects.filter(id=memory.id).update(created_at=timezone.now() - timedelta(days=90))
    return memory


def test_an_admin_prunes_from_the_page(alice, weak, session_client):
    client = session_client(alice, enforce_csrf=False).client
    page = client.get(_url(alice.project))
    assert page.status_code == 200 and b"Weak and forgotten." in page.content
    response = client.post(_url(alice.project, "prune/"))
    assert response.status_code == 302 and response["Location"] == _url(alice.project)
    assert Memory.objects.get(id=weak.id).deprecated
    assert client.post(_url(alice.project, "reindex/")).status_code == 302
    assert AuditLog.objects.filter(action="project.reindex_queued").count() == 1


def test_a_member_gets_403_and_an_outsider_404(alice, bob, charlie, weak, session_client):
    for person, status in ((bob, 403), (charlie, 404)):
        client = session_client(person, enforce_csrf=False).client
        assert client.get(_url(alice.project)).status_code == status
        for tail in ("prune/", "reindex/"):
            assert client.post(_url(alice.project, tail)).status_code == status
    assert not Memory.objects.get(id=weak.id).deprecated
    assert (
        not AuditLog.objects.filter(action__startswith="project.").filter(action__endswith="_queued").exists()
    )


def test_a_button_needs_a_post(alice, session_client):
    client = session_client(alice, enforce_csrf=False).client
    assert client.get(_url(alice.project, "prune/")).status_code == 405


def test_the_page_is_not_offered_to_a_member(alice, bob, session_client):
    member = session_client(bob, enforce_csrf=False).client.get(
        f"/o/{alice.org.slug}/p/{alice.project.slug}/"
    )
    admin = session_client(alice, enforce_csrf=False).client.get(
        f"/o/{alice.org.slug}/p/{alice.project.slug}/"
    )
    assert _url(alice.project).encode() in admin.content
    assert _url(alice.project).encode() not in member.content
