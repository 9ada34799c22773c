"""Disputes: who may open, comment on and resolve them, what happens to the memory, who hears."""

from __future__ import annotations

import pytest
from django.core import mail
from django.db import transaction

from apps.governance import services
from apps.governance.models import Dispute, Notification
from apps.memories import services as memory_services
from apps.memories.models import Memory
from apps.memories.search.fusion import weighting
from apps.tenants.roles import Role
from memorysaas.kernel.errors import Conflict
from tests.memories.factories import make_memory
from tests.processes import Worker, wait_until_another_session_waits_for_a_lock
from tests.tables import tables_holding

pytestmark = pytest.mark.django_db


@pytest.fixture
def team(person_with_role):
    return {role: person_with_role(role) for role in Role}


@pytest.fixture
def signed_in(session_client):
    """Resolving is a person's act: API keys carry no 'memories:review' scope."""

    def make(person):
        return session_client(person, enforce_csrf=False)

    return make


@pytest.fixture
def memory(team):
    return make_memory(team[Role.OWNER], content="Run migrations with --fake on staging.")


def _open(api_client, person, memory, reason="That flag corrupts the schema."):
    return api_client(person.key).post(f"memories/{memory.id}/disputes", {"reason": reason})


@pytest.mark.parametrize(
    ("role", "status"),
    [(Role.VIEWER, 403), (Role.MEMBER, 201), (Role.STEWARD, 201), (Role.ADMIN, 201), (Role.OWNER, 201)],
)
def test_who_may_open_a_dispute(api_client, team, memory, role, status):
    response = _open(api_client, team[role], memory)
    assert response.status_code == status, response.content
    memory.refresh_from_db()
    assert memory.disputed is (status == 201)


def test_opening_flags_the_memory_and_notifies_stewards_in_app_and_by_email(api_client, team, memory):
    body = _open(api_client, team[Role.MEMBER], memory).json()
    memory.refresh_from_db()
    assert memory.disputed and memory.needs_review
    assert body["status"] == "open" and body["comments"][0]["kind"] == "opened"
    notified = set(Notification.objects.filter(kind="dispute.opened").values_list("user__email", flat=True))
    assert notified == {team[r].user.email for r in (Role.STEWARD, Role.ADMIN, Role.OWNER)}
    assert sorted(m.to[0] for m in mail.outbox) == sorted(notified)
    assert f"/disputes/{body['id']}/" in mail.outbox[0].body
    assert (
        weighting(
            phase="implement", memory_type="gotcha", source="user_taught", confidence=0.8, disputed=True
        ).dispute
        == 0.8
    )


def test_a_second_open_dispute_on_the_same_memory_is_a_conflict(api_client, team, memory):
    assert _open(api_client, team[Role.MEMBER], memory).status_code == 201
    assert _open(api_client, team[Role.STEWARD], memory).status_code == 409


@pytest.mark.parametrize(
    ("role", "status"),
    [(Role.VIEWER, 403), (Role.MEMBER, 201), (Role.STEWARD, 201), (Role.ADMIN, 201), (Role.OWNER, 201)],
)
def test_who_may_comment(api_client, team, memory, role, status):
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    response = api_client(team[role].key).post(f"disputes/{dispute_id}/comments", {"body": "Seen it too."})
    assert response.status_code == status, response.content
    thread = api_client(team[Role.VIEWER].key).get(f"disputes/{dispute_id}/comments").json()
    assert len(thread) == (2 if status == 201 else 1)


def test_comment_notifies_the_opener_and_stewards_but_not_the_author(api_client, team, memory):
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    Notification.objects.all().delete()
    api_client(team[Role.STEWARD].key).post(f"disputes/{dispute_id}/comments", {"body": "Which staging?"})
    notified = set(Notification.objects.values_list("user__email", flat=True))
    assert team[Role.MEMBER].user.email in notified
    assert team[Role.STEWARD].user.email not in notified


