"""The Insights control pages in a browser: an admin saves the A/B split and the new period
appears; a steward applies a phase-weight proposal and the weights in use change; an admin
reverts a tightened threshold under the telemetry charts; a viewer sees every page without a
button, and a POST made with the viewer's own session and CSRF token is refused with 403."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from apps.insights.experiments import experiment_current
from apps.insights.models import ExperimentPeriod, ProposalStatus, ThresholdAdjustment
from apps.memories.phase_weights import phase_weights_for
from apps.tenants.roles import Role
from tests.insights.controls_data import proposal_where_gotchas_pass_qa, telemetry_with_a_tightened_class


@pytest.fixture(autouse=True)
def hashing_embeddings(settings):
    settings.EMBEDDING_PROVIDER = "hashing"


def _url(person, page: str) -> str:
    return f"/o/{person.org.slug}/p/{person.project.slug}/insights/{page}"


def test_an_admin_saves_the_split_and_a_new_period_appears(alice, page_as):
    experiment_current(project=alice.project)
    page = page_as(alice)
    page.goto(_url(alice, "experiment/"))
    periods = page.get_by_test_id("experiment-periods").get_by_test_id("period-row")
    expect(periods).to_have_count(1)
    form = page.get_by_test_id("experiment-form")
    form.get_by_label("Control % (no memory)").fill("20")
    form.get_by_label("Passive % (session-start memory only)").fill("15")
    form.get_by_label("Reason").fill("a larger control group for the quarter")
    form.get_by_role("button", name="Save and start a new period").click()
    expect(page.locator(".flash.success")).to_contain_text("A new experiment period started")
    expect(periods).to_have_count(2)
    expect(periods.first).to_contain_text("20 %")
    expect(periods.first).to_contain_text("65 %")
    expect(periods.first).to_contain_text("a larger control group for the quarter")
    expect(periods.nth(1)).not_to_contain_text("current")
    expect(page.get_by_test_id("current-full")).to_have_text("65 %")
    current = experiment_current(project=alice.project)
    assert (current.control_pct, current.passive_pct) == (20, 15)


def test_a_steward_applies_a_proposal_and_the_weights_change(alice, person_with_role, page_as):
    proposal = proposal_where_gotchas_pass_qa(alice)
    entry = proposal.report["implement"]["gotcha"]
    steward = person_with_role(Role.STEWARD)
    page = page_as(steward)
    page.goto(_url(steward, "phase-weights/"))
    card = page.get_by_test_id(f"proposal-{proposal.pk}")
    now = card.get_by_test_id("weight-implement-gotcha").get_by_test_id("weight-now")
    expect(now).to_have_text(f"{entry['before']:.2f}")
    expect(card.get_by_test_id("proposal-status")).to_have_text("proposed")
    page.once("dialog", lambda dialog: dialog.accept())
    card.get_by_test_id("proposal-apply").click()
    expect(card.get_by_test_id("proposal-status")).to_have_text("applied")
    expect(now).to_have_text(f"{entry['proposed']:.2f}")
    expect(card.get_by_test_id("proposal-apply")).to_have_count(0)
    assert phase_weights_for(alice.project.id)["implement"]["gotcha"] == entry["proposed"] > entry["before"]


def test_an_admin_reverts_a_tightened_threshold_under_the_charts(alice, page_as, screenshot):
    telemetry_with_a_tightened_class(alice)
    page = page_as(alice)
    page.goto(_url(alice, "telemetry/"))
    for measure in ("promoted", "reinforced", "rejected"):
        chart = page.get_by_test_id(f"chart-telemetry-{measure}")
        expect(chart.locator(".chart-canvas[data-drawn=true] canvas")).to_have_count(1)
        expect(chart.locator("details table tbody tr")).to_have_count(12)  # (the table alternative)
    screenshot(page, "insights-telemetry")
    row = page.get_by_test_id("tightened-backtrack")
    expect(row.get_by_test_id("tightened-state")).to_have_text("in force")
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_test_id("tightened-revert").click()
    expect(page.locator(".flash.success")).to_contain_text("backtrack threshold is back to its default")
    expect(row.get_by_test_id("tightened-state")).to_contain_text("reverted")
    expect(row.get_by_test_id("tightened-revert")).to_have_count(0)
    assert ThresholdAdjustment.objects.get(project=alice.project).reverted_at is not None


def _post_with_page_token(page, path: str, form: dict[str, str] | None = None):
    """A POST from the page's own session with the CSRF token the page carries: what a person
    editing the HTML, or a script in their browser, could send."""
    token = page.evaluate("JSON.parse(document.body.getAttribute('hx-headers'))['X-CSRFToken']")
    return page.request.post(path, form=form or {}, headers={"X-CSRFToken": token}, max_redirects=0)


def test_a_viewer_sees_no_buttons_and_is_refused_on_post(alice, person_with_role, page_as):
    proposal = proposal_where_gotchas_pass_qa(alice)
    adjustment = telemetry_with_a_tightened_class(alice)
    viewer = person_with_role(Role.VIEWER)
    page = page_as(viewer)
    for path, read_only in (
        ("experiment/", "experiment-read-only"),
        ("phase-weights/", "phase-weights-read-only"),
        ("telemetry/", "telemetry-read-only"),
    ):
        page.goto(_url(viewer, path))
        expect(page.get_by_test_id(read_only)).to_be_visible()
        expect(page.locator("main button")).to_have_count(0)
        expect(page.locator("main form")).to_have_count(0)
    posts = (
        ("experiment/", {"enabled": "on", "control_pct": "50", "passive_pct": "0"}),
        (f"phase-weights/{proposal.pk}/apply/", None),
        (f"thresholds/{adjustment.pk}/revert/", None),
    )
    for path, form in posts:
        response = _post_with_page_token(page, _url(viewer, path), form)
        assert response.status == 403, (path, response.status)
        assert "CSRF verification failed" not in response.text()  # (the role is refused, not the token)
    assert ExperimentPeriod.objects.filter(project=alice.project).count() == 1
    proposal.refresh_from_db()
    assert proposal.status == ProposalStatus.PROPOSED
    assert ThresholdAdjustment.objects.get(pk=adjustment.pk).reverted_at is None
    # The same token and session do reach the view: an admin's identical POST is let through.
    admin_page = page_as(alice)
    admin_page.goto(_url(alice, "telemetry/"))
    assert _post_with_page_token(admin_page, _url(alice, f"thresholds/{adjustment.pk}/revert/")).status == 302
