"""Teams through the API: admins create, rename and delete them, add and remove members and
move projects in and out; the team's projects and team memories reach exactly its members and
its projects; every write is audited; the bad inputs get a clear 4xx."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from apps.memories.models import Memory, MemoryScope
from apps.tenants.models import AuditLog, TeamMembership
from apps.tenants.roles import Role
from tests.factories import ProjectFactory
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db


def _teams(org):
    return f"orgs/{org.slug}/teams"


@pytest.fixture
def admin_api(alice, api_client):
    return api_client(alice.key)


def _make_team(api, org, name="Payments"):
    response = api.post(_teams(org), {"name": name})
    assert response.status_code == 201, response.content
    return response.json()


def test_an_admin_creates_renames_and_deletes_a_team_and_each_is_audited(alice, admin_api):
    team = _make_team(admin_api, alice.org)
    assert (team["name"], team["slug"], team["members"], team["projects"]) == ("Payments", "payments", [], [])

    renamed = admin_api.patch(f"{_teams(alice.org)}/payments", {"name": "Billing"})
    assert renamed.status_code == 200 and renamed.json()["name"] == "Billing"
    assert renamed.json()["slug"] == "payments"  # (the paths naming it stay)
    assert [t["name"] for t in admin_api.get(_teams(alice.org)).json()] == ["Billing"]

    assert admin_api.delete(f"{_teams(alice.org)}/payments").status_code == 204
    assert admin_api.get(f"{_teams(alice.org)}/payments").status_code == 404
    actions = list(
        AuditLog.objects.filter(organization=alice.org, action__startswith="team.").values_list(
            "action", flat=True
        )
    )
    assert sorted(actions) == ["team.created", "team.deleted", "team.renamed"]


def test_a_team_name_taken_is_a_409_whatever_its_case(alice, admin_api):
    _make_team(admin_api, alice.org, "Payments")
    _make_team(admin_api, alice.org, "Search")
    taken = admin_api.post(_teams(alice.org), {"name": "payments"})
    assert taken.status_code == 409
    assert taken.json()["error"]["code"] == "name_taken"
    renamed = admin_api.patch(f"{_teams(alice.org)}/search", {"name": "PAYMENTS"})
    assert renamed.status_code == 409 and renamed.json()["error"]["code"] == "name_taken"


def test_deleting_a_team_that_owns_projects_is_refused_until_they_move(alice, admin_api):
    team = _make_team(admin_api, alice.org)
    assigned = admin_api.post(f"{_teams(alice.org)}/payments/projects", {"project_id": str(alice.project.id)})
    assert assigned.status_code == 200 and [p["slug"] for p in assigned.json()["projects"]] == ["acme-api"]

    refused = admin_api.delete(f"{_teams(alice.org)}/payments")
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert error["code"] == "team_has_projects" and error["details"] == {"projects": ["Acme API"]}
    assert "Move them" in error["message"]

    out = admin_api.delete(f"{_teams(alice.org)}/payments/projects/{alice.project.id}")
    assert out.status_code == 204
    assert admin_api.delete(f"{_teams(alice.org)}/{team['id']}").status_code == 204
    alice.project.refresh_from_db()
    assert alice.project.team_id is None


def test_members_and_viewers_may_read_teams_but_change_nothing(
    alice, bob, person_with_role, admin_api, api_client
):
    _make_team(admin_api, alice.org)
    steward = person_with_role(Role.STEWARD)
    for person in (bob, steward, person_with_role(Role.VIEWER)):
        api = api_client(person.key)
        assert api.get(_teams(alice.org)).status_code == 200
        base = f"{_teams(alice.org)}/payments"
        attempts = [
            api.post(_teams(alice.org), {"name": "Mine"}),
            api.patch(base, {"name": "Mine"}),
            api.delete(base),
            api.post(f"{base}/members", {"user": person.user.email}),
            api.delete(f"{base}/members/{alice.user.pk}"),
            api.post(f"{base}/projects", {"project_id": str(alice.project.id)}),
            api.delete(f"{base}/projects/{alice.project.id}"),
        ]
        assert [r.status_code for r in attempts] == [403] * 7, person.role
        assert attempts[0].json()["error"]["code"] == "forbidden"


def test_an_outsider_finds_no_team_and_cannot_add_one_of_theirs(alice, charlie, admin_api, api_client):
    _make_team(admin_api, alice.org)
    outsider = api_client(charlie.key)
    assert outsider.get(f"{_teams(alice.org)}/payments").status_code == 404
    assert outsider.get(_teams(alice.org)).status_code == 404
    added = admin_api.post(f"{_teams(alice.org)}/payments/members", {"user": charlie.user.email})
    assert added.status_code == 404 and added.json()["error"]["details"] == {"field": "user"}
    foreign = admin_api.post(
        f"{_teams(alice.org)}/payments/projects", {"project_id": str(charlie.project.id)}
    )
    assert foreign.status_code == 404


def test_a_team_memory_applies_in_every_project_of_its_team_and_in_no_other(
    alice, bob, org_a, admin_api, api_client
):
    _make_team(admin_api, alice.org)
    second = ProjectFactory(organization=org_a, name="Acme Web", slug="acme-web")
    outside = ProjectFactory(organization=org_a, name="Acme Ops", slug="acme-ops")
    for project in (alice.project, second):
        assert (
            admin_api.post(f"{_teams(org_a)}/payments/projects", {"project_id": str(project.id)}).status_code
            == 200
        )
    assert admin_api.post(f"{_teams(org_a)}/payments/members", {"user": "bob@acme.test"}).status_code == 201

    created = api_client(bob.key).post(
        f"projects/{alice.project.id}/memories",
        {"type": "gotcha", "content": "Refunds settle a day late on Fridays.", "scope": "team"},
    )
    assert created.status_code == 201, created.content
    memory_id = created.json()["id"]

    def listed(api, project):
        response = api.get(f"projects/{project.id}/memories")
        assert response.status_code == 200
        return {m["id"] for m in response.json()["items"]}

    for api in (api_client(bob.key), admin_api):
        assert memory_id in listed(api, alice.project)
        assert memory_id in listed(api, second)
        assert memory_id not in listed(api, outside)
    # Bob's key searched in the other project of the team finds it too.
    found = api_client(bob.key).post(f"projects/{second.id}/search", {"query": "refunds settle late fridays"})
    assert found.status_code == 200 and memory_id in [r["memory"]["id"] for r in found.json()["results"]]


def test_a_member_taken_off_a_team_loses_its_projects_at_once(alice, bob, admin_api, api_client):
    _make_team(admin_api, alice.org)
    admin_api.post(f"{_teams(alice.org)}/payments/projects", {"project_id": str(alice.project.id)})
    bob_api = api_client(bob.key)
    assert bob_api.get(f"projects/{alice.project.id}").status_code == 404  # not on the team yet
    admin_api.post(f"{_teams(alice.org)}/payments/members", {"user": str(bob.user.pk)})
    assert bob_api.get(f"projects/{alice.project.id}").status_code == 200

    removed = admin_api.delete(f"{_teams(alice.org)}/payments/members/{bob.user.pk}")
    assert removed.status_code == 204
    assert bob_api.get(f"projects/{alice.project.id}").status_code == 404
    assert admin_api.delete(f"{_teams(alice.org)}/payments/members/{bob.user.pk}").status_code == 404
    assert AuditLog.objects.filter(action="team.member_removed", metadata__user_id=bob.user.pk).count() == 1


def test_team_memories_follow_their_project_out_of_the_team(alice, org_a, admin_api):
    _make_team(admin_api, org_a)
    _make_team(admin_api, org_a, "Search")
    admin_api.post(f"{_teams(org_a)}/payments/projects", {"project_id": str(alice.project.id)})
    alice.project.refresh_from_db()
    memory = make_memory(alice, content="Idempotency keys expire after a day.", scope="team")
    payments = memory.team_id

    admin_api.post(f"{_teams(org_a)}/search/projects", {"project_id": str(alice.project.id)})
    memory.refresh_from_db()
    assert memory.scope == MemoryScope.TEAM and memory.team_id not in (None, payments)

    admin_api.delete(f"{_teams(org_a)}/search/projects/{alice.project.id}")
    memory.refresh_from_db()
    assert (memory.scope, memory.team_id) == (MemoryScope.PROJECT, None)
    assert admin_api.delete(f"{_teams(org_a)}/search").status_code == 204
    assert Memory.objects.filter(pk=memory.pk).exists()


@pytest.mark.django_db(transaction=True)
def test_a_socket_on_a_team_project_closes_when_its_person_leaves_the_team(alice, bob, admin_api):
    async_to_sync(_socket_closes)(alice, bob, admin_api)


async def _socket_closes(alice, bob, admin_api):
    from tests.test_realtime import _connect, _session_cookie

    await sync_to_async(_make_team)(admin_api, alice.org)
    await sync_to_async(admin_api.post)(
        f"{_teams(alice.org)}/payments/projects", {"project_id": str(alice.project.id)}
    )
    await sync_to_async(admin_api.post)(f"{_teams(alice.org)}/payments/members", {"user": "bob@acme.test"})
    cookie = (b"cookie", (await sync_to_async(_session_cookie)(bob)).encode())
    sockets = []
    for header in (cookie, (b"authorization", f"Bearer {bob.key}".encode())):
        communicator, connected, _ = await _connect(alice.project.id, header)
        assert connected and (await communicator.receive_json_from())["event"] == "hello"
        sockets.append(communicator)

    await sync_to_async(admin_api.delete)(f"{_teams(alice.org)}/payments/members/{bob.user.pk}")
    for communicator in sockets:
        assert (await communicator.receive_output())["type"] == "websocket.close"
    assert not await sync_to_async(TeamMembership.objects.filter(user=bob.user).exists)()
