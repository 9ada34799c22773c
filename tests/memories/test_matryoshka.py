"""Matryoshka models (OpenAI's text-embedding-3): an HNSW index over the first 256 dimensions
finds candidates, the full vectors order them. Embedded through the real
`openai` SDK against the fake server."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection

from apps.memories import vectors
from apps.memories.embedding.providers import embed_query, get_provider
from apps.memories.models import Memory
from apps.memories.search import Scope, dense_path
from apps.memories.selectors import find_near_duplicate, memories_visible
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db

DIMS = 512
TOPICS = [
    "paginator", "jwt tokens", "cache keys", "bulk create", "admin list", "signals", "migrations",
    "form validation", "select related", "transactions", "middleware order", "static files",
]  # fmt: skip


@pytest.fixture
def openai_512(settings, fake_openai):
    settings.EMBEDDING_PROVIDER = "openai"
    settings.EMBEDDING_DIMENSIONS = DIMS
    return get_provider()


def _indexes() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memories_memory'")
        return dict(cursor.fetchall())


def test_migrate_makes_the_providers_prefix_index(openai_512):
    assert openai_512.matryoshka
    vectors.ensure_provider_index()
    indexes = _indexes()
    assert "subvector" in indexes["memory_embedding_hnsw_512_p256"]
    assert "WHERE (embedding_dims = 512)" in indexes["memory_embedding_hnsw_512_p256"]
    assert "memory_embedding_hnsw_512" not in indexes  # the full vectors are read, not indexed
    vectors.ensure_provider_index()  # idempotent
    assert len(_indexes()) == len(indexes)


def test_the_full_vectors_order_the_prefix_indexs_candidates(alice, openai_512):
    vectors.ensure_provider_index()
    for topic in TOPICS:
        make_memory(alice, content=f"Notes about {topic} in the shop service.", related_files=[f"{topic}.py"])
    query = embed_query("how the paginator pages the cache keys", openai_512)
    scope = Scope.of(memories_visible(principal=alice.principal, project=alice.project).active())

    found = dense_path(scope, query, model_id=openai_512.model_id, limit=5, matryoshka=True)

    stored = {
        str(i): np.asarray(v, dtype=np.float32) for i, v in Memory.objects.values_list("id", "embedding")
    }
    exact = sorted(stored, key=lambda i: -float(np.dot(stored[i], query)))[:5]
    assert [memory_id for memory_id, _, _ in found] == exact
    assert [round(cosine, 5) for _, cosine, _ in found] == [
        round(float(np.dot(stored[i], query)), 5) for i in exact
    ]


def test_the_candidates_come_through_the_prefix_index(alice, openai_512):
    vectors.ensure_provider_index()
    make_memory(alice, content="Notes about the paginator.")
    sql, params = vectors.nearest(
        DIMS,
        columns="id",
        where="project_id = %s AND embedding_dims = %s",
        params=[str(alice.project.id), DIMS],
        limit=3,
        query_params=[vectors.vector_literal(embed_query("paginator", openai_512))],
        matryoshka=True,
    )
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # a three-row table would be read whole
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "memory_embedding_hnsw_512_p256" in plan


def test_near_duplicates_are_found_through_the_prefix_index_too(alice, openai_512):
    vectors.ensure_provider_index()
    original = make_memory(alice, type="gotcha", content="The paginator counts rows with a second query.")
    make_memory(alice, type="gotcha", content="Cache keys are versioned per deploy.")
    near = find_near_duplicate(
        project=alice.project, memory_type="gotcha", text="The paginator counts rows with a second query."
    )
    assert near is not None and near.id == original.id
    assert find_near_duplicate(project=alice.project, memory_type="pattern", text=original.content) is None