@pytest.mark.parametrize(
    ("role", "status"),
    [(Role.VIEWER, 403), (Role.MEMBER, 403), (Role.STEWARD, 200), (Role.ADMIN, 200), (Role.OWNER, 200)],
)
def test_who_may_resolve(api_client, team, memory, role, status, signed_in):
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    response = signed_in(team[role]).post(f"disputes/{dispute_id}/resolve", {"resolution": "reject"})
    assert response.status_code == status, response.content
    memory.refresh_from_db()
    assert memory.disputed is (status != 200)


def test_update_resolution_rewrites_the_memory_and_clears_the_badge(api_client, team, memory, signed_in):
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    response = signed_in(team[Role.STEWARD]).post(
        f"disputes/{dispute_id}/resolve",
        {"resolution": "update", "note": "Fixed.", "changes": {"content": "Never use --fake on staging."}},
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "resolved" and body["resolution"] == "update" and not body["override"]
    assert [c["kind"] for c in body["comments"]] == ["opened", "resolved"]
    memory.refresh_from_db()
    assert (
        memory.content == "Never use --fake on staging." and not memory.disputed and not memory.needs_review
    )
    assert memory.versions.filter(change="dispute_update").exists()
    assert Notification.objects.filter(kind="dispute.resolved", user=team[Role.MEMBER].user).exists()


def test_an_update_that_leaves_the_memory_as_it_was_is_a_conflict_and_keeps_the_dispute_open(
    api_client, team, memory, signed_in
):
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    memory.refresh_from_db()
    version = memory.version
    response = signed_in(team[Role.STEWARD]).post(
        f"disputes/{dispute_id}/resolve",
        {"resolution": "update", "changes": {"content": memory.content + " "}},
    )
    assert response.status_code == 409, response.content  # (valid; the memory already says it)
    memory.refresh_from_db()
    assert memory.disputed and memory.needs_review and memory.version == version
    assert Dispute.objects.get(id=dispute_id).status == "open"


def test_update_without_changes_is_invalid(api_client, team, memory, signed_in):
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    response = signed_in(team[Role.STEWARD]).post(f"disputes/{dispute_id}/resolve", {"resolution": "update"})
    assert response.status_code == 422
    assert Dispute.objects.get(pk=dispute_id).is_open


def test_deprecate_resolution(api_client, team, memory, signed_in):
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    signed_in(team[Role.STEWARD]).post(f"disputes/{dispute_id}/resolve", {"resolution": "deprecate"})
    memory.refresh_from_db()
    assert memory.deprecated and not memory.disputed


def test_a_secret_pasted_into_a_dispute_thread_is_stored_mailed_and_shown_redacted(
    api_client, team, memory, signed_in
):
    key = "sk-ant-api03-" + "Pw3Ks8Jd2Lf6" * 4
    dispute_id = _open(
        api_client, team[Role.MEMBER], memory, reason=f"Staging needs {key}, not --fake."
    ).json()["id"]
    api_client(team[Role.STEWARD].key).post(f"disputes/{dispute_id}/comments", {"body": f"{key} works here"})
    response = signed_in(team[Role.STEWARD]).post(
        f"disputes/{dispute_id}/resolve", {"resolution": "reject", "note": f"Rotated {key}."}
    )
    assert response.status_code == 200, response.content
    thread = [c["body"] for c in response.json()["comments"]]
    assert all("[REDACTED:anthropic_key]" in body for body in thread), thread
    assert tables_holding(key[13:40]) == [] and not any(key in m.body for m in mail.outbox)


def test_only_admins_override_a_closed_dispute_and_history_is_kept(api_client, team, memory, signed_in):
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    steward = signed_in(team[Role.STEWARD])
    assert steward.post(f"disputes/{dispute_id}/resolve", {"resolution": "reject"}).status_code == 200
    assert steward.post(f"disputes/{dispute_id}/resolve", {"resolution": "deprecate"}).status_code == 403
    response = signed_in(team[Role.ADMIN]).post(
        f"disputes/{dispute_id}/resolve", {"resolution": "deprecate", "note": "It is wrong."}
    )
    body = response.json()
    assert response.status_code == 200 and body["override"] and body["resolution"] == "deprecate"
    assert [c["kind"] for c in body["comments"]] == ["opened", "resolved", "overridden", "resolved"]
    assert Memory.objects.get(pk=memory.pk).deprecated


def test_lists_and_statuses(api_client, team, memory):
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    viewer = api_client(team[Role.VIEWER].key)
    project_id = team[Role.VIEWER].project.id
    assert [d["id"] for d in viewer.get(f"projects/{project_id}/disputes").json()] == [dispute_id]
    assert viewer.get(f"projects/{project_id}/disputes", {"status": "resolved"}).json() == []
    assert [d["id"] for d in viewer.get(f"memories/{memory.id}/disputes").json()] == [dispute_id]


def test_events_are_published(api_client, team, memory, monkeypatch, signed_in):
    seen = []
    monkeypatch.setattr(services, "publish", lambda project_id, event, data: seen.append(event))
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    api_client(team[Role.MEMBER].key).post(f"disputes/{dispute_id}/comments", {"body": "More."})
    signed_in(team[Role.STEWARD]).post(f"disputes/{dispute_id}/resolve", {"resolution": "reject"})
    assert seen == ["dispute.opened", "dispute.commented", "dispute.resolved"]


def test_notifications_are_per_user(api_client, team, memory, charlie):
    _open(api_client, team[Role.MEMBER], memory)
    steward = api_client(team[Role.STEWARD].key)
    items = steward.get("notifications", {"unread": True}).json()
    assert len(items) == 1 and items[0]["kind"] == "dispute.opened"
    assert api_client(charlie.key).get("notifications").json() == []
    assert api_client(charlie.key).post("notifications/read", {}).json() == {"marked": 0}
    assert steward.post(f"notifications/{items[0]['id']}/read", {}).json()["read"] is True
    assert steward.get("notifications", {"unread": True}).json() == []
    assert api_client(team[Role.ADMIN].key).post("notifications/read", {}).json() == {"marked": 1}


def test_gdpr_export_and_erasure(api_client, team, memory):
    from apps.governance import gdpr

    member = team[Role.MEMBER].user
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    exported = gdpr.export_user(member)
    assert [d["id"] for d in exported["disputes_opened"]] == [dispute_id]
    assert gdpr.export_organization(team[Role.MEMBER].org)["disputes"][0]["thread"][0]["kind"] == "opened"
    steward = team[Role.STEWARD].user
    assert gdpr.delete_user_data(steward, "deleted-user-x")["notifications"] == 1
    counts = gdpr.delete_user_data(member, "deleted-user-y")
    assert counts["dispute_rows"] == 2
    dispute = Dispute.objects.get(pk=dispute_id)
    assert dispute.opened_by is None and dispute.opened_by_label == "deleted-user-y"


@pytest.mark.django_db(transaction=True)
def test_an_update_that_an_edit_made_meanwhile_already_made_changes_nothing(api_client, team, memory):
    """The resolution compares the memory's version from under its lock: read before an edit that
    commits meanwhile, the edit's new version looked like the update's own."""
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    fixed = "Run migrations without --fake on staging."
    with transaction.atomic():
        locked = memory_services.memory_locked(memory)
        memory_services.memory_update(
            memory=locked, actor=team[Role.OWNER].principal, changes={"content": fixed}
        )
        resolution = Worker(
            lambda: services.dispute_resolve(
                dispute=Dispute.objects.get(pk=dispute_id),
                actor=team[Role.STEWARD].principal,
                resolution="update",
                changes={"content": fixed},
            )
        )
        wait_until_another_session_waits_for_a_lock()
    assert isinstance(resolution.finish(), Conflict)
    assert Dispute.objects.get(pk=dispute_id).status == "open"


@pytest.mark.parametrize(
    "changes",
    [
        {"work_unit_ref": ["x"]},
        {"decay_half_life_days": "abc"},
        {"decay_half_life_days": -1},
        {"deprecated": "maybe"},
        {"confidence": 7},
        {"no_such_field": 1},
        {},
    ],
)
def test_an_update_takes_only_what_a_patch_would(api_client, team, memory, signed_in, changes):
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    memory.refresh_from_db()
    version = memory.version
    response = signed_in(team[Role.STEWARD]).post(
        f"disputes/{dispute_id}/resolve", {"resolution": "update", "changes": changes}
    )
    assert response.status_code == 422, response.content
    assert response.json()["error"]["code"] == "validation_error"
    memory.refresh_from_db()
    assert memory.version == version and Dispute.objects.get(pk=dispute_id).is_open
    assert api_client(team[Role.OWNER].key).get(f"memories/{memory.id}").status_code == 200


@pytest.mark.parametrize(
    ("resolution", "changes"),
    [("reject", {"content": "Never use --fake on staging."}), ("deprecate", {"deprecated": False})],
)
def test_changes_go_only_with_an_update(api_client, team, memory, signed_in, resolution, changes):
    """Changes sent with a rejection or deprecation were dropped, and the answer was a 200."""
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    memory.refresh_from_db()
    version = memory.version
    response = signed_in(team[Role.STEWARD]).post(
        f"disputes/{dispute_id}/resolve", {"resolution": resolution, "changes": changes}
    )
    assert response.status_code == 422, response.content
    assert response.json()["error"]["details"] == {"field": "changes"}
    memory.refresh_from_db()
    assert memory.version == version and memory.disputed and not memory.deprecated
    assert Dispute.objects.get(pk=dispute_id).is_open
    response = signed_in(team[Role.STEWARD]).post(
        f"disputes/{dispute_id}/resolve", {"resolution": resolution, "changes": None}
    )
    assert response.status_code == 200, response.content


def test_an_update_that_brings_a_secret_leaves_the_memory_in_review(api_client, team, memory, signed_in):
    """As any write that brings a secret (a steward's PATCH or correction too): the resolution
    cleared the review, and a memory with a redaction marker went to agents unreviewed."""
    key = "sk-ant-api03-" + "Pw3Ks8Jd2Lf6" * 4
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    response = signed_in(team[Role.STEWARD]).post(
        f"disputes/{dispute_id}/resolve",
        {"resolution": "update", "changes": {"content": f"Migrate staging with {key}."}},
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "resolved"
    memory.refresh_from_db()
    assert memory.content == "Migrate staging with [REDACTED:anthropic_key]."
    assert memory.secrets_redacted and memory.needs_review and not memory.disputed


def test_an_update_that_asks_for_review_keeps_the_memory_in_review(api_client, team, memory, signed_in):
    """The dispute's close cleared the review the same update had just asked for."""
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    changes = {"content": "Migrate staging from the runbook's step 4.", "needs_review": True}
    response = signed_in(team[Role.STEWARD]).post(
        f"disputes/{dispute_id}/resolve", {"resolution": "update", "changes": changes}
    )
    assert response.status_code == 200, response.content
    memory.refresh_from_db()
    assert memory.content == changes["content"] and memory.needs_review and not memory.disputed


def test_a_personal_memory_cannot_be_disputed_and_no_steward_hears_of_it(api_client, team):
    personal = make_memory(team[Role.MEMBER], content="My shortcut: deploy with --force.", scope="personal")
    response = _open(api_client, team[Role.MEMBER], personal)
    assert response.status_code == 409, response.content
    assert response.json()["error"]["details"] == {"field": "memory"}
    personal.refresh_from_db()
    assert not personal.disputed and not Dispute.objects.exists() and not Notification.objects.exists()
    assert not [m for m in mail.outbox if "--force" in m.body]


def test_an_api_key_reads_and_marks_only_the_notifications_its_scope_covers(
    api_client, alice, org_b, project_a
):
    """A key acts as its creator, but only within its organization (and project, for a project
    key): the creator's notifications from another organization or project stay out of reach."""
    from apps.tenants import services as tenant_services
    from apps.tenants.principal import Principal
    from tests.factories import MembershipFactory, ProjectFactory

    MembershipFactory(organization=org_b, user=alice.user, role=Role.OWNER)
    other_project = ProjectFactory(organization=alice.org, name="Other", slug="other")
    elsewhere = Notification.objects.create(organization=org_b, user=alice.user, kind="x", title="Borg")
    sibling = Notification.objects.create(
        organization=alice.org, project=other_project, user=alice.user, kind="x", title="Other"
    )
    Notification.objects.create(
        organization=alice.org, project=project_a, user=alice.user, kind="x", title="Here"
    )
    _, project_key = tenant_services.api_key_create(
        organization=alice.org,
        actor=Principal(user=alice.user, roles={alice.org.id: Role.OWNER}),
        name="project key",
        scopes=["memories:read"],
        project=project_a,
        check_permission=False,
    )
    org_client, project_client = api_client(alice.key), api_client(project_key)
    assert {n["title"] for n in org_client.get("notifications").json()} == {"Other", "Here"}
    assert [n["title"] for n in project_client.get("notifications").json()] == ["Here"]
    for client, item in ((org_client, elsewhere), (project_client, sibling)):
        assert client.post(f"notifications/{item.pk}/read", {}).status_code == 404
        assert client.post("notifications/read", {"ids": [item.pk]}).json() == {"marked": 0}
    assert project_client.post("notifications/read", {}).json() == {"marked": 1}
    assert org_client.post("notifications/read", {}).json() == {"marked": 1}
    assert Notification.objects.get(pk=elsewhere.pk).read is False


def test_notification_ids_are_json_numbers(api_client, alice):
    """`{"ids": ["7"]}` marked notification 7 read, and `[true]` notification 1."""
    item = Notification.objects.create(organization=alice.org, user=alice.user, kind="x", title="t")
    client = api_client(alice.key)
    for ids in ([str(item.pk)], [True]):
        response = client.post("notifications/read", {"ids": ids})
        assert response.status_code == 422 and response.json()["error"]["details"][0]["loc"][-2] == "ids"
    assert Notification.objects.get(pk=item.pk).read is False


def test_an_erased_persons_name_leaves_others_notifications_and_override_entries(
    api_client, team, memory, signed_in
):
    """Erasure pseudonymised the dispute rows but left the name where it had been written into
    text: other people's notification titles and an override's thread entry."""
    from apps.governance.models import DisputeComment, EntryKind
    from apps.tenants import gdpr

    member, steward = team[Role.MEMBER].user, team[Role.STEWARD].user
    dispute_id = _open(api_client, team[Role.MEMBER], memory).json()["id"]
    dispute = Dispute.objects.get(pk=dispute_id)
    services.dispute_resolve(
        dispute=dispute, actor=team[Role.STEWARD].principal, resolution="reject", note=""
    )
    services.dispute_resolve(
        dispute=Dispute.objects.get(pk=dispute_id),
        actor=team[Role.OWNER].principal,
        resolution="reject",
        note="",
    )
    assert Notification.objects.filter(title__contains=member.name).exists()
    overridden = DisputeComment.objects.get(dispute_id=dispute_id, kind=EntryKind.OVERRIDDEN)
    assert steward.name in overridden.body
    gdpr.account_hard_delete(member.pk)
    gdpr.account_hard_delete(steward.pk)
    assert not Notification.objects.filter(title__contains=member.name).exists()
    assert steward.name not in DisputeComment.objects.get(pk=overridden.pk).body
