"""Alice's agent, its sessions split into A/B groups by the real assigner (not pinned)."""

from __future__ import annotations

import pytest

from tests.observer.conftest import Agent


@pytest.fixture
def ab_agent(alice, api_client) -> Agent:
    return Agent(api_client(alice.key), str(alice.project.id))
