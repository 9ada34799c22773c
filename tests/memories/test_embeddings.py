"""The embedding cache: a text embedded once comes back from the database, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from apps.memories.embedding.providers import embed_cached, get_provider
from apps.memories.models import EmbeddingCache

pytestmark = pytest.mark.django_db(transaction=False)


def test_a_cached_vector_comes_back_exactly_without_asking_the_provider(monkeypatch):
    provider = get_provider()
    texts = ["Prices are stored in integer cents", "Refunds go through the ledger"]
    first = embed_cached(texts, provider)
    assert EmbeddingCache.objects.count() == 2

    def refuse(batch):
        raise AssertionError(f"embedded again: {batch}")

    monkeypatch.setattr(provider, "embed", refuse)
    again = embed_cached(list(reversed(texts)), provider)
    assert again.dtype == np.float32 and np.array_equal(again, first[::-1])
