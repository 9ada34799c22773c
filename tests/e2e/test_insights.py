"""The Insights page in a browser: every chart drawn with data, in light and in dark, each with
its data table; the page follows the data live. Saves docs/screenshots/insights.png (with
UPDATE_SCREENSHOTS=1)."""

from __future__ import annotations

import itertools

import httpx
import pytest
from playwright.sync_api import expect

from tests.insights.dashboard_history import populate

DRAWN = ("health", "activity", "backlog", "precision", "latency")
# The dark theme's first chart colour (static/css/app.css), as the browser reports it.
DARK_CHART_1 = "rgb(145, 167, 255)"
LIGHT_CHART_1 = "rgb(59, 91, 219)"


@pytest.fixture(autouse=True)
def hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"


@pytest.fixture
def history(alice, api_client, monkeypatch):
    """A week of sessions, half of them in the control group (alternating, so the comparison has
    enough of each), with 25 % fewer tool calls when memory is on."""
    from apps.observer import abgroups

    groups = itertools.cycle(["control", "full"])
    monkeypatch.setattr(abgroups, "_ASSIGNER", [lambda session_id, project: next(groups)])
    return populate(api_client(alice.key), str(alice.project.id), days=7, sessions_per_day=4)


def _url(person) -> str:
    return f"/o/{person.org.slug}/p/{person.project.slug}/insights/?days=7"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_chart_is_drawn_with_data_in_light_and_dark(history, alice, page_as, screenshot, scheme):
    page = page_as(alice, color_scheme=scheme)
    page.goto(_url(alice))
    for key in DRAWN:
        chart = page.get_by_test_id(f"chart-{key}")
        expect(chart.locator(".chart-canvas[data-drawn=true] canvas")).to_have_count(1)
        expect(chart.locator("details table tbody tr")).to_have_count(7)  # the table alternative
        expect(chart.locator(".chart-canvas")).to_have_attribute("aria-hidden", "true")
    marker = page.get_by_test_id("chart-health").locator(".u-legend .u-series").nth(1).locator(".u-marker")
    colour = marker.evaluate("el => getComputedStyle(el).borderColor")
    assert colour == (DARK_CHART_1 if scheme == "dark" else LIGHT_CHART_1)
    ab = page.get_by_test_id("chart-ab")
    expect(ab.locator("svg.forest-row").first).to_be_visible()  # compared metrics are drawn
    expect(page.get_by_test_id("ab-tool_calls").locator("svg.forest-row")).to_have_count(1)
    expect(page.get_by_test_id("ab-tool_calls-effect")).to_contain_text("better")
    expect(page.get_by_test_id("chart-top").locator(".bars li").first).to_be_visible()
    expect(page.get_by_test_id("chart-backlog-age").locator(".bars li")).to_have_count(5)
    screenshot(page, "insights" if scheme == "light" else "insights-dark")


def test_the_page_follows_new_memories_live(history, alice, page_as, live_url):
    page = page_as(alice)
    page.goto(_url(alice))
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    summary = page.locator("#chart-health-summary")
    before = summary.inner_text()
    response = httpx.post(
        f"{live_url}/api/v1/projects/{alice.project.id}/memories",
        json={"type": "gotcha", "content": "Live: the insights page redraws when memory changes."},
        headers={"Authorization": f"Bearer {alice.key}"},
        timeout=120,
    )
    assert response.status_code == 201, response.text
    expect(summary).not_to_have_text(before)
    expect(
        page.get_by_test_id("chart-health").locator(".chart-canvas[data-drawn=true] canvas")
    ).to_have_count(1)
