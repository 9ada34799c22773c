"""Hooks tests embed with the hashing provider (fast, offline) and pin sessions to the memory
group unless a test asks for the control group."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"
    settings.EMBEDDING_DIMENSIONS = 384


@pytest.fixture
def memory_group(monkeypatch):
    from apps.observer import services

    monkeypatch.setattr(services, "ab_group", lambda session_id, project=None: "full")


@pytest.fixture(autouse=True)
def _context_builders_closed():
    """The threads that build hooks' context keep their connections: closed after each test,
    before its database is flushed or dropped."""
    yield
    from apps.agents.budget import close_context_builders

    close_context_builders()
