import random
import string
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from apps.tenants.models import ApiKey, AuditLog
from apps.tenants.services import api_key_authenticate


def test_it_creates_a_key_shown_once_and_stores_only_a_hash(alice, api_client):
    response = api_client(alice.key).post(
        f"orgs/{alice.org.slug}/api-keys", {"name": "ci", "scopes": ["memories:read"]}
    )
    assert response.status_code == 201
    body = response.json()
    full = body["key"]
    assert full.startswith(f"msk_{body['prefix']}_") and full.endswith(body["last_four"])
    stored = ApiKey.objects.get(id=body["id"])
    assert stored.secret_hash != full.split("_")[2]
    assert stored.matches(full.split("_")[2])
    listed = api_client(alice.key).get(f"orgs/{alice.org.slug}/api-keys").json()
    assert all("key" not in k for k in listed)
    assert any(k["prefix"] == body["prefix"] and k["last_four"] == body["last_four"] for k in listed)


def test_no_plaintext_key_anywhere_in_the_database(alice, bob, charlie):
    secrets_ = [p.key.split("_")[2] for p in (alice, bob, charlie)]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, column_name FROM information_schema.columns "
            "WHERE table_schema = 'public' AND data_type IN ('text', 'character varying', 'jsonb', 'ARRAY')"
        )
        columns = cursor.fetchall()
        for table, column in columns:
            cursor.execute(f'SELECT "{column}"::text FROM "{table}"')
            for (value,) in cursor.fetchall():
                if value:
                    assert not any(secret in value for secret in secrets_), (
                        f"secret found in {table}.{column}"
                    )


def test_a_revoked_key_is_refused(alice, api_client):
    alice.api_key.revoked_at = timezone.now()
    alice.api_key.save()
    response = api_client(alice.key).get("projects")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


def test_an_expired_key_is_refused(alice, api_client):
    alice.api_key.expires_at = timezone.now() - timedelta(seconds=1)
    alice.api_key.save()
    assert api_client(alice.key).get("projects").status_code == 401


def test_a_key_with_a_wrong_secret_is_refused(alice, api_client):
    prefix = alice.api_key.prefix
    assert api_client(f"msk_{prefix}_{'A' * 40}").get("projects").status_code == 401


def _malformed_keys(n: int, real: str) -> list[str]:
    rng = random.Random(20261122)
    alphabet = string.ascii_letters + string.digits + "_-.:/+= \t\x00é"
    prefix, secret = real.split("_")[1], real.split("_")[2]
    keys = []
    for i in range(n):
        kind = i % 6
        if kind == 0:
            keys.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80))))
        elif kind == 1:  # right shape, random secret
            keys.append(f"msk_{prefix}_{''.join(rng.choice(string.ascii_letters) for _ in range(40))}")
        elif kind == 2:  # one character of the real secret changed
            pos = rng.randrange(40)
            ch = rng.choice([c for c in string.ascii_letters if c != secret[pos]])
            keys.append(f"msk_{prefix}_{secret[:pos]}{ch}{secret[pos + 1 :]}")
        elif kind == 3:  # truncated or extended
            keys.append(
                real[: rng.randint(0, len(real) - 1)] if rng.random() < 0.5 else real + rng.choice(alphabet)
            )
        elif kind == 4:  # wrong scheme prefix
            keys.append(rng.choice(["sk_", "MSK_", "msk-", "msk__"]) + real[4:])
        else:  # real secret under another prefix
            keys.append(f"msk_{''.join(rng.choice(string.ascii_lowercase) for _ in range(8))}_{secret}")
    return keys


def test_ten_thousand_malformed_keys_are_all_refused(alice):
    keys = _malformed_keys(10_000, alice.key)
    assert len(keys) == 10_000
    accepted = [k for k in keys if k != alice.key and api_key_authenticate(k) is not None]
    assert accepted == []
    assert api_key_authenticate(alice.key) is not None


@pytest.mark.parametrize("header", ["Token abc", "Bearer", "Basic dXNlcjpwYXNz", "Bearer msk_short_key"])
def test_a_malformed_authorization_header_is_a_401(header, alice, api_client):
    response = api_client().get("projects", HTTP_AUTHORIZATION=header)
    assert response.status_code == 401
    assert "error" in response.json()


def test_last_used_is_recorded_and_throttled(alice, api_client):
    assert alice.api_key.last_used_at is None
    api_client(alice.key).get("projects")
    first = ApiKey.objects.get(pk=alice.api_key.pk).last_used_at
    assert first is not None
    api_client(alice.key).get("projects")
    assert ApiKey.objects.get(pk=alice.api_key.pk).last_used_at == first


