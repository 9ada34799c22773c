"""Sessions: the list, the session-end review (applied, new needing review, auto-confirmed,
reinforced, rejected), confirm all, reject and restore; roles and tenant isolation."""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.memories.models import Memory, MemoryFeedback
from apps.observer import services as observer
from apps.observer.models import Session
from apps.observer.traces import Trace
from apps.tenants.roles import Role
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def memory_group(monkeypatch):
    """Every session here runs with memory (the 10% control group is random by id)."""
    monkeypatch.setattr(observer, "ab_group", lambda session_id, project=None: "full")


def observed(person, trace: Trace, *, task: str = "fix the totals", client: str = "claude-code") -> Session:
    """A whole session through the observer: open, events, a passed validation, complete (the
    test queue runs the promotion inline)."""
    session = observer.session_open(
        project=person.project, actor=person.principal, data={"task": task, "client": client}
    )
    observer.events_ingest(session=session, events=trace.events)
    observer.validation_record(session=session, actor=person.principal, passed=True, work_unit="", report="")
    observer.session_complete(session=session, outcome="success", steps=None)
    return Session.objects.get(id=session.id)


def correcting(path: str = "shop/a.py", fix: str = "totals are in b.py not a.py") -> Trace:
    """A self-correction (promoted, needs review) and an explicit note (needs none)."""
    return (
        Trace()
        .read(path)
        .think(f"Actually, {fix}")
        .note("gotcha", f"Run the {path} tests with -p no:randomly")
    )


def pending_ids(session: Session) -> set[str]:
    return {
        str(i)
        for i in Memory.objects.filter(id__in=session.promoted_memory_ids, needs_review=True).values_list(
            "id", flat=True
        )
    }


def cards(response, section: str) -> set[str]:
    """Memory card ids inside the element whose id is `section` (up to the next section)."""
    html = response.content.decode()
    start = html.index(f'id="{section}"')
    following = [html.find(marker, start + 1) for marker in ('aria-labelledby="', "<details")]
    end = min([i for i in following if i != -1] or [len(html)])
    return set(re.findall(r'data-memory-id="([0-9a-f-]+)"', html[start:end]))


@pytest.fixture
def finished(alice) -> Session:
    session = observed(alice, correcting())
    assert len(pending_ids(session)) == 1 and len(session.promoted_memory_ids) == 2
    return session


# ---------------------------------------------------------------- the list


def test_the_list_shows_sessions_newest_first_with_their_counts(alice, signed_in, base, finished):
    running = observer.session_open(
        project=alice.project, actor=alice.principal, data={"task": "add rate limiting", "client": "cursor"}
    )
    page = signed_in(alice).get(f"{base}/sessions/").content.decode()
    rows = re.findall(r'data-session-id="([0-9a-f-]+)"', page)
    assert rows == [str(running.id), str(finished.id)]
    finished_row = page[page.index(f'data-session-id="{finished.id}"') :]
    assert "fix the totals" in finished_row and "claude-code" in finished_row
    assert 'data-status="completed">success' in finished_row
    numbers = re.findall(r'<td class="num">(.*?)</td>', finished_row)[:3]
    assert numbers[0] == str(finished.event_count) and numbers[1] == "2" and ">1<" in numbers[2]
    assert 'data-status="open">running' in page
    assert f'href="{base}/sessions/{finished.id}/"' in page
    assert f'href="{base}/sessions/"' in page and 'aria-current="page">Sessions' in page


def test_an_empty_list_points_to_the_connect_page(alice, signed_in, base):
    page = signed_in(alice).get(f"{base}/sessions/").content.decode()
    assert 'data-testid="sessions-empty"' in page and f'href="{base}/connect/"' in page


def test_the_list_pages_by_25_and_refreshes_live_only_on_the_first(alice, signed_in, base):
    for i in range(26):
        observer.session_open(project=alice.project, actor=alice.principal, data={"task": f"task {i}"})
    client = signed_in(alice)
    first = client.get(f"{base}/sessions/").content.decode()
    second = client.get(f"{base}/sessions/?page=2").content.decode()
    assert first.count('data-testid="session-row"') == 25 and "Older sessions" in first
    assert second.count('data-testid="session-row"') == 1 and "Newer sessions" in second
    assert "live-session from:body" in first and "live-session from:body" not in second
    for odd in ("?page=x", "?page=-3", "?page=99999999999999999999999"):
        assert client.get(f"{base}/sessions/{odd}").status_code == 200


