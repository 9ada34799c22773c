"""The suite's commit-hook emulation fires hooks on application commit, never on rollback."""

import pytest
from django.db import transaction


def test_a_hook_fires_when_the_application_block_commits(db):
    fired = []
    with transaction.atomic():
        transaction.on_commit(lambda: fired.append("outer"))
        with transaction.atomic():
            transaction.on_commit(lambda: fired.append("inner"))
        assert fired == []
    assert fired == ["outer", "inner"]


def test_a_hook_is_dropped_when_the_block_rolls_back(db):
    fired = []
    with pytest.raises(RuntimeError), transaction.atomic():
        transaction.on_commit(lambda: fired.append("x"))
        raise RuntimeError
    assert fired == []


def test_a_hook_outside_any_application_block_fires_at_once(db):
    fired = []
    transaction.on_commit(lambda: fired.append(1))
    assert fired == [1]
