"""The insights API: the experiment setting and its periods, the export, the passive group's
limits, telemetry and its tightening, and what another tenant sees."""

from __future__ import annotations

import csv
import io
import uuid

import pytest

from apps.insights import ab, retrieval, rollups, telemetry
from apps.insights.models import ExperimentPeriod, RetrievalDay, ThresholdAdjustment
from apps.memories.models import Memory
from apps.observer import services
from apps.observer.models import PatternStat
from apps.tenants.models import AuditLog
from tests.insights.population import populate
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db(transaction=False)


def test_another_tenants_insights_are_not_found(ab_agent, alice, charlie, api_client):
    as_charlie = api_client(charlie.key)
    for path in ("insights", "experiment", "insights/telemetry", "insights/phase-weights"):
        response = as_charlie.get(f"projects/{alice.project.id}/{path}")
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert ab_agent.client.get(f"projects/{alice.project.id}/insights").status_code == 200


def test_a_change_of_split_starts_a_new_period_and_comparisons_never_mix_them(
    ab_agent, alice, bob, api_client
):
    url = f"projects/{alice.project.id}/experiment"
    populate(ab_agent, 6, tool_call_ratio=1.0)
    first = ab_agent.client.get(url).json()["current"]
    assert (first["control_pct"], first["passive_pct"], first["full_pct"]) == (5, 10, 85)

    body = {"enabled": True, "control_pct": 50, "passive_pct": 50, "reason": "no full memory for a day"}
    assert api_client(bob.key).put(url, body).status_code == 403  # (admins only)
    changed = ab_agent.client.put(url, body).json()
    assert changed["current"]["full_pct"] == 0 and changed["current"]["changed_by"].startswith("api_key:")
    assert [p["ended_at"] is None for p in changed["periods"]] == [True, False]
    assert AuditLog.objects.filter(action="insights.experiment_changed").count() == 1
    assert (
        ab_agent.client.put(url, body).json()["periods"] == changed["periods"]
    )  # (the same again: no new one)

    later = populate(ab_agent, 4, tool_call_ratio=1.0)
    assert set(later.groups) <= {"control", "passive"} and sum(later.groups.values()) == 4
    rollups.rollup_run()
    report = ab_agent.client.get(f"projects/{alice.project.id}/insights").json()
    assert report["period"]["id"] == changed["current"]["id"]
    assert report["groups"] == {
        "control": later.groups["control"],
        "passive": later.groups["passive"],
        "full": 0,
    }
    earlier = ab_agent.client.get(f"projects/{alice.project.id}/insights", {"period": first["id"]}).json()
    assert sum(earlier["groups"].values()) == 6

    bad = ab_agent.client.put(url, {"enabled": True, "control_pct": 60, "passive_pct": 10})
    assert bad.status_code == 422 and "control_pct" in bad.content.decode()


def test_the_split_is_murmurhash_of_session_and_project():
    session, project = uuid.uuid4(), uuid.uuid4()
    split = ab.Split(control_pct=5, passive_pct=10)
    expected = {True: "control"}.get(ab.bucket(session, project) < 5) or (
        "passive" if ab.bucket(session, project) < 15 else "full"
    )
    assert ab.assign(session, project, split) == expected
    groups = [ab.assign(uuid.uuid4(), project, split) for _ in range(4000)]
    assert 0.03 < groups.count("control") / 4000 < 0.07 and 0.07 < groups.count("passive") / 4000 < 0.13
    assert ab.assign(session, project, ab.Split(enabled=False)) == "full"


