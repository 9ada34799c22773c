"""Embedding gaps: the cache key's three parts, queued embedding, failures, one model per comparison."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signing import SignedPackage
from django_q.tasks import _sync

from apps.memories import services
from apps.memories.embedding import providers
from apps.memories.embedding.providers import HashingEmbeddings, cache_key, embed_cached
from apps.memories.models import EmbeddingCache, EmbeddingStatus, Memory
from apps.memories.search import SearchRequest, search
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db


class CountingEmbeddings(HashingEmbeddings):
    """The hashing provider under any model id, remembering what it was asked to embed."""

    def __init__(self, dimensions: int = 384, model_id: str | None = None) -> None:
        super().__init__(dimensions)
        if model_id is not None:
            self.model_id = model_id
        self.asked: list[str] = []

    def embed(self, texts: list[str]) -> np.ndarray:
        self.asked.extend(texts)
        return super().embed(texts)


class BrokenEmbeddings(HashingEmbeddings):
    def embed(self, texts: list[str]) -> np.ndarray:
        raise RuntimeError("embedding service unavailable")


TEXT = "Prices are stored in integer cents"


def test_the_same_text_model_and_dims_hit_the_cache():
    first = CountingEmbeddings(384)
    embed_cached([TEXT], first)
    again = CountingEmbeddings(384)
    embed_cached([TEXT], again)
    assert first.asked == [TEXT] and again.asked == []
    assert EmbeddingCache.objects.filter(key=cache_key(TEXT, "hashing-v1-384", 384)).exists()


def test_another_model_id_or_dimension_count_misses_the_cache():
    embed_cached([TEXT], CountingEmbeddings(384))
    other_model = CountingEmbeddings(384, model_id="openai/text-embedding-3-small")
    other_dims = CountingEmbeddings(256, model_id="hashing-v1-384")
    embed_cached([TEXT], other_model)
    vectors = embed_cached([TEXT], other_dims)
    assert other_model.asked == [TEXT] and other_dims.asked == [TEXT]
    assert vectors.shape == (1, 256)
    stored = set(EmbeddingCache.objects.values_list("model_id", "dims"))
    assert stored == {
        ("hashing-v1-384", 384),
        ("openai/text-embedding-3-small", 384),
        ("hashing-v1-384", 256),
    }


def test_cache_key_is_sha256_of_text_model_and_dims():
    import hashlib

    assert cache_key(TEXT, "m", 384) == hashlib.sha256(f"{TEXT}:m:384".encode()).hexdigest()
    assert len({cache_key(TEXT, "m", 384), cache_key(TEXT, "n", 384), cache_key(TEXT, "m", 256)}) == 3


@pytest.fixture
def queued_embedding(settings, monkeypatch):
    """EMBEDDING_MODE "async" with django-q2 queueing to its configured broker (Redis where
    REDIS_URL is set, as in CI; the ORM otherwise) instead of running inline."""
    settings.EMBEDDING_MODE = "async"
    monkeypatch.setattr(Conf, "SYNC", False)
    broker = get_broker(settings.QUEUE_LANES["bulk"])  # (embeddings go on the bulk lane)
    broker.purge_queue()  # a Redis list outlives the test's transaction
    yield
    broker.purge_queue()


def _queued_embed_tasks() -> list[dict]:
    """The embedding tasks waiting in the broker, read without taking them off the queue."""
    broker = get_broker(settings.QUEUE_LANES["bulk"])
    if Conf.ORM:
        packages = [q.payload for q in OrmQ.objects.all()]
    else:
        packages = broker.connection.lrange(broker.list_key, 0, -1)
    tasks = [SignedPackage.loads(package) for package in packages]
    return [task for task in tasks if task.get("func") == "apps.memories.tasks.embed_memories"]


def test_a_queued_memory_is_pending_until_its_task_runs(alice, api_client, queued_embedding, monkeypatch):
    response = api_client(alice.key).post(
        f"projects/{alice.project.id}/memories",
        {"type": "gotcha", "content": "Queued embeddings come later."},
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["embedding_status"] == "pending" and body["embedding_model"] == ""
    [queued] = _queued_embed_tasks()
    assert queued["args"] == ([body["id"]],) and queued["group"] == "memories.embed"

    # Run the queued package through django-q's worker, in this test's transaction (sync mode
    # keeps the connection a worker would otherwise close).
    monkeypatch.setattr(Conf, "SYNC", True)
    _sync(SignedPackage.dumps(queued))

    memory = Memory.objects.get(id=body["id"])
    assert memory.embedding_status == EmbeddingStatus.READY
    assert memory.embedding_model == "hashing-v1-384" and len(memory.embedding) == 384


def test_the_embedding_task_is_queued_only_when_the_transaction_commits(alice, queued_embedding):
    with transaction.atomic():
        memory = make_memory(alice, content="Inside a larger transaction.")
        # The ORM broker's task row is written in the same transaction (workers see it when, and
        # only if, it commits); Redis is handed the task after the commit.
        assert len(_queued_embed_tasks()) == (1 if Conf.ORM else 0)
    [queued] = _queued_embed_tasks()
    assert queued["args"] == ([str(memory.id)],)


def test_a_rolled_back_memory_queues_no_embedding(alice, queued_embedding):
    with pytest.raises(RuntimeError), transaction.atomic():
        make_memory(alice, content="Never committed.")
        raise RuntimeError("abort")
    assert _queued_embed_tasks() == []


def test_a_provider_that_fails_leaves_the_memory_stored_and_failed(alice, api_client, monkeypatch):
    monkeypatch.setattr(providers, "get_provider", BrokenEmbeddings)
    response = api_client(alice.key).post(
        f"projects/{alice.project.id}/memories", {"type": "gotcha", "content": "Embedding will fail."}
    )
    assert response.status_code == 201, response.content
    assert response.json()["embedding_status"] == "failed"
    memory = Memory.objects.get(id=response.json()["id"])
    assert memory.embedding is None and memory.embedding_model == ""
    assert memory.embedding_error == "embedding service unavailable"
    assert not EmbeddingCache.objects.exists()


def test_a_failed_memory_is_ready_once_the_provider_works_again(alice, monkeypatch):
    with monkeypatch.context() as patched:
        patched.setattr(providers, "get_provider", BrokenEmbeddings)
        memory = make_memory(alice, content="Retry me later.")
    assert Memory.objects.get(id=memory.id).embedding_status == EmbeddingStatus.FAILED
    assert services.memories_embed([memory.id]) == 1
    memory.refresh_from_db()
    assert memory.embedding_status == EmbeddingStatus.READY and memory.embedding_error == ""


def test_a_vector_of_text_edited_while_the_model_ran_is_not_stored(alice, monkeypatch):
    memory = make_memory(alice, content="Retries use exponential backoff.")

    class EditedMeanwhile(HashingEmbeddings):
        def embed(self, texts: list[str]) -> np.ndarray:
            if not Memory.objects.filter(id=memory.id, content__startswith="Retries stop").exists():
                services.memory_update(
                    memory=Memory.objects.get(id=memory.id),
                    actor=alice.principal,
                    changes={"content": "Retries stop after five attempts."},
                )
            return super().embed(texts)

    provider = EditedMeanwhile()
    monkeypatch.setattr(providers, "get_provider", lambda: provider)
    EmbeddingCache.objects.all().delete()  # (so the model runs)
    assert services.memories_embed([memory.id]) == 0  # it embedded the old text: dropped
    memory.refresh_from_db()  # what the edit's own task stored (in this sync setup, at once) stays
    expected = provider.embed([services.embedding_text(memory)])[0]
    assert memory.embedding_status == EmbeddingStatus.READY
    assert np.allclose(np.asarray(memory.embedding, dtype=np.float32), expected, atol=1e-6)


def test_a_failure_on_text_edited_meanwhile_leaves_the_new_texts_vector(alice, monkeypatch):
    memory = make_memory(alice, content="Webhooks retry three times.")

    class EditedThenFailing(HashingEmbeddings):
        def embed(self, texts: list[str]) -> np.ndarray:
            if Memory.objects.filter(id=memory.id, content__startswith="Webhooks retry five").exists():
                return super().embed(texts)  # the edit's own task, on the new text
            services.memory_update(
                memory=Memory.objects.get(id=memory.id),
                actor=alice.principal,
                changes={"content": "Webhooks retry five times."},
            )
            raise RuntimeError("timeout")

    monkeypatch.setattr(providers, "get_provider", EditedThenFailing)
    EmbeddingCache.objects.all().delete()  # (so the model runs)
    assert services.memories_embed([memory.id]) == 0
    memory.refresh_from_db()
    assert memory.embedding_status == EmbeddingStatus.READY and memory.embedding_error == ""


def test_an_expired_cache_entry_is_renewed_not_recomputed_every_time(monkeypatch):
    provider = CountingEmbeddings()
    embed_cached(["Session tokens rotate hourly."], provider)
    EmbeddingCache.objects.update(expires_at=timezone.now() - timedelta(days=1))
    embed_cached(["Session tokens rotate hourly."], provider)  # expired: computed again, renewed
    embed_cached(["Session tokens rotate hourly."], provider)  # fresh again: from the cache
    assert len(provider.asked) == 2
    assert EmbeddingCache.objects.get().expires_at > timezone.now()


def test_vectors_of_another_model_are_never_compared(alice):
    same = make_memory(alice, content="verifyJwt rejects tokens with clock skew.")
    other = make_memory(alice, content="verifyJwt rejects tokens with clock skew, always.")
    Memory.objects.filter(id=other.id).update(embedding_model="openai/text-embedding-3-small")
    with connection.cursor() as cursor:
        # Plan on this table's real size (as autovacuum would in production): this test is about
        # the model filter, not about the ANN index (full of rolled-back rows from earlier tests).
        cursor.execute("ANALYZE memories_memory")

    result = search(
        SearchRequest(principal=alice.principal, project=alice.project, query="verifyJwt clock skew", limit=8)
    )

    assert result.rankings["dense"] == [str(same.id)]
    assert set(result.rankings["keyword"]) == {str(same.id), str(other.id)}
    hits = {hit.memory.id: hit for hit in result.hits}
    assert hits[same.id].components["cosine"] is not None
    assert hits[other.id].components["cosine"] is None  # found by keyword, never by distance


def test_near_duplicates_ignore_vectors_of_another_model(alice):
    from apps.memories.selectors import find_near_duplicate

    text = "QuerySet.update() does not call save() or send signals"
    memory = make_memory(alice, content=text)
    assert find_near_duplicate(project=alice.project, text=text, memory_type="gotcha") == memory
    Memory.objects.filter(id=memory.id).update(embedding_model="openai/text-embedding-3-small")
    assert find_near_duplicate(project=alice.project, text=text, memory_type="gotcha") is None


def test_a_memory_is_embedded_from_its_context_content_and_payload(alice):
    memory = make_memory(
        alice,
        type="dead_end",
        content="Raising the skew did not help.",
        related_files=["auth/tokens.ts"],
        related_modules=["auth"],
        payload={"approach_tried": "raise the clock skew", "why_it_failed": "tokens were expired"},
    )
    expected = (
        "Files: auth/tokens.ts | Module: auth | Type: dead_end\n\n"
        "Raising the skew did not help.\nraise the clock skew tokens were expired"
    )
    memory.refresh_from_db()
    assert EmbeddingCache.objects.filter(key=cache_key(expected, "hashing-v1-384", 384)).exists()
    assert np.allclose(memory.embedding, HashingEmbeddings(384).embed([expected])[0], atol=1e-6)
