"""Retrieval gaps: which scopes apply where, keyword matches by identifier parts, the
neighbourhood boost end to end."""

from __future__ import annotations

import pytest

from apps.memories.search import SearchRequest, fusion, search
from apps.tenants import services as tenant_services
from apps.tenants.models import TeamMembership
from apps.tenants.roles import Role
from tests.factories import ProjectFactory, TeamFactory
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db


def _listed(client, project) -> set[str]:
    response = client.get(f"projects/{project.id}/memories")
    assert response.status_code == 200, response.content
    return {m["content"] for m in response.json()["items"]}


def _found(client, project, query: str) -> set[str]:
    response = client.post(f"projects/{project.id}/search", {"query": query, "limit": 20})
    assert response.status_code == 200, response.content
    return {r["memory"]["content"] for r in response.json()["results"]}


def test_team_scope_applies_in_every_project_of_the_team_and_only_there(
    alice, bob, org_a, person_with_role, session_client
):
    team, other_team = TeamFactory(organization=org_a), TeamFactory(organization=org_a)
    home = ProjectFactory(organization=org_a, team=team)
    sibling = ProjectFactory(organization=org_a, team=team)
    elsewhere = ProjectFactory(organization=org_a, team=other_team)
    TeamMembership.objects.create(team=team, user=bob.user)
    outsider = person_with_role(Role.MEMBER)
    memory = make_memory(alice, project=home, content="team fact about the billing queue", scope="team")
    as_alice, as_bob = session_client(alice, enforce_csrf=False), session_client(bob, enforce_csrf=False)
    as_outsider = session_client(outsider, enforce_csrf=False)

    assert "team fact about the billing queue" in _listed(as_bob, sibling)
    assert "team fact about the billing queue" in _found(as_bob, sibling, "billing queue")
    assert as_bob.get(f"memories/{memory.id}").status_code == 200
    assert "team fact about the billing queue" not in _listed(as_alice, elsewhere)
    assert "team fact about the billing queue" not in _found(as_alice, elsewhere, "billing queue")
    assert as_outsider.get(f"memories/{memory.id}").status_code == 404
    assert as_outsider.get(f"projects/{sibling.id}/memories").status_code == 404


def test_a_project_limited_key_sees_project_memories_of_its_project_only(alice, org_a, api_client):
    other = ProjectFactory(organization=org_a)
    mine = make_memory(alice, content="fact of the key's project")
    theirs = make_memory(alice, project=other, content="fact of another project")
    org_wide = make_memory(alice, project=other, content="fact for the whole org", scope="org")
    _, key = tenant_services.api_key_create(
        organization=org_a,
        actor=alice.principal,
        name="limited",
        scopes=alice.api_key.scopes,
        project=alice.project,
        check_permission=False,
    )
    limited = api_client(key)

    assert _listed(limited, alice.project) == {"fact of the key's project", "fact for the whole org"}
    assert limited.get(f"memories/{mine.id}").status_code == 200
    assert limited.get(f"memories/{theirs.id}").status_code == 404
    assert limited.get(f"projects/{other.id}/memories").status_code == 404
    assert limited.get(f"memories/{org_wide.id}").status_code == 200
    assert "fact of another project" not in _found(limited, alice.project, "fact of another project")


def test_org_scope_applies_in_every_project_of_the_org_and_no_other(
    alice, bob, charlie, org_a, session_client
):
    team = TeamFactory(organization=org_a)
    TeamMembership.objects.create(team=team, user=bob.user)
    projects = [
        alice.project,
        ProjectFactory(organization=org_a),
        ProjectFactory(organization=org_a, team=team),
    ]
    make_memory(alice, content="org fact: all services log in UTC", scope="org")
    as_bob = session_client(bob, enforce_csrf=False)
    for project in projects:
        assert "org fact: all services log in UTC" in _listed(as_bob, project), project
    as_charlie = session_client(charlie, enforce_csrf=False)
    assert "org fact: all services log in UTC" not in _listed(as_charlie, charlie.project)


@pytest.mark.parametrize("query", ["verify_jwt", "jwt", "verify", "tokens.ts", "tokens"])
def test_keyword_path_finds_identifiers_and_paths_by_their_parts(alice, query):
    jwt = make_memory(
        alice,
        content="verifyJwt rejects tokens whose clock skew exceeds 30 seconds.",
        related_files=["auth/tokens.ts"],
    )
    make_memory(
        alice, content="Sessions expire after an hour of inactivity.", related_files=["web/session.py"]
    )
    result = search(SearchRequest(principal=alice.principal, project=alice.project, query=query, limit=5))
    assert result.rankings["keyword"] == [str(jwt.id)], query
    assert next(h for h in result.hits if h.memory.id == jwt.id).ranks["keyword"] == 1


def test_the_neighbourhood_boost_lifts_a_memory_on_a_co_mentioned_file(alice, api_client):
    # Ten-plus memories on the paginator lead the results; one memory mentions the paginator and
    # views/list.py together, so the built-in co-mention provider makes views/list.py a neighbour
    # of the top files, and a weak memory about views/list.py (ranked past 10) gets the boost.
    for n in range(fusion.BOOST_TOP_K + 2):
        make_memory(
            alice,
            content=f"The paginator clamps page number {n} to the last page.",
            related_files=["core/paginator.py"],
        )
    make_memory(alice, content="Shared by two modules.", related_files=["core/paginator.py", "views/list.py"])
    target = make_memory(alice, content="Templates receive an object list.", related_files=["views/list.py"])
    response = api_client(alice.key).post(
        f"projects/{alice.project.id}/search",
        {"query": "paginator clamps page number to the last page", "limit": 50, "rerank": False},
    )
    assert response.status_code == 200, response.content
    results = {r["memory"]["id"]: r for r in response.json()["results"]}
    boosted = results[str(target.id)]
    assert boosted["boost_reason"] == "graph_neighbourhood: views/list.py"
    assert boosted["components"]["boost"] > 0
    leaders = [r for r in response.json()["results"] if "clamps page" in r["memory"]["content"]]
    assert leaders and all(r["boost_reason"] is None and r["components"]["boost"] == 0 for r in leaders)
