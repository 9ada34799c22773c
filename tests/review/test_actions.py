"""Actions on a memory from the dashboard: confirm, correct (the dialog's four reasons), flag,
pin, delete — each changes state through the memory services (versions, history, feedback),
answers htmx with the card and plain posts with a redirect, and is refused by role."""

from __future__ import annotations

import json
import re

import pytest

from apps.memories.models import Memory, MemoryFeedback, MemoryVersion
from apps.tenants.roles import Role
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db


@pytest.fixture
def memory(alice):
    return make_memory(alice, content="Migrations run before the web process starts.", needs_review=True)


def url(base, memory, action=""):
    return f"{base}/memories/{memory.id}/{action + '/' if action else ''}"


def test_confirm_verifies_and_redirects_back(alice, memory, signed_in, base):
    response = signed_in(alice).post(url(base, memory, "confirm"), {"next": f"{base}/memories/"})
    assert response.status_code == 302 and response["Location"] == f"{base}/memories/"
    memory.refresh_from_db()
    assert memory.user_verified and not memory.needs_review
    assert MemoryFeedback.objects.get(memory=memory).kind == "confirm"


def test_with_htmx_an_action_answers_with_the_card(alice, memory, signed_in, base):
    response = signed_in(alice).post(
        url(base, memory, "confirm"), {"context": "list"}, HTTP_HX_REQUEST="true"
    )
    body = response.content.decode()
    assert response.status_code == 200 and body.lstrip().startswith("<article")
    assert f'id="memory-{memory.id}"' in body and 'data-testid="verified-badge"' in body
    triggers = json.loads(response["HX-Trigger-After-Settle"])
    assert triggers["toast"]["value"] == "Memory confirmed."


def test_a_next_url_outside_the_project_is_ignored(alice, memory, signed_in, base):
    response = signed_in(alice).post(url(base, memory, "confirm"), {"next": "https://evil.example/"})
    assert response["Location"] == url(base, memory)


def test_flag_lowers_confidence_and_asks_for_review(alice, signed_in, base):
    memory = make_memory(alice, content="Cache keys include the locale.", confidence=0.7)
    signed_in(alice).post(url(base, memory, "flag"), {"note": "not since v2"})
    memory.refresh_from_db()
    assert memory.confidence == pytest.approx(0.5) and memory.needs_review and memory.flag_count == 1
    assert MemoryFeedback.objects.get(memory=memory, kind="flag").note == "not since v2"


@pytest.mark.parametrize("action", ["flag", "reject"])
def test_a_note_with_a_nul_character_is_refused_and_changes_nothing(alice, memory, signed_in, base, action):
    client = signed_in(alice)
    response = client.post(url(base, memory, action), {"note": "wrong\x00", "next": f"{base}/memories/"})
    assert response.status_code == 302 and response["Location"] == f"{base}/memories/"
    assert "Null characters are not allowed." in client.get(response["Location"]).content.decode()
    htmx = client.post(url(base, memory, action), {"note": "wrong\x00"}, HTTP_HX_REQUEST="true")
    assert htmx.status_code == 200 and f'id="memory-{memory.id}"' in htmx.content.decode()
    assert json.loads(htmx["HX-Trigger-After-Settle"])["toast"]["value"] == "Null characters are not allowed."
    memory.refresh_from_db()
    assert not MemoryFeedback.objects.filter(memory=memory).exists()
    assert memory.flag_count == 0 and not memory.deprecated and memory.version == 1


