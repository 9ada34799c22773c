"""The health dashboard: its formulas (pure) and the page."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.memories import services as memory_services
from apps.memories.models import MemoryUsage
from apps.review import health
from apps.review.selectors import project_totals
from tests.memories.factories import make_memory


def test_the_score_weighs_its_five_parts_as_documented():
    totals = health.Totals(total=10, active=5, needs_review=2, disputed=1, stale=0, mean_confidence=0.8)
    result = health.health_score(totals)
    expected = 100 * (0.30 * 0.8 + 0.25 * 0.8 + 0.15 * 0.9 + 0.15 * 1.0 + 0.15 * 0.5)
    assert result.score == round(expected) == 80
    assert [key for key, *_ in result.parts] == ["confidence", "reviewed", "undisputed", "fresh", "active"]
    assert sum(weight for _, weight, _, _ in result.parts) == pytest.approx(1.0)


def test_a_project_without_memories_has_no_score():
    assert health.health_score(health.Totals()).score is None
    assert health.health_grade(None) == "muted"


@pytest.mark.parametrize(
    ("score", "grade"), [(100, "ok"), (75, "ok"), (74, "warn"), (50, "warn"), (49, "danger")]
)
def test_grades(score, grade):
    assert health.health_grade(score) == grade


def test_modules_group_files_and_named_modules_once_per_memory():
    facts = [
        health.MemoryFacts(["auth/tokens.py", "auth/views.py"], ["auth"], needs_review=True),
        health.MemoryFacts(["billing/invoice.py"], [], is_e2e=True),
        health.MemoryFacts(["README.md"], ["apps.memories"]),
    ]
    rows, depth = health.module_rows(facts)
    assert depth == 1
    by_name = {row.name: row for row in rows}
    assert by_name["auth"].memories == 1 and by_name["auth"].needs_review == 1
    assert by_name["billing"].e2e == 1
    assert by_name[health.ROOT_MODULE].memories == 1 and by_name["apps"].memories == 1


def test_with_the_graph_a_module_shows_the_share_of_its_files_some_memory_names():
    facts = [health.MemoryFacts(["src/auth/tokens.py"], [])]
    graph = ["src/auth/tokens.py", "src/auth/views.py", "src/billing/a.py", "src/main.py"]
    rows, depth = health.module_rows(facts, graph)
    assert depth == 2  # everything sits in src/
    by_name = {row.name: row for row in rows}
    assert (by_name["src/auth"].files_covered, by_name["src/auth"].files_total) == (1, 2)
    assert by_name["src/auth"].coverage == 0.5
    assert by_name["src/billing"].memories == 0 and by_name["src/billing"].coverage == 0
    assert by_name["src"].files_total == 1  # src/main.py sits directly in src/


def test_bar_widths():
    assert health.bar_width(0, 10) == 0
    assert health.bar_width(10, 10) == 100
    assert health.bar_width(1, 1000) == 2


@pytest.mark.django_db
def test_totals_count_what_the_dashboard_shows(alice, bob):
    used = make_memory(alice, content="a" * 400)  # 100 tokens
    make_memory(alice, content="Waits for review.", needs_review=True)
    disputed = make_memory(alice, content="Disputed one.")
    memory_services.memory_feedback(memory=disputed, actor=bob.principal, kind="dispute")
    old = make_memory(alice, content="Used long ago.")
    make_memory(alice, content="Retired.").delete()
    memory_services.memories_record_access(memory_ids=[used.id, used.id])
    memory_services.memories_record_access(memory_ids=[old.id])
    MemoryUsage.objects.filter(memory=old).update(last_accessed_at=timezone.now() - timedelta(days=40))
    memory_services.memory_update(
        memory=make_memory(alice, content="Gone."), actor=alice.principal, changes={"deprecated": True}
    )

    totals = project_totals(principal=alice.principal, project=alice.project)
    assert (totals.total, totals.active, totals.needs_review, totals.disputed) == (4, 1, 2, 1)
    # Tokens saved is measured against the A/B control group: with no sessions, it is not claimed.
    assert totals.tokens_saved is None and totals.tokens_saved_interval is None


@pytest.mark.django_db
def test_the_health_page_is_the_project_home(alice, signed_in, base):
    make_memory(alice, content="verify_jwt rejects skew over 30 s.", related_files=["auth/tokens.py"])
    make_memory(
        alice, content="Invoices round half-even.", related_files=["billing/money.py"], needs_review=True
    )
    page = signed_in(alice).get(f"{base}/").content.decode()
    assert 'data-testid="stat-total">2<' in page and 'data-testid="stat-review">1<' in page
    assert 'data-testid="health-score"' in page and "mean confidence" in page and "share not disputed" in page
    assert "Tokens saved is measured" in page and "not enough sessions yet" in page
    assert "?module=auth" in page and "?module=billing" in page
    assert "Invoices round half-even." in page  # needs attention
    assert "trust-badge" in page and 'href="/o/acme/p/acme-api/disputes/"' in page
    assert str(alice.project.id) in page  # connect another agent


@pytest.mark.django_db
def test_an_empty_project_shows_how_to_connect_an_agent(alice, signed_in, base):
    page = signed_in(alice).get(f"{base}/").content.decode()
    assert 'data-testid="health-empty"' in page and "Connect an agent" in page
    assert f"/api/v1/projects/{alice.project.id}/context" in page and "/o/acme/api-keys/" in page


@pytest.mark.django_db
def test_viewers_read_the_dashboard_and_outsiders_get_404(person_with_role, charlie, signed_in, base):
    from apps.tenants.roles import Role

    assert signed_in(person_with_role(Role.VIEWER)).get(f"{base}/").status_code == 200
    assert signed_in(charlie).get(f"{base}/").status_code == 404


@pytest.mark.django_db
def test_someone_elses_personal_memories_are_not_counted(alice, bob, signed_in, base):
    make_memory(bob, content="Bob's own reminder.", scope="personal")
    assert project_totals(principal=alice.principal, project=alice.project).total == 0
    assert project_totals(principal=bob.principal, project=bob.project).total == 1
    assert "Bob's own reminder" not in signed_in(alice).get(f"{base}/").content.decode()
