"""The memory browser: filters, search through the retrieval engine, cards with provenance,
visibility of personal memories, role-dependent actions, query counts."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape

import pytest
from django.utils import timezone

from apps.memories import services as memory_services
from apps.memories.models import Memory
from apps.review import health
from apps.review.selectors import BrowseFilters, memories_filtered
from apps.tenants.roles import Role
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db


def shown(response) -> set[str]:
    """The ids of the memory cards on a page."""
    return set(re.findall(r'data-memory-id="([0-9a-f-]+)"', response.content.decode()))


@pytest.fixture
def corpus(alice, bob):
    jwt = make_memory(
        alice,
        content="verify_jwt rejects tokens whose clock skew exceeds 30 s.",
        type="gotcha",
        related_files=["auth/tokens.py"],
        session_id="sess-auth-1",
        methodology="tdd",
        confidence=0.9,
    )
    money = make_memory(
        alice,
        content="Invoices round half-even; never use float for money.",
        type="decision",
        related_files=["billing/money.py"],
        source="user_taught",
        confidence=0.6,
    )
    flaky = make_memory(
        bob,
        content="The e2e suite fails when REDIS_URL is unset.",
        type="error_pattern",
        related_modules=["tests/e2e"],
        needs_review=True,
        scope="org",
        confidence=0.3,
    )
    readme = make_memory(
        alice,
        content="The README is generated from docs/.",
        related_files=["README.md"],
        type="pattern",
        confidence=0.7,
    )
    Memory.objects.filter(pk=readme.pk).update(created_at=timezone.now() - timedelta(days=10))
    return {"jwt": str(jwt.id), "money": str(money.id), "flaky": str(flaky.id), "readme": str(readme.id)}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("type=gotcha", {"jwt"}),
        ("source=user_taught", {"money"}),
        ("scope=org", {"flaky"}),
        ("confidence=high", {"jwt"}),
        ("confidence=medium", {"money", "readme"}),
        ("confidence=low", {"flaky"}),
        ("module=auth", {"jwt"}),
        ("module=tests", {"flaky"}),
        ("module=(root)", {"readme"}),
        ("methodology=tdd", {"jwt"}),
        ("review=needs_review", {"flaky"}),
        ("type=decision&module=billing", {"money"}),
        ("type=not-a-type", {"jwt", "money", "flaky", "readme"}),
    ],
)
def test_filters_filter(corpus, alice, signed_in, base, query, expected):
    response = signed_in(alice).get(f"{base}/memories/?{query}")
    assert response.status_code == 200
    assert shown(response) == {corpus[name] for name in expected}


def test_date_filters(corpus, alice, signed_in, base):
    today = timezone.localdate()
    client = signed_in(alice)
    recent = client.get(f"{base}/memories/?since={today - timedelta(days=1)}")
    assert shown(recent) == {corpus["jwt"], corpus["money"], corpus["flaky"]}
    older = client.get(f"{base}/memories/?until={today - timedelta(days=5)}")
    assert shown(older) == {corpus["readme"]}
    assert len(shown(client.get(f"{base}/memories/?until=9999-12-31"))) == 4  # (the last day there is)
    assert len(shown(client.get(f"{base}/memories/?since=9999-12-31"))) == 0


def test_review_states_and_deprecated(corpus, alice, signed_in, base):
    memory = Memory.objects.get(pk=corpus["money"])
    memory_services.memory_feedback(memory=memory, actor=alice.principal, kind="confirm")
    memory_services.memory_update(
        memory=Memory.objects.get(pk=corpus["readme"]), actor=alice.principal, changes={"deprecated": True}
    )
    client = signed_in(alice)
    assert shown(client.get(f"{base}/memories/?review=verified")) == {corpus["money"]}
    assert shown(client.get(f"{base}/memories/?review=deprecated")) == {corpus["readme"]}
    assert corpus["readme"] not in shown(client.get(f"{base}/memories/"))


def test_keyword_and_semantic_search_go_through_the_retrieval_engine(corpus, alice, signed_in, base):
    client = signed_in(alice)
    keyword = client.get(f"{base}/memories/", {"q": "verify_jwt", "mode": "keyword"})
    assert shown(keyword) == {corpus["jwt"]}
    assert "keyword #1" in keyword.content.decode()
    semantic = client.get(f"{base}/memories/", {"q": "clock skew of tokens", "mode": "semantic"})
    assert corpus["jwt"] in shown(semantic) and "semantic #" in semantic.content.decode()
    filtered = client.get(f"{base}/memories/", {"q": "money float invoices", "type": "gotcha"})
    assert corpus["money"] not in shown(filtered)


def test_the_module_filter_agrees_with_the_module_map(alice, base):
    paths = ["src/auth/tokens.py", "src/auth/deep/x.py", "src/main.py", "src/billing/a.py"]
    for path in paths:
        make_memory(alice, content=f"About {path}.", related_files=[path])
    make_memory(alice, content="Named module.", related_modules=["src.auth"])
    rows, depth = health.module_rows(
        health.MemoryFacts(m.related_files, m.related_modules) for m in Memory.objects.all()
    )
    assert depth == 2
    for row in rows:
        qs = memories_filtered(
            principal=alice.principal,
            project=alice.project,
            filters=BrowseFilters(module=row.name),
            depth=depth,
        )
        assert qs.count() == row.memories, row.name


def test_cards_show_provenance(corpus, alice, signed_in, base):
    memory_services.memories_record_access(memory_ids=[corpus["jwt"]])
    page = signed_in(alice).get(f"{base}/memories/?type=gotcha").content.decode()
    provenance = page.split('data-testid="provenance"', 1)[1].split("</p>", 1)[0]
    assert "sess-auth-1" in provenance and "used 1×" in provenance and "tdd" in provenance
    assert f"by {alice.user.display_name}" in provenance
    assert "agent_explicit" in page and "confidence 0.90" in page


def test_personal_memories_show_only_to_their_owner(alice, bob, signed_in, base):
    mine = make_memory(bob, content="Bob prefers tabs, quietly.", scope="personal")
    assert str(mine.id) in shown(signed_in(bob).get(f"{base}/memories/"))
    assert str(mine.id) not in shown(signed_in(alice).get(f"{base}/memories/"))
    assert signed_in(alice).get(f"{base}/memories/{mine.id}/").status_code == 404
    assert str(mine.id) not in shown(signed_in(alice).get(f"{base}/memories/", {"q": "tabs quietly"}))


def test_viewers_see_no_actions_members_no_pin_stewards_everything(
    corpus, alice, person_with_role, signed_in, base
):
    url = f"{base}/memories/?type=gotcha"
    viewer = signed_in(person_with_role(Role.VIEWER)).get(url).content.decode()
    assert "Confirm" not in viewer and "Correct" not in viewer and "Flag wrong" not in viewer
    member = signed_in(person_with_role(Role.MEMBER)).get(url).content.decode()
    assert "✓ Confirm" in member and "✎ Correct" in member and "Dispute" in member
    assert ">Pin<" not in member and ">Delete<" not in member  # alice's memory, not theirs
    steward = signed_in(person_with_role(Role.STEWARD)).get(url).content.decode()
    assert ">Pin<" in steward and ">Delete<" in steward


def test_empty_project_explains_how_to_send_memories(alice, signed_in, base):
    page = signed_in(alice).get(f"{base}/memories/").content.decode()
    assert 'data-testid="browser-empty"' in page and f"/api/v1/projects/{alice.project.id}/memories" in page


def test_no_match_says_so(corpus, alice, signed_in, base):
    page = signed_in(alice).get(f"{base}/memories/?type=dead_end").content.decode()
    assert "Nothing matches" in page and "Clear all filters" in page


def test_pages_of_thirty(alice, signed_in, base):
    memory_services.memories_create_batch(
        project=alice.project,
        actor=alice.principal,
        drafts=[
            __import__("tests.memories.factories", fromlist=["draft"]).draft(content=f"Fact {i}.")
            for i in range(35)
        ],
    )
    client = signed_in(alice)
    first = client.get(f"{base}/memories/")
    assert len(shown(first)) == 30 and "Older memories" in first.content.decode()
    second = client.get(f"{base}/memories/?page=2")
    assert len(shown(second)) == 5 and not shown(first) & shown(second)


def test_each_page_says_which_memories_of_how_many_and_links_both_ways(alice, signed_in, base):
    """Page 1 said "30+ memories" and page 2 had no way back."""
    from tests.memories.factories import draft

    memory_services.memories_create_batch(
        project=alice.project,
        actor=alice.principal,
        drafts=[draft(content=f"Fact {i}.", type="gotcha") for i in range(42)]
        + [draft(content="A decision.", type="decision")],
    )
    client = signed_in(alice)
    first = client.get(f"{base}/memories/", {"type": "gotcha"}).content.decode()
    assert count_line(first) == "Memories 1–30 of 42" and "← Newer" not in first
    assert 'href="?type=gotcha&amp;page=2">Older memories' in first
    second = client.get(f"{base}/memories/", {"type": "gotcha", "page": "2"}).content.decode()
    assert count_line(second) == "Memories 31–42 of 42" and "Older memories" not in second
    assert 'href="?type=gotcha&amp;page=1">← Newer memories' in second
    assert count_line(client.get(f"{base}/memories/", {"type": "decision"}).content.decode()) == "1 memory"
    beyond = client.get(f"{base}/memories/", {"type": "gotcha", "page": "3"}).content.decode()
    assert count_line(beyond) == "42 memories in all, none on page 3" and "← Newer memories" in beyond


def count_line(page: str) -> str:
    found = re.search(r'data-testid="result-count">(.*?)</p>', page, re.S)
    assert found is not None
    return unescape(found.group(1)).strip()


def test_the_list_costs_the_same_queries_for_5_or_30_memories(
    alice, signed_in, base, django_assert_max_num_queries
):
    from tests.memories.factories import draft

    client = signed_in(alice)
    memory_services.memories_create_batch(
        project=alice.project, actor=alice.principal, drafts=[draft(content=f"Fact {i}.") for i in range(5)]
    )
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as few:
        client.get(f"{base}/memories/")
    memory_services.memories_create_batch(
        project=alice.project, actor=alice.principal, drafts=[draft(content=f"More {i}.") for i in range(25)]
    )
    with django_assert_max_num_queries(len(few.captured_queries)):
        client.get(f"{base}/memories/")
