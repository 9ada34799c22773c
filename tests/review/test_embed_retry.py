"""A memory whose embedding failed says so on its card and its page, with the reason, and a
writer can try it again from there; nobody else can, and nothing else is retried."""

from __future__ import annotations

import json

import pytest

from apps.memories.models import EmbeddingStatus, Memory
from apps.tenants.roles import Role
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db


@pytest.fixture
def failed(alice) -> Memory:
    memory = make_memory(alice, content="Webhooks are signed with the org's secret.")
    Memory.objects.filter(id=memory.id).update(
        embedding_status=EmbeddingStatus.FAILED,
        embedding_error="the embedding service timed out",
        embedding=None,
    )
    memory.refresh_from_db()
    return memory


def retry_url(base, memory) -> str:
    return f"{base}/memories/{memory.id}/retry-embedding/"


def test_a_failed_embedding_shows_its_reason_and_a_retry_button(alice, failed, signed_in, base):
    client = signed_in(alice)
    listed = client.get(f"{base}/memories/").content.decode()
    assert 'data-testid="embedding-failed"' in listed and "the embedding service timed out" in listed
    assert f'id="retry-embedding-{failed.id}"' in listed
    page = client.get(f"{base}/memories/{failed.id}/").content.decode()
    assert "Failed: the embedding service timed out" in page


def test_retry_embeds_it_again_and_answers_with_the_card(alice, failed, signed_in, base):
    response = signed_in(alice).post(retry_url(base, failed), {"context": "list"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    assert json.loads(response["HX-Trigger-After-Settle"])["toast"]["value"].startswith("Embedded")
    body = response.content.decode()
    assert 'data-testid="embedding-failed"' not in body and f"retry-embedding-{failed.id}" not in body
    failed.refresh_from_db()
    assert failed.embedding_status == EmbeddingStatus.READY and failed.embedding_error == ""
    assert failed.embedding is not None and failed.embedding_model == "hashing-v1-384"


def test_a_memory_that_did_not_fail_is_not_retried(alice, signed_in, base):
    memory = make_memory(alice, content="Exports expire after seven days.")
    memory.refresh_from_db()
    embedded_at = memory.embedded_at
    assert embedded_at is not None
    response = signed_in(alice).post(retry_url(base, memory))
    assert response.status_code == 302
    memory.refresh_from_db()
    assert memory.embedding_status == EmbeddingStatus.READY and memory.embedded_at == embedded_at


def test_a_viewer_cannot_retry_and_sees_no_button(failed, person_with_role, signed_in, base):
    viewer = signed_in(person_with_role(Role.VIEWER))
    assert f"retry-embedding-{failed.id}" not in viewer.get(f"{base}/memories/").content.decode()
    assert viewer.post(retry_url(base, failed)).status_code == 403
    failed.refresh_from_db()
    assert failed.embedding_status == EmbeddingStatus.FAILED


def test_an_outsider_gets_404(failed, charlie, signed_in, base):
    assert signed_in(charlie).post(retry_url(base, failed)).status_code == 404
