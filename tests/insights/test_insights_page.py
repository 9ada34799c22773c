"""The Insights page and the health page's charts, from a history made through the API."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from apps.insights import metrics, snapshots
from apps.insights.history import HealthSnapshot, RetrievalSample
from memorysaas.kernel import latency
from tests.insights.dashboard_history import populate

CHARTS = ("health", "activity", "backlog", "precision", "latency")


@pytest.fixture
def history(settings, alice, api_client):
    settings.EMBEDDING_PROVIDER = "hashing"
    return populate(api_client(alice.key), str(alice.project.id), days=4, sessions_per_day=6)


def _page(person, name: str, **query) -> str:
    client = Client()
    client.force_login(person.user, backend="django.contrib.auth.backends.ModelBackend")
    url = reverse(name, args=[person.org.slug, person.project.slug])
    response = client.get(url, query)
    assert response.status_code == 200
    return response.content.decode()


def _specs(html: str) -> dict[str, dict]:
    found = re.findall(r'<script id="spec-([\w-]+)" type="application/json">(.*?)</script>', html, re.S)
    return {key: json.loads(body) for key, body in found}


def test_every_chart_of_the_insights_page_has_data_and_a_table(history, alice):
    html = _page(alice, "insights", days=7)
    specs = _specs(html)
    assert set(specs) == set(CHARTS)
    for key in CHARTS:
        assert f'data-testid="chart-{key}"' in html
        assert f'data-testid="chart-{key}-empty"' not in html
        values = [v for s in specs[key]["series"] for v in s["values"] if v]
        assert values, key
        assert len(specs[key]["x"]) == 7
    assert 'data-testid="chart-ab"' in html and 'data-testid="chart-top"' in html
    assert html.count("<summary>Data table</summary>") == len(CHARTS)
    health = {s["label"]: s["values"] for s in specs["health"]["series"]}
    assert health["Total"][-1] >= 8 and health["Needs review"][-1] >= 1  # (8 made + promotions)
    assert (
        health["Total"][-4] is not None and health["Total"][-4] <= health["Total"][-1]
    )  # 4 days of snapshots
    latency_series = {s["label"]: s["values"] for s in specs["latency"]["series"]}
    assert latency_series["p95"][-1] >= latency_series["p50"][-1] > 0


def test_the_ab_section_says_not_enough_sessions_until_there_are(alice):
    html = _page(alice, "insights")
    assert html.count("Not enough sessions yet") == len(metrics.METRICS) + 1  # (+ the graph boost rate)
    assert "<svg" not in html.split('data-testid="chart-ab"')[1].split("</figure>")[0]


def test_snapshots_count_memory_states_and_rewrite_the_day(alice):
    from tests.memories.factories import make_memory

    make_memory(alice, content="One", needs_review=True)
    make_memory(alice, content="Two")
    gone = make_memory(alice, content="Three")
    type(gone).objects.filter(pk=gone.pk).update(deprecated=True)
    snapshots.snapshot_project(alice.project)
    snapshots.snapshot_project(alice.project)
    snapshot = HealthSnapshot.objects.get(project=alice.project)
    assert (snapshot.total, snapshot.ready, snapshot.needs_review, snapshot.deprecated) == (2, 1, 1, 1)
    assert snapshot.review_oldest_days is not None and snapshot.review_oldest_days >= 0


def test_search_records_its_latency_and_the_snapshot_takes_percentiles(settings, alice, api_client):
    settings.EMBEDDING_PROVIDER = "hashing"
    client = api_client(alice.key)
    for query in ("alpha", "beta", "gamma"):
        assert client.post(f"projects/{alice.project.id}/search", {"query": query}).status_code == 200
    assert latency.flush() >= 0
    assert RetrievalSample.objects.filter(project=alice.project).count() == 3
    snapshot = snapshots.snapshot_project(alice.project)
    assert snapshot.search_count == 3
    assert 0 < snapshot.search_p50_ms <= snapshot.search_p95_ms <= snapshot.search_p99_ms


def test_the_health_page_shows_its_charts(history, alice):
    html = _page(alice, "project_home")
    assert 'data-testid="health-charts"' in html
    assert set(_specs(html)) == {"health-page-health", "health-page-activity"}