def test_wrong_scope_is_a_403(alice, api_client):
    read_only = (
        api_client(alice.key)
        .post(f"orgs/{alice.org.slug}/api-keys", {"name": "ro", "scopes": ["memories:read"]})
        .json()["key"]
    )
    response = api_client(read_only).get(f"orgs/{alice.org.slug}/api-keys")
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


def test_a_member_cannot_manage_keys(bob, api_client):
    assert api_client(bob.key).get(f"orgs/{bob.org.slug}/api-keys").status_code == 403


def test_a_key_cannot_mint_a_key_with_more_scopes_than_itself(alice, api_client):
    admin_only = (
        api_client(alice.key)
        .post(f"orgs/{alice.org.slug}/api-keys", {"name": "adm", "scopes": ["admin"]})
        .json()["key"]
    )
    response = api_client(admin_only).post(
        f"orgs/{alice.org.slug}/api-keys", {"name": "esc", "scopes": ["admin", "memories:write"]}
    )
    assert response.status_code == 403


def test_revoking_stops_the_key_and_writes_an_audit_row_without_the_secret(alice, api_client):
    created = (
        api_client(alice.key)
        .post(f"orgs/{alice.org.slug}/api-keys", {"name": "tmp", "scopes": ["memories:read"]})
        .json()
    )
    assert api_client(created["key"]).get("projects").status_code == 200
    revoked = api_client(alice.key).delete(f"orgs/{alice.org.slug}/api-keys/{created['id']}")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert api_client(created["key"]).get("projects").status_code == 401
    actions = list(AuditLog.objects.filter(target_id=created["id"]).values_list("action", flat=True))
    assert set(actions) == {"api_key.created", "api_key.revoked"}
    assert all(created["key"].split("_")[2] not in str(a.metadata) for a in AuditLog.objects.all())


def test_a_project_limited_key_sees_only_its_project(alice, api_client):
    other = api_client(alice.key).post("projects", {"name": "Second"}).json()
    limited = (
        api_client(alice.key)
        .post(
            f"orgs/{alice.org.slug}/api-keys",
            {"name": "one", "scopes": ["memories:read"], "project_id": str(alice.project.id)},
        )
        .json()["key"]
    )
    ids = [p["id"] for p in api_client(limited).get("projects").json()]
    assert ids == [str(alice.project.id)]
    assert api_client(limited).get(f"projects/{other['id']}").status_code == 404


def test_a_project_limited_key_makes_only_keys_limited_to_its_project(alice, api_client):
    """It cannot widen its reach by minting an org-wide key, and it can list and revoke what it made."""
    other = api_client(alice.key).post("projects", {"name": "Second"}).json()
    url = f"orgs/{alice.org.slug}/api-keys"
    limited = (
        api_client(alice.key)
        .post(url, {"name": "one", "scopes": ["admin", "memories:read"], "project_id": str(alice.project.id)})
        .json()["key"]
    )
    made = api_client(limited).post(url, {"name": "CI agent", "scopes": ["memories:read"]})
    assert made.status_code == 201, made.content
    assert made.json()["project_id"] == str(alice.project.id)
    assert [p["id"] for p in api_client(made.json()["key"]).get("projects").json()] == [str(alice.project.id)]
    assert made.json()["id"] in [k["id"] for k in api_client(limited).get(url).json()]
    assert api_client(limited).delete(f"{url}/{made.json()['id']}").status_code == 200
    elsewhere = api_client(limited).post(
        url, {"name": "x", "scopes": ["memories:read"], "project_id": other["id"]}
    )
    assert elsewhere.status_code in (403, 404)


def test_a_project_limited_key_cannot_create_projects(alice, api_client):
    """It made a project with 201, then could neither list nor open it: to its user, it vanished."""
    from apps.tenants.models import Project

    url = f"orgs/{alice.org.slug}/api-keys"
    limited = (
        api_client(alice.key)
        .post(url, {"name": "one", "scopes": ["admin", "memories:read"], "project_id": str(alice.project.id)})
        .json()["key"]
    )
    response = api_client(limited).post("projects", {"name": "Billing service"})
    assert response.status_code == 403 and "organization-wide key" in response.json()["error"]["message"]
    assert not Project.objects.filter(name="Billing service").exists()


def test_a_key_that_expires_makes_only_keys_that_expire_no_later(alice, api_client):
    url = f"orgs/{alice.org.slug}/api-keys"
    soon = (timezone.now() + timedelta(days=1)).isoformat()
    short = api_client(alice.key).post(url, {"name": "day", "scopes": ["admin"], "expires_at": soon}).json()
    child = api_client(short["key"]).post(url, {"name": "child", "scopes": ["admin"]})
    assert child.status_code == 201 and child.json()["expires_at"] == short["expires_at"]
    later = (timezone.now() + timedelta(days=30)).isoformat()
    assert (
        api_client(short["key"])
        .post(url, {"name": "x", "scopes": ["admin"], "expires_at": later})
        .status_code
        == 403
    )