def test_correcting_keeps_the_old_text_in_history(alice, memory, signed_in, base):
    client = signed_in(alice)
    form = client.get(url(base, memory, "correct")).content.decode()
    for label in ("Content is inaccurate", "No longer applies", "Too specific", "duplicate"):
        assert label in form
    response = client.post(
        url(base, memory, "correct"),
        {
            "reason": "incorrect",
            "content": "Migrations run in a release job, not at web start.",
            "note": "see deploy/",
        },
    )
    assert response.status_code == 302
    memory.refresh_from_db()
    assert memory.content.startswith("Migrations run in a release job") and memory.user_verified
    versions = list(
        MemoryVersion.objects.filter(memory=memory).order_by("version").values_list("content", "change")
    )
    assert versions[0] == ("Migrations run before the web process starts.", "created")
    assert versions[-1][1] == "corrected"
    assert MemoryFeedback.objects.get(memory=memory, kind="correct").note == "Inaccurate: see deploy/"
    detail = client.get(url(base, memory)).content.decode()
    assert '<span class="small" data-testid="feedback-note">Inaccurate: see deploy/</span>' in detail
    assert "[incorrect]" not in detail
    assert "Migrations run before the web process starts." in detail and "corrected" in detail


def test_feedback_notes_written_with_a_reason_code_read_as_labels(alice, bob, memory, signed_in, base):
    """Older notes began with the reason's code ("[too_specific] …"): the page showed it as is."""
    from apps.memories import services as memory_services

    for note in ("[too_specific] see the ADR", "[rejected]", "[draft] my own brackets"):
        memory_services.memory_feedback(memory=memory, actor=bob.principal, kind="flag", note=note)
    detail = signed_in(alice).get(url(base, memory)).content.decode()
    notes = re.findall(r'data-testid="feedback-note">(.*?)</span>', detail)
    assert sorted(notes) == [
        "Rejected in the session review",
        "Too specific: see the ADR",
        "[draft] my own brackets",
    ]


def test_a_correction_that_changes_nothing_is_refused(alice, memory, signed_in, base):
    client = signed_in(alice)
    response = client.post(
        url(base, memory, "correct"), {"reason": "too_specific", "content": memory.content}
    )
    assert response.status_code == 422 and "same as before" in response.content.decode()
    response = client.post(url(base, memory, "correct"), {"reason": "too_specific", "content": "  "})
    assert response.status_code == 422 and "it is empty" in response.content.decode()
    response = client.post(url(base, memory, "correct"), {"reason": "", "content": "x"})
    assert response.status_code == 422
    memory.refresh_from_db()
    assert memory.version == 1