def test_the_list_costs_the_same_queries_for_2_or_12_sessions(
    alice, signed_in, base, django_assert_max_num_queries
):
    client = signed_in(alice)
    for _ in range(2):
        observed(alice, correcting())
    with CaptureQueriesContext(connection) as few:
        client.get(f"{base}/sessions/")
    for i in range(10):
        observed(alice, correcting(f"shop/m{i}.py", f"use m{i}b not m{i}"))
    with django_assert_max_num_queries(len(few.captured_queries)):
        client.get(f"{base}/sessions/")


# ---------------------------------------------------------------- the review


def test_the_review_separates_applied_new_and_confirmed_memories(alice, signed_in, base, finished):
    applied = make_memory(alice, content="Totals are cached for 60 s.", confidence=0.9)
    observer.injection_record(session=finished, memory_ids=[applied.id], notes_upto=0)
    (pending,) = pending_ids(finished)
    (note,) = {str(i) for i in finished.promoted_memory_ids} - {pending}
    response = signed_in(alice).get(f"{base}/sessions/{finished.id}/")
    html = response.content.decode()
    assert cards(response, "review-title") == {pending}
    assert f'href="{base}/memories/{applied.id}/"' in html and "Totals are cached" in html
    assert note in cards(response, "settled-title")
    assert re.search(r"<details class=\"card\" [^>]*>\s*<summary id=\"settled-title\">", html)
    assert 'data-testid="pending-count">1<' in html and 'data-testid="applied-count">1<' in html
    assert f'id="reject-{pending}"' in html and f'id="confirm-{pending}"' in html
    assert f'id="correct-{pending}"' in html and "Confirm all 1" in html


@pytest.mark.parametrize(
    ("level", "condensed", "suppressed"),
    [(None, False, False), (2, False, False), (3, True, False), (4, False, True)],
)
def test_the_review_condenses_with_the_trust_level(
    alice, signed_in, base, finished, level, condensed, suppressed
):
    """Confident shows only what needs review (the rest folded); Autonomous hides
    the summary unless asked."""
    from apps.governance.models import ProjectTrust

    if level is not None:
        ProjectTrust.objects.create(project=alice.project, organization=alice.org, level=level)
    html = signed_in(alice).get(f"{base}/sessions/{finished.id}/").content.decode()
    assert ('data-testid="summary-condensed"' in html) is condensed
    assert ('data-testid="summary-suppressed"' in html) is suppressed
    if condensed:  # what needs review stays outside the fold, what was applied is inside it
        fold = html.index('data-testid="summary-condensed"')
        assert html.index('id="review-title"') < fold < html.index('id="applied-title"')
    assert "Confirm all 1" in html  # still reachable at every level


def test_a_viewer_reads_the_review_but_cannot_confirm_all(alice, person_with_role, signed_in, base, finished):
    viewer = person_with_role(Role.VIEWER)
    client = signed_in(viewer)
    page = client.get(f"{base}/sessions/{finished.id}/").content.decode()
    assert "Confirm all" not in page and "reject-" not in page
    assert client.post(f"{base}/sessions/{finished.id}/confirm-all/").status_code == 403
    assert len(pending_ids(finished)) == 1


def test_confirm_all_verifies_exactly_this_sessions_memories(alice, bob, signed_in, base, finished):
    other = observed(alice, correcting("shop/c.py", "prices are in d.py not c.py"))
    unrelated = make_memory(alice, content="Unrelated, waiting.", needs_review=True)
    mine = pending_ids(finished)
    client = signed_in(bob)
    response = client.post(f"{base}/sessions/{finished.id}/confirm-all/")
    assert response.status_code == 302 and response["Location"] == f"{base}/sessions/{finished.id}/"
    assert pending_ids(finished) == set()
    confirmed = Memory.objects.filter(id__in=mine)
    assert all(m.user_verified and not m.needs_review for m in confirmed)
    assert set(
        MemoryFeedback.objects.filter(kind="confirm", session_id=str(finished.id)).values_list(
            "memory_id", flat=True
        )
    ) == {m.id for m in confirmed}
    assert len(pending_ids(other)) == 1
    assert Memory.objects.get(id=unrelated.id).needs_review
    page = client.get(response["Location"]).content.decode()
    assert "Confirmed 1 memory from this session." in page and 'data-testid="pending-count">0<' in page


