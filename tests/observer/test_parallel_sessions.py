"""Which sessions of one work unit count as parallel agents: a `parallel_conflict` needs two
sessions at work at the same time (or a parallel group both clients named), not subtasks of one
spec that ran one after another."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from apps.memories.models import Memory
from apps.observer.models import Session
from apps.observer.parallel import Span, ran_in_parallel
from apps.observer.traces import Trace

pytestmark = pytest.mark.django_db


def _conflicts() -> list[Memory]:
    return [m for m in Memory.objects.filter(type="gotcha") if "signal:parallel_conflict" in m.tags]


def _subtask(n: int, **extra) -> dict:
    return {"work_unit": {"hierarchy": ["spec_7", f"subtask_{n}"], **extra}}


def _finish(agent, session_id: str) -> None:
    agent.validate(session_id)
    agent.complete(session_id)


def test_subtasks_run_one_after_another_are_no_conflict(agent):
    first = agent.open(**_subtask(1))
    agent.send(first["id"], Trace().edit("shop/cart.py").events)
    _finish(agent, first["id"])
    second = agent.open(**_subtask(2))
    agent.send(second["id"], Trace().edit("shop/cart.py").events)
    _finish(agent, second["id"])
    # (the same parent: the same group, so only time told them apart)
    groups = set(Session.objects.values_list("parallel_group", "parallel_declared"))
    assert groups == {("spec_7", False)}
    assert _conflicts() == []


def test_overlapping_subtasks_editing_one_file_conflict(agent):
    first = agent.open(**_subtask(1))
    second = agent.open(**_subtask(2))
    agent.send(first["id"], Trace().edit("shop/cart.py").events)
    agent.send(second["id"], Trace().edit("shop/cart.py").events)
    _finish(agent, first["id"])
    _finish(agent, second["id"])
    (conflict,) = _conflicts()
    assert conflict.related_files == ["shop/cart.py"]


def test_overlapping_subtasks_editing_different_files_do_not_conflict(agent):
    first = agent.open(**_subtask(1))
    second = agent.open(**_subtask(2))
    agent.send(first["id"], Trace().edit("shop/cart.py").events)
    agent.send(second["id"], Trace().edit("shop/checkout.py").events)
    _finish(agent, first["id"])
    _finish(agent, second["id"])
    assert _conflicts() == []


def test_a_session_that_went_quiet_before_another_began_ran_before_it(agent):
    abandoned = agent.open(**_subtask(1))
    agent.send(abandoned["id"], Trace().edit("shop/cart.py").events)  # never completed
    later = agent.open(**_subtask(2))
    agent.send(later["id"], Trace().edit("shop/cart.py").events)
    _finish(agent, later["id"])
    assert _conflicts() == []


def test_an_open_session_still_sending_runs_alongside(agent):
    running = agent.open(**_subtask(1))
    later = agent.open(**_subtask(2))
    agent.send(later["id"], Trace().edit("shop/cart.py").events)
    agent.send(running["id"], Trace().edit("shop/cart.py").events)  # after `later` began
    _finish(agent, later["id"])
    assert len(_conflicts()) == 1


def test_a_group_both_clients_named_is_parallel_whenever_they_ran(agent):
    first = agent.open(**_subtask(1, parallel_group="wave-2"))
    agent.send(first["id"], Trace().edit("shop/cart.py").events)
    _finish(agent, first["id"])
    second = agent.open(**_subtask(2, parallel_group="wave-2"))
    agent.send(second["id"], Trace().edit("shop/cart.py").events)
    _finish(agent, second["id"])
    assert set(Session.objects.values_list("parallel_group", "parallel_declared")) == {("wave-2", True)}
    assert len(_conflicts()) == 1


T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def _span(start: int, end: int, declared: bool = False) -> Span:
    return Span(T0 + timedelta(minutes=start), T0 + timedelta(minutes=end), declared)


def test_spans_overlap_or_not():
    assert ran_in_parallel(_span(0, 10), _span(5, 15))
    assert ran_in_parallel(_span(5, 15), _span(0, 10))
    assert ran_in_parallel(_span(0, 30), _span(5, 10))
    assert not ran_in_parallel(_span(0, 10), _span(10, 20))  # one ended as the other started
    assert not ran_in_parallel(_span(20, 30), _span(0, 10))
    assert ran_in_parallel(_span(0, 10, True), _span(20, 30, True))
    assert not ran_in_parallel(_span(0, 10, True), _span(20, 30))  # one side's word is not enough