def test_an_invalid_correction_in_the_dialog_is_shown_in_the_dialog(alice, memory, signed_in, base):
    response = signed_in(alice).post(
        url(base, memory, "correct"), {"reason": "incorrect", "content": ""}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200 and response["HX-Retarget"] == "#dialog-body"
    assert 'role="alert"' in response.content.decode()


def test_outdated_without_text_flags_for_members_and_retires_for_stewards(
    memory, bob, person_with_role, signed_in, base
):
    signed_in(bob).post(url(base, memory, "correct"), {"reason": "outdated", "note": "we moved to k8s"})
    memory.refresh_from_db()
    assert memory.needs_review and not memory.deprecated and memory.flag_count == 1
    steward = person_with_role(Role.STEWARD)
    signed_in(steward).post(url(base, memory, "correct"), {"reason": "duplicate"})
    memory.refresh_from_db()
    assert memory.deprecated and not memory.needs_review
    assert MemoryVersion.objects.filter(memory=memory, change="duplicate").exists()


def test_pin_toggles_for_stewards_only(memory, bob, person_with_role, signed_in, base):
    assert signed_in(bob).post(url(base, memory, "pin")).status_code == 403
    steward = signed_in(person_with_role(Role.STEWARD))
    steward.post(url(base, memory, "pin"))
    memory.refresh_from_db()
    assert memory.pinned
    steward.post(url(base, memory, "pin"))
    memory.refresh_from_db()
    assert not memory.pinned and memory.version == 3


def test_delete_by_the_author_or_a_steward(alice, bob, person_with_role, signed_in, base):
    theirs = make_memory(alice, content="Alice's memory.")
    own = make_memory(bob, content="Bob's memory.")
    client = signed_in(bob)
    assert client.post(url(base, theirs, "delete")).status_code == 403
    assert "Delete this memory?" in client.get(url(base, own, "delete")).content.decode()
    response = client.post(url(base, own, "delete"), {"next": url(base, own)})
    assert response.status_code == 302 and response["Location"] == f"{base}/memories/"
    assert not Memory.objects.filter(pk=own.pk).exists()
    response = signed_in(person_with_role(Role.STEWARD)).post(
        url(base, theirs, "delete"), {"context": "list"}, HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200 and response.content.strip() == b""
    assert not Memory.objects.filter(pk=theirs.pk).exists()


@pytest.mark.parametrize("action", ["confirm", "flag", "correct", "pin", "delete"])
def test_viewers_may_not_act(memory, person_with_role, signed_in, base, action):
    viewer = signed_in(person_with_role(Role.VIEWER))
    assert viewer.post(url(base, memory, action), {"reason": "incorrect", "content": "x"}).status_code == 403
    memory.refresh_from_db()
    assert memory.version == 1 and not memory.user_verified


@pytest.mark.parametrize("action", ["", "confirm", "flag", "correct", "pin", "delete"])
def test_another_org_gets_404(memory, charlie, signed_in, base, action):
    client = signed_in(charlie)
    assert client.get(url(base, memory, action)).status_code in (404,)
    assert client.post(url(base, memory, action)).status_code == 404
    # Nor through charlie's own project: the memory does not apply there.
    own = f"/o/{charlie.org.slug}/p/{charlie.project.slug}"
    assert client.post(url(own, memory, action or "confirm")).status_code == 404


def test_a_memory_of_another_project_of_the_same_org_is_404_unless_shared(alice, signed_in, base):
    from tests.factories import ProjectFactory

    other = ProjectFactory(organization=alice.org, slug="other")
    local = make_memory(alice, project=other, content="Only for the other project.")
    shared = make_memory(alice, project=other, content="For the whole org.", scope="org")
    client = signed_in(alice)
    assert client.get(url(base, local)).status_code == 404
    page = client.get(url(base, shared)).content.decode()
    assert "from Project" in page or "from " + other.name in page
    assert f"/o/acme/p/other/memories/{shared.id}/dispute/" in page


def test_an_org_memory_from_a_team_project_names_it_and_offers_a_dispute_only_to_who_can_open_it(
    alice, bob, signed_in, base
):
    from apps.tenants.models import TeamMembership
    from tests.factories import ProjectFactory, TeamFactory

    team = TeamFactory(organization=alice.org)
    hidden = ProjectFactory(organization=alice.org, team=team, name="Payroll Vault", slug="payroll")
    shared = make_memory(alice, project=hidden, content="Payslips render in UTC.", scope="org")
    dispute_url = f"/o/acme/p/payroll/memories/{shared.id}/dispute/"
    as_bob = signed_in(bob)
    for page in (as_bob.get(f"{base}/memories/"), as_bob.get(url(base, shared))):
        html = page.content.decode()
        assert page.status_code == 200 and "Payslips render in UTC." in html
        assert "Payroll Vault" not in html and "/p/payroll/" not in html and "from another project" in html
    assert as_bob.get(dispute_url).status_code == 404  # what the link would have led to

    TeamMembership.objects.create(team=team, user=bob.user)
    for client in (signed_in(alice), signed_in(bob)):  # an owner sees every project; bob now the team's
        for html in (
            client.get(f"{base}/memories/").content.decode(),
            client.get(url(base, shared)).content.decode(),
        ):
            assert "from Payroll Vault" in html and dispute_url in html
        assert client.get(dispute_url).status_code == 200


def test_the_detail_page_shows_history_feedback_disputes_and_a_dispute_link(
    alice, bob, memory, person_with_role, signed_in, base
):
    from apps.governance import services as governance

    governance.dispute_open(memory=memory, actor=bob.principal, reason="Not on Heroku.")
    page = signed_in(alice).get(url(base, memory)).content.decode()
    assert "Not on Heroku." in page and "History" in page and 'data-testid="history"' in page
    assert f"{base}/memories/{memory.id}/dispute/" in page
    assert "Bob" in page  # feedback and history name people, not "user:3"
    viewer_page = signed_in(person_with_role(Role.VIEWER)).get(url(base, memory)).content.decode()
    assert "Dispute this memory" not in viewer_page and "Not on Heroku." in viewer_page
