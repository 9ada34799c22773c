"""The A/B report on a simulated population of 400 sessions fed through the event API."""

from __future__ import annotations

import pytest

from apps.insights import rollups
from apps.insights.models import DailyRollup, SessionMetrics
from apps.observer.models import Session
from tests.insights.population import populate

pytestmark = pytest.mark.django_db(transaction=False)
SESSIONS = 400


def split_evenly_enough(ab_agent, alice):
    # The default split gives control 5 % (about 20 of 400 sessions, at random): now and then
    # fewer than the 10 a metric needs. Three in ten in control keeps every group well above it.
    ab_agent.client.put(
        f"projects/{alice.project.id}/experiment", {"enabled": True, "control_pct": 30, "passive_pct": 10}
    )


def metric(report, key):
    return next(m for m in report["metrics"] if m["key"] == key)


def snapshot():
    return sorted(
        DailyRollup.objects.values_list("project_id", "period_id", "day", "group", "sessions", "sums")
    )


def test_full_memory_with_25_percent_fewer_tool_calls_shows_that_effect_and_no_other(ab_agent, alice):
    split_evenly_enough(ab_agent, alice)
    population = populate(ab_agent, SESSIONS, tool_call_ratio=0.75)
    assert set(population.groups) == {"control", "passive", "full"}
    assert Session.objects.filter(project=alice.project, status="completed").count() == SESSIONS

    assert rollups.rollup_run().sessions == SESSIONS
    report = ab_agent.client.get(f"projects/{alice.project.id}/insights").json()

    assert report["groups"] == dict(population.groups)
    calls = metric(report, "tool_calls")
    assert calls["enough"] and calls["significant"] and calls["effect_kind"] == "relative"
    low, high = calls["interval"]
    assert low <= -0.25 <= high and high < 0
    assert calls["n_control"] == population.groups["control"] and calls["n_full"] == population.groups["full"]

    # Tokens per task were drawn alike in every group: no effect, and none claimed.
    tokens = metric(report, "tokens")
    assert tokens["enough"] and not tokens["significant"]
    assert tokens["interval"][0] <= 0 <= tokens["interval"][1]
    saved = report["tokens_saved"]
    assert saved["interval"][0] <= 0 <= saved["interval"][1] and "estimate" in saved["label"]

    # Rerunning the rollup changes nothing, nor does a run that rescans every session.
    before = snapshot()
    assert rollups.rollup_run().sessions == 0
    rollups.RollupCursor.objects.all().delete()
    assert rollups.rollup_run().sessions == 0
    assert snapshot() == before and SessionMetrics.objects.count() == SESSIONS
    assert ab_agent.client.get(f"projects/{alice.project.id}/insights").json() == report


def test_no_effect_gives_an_interval_around_zero_that_is_not_called_significant(ab_agent, alice):
    split_evenly_enough(ab_agent, alice)
    populate(ab_agent, 120, tool_call_ratio=1.0)
    rollups.rollup_run()
    calls = metric(ab_agent.client.get(f"projects/{alice.project.id}/insights").json(), "tool_calls")
    assert calls["enough"] and not calls["significant"]
    assert calls["interval"][0] <= 0 <= calls["interval"][1]


def test_runs_that_add_a_few_sessions_at_a_time_sum_to_the_sessions_figures(ab_agent, alice):
    from apps.insights import metrics

    split_evenly_enough(ab_agent, alice)
    populate(ab_agent, 30, tool_call_ratio=0.75)
    assert rollups.rollup_run(batch=4).sessions == 30  # (eight runs' worth, each adding to today's sums)
    populate(ab_agent, 7, tool_call_ratio=0.75)
    assert rollups.rollup_run(batch=4).sessions == 7

    expected: dict[tuple, dict[str, list[float]]] = {}
    for row in SessionMetrics.objects.filter(project=alice.project).values():
        into = expected.setdefault((row["period_id"], row["day"], row["group"]), {})
        for name, (n, value) in metrics.contributions(row).items():
            acc = into.setdefault(name, [0.0, 0.0, 0.0])
            acc[0], acc[1], acc[2] = acc[0] + n, acc[1] + value, acc[2] + value * value
    rollup_rows = DailyRollup.objects.filter(project=alice.project)
    assert {(r.period_id, r.day, r.group): r.sums for r in rollup_rows} == expected
    assert sum(r.sessions for r in rollup_rows) == 37
