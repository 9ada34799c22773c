"""Memories tests embed with the hashing provider unless a test asks for the real model
(`real_embeddings`), so the suite stays fast; the MiniLM model loads once per process."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def hashing_embeddings(settings, request):
    if "real_embeddings" in request.fixturenames:
        return
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384


@pytest.fixture
def real_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "local"
