"""Dashboard tests embed with the hashing provider (fast, offline); pages are fetched signed in."""

from __future__ import annotations

import pytest
from django.test import Client


@pytest.fixture(autouse=True)
def hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384


@pytest.fixture
def signed_in():
    """`signed_in(person)` → a test client with that person's session (CSRF not enforced)."""

    def make(person) -> Client:
        client = Client()
        client.force_login(person.user, backend="django.contrib.auth.backends.ModelBackend")
        return client

    return make


@pytest.fixture
def base(alice) -> str:
    return f"/o/{alice.org.slug}/p/{alice.project.slug}"