def test_confirm_all_leaves_a_memory_that_held_a_secret_for_a_steward(alice, bob, signed_in, base, finished):
    """A member's confirm of one would be refused (it waits for a steward): Confirm all refused
    the whole session with it, and its card offered a Confirm that could only fail."""
    (held,) = pending_ids(finished)
    Memory.objects.filter(id=held).update(secrets_redacted=True)
    client = signed_in(bob)
    response = client.post(f"{base}/sessions/{finished.id}/confirm-all/")
    assert response.status_code == 302
    assert Memory.objects.get(id=held).needs_review
    page = client.get(response["Location"]).content.decode()
    assert "Nothing confirmed. 1 held a secret and waits for a steward." in page
    assert f'id="steward-{held}"' in page and f'id="confirm-{held}"' not in page
    assert f'id="confirm-{held}"' in signed_in(alice).get(response["Location"]).content.decode()
    signed_in(alice).post(f"{base}/sessions/{finished.id}/confirm-all/")
    assert pending_ids(finished) == set()


def test_confirm_all_with_htmx_answers_with_the_review(alice, signed_in, base, finished):
    response = signed_in(alice).post(f"{base}/sessions/{finished.id}/confirm-all/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and 'id="session-review"' in response.content.decode()
    assert json.loads(response["HX-Trigger-After-Settle"])["toast"]["value"].startswith("Confirmed 1")
    again = signed_in(alice).post(f"{base}/sessions/{finished.id}/confirm-all/", HTTP_HX_REQUEST="true")
    assert "Nothing from this session" in json.loads(again["HX-Trigger-After-Settle"])["toast"]["value"]


def test_confirm_all_is_a_post(alice, signed_in, base, finished):
    assert signed_in(alice).get(f"{base}/sessions/{finished.id}/confirm-all/").status_code == 405


def test_another_orgs_session_is_not_found(alice, charlie, signed_in, base, finished):
    theirs = observed(charlie, correcting())
    client = signed_in(alice)
    assert client.get(f"{base}/sessions/{theirs.id}/").status_code == 404
    assert client.post(f"{base}/sessions/{theirs.id}/confirm-all/").status_code == 404
    assert len(pending_ids(theirs)) == 1
    charlie_base = f"/o/{charlie.org.slug}/p/{charlie.project.slug}"
    assert signed_in(charlie).get(f"{charlie_base}/sessions/{finished.id}/").status_code == 404
    assert signed_in(charlie).post(f"{base}/sessions/{finished.id}/confirm-all/").status_code == 404
    assert str(theirs.id) not in client.get(f"{base}/sessions/").content.decode()


# ---------------------------------------------------------------- reject and restore


def test_a_steward_rejects_by_retiring_and_restores(alice, person_with_role, signed_in, base, finished):
    steward = signed_in(person_with_role(Role.STEWARD))
    (pending,) = pending_ids(finished)
    url = f"{base}/memories/{pending}"
    response = steward.post(f"{url}/reject/", {"next": f"{base}/sessions/{finished.id}/"})
    assert response.status_code == 302 and response["Location"] == f"{base}/sessions/{finished.id}/"
    memory = Memory.objects.get(id=pending)
    assert memory.deprecated and not memory.needs_review
    assert memory.feedback.filter(kind="flag", note="Rejected in the session review").exists()
    review = steward.get(f"{base}/sessions/{finished.id}/")
    assert pending not in cards(review, "review-title")
    assert f'id="restore-{pending}"' in review.content.decode()
    steward.post(f"{url}/restore/", {"context": "session"}, HTTP_HX_REQUEST="true")
    memory.refresh_from_db()
    assert not memory.deprecated and memory.needs_review
    assert list(memory.versions.values_list("change", flat=True))[:2] == ["restored", "rejected"]


def test_a_members_reject_flags_for_a_steward(alice, bob, person_with_role, signed_in, base, finished):
    (pending,) = pending_ids(finished)
    signed_in(bob).post(f"{base}/memories/{pending}/reject/")
    memory = Memory.objects.get(id=pending)
    assert not memory.deprecated and memory.needs_review and memory.flag_count == 1
    assert signed_in(bob).post(f"{base}/memories/{pending}/restore/").status_code == 403
    viewer = signed_in(person_with_role(Role.VIEWER))
    assert viewer.post(f"{base}/memories/{pending}/reject/").status_code == 403


def test_a_memory_links_to_the_review_of_its_session(alice, signed_in, base, finished):
    (pending,) = pending_ids(finished)
    page = signed_in(alice).get(f"{base}/memories/{pending}/").content.decode()
    assert f'href="{base}/sessions/{finished.id}/"' in page