def test_csv_export_has_a_row_per_metric(ab_agent, alice):
    populate(ab_agent, 5, tool_call_ratio=1.0)
    rollups.rollup_run()
    url = f"projects/{alice.project.id}/insights"
    response = ab_agent.client.get(url, {"format": "csv"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    keys = [r["key"] for r in rows if r["section"] == "comparison"]
    assert "tool_calls" in keys and "graph_boost_rate" in keys
    assert any(r["section"] == "daily" for r in rows)
    by_accept = ab_agent.client.get(url, HTTP_ACCEPT="text/csv")
    assert by_accept.content == response.content
    backwards = ab_agent.client.get(url, {"from": "2026-11-20", "to": "2026-11-01"})
    forwards = ab_agent.client.get(url, {"from": "2026-11-01", "to": "2026-11-20"})
    assert backwards.status_code == 200 and backwards.json()["period"] == forwards.json()["period"]
    long = ab_agent.client.get(url, {"format": "json", "from": "2000-01-01", "to": "2026-11-28"}).json()
    assert long["period"]["date_from"] == "2025-11-28"  # (cut to the last 366 days)


def test_passive_sessions_get_session_start_memory_only(ab_agent, alice, monkeypatch):
    monkeypatch.setattr(services, "ab_group", lambda session_id, project=None: "passive")
    session = ab_agent.open(task="refunds", files=["shop/refunds.py"])
    assert session["ab_group"] == "passive"
    answer = ab_agent.client.post(f"sessions/{session['id']}/step-injection", {"step": 7}).json()
    assert answer == {"step": 7, "injection": None, "reason": "passive_group"}
    make_memory(alice, content="Refunds are asynchronous.", related_files=["shop/refunds.py"])
    body = {"phase": "implement", "task": "refunds", "session_id": session["id"]}
    assert ab_agent.client.post(f"projects/{alice.project.id}/context", body).json()["memories"]


def test_graph_boost_rate_counts_retrievals_whose_top_8_the_boost_changed(ab_agent, alice):
    for changed in (True, False, False, True):
        retrieval.boost_counted(alice.project.id, changed)
    assert retrieval.retrieval_counts_flush() == 1
    assert RetrievalDay.objects.get(project=alice.project).changed_top == 2
    rate = next(
        m for m in ab_agent.client.get(f"projects/{alice.project.id}/insights").json()["metrics"]
        if m["key"] == "graph_boost_rate"
    )  # fmt: skip
    assert rate["full"] == 0.5 and rate["n_full"] == 4


def test_a_class_reviewers_reject_is_tightened_until_an_admin_reverts_it(ab_agent, alice, bob, api_client):
    for i in range(6):
        memory = make_memory(alice, type="gotcha", content=f"Backtrack lesson number {i} about the cart.")
        # three rejected in review, three approved
        Memory.objects.filter(pk=memory.pk).update(deprecated=i < 3, user_verified=i >= 3)
        PatternStat.objects.create(
            project=alice.project, kind="backtrack", key=f"k{i}", promoted_memory=memory
        )
    made = telemetry.thresholds_tighten(project=alice.project)
    assert [(a.signal_class, a.factor) for a in made] == [("backtrack", 1.2)]
    assert telemetry.thresholds_tighten(project=alice.project) == []  # (once)
    assert telemetry.tightenings_of(alice.project.id) == {"backtrack": 1.2}
    shown = ab_agent.client.get(f"projects/{alice.project.id}/insights/telemetry").json()
    assert shown["tightened"][0]["signal_class"] == "backtrack"
    assert {c["signal_class"]: c["rejection_rate"] for c in shown["classes"]} == {"backtrack": 0.5}

    url = f"projects/{alice.project.id}/insights/thresholds/{made[0].pk}/revert"
    assert api_client(bob.key).post(url, {}).status_code == 403
    assert ab_agent.client.post(url, {}).status_code == 200
    assert telemetry.tightenings_of(alice.project.id) == {}
    assert ThresholdAdjustment.objects.get().reverted_at is not None
    assert telemetry.thresholds_tighten(project=alice.project) == []  # (no newer rejections since)
    assert ExperimentPeriod.objects.count() == 0  # (telemetry touches no experiment)


def test_the_report_is_one_statement_and_sums_the_sessions_metrics(
    ab_agent, alice, django_assert_num_queries
):
    from datetime import timedelta

    from django.utils import timezone

    from apps.insights import metrics, selectors
    from apps.insights.models import SessionMetrics

    populate(ab_agent, 12, tool_call_ratio=0.75)
    rollups.rollup_run()
    today = timezone.localdate()
    with django_assert_num_queries(1):
        report = selectors.project_insights(
            project=alice.project, date_from=today - timedelta(days=6), date_to=today
        )
    rows = SessionMetrics.objects.filter(project=alice.project).values()
    for group in ("control", "passive", "full"):
        mine = [r for r in rows if r["group"] == group]
        assert report["groups"][group] == len(mine)
        calls = [metrics.contributions(r)["tool_calls"][1] for r in mine]
        tool_calls = next(m for m in report["metrics"] if m["key"] == "tool_calls")
        assert tool_calls[group] == (round(sum(calls) / len(calls), 4) if calls else None)
    today_row = next(d for d in report["daily"] if d["date"] == today.isoformat())
    assert sum(today_row[g]["n"] for g in ("control", "passive", "full")) == 12
