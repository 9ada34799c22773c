"""The Insights control pages: the experiment's split (admins), phase-weight proposals
(stewards and admins apply) and observer telemetry (admins revert a tightening). Everyone who
reads the project sees them; a role that may not act sees no button and gets 403 on POST."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from apps.insights.experiments import experiment_current
from apps.insights.models import ExperimentPeriod, ProposalStatus, ThresholdAdjustment
from apps.memories.phase_weights import phase_weights_for
from apps.tenants.models import AuditLog
from apps.tenants.roles import Role
from tests.insights.controls_data import proposal_where_gotchas_pass_qa, telemetry_with_a_tightened_class

pytestmark = pytest.mark.django_db(transaction=False)


def _client(person) -> Client:
    client = Client()
    client.force_login(person.user, backend="django.contrib.auth.backends.ModelBackend")
    return client


def _url(person, name: str, *args) -> str:
    return reverse(name, args=[person.org.slug, person.project.slug, *args])


def test_an_admin_changes_the_split_and_a_new_period_starts(alice):
    first = experiment_current(project=alice.project)
    client = _client(alice)
    url = _url(alice, "insights_experiment")
    html = client.get(url).content.decode()
    assert 'data-testid="experiment-form"' in html and html.count('data-testid="period-row"') == 1
    body = {"enabled": "on", "control_pct": "20", "passive_pct": "10", "reason": "a bigger control group"}
    response = client.post(url, body)
    assert response.status_code == 302
    current = experiment_current(project=alice.project)
    assert current.pk != first.pk
    assert (current.control_pct, current.passive_pct, current.full_pct) == (20, 10, 70)
    assert current.reason == "a bigger control group" and current.changed_by == alice.user
    assert ExperimentPeriod.objects.get(pk=first.pk).ended_at == current.started_at
    audit = AuditLog.objects.get(action="insights.experiment_changed")
    assert audit.metadata["before"]["control_pct"] == 5 and audit.metadata["after"]["control_pct"] == 20
    html = client.get(url).content.decode()
    assert html.count('data-testid="period-row"') == 2 and "a bigger control group" in html
    client.post(url, body)  # (the same split again: no new period)
    assert ExperimentPeriod.objects.filter(project=alice.project).count() == 2


def test_switching_the_test_off_gives_everyone_full_memory(alice):
    _client(alice).post(_url(alice, "insights_experiment"), {"control_pct": "5", "passive_pct": "10"})
    current = experiment_current(project=alice.project)
    assert current.enabled is False and current.full_pct == 100


@pytest.mark.parametrize(
    ("control", "passive", "field"),
    [("60", "10", "control_pct"), ("5", "-1", "passive_pct"), ("x", "10", "control_pct")],
)
def test_a_split_out_of_range_is_refused_with_the_form_shown_again(alice, control, passive, field):
    response = _client(alice).post(
        _url(alice, "insights_experiment"), {"enabled": "on", "control_pct": control, "passive_pct": passive}
    )
    assert response.status_code == 422
    assert f'id="id_{field}"' in response.content.decode() and 'class="errorlist' in response.content.decode()
    assert ExperimentPeriod.objects.filter(project=alice.project).count() == 1


@pytest.mark.parametrize("role", [Role.VIEWER, Role.MEMBER, Role.STEWARD])
def test_only_an_admin_may_change_the_split(person_with_role, role):
    person = person_with_role(role)
    client = _client(person)
    url = _url(person, "insights_experiment")
    html = client.get(url).content.decode()
    assert 'data-testid="experiment-read-only"' in html and "<button" not in html.split("<main")[1]
    response = client.post(url, {"enabled": "on", "control_pct": "50", "passive_pct": "0"})
    assert response.status_code == 403
    assert ExperimentPeriod.objects.filter(project=person.project, control_pct=50).count() == 0


def test_a_steward_applies_a_proposal_and_the_weights_in_use_change(alice, person_with_role):
    proposal = proposal_where_gotchas_pass_qa(alice)
    entry = proposal.report["implement"]["gotcha"]
    steward = person_with_role(Role.STEWARD)
    client = _client(steward)
    page = _url(steward, "insights_phase_weights")
    html = client.get(page).content.decode()
    assert 'data-testid="proposal-apply"' in html
    row = html.split('data-testid="weight-implement-gotcha"')[1].split("</tr>")[0]
    assert f"{entry['before']:.2f}" in row.split('data-testid="weight-now"')[1][:20]
    response = client.post(_url(steward, "insights_phase_weights_apply", proposal.pk))
    assert response.status_code == 302
    assert phase_weights_for(steward.project.id)["implement"]["gotcha"] == entry["proposed"]
    proposal.refresh_from_db()
    assert proposal.status == ProposalStatus.APPLIED and proposal.decided_by == steward.user
    audit = AuditLog.objects.get(action="insights.phase_weights_applied")
    assert audit.metadata["after"]["implement"]["gotcha"] == entry["proposed"]
    html = client.get(page).content.decode()
    row = html.split('data-testid="weight-implement-gotcha"')[1].split("</tr>")[0]
    assert f"{entry['proposed']:.2f}" in row.split('data-testid="weight-now"')[1][:20]
    assert 'data-testid="proposal-apply"' not in html
    again = client.post(_url(steward, "insights_phase_weights_apply", proposal.pk), follow=True)
    assert "already applied" in again.content.decode()


@pytest.mark.parametrize("role", [Role.VIEWER, Role.MEMBER])
def test_below_steward_the_proposals_are_read_only(alice, person_with_role, role):
    proposal = proposal_where_gotchas_pass_qa(alice)
    person = person_with_role(role)
    client = _client(person)
    html = client.get(_url(person, "insights_phase_weights")).content.decode()
    assert 'data-testid="phase-weights-read-only"' in html and "<button" not in html.split("<main")[1]
    assert client.post(_url(person, "insights_phase_weights_apply", proposal.pk)).status_code == 403
    proposal.refresh_from_db()
    assert proposal.status == ProposalStatus.PROPOSED


def test_a_proposal_of_another_project_is_not_applied(alice, charlie):
    theirs = proposal_where_gotchas_pass_qa(charlie)
    response = _client(alice).post(_url(alice, "insights_phase_weights_apply", theirs.pk), follow=True)
    assert "No such proposal" in response.content.decode()
    theirs.refresh_from_db()
    assert theirs.status == ProposalStatus.PROPOSED


def _specs(html: str) -> dict[str, dict]:
    found = re.findall(r'<script id="spec-([\w-]+)" type="application/json">(.*?)</script>', html, re.S)
    return {key: json.loads(body) for key, body in found}


def test_telemetry_charts_each_measure_by_signal_class_with_a_table(alice):
    telemetry_with_a_tightened_class(alice)
    html = _client(alice).get(_url(alice, "insights_telemetry")).content.decode()
    specs = _specs(html)
    assert set(specs) == {"telemetry-promoted", "telemetry-reinforced", "telemetry-rejected"}
    promoted = {s["label"]: s["values"] for s in specs["telemetry-promoted"]["series"]}
    assert sum(promoted["backtrack"]) == 6 and sum(promoted["explicit_signal"]) == 4
    assert len(promoted["backtrack"]) == 12 and promoted["backtrack"][-1] == 2  # (this week's)
    rejected = {s["label"]: s["values"] for s in specs["telemetry-rejected"]["series"]}
    assert sum(rejected["backtrack"]) == 3 and sum(rejected["explicit_signal"]) == 0
    reinforced = {s["label"]: s["values"] for s in specs["telemetry-reinforced"]["series"]}
    assert sum(reinforced["explicit_signal"]) == 4
    assert html.count("<summary>Data table</summary>") == 3 and '<th scope="col">Week of</th>' in html
    assert 'data-testid="tightened-revert"' in html


def test_an_admin_reverts_a_tightened_threshold(alice):
    adjustment = telemetry_with_a_tightened_class(alice)
    client = _client(alice)
    response = client.post(_url(alice, "insights_threshold_revert", adjustment.pk), follow=True)
    assert response.status_code == 200 and "back to its default" in response.content.decode()
    adjustment.refresh_from_db()
    assert adjustment.reverted_at is not None and adjustment.reverted_by == alice.user
    assert 'data-testid="tightened-revert"' not in response.content.decode()
    assert AuditLog.objects.filter(action="insights.threshold_reverted").count() == 1


@pytest.mark.parametrize("role", [Role.VIEWER, Role.STEWARD])
def test_below_admin_a_tightening_cannot_be_reverted(alice, person_with_role, role):
    adjustment = telemetry_with_a_tightened_class(alice)
    person = person_with_role(role)
    client = _client(person)
    html = client.get(_url(person, "insights_telemetry")).content.decode()
    assert 'data-testid="telemetry-read-only"' in html and "<button" not in html.split("<main")[1]
    assert client.post(_url(person, "insights_threshold_revert", adjustment.pk)).status_code == 403
    assert ThresholdAdjustment.objects.get(pk=adjustment.pk).reverted_at is None


def test_the_pages_without_data_say_so(alice):
    client = _client(alice)
    assert 'data-testid="no-proposals"' in client.get(_url(alice, "insights_phase_weights")).content.decode()
    html = client.get(_url(alice, "insights_telemetry")).content.decode()
    assert 'data-testid="no-tightening"' in html and html.count("No data in this period yet.") == 3