def test_an_expiry_without_an_offset_is_utc(alice, api_client):
    url = f"orgs/{alice.org.slug}/api-keys"
    dated = api_client(alice.key).post(
        url, {"name": "dated", "scopes": ["admin"], "expires_at": "2031-01-01T00:00:00"}
    )
    assert dated.status_code == 201, dated.content
    assert dated.json()["expires_at"] in ("2031-01-01T00:00:00Z", "2031-01-01T00:00:00+00:00")
    past = {"name": "past", "scopes": ["admin"], "expires_at": "2020-01-01T00:00:00"}
    assert api_client(alice.key).post(url, past).status_code == 422
    later = {"name": "later", "scopes": ["admin"], "expires_at": "2031-01-01T00:00:01"}
    assert api_client(dated.json()["key"]).post(url, later).status_code == 403


def test_an_expiry_past_the_last_storable_year_is_refused_and_the_keys_stay_listable(alice, api_client):
    url = f"orgs/{alice.org.slug}/api-keys"
    beyond = {"name": "far", "scopes": ["admin"], "expires_at": "9999-12-31T23:59:59-12:00"}
    response = api_client(alice.key).post(url, beyond)
    assert response.status_code == 422, response.content
    assert "10000" in response.content.decode()
    assert api_client(alice.key).get(url).status_code == 200


def test_a_key_acts_with_its_makers_current_role_and_teams(alice, person_with_role, api_client):
    """A key carried the scopes it was made with whatever became of its maker: an admin demoted
    to viewer kept writing memories and minting keys through it, and a member's org-wide key read
    the projects of teams they are not on."""
    from apps.tenants.models import Membership, Project, TeamMembership
    from apps.tenants.roles import Role
    from apps.tenants.services import membership_change_role
    from tests.factories import TeamFactory

    admin = person_with_role(Role.ADMIN)
    team = TeamFactory(organization=alice.org, name="Billing")
    billing = Project.objects.create(organization=alice.org, team=team, name="Billing", slug="billing")
    memories = f"projects/{admin.project.id}/memories"
    assert api_client(admin.key).post(memories, {"type": "gotcha", "content": "As admin."}).status_code == 201
    assert api_client(admin.key).get(f"projects/{billing.id}/memories").status_code == 200

    membership = Membership.objects.get(user=admin.user, organization=alice.org)
    membership_change_role(membership=membership, actor=alice.principal, role=Role.VIEWER)

    key = api_client(admin.key)
    assert key.post(memories, {"type": "gotcha", "content": "As viewer."}).status_code == 403
    assert (
        key.post(f"orgs/{alice.org.slug}/api-keys", {"name": "x", "scopes": ["memories:read"]}).status_code
        == 403
    )
    assert key.get(memories).status_code == 200  # what a viewer may do, the key still does
    assert key.get(f"projects/{billing.id}/memories").status_code == 404  # not on the team
    assert billing.id not in {p["id"] for p in key.get("projects").json()}
    (org,) = key.get("me").json()["organizations"]
    assert (org["role"], org["permissions"]) == ("viewer", ["memories:read"])

    TeamMembership.objects.create(team=team, user=admin.user)
    assert key.get(f"projects/{billing.id}/memories").status_code == 200


def test_a_deleted_persons_keys_stop_whichever_way_they_were_deleted(alice, bob, api_client):
    """A key whose maker was deleted outside the erasure (the admin, a shell) acted for no one,
    with its scopes unbounded and every project in view."""
    from apps.tenants import services

    _, device_key = services.device_register(organization=bob.org, actor=bob.principal, name="box")
    url = f"projects/{bob.project.id}/memories"
    assert api_client(bob.key).get(url).status_code == 200
    bob.user.delete()
    assert api_client(bob.key).get(url).status_code == 401
    assert api_client(device_key).get(url).status_code == 401
    assert api_client(alice.key).get(url).status_code == 200


def test_a_deactivated_persons_keys_stop(alice, bob, api_client):
    """Their sign-in stopped; their keys went on reading and writing."""
    url = f"projects/{bob.project.id}/memories"
    bob.user.is_active = False
    bob.user.save(update_fields=["is_active"])
    assert api_client(bob.key).get(url).status_code == 401
    assert api_client(alice.key).get(url).status_code == 200
