"""A daphne of the test database per test (the offline tests stop it), and a HOME per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import HASHING_EMBEDDINGS, daphne_env, start_daphne, stop
from tests.processes import database_url, free_port


def clients_daphne_env(url: str) -> dict[str, str]:
    return daphne_env(
        url, **HASHING_EMBEDDINGS, RATE_LIMIT_ENABLED="0", MODELS_WARM_AT_START="0", DEVICE_FLOW_INTERVAL="1"
    )


@pytest.fixture
def server(django_db_setup, django_db_blocker, transactional_db, settings) -> Iterator[dict]:
    """A live daphne: `server["url"]`, and `server["process"]` to stop it."""
    settings.EMBEDDING_PROVIDER = "hashing"  # (what the test itself stores, as the server embeds it)
    settings.EMBEDDING_DIMENSIONS = 384
    with django_db_blocker.unblock():
        url = database_url()
    port = free_port()
    process = start_daphne(port, clients_daphne_env(url))
    yield {"url": f"http://127.0.0.1:{port}", "process": process}
    stop(process)


@pytest.fixture
def home(tmp_path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path
