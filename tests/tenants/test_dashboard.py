"""Dashboard pages for tenancy, and CSRF on every dashboard POST."""

import re
from html import unescape

import pytest
from django.core import mail
from django.test import Client

from apps.tenants.models import ApiKey, Invitation, Membership
from apps.tenants.roles import Role
from tests import isolation
from tests.isolation import World
from tests.test_isolation import _fill_route, dashboard_routes


def signed_in(person, enforce_csrf=False) -> Client:
    client = Client(enforce_csrf_checks=enforce_csrf)
    client.force_login(person.user, backend="django.contrib.auth.backends.ModelBackend")
    return client


def test_anonymous_visitors_are_sent_to_login(db):
    response = Client().get("/o/acme/members/")
    assert response.status_code == 302 and "/accounts/login/" in response.url


def test_home_lists_projects_and_the_project_page_renders(alice):
    client = signed_in(alice)
    home = client.get("/", follow=True)
    assert home.status_code == 200 and alice.project.name.encode() in home.content
    page = client.get(f"/o/{alice.org.slug}/p/{alice.project.slug}/")
    assert page.status_code == 200
    assert str(alice.project.id).encode() in page.content


def test_members_page_shows_the_role_matrix_and_members(alice, bob):
    page = signed_in(alice).get(f"/o/{alice.org.slug}/members/")
    assert page.status_code == 200
    assert bob.user.email.encode() in page.content and b"memories:review" in page.content


def test_removing_or_leaving_asks_first_naming_the_person_and_what_is_revoked(alice, bob):
    """Remove and Leave acted on one click: a slip took someone's keys and devices away."""
    page = unescape(signed_in(alice).get(f"/o/{alice.org.slug}/members/").content.decode())
    assert (
        'data-confirm="Remove Bob (bob@acme.test) from Acme? Their API keys and devices in Acme are revoked."'
        in page
    )
    own = unescape(signed_in(bob).get(f"/o/{bob.org.slug}/members/").content.decode())
    assert 'data-confirm="Leave Acme? Your API keys and devices in Acme are revoked."' in own


def test_the_role_selects_label_is_for_screen_readers_only(alice, bob):
    page = signed_in(alice).get(f"/o/{alice.org.slug}/members/").content.decode()
    membership = Membership.objects.get(user=bob.user)
    assert f'<label class="visually-hidden" for="role-{membership.pk}">Role</label>' in page
    assert "sr-only" not in page


def test_an_admin_invites_and_the_invitee_accepts(alice, db):
    client = signed_in(alice)
    response = client.post(
        f"/o/{alice.org.slug}/members/invite/", {"email": "dave@acme.test", "role": "steward"}
    )
    assert response.status_code == 302
    link = re.search(r"https?://\S+/invitations/(\S+)/", mail.outbox[-1].body)
    token = link.group(1)
    invitation = Invitation.objects.get(email="dave@acme.test")
    assert invitation.token_hash != token  # only the hash is stored
    from tests.factories import UserFactory

    dave = UserFactory(email="dave@acme.test")
    dave_client = Client()
    dave_client.force_login(dave, backend="django.contrib.auth.backends.ModelBackend")
    assert dave_client.get(f"/invitations/{token}/").status_code == 200
    assert dave_client.post(f"/invitations/{token}/").status_code == 302
    assert Membership.objects.get(user=dave, organization=alice.org).role == Role.STEWARD
    assert dave_client.get(f"/invitations/{token}/").status_code == 404  # used once


def test_an_invitation_for_someone_else_is_refused(alice, charlie):
    from apps.tenants import services

    _, token = services.invitation_create(
        organization=alice.org, actor=alice.principal, email="someone@else.test", role="member"
    )
    client = signed_in(charlie)
    client.post(f"/invitations/{token}/")
    assert not Membership.objects.filter(user=charlie.user, organization=alice.org).exists()


def test_a_member_cannot_invite_or_see_keys(bob):
    client = signed_in(bob)
    assert (
        client.post(f"/o/{bob.org.slug}/members/invite/", {"email": "x@y.z", "role": "member"}).status_code
        == 403
    )
    assert client.get(f"/o/{bob.org.slug}/api-keys/").status_code == 403


def test_an_admin_cannot_make_owners(person_with_role, bob):
    admin = person_with_role(Role.ADMIN)
    membership = Membership.objects.get(user=bob.user)
    signed_in(admin).post(f"/o/{admin.org.slug}/members/{membership.pk}/role/", {"role": "owner"})
    membership.refresh_from_db()
    assert membership.role == Role.MEMBER


def test_the_last_owner_cannot_leave(alice):
    membership = Membership.objects.get(user=alice.user)
    signed_in(alice).post(f"/o/{alice.org.slug}/members/{membership.pk}/remove/")
    assert Membership.objects.filter(pk=membership.pk).exists()


def test_removing_a_member_revokes_their_keys_and_devices_in_that_organization_only(alice, bob, api_client):
    from apps.tenants import services
    from tests.factories import OrganizationFactory

    device, device_key = services.device_register(organization=bob.org, actor=bob.principal, name="bob-box")
    elsewhere_org = OrganizationFactory(name="Elsewhere", slug="elsewhere")
    Membership.objects.create(organization=elsewhere_org, user=bob.user, role=Role.MEMBER)
    other_key, _ = services.api_key_create(
        organization=elsewhere_org,
        actor=bob.principal,
        name="elsewhere",
        scopes=["memories:read"],
        check_permission=False,
    )
    url = f"projects/{bob.project.id}/memories"
    assert api_client(bob.key).get(url).status_code == 200
    membership = Membership.objects.get(user=bob.user, organization=bob.org)
    response = signed_in(alice).post(f"/o/{alice.org.slug}/members/{membership.pk}/remove/")
    assert response.status_code == 302 and not Membership.objects.filter(pk=membership.pk).exists()
    assert api_client(bob.key).get(url).status_code == 401
    assert api_client(device_key).get(url).status_code == 401
    assert api_client(alice.key).get(url).status_code == 200
    other_key.refresh_from_db()
    assert other_key.revoked_at is None


def test_api_key_page_shows_a_new_key_once_then_only_its_prefix(alice):
    client = signed_in(alice)
    created = client.post(
        f"/o/{alice.org.slug}/api-keys/new/", {"name": "laptop", "scopes": ["memories:read"]}
    )
    assert created.status_code == 200
    full = re.search(rb"msk_[a-z0-9]{8}_[A-Za-z0-9]{40}", created.content).group(0).decode()
    assert created["Cache-Control"] == "no-store"
    listing = client.get(f"/o/{alice.org.slug}/api-keys/")
    assert full.encode() not in listing.content
    assert full.split("_")[1].encode() in listing.content


def test_reloading_the_page_with_a_new_key_makes_no_second_key(alice):
    client = signed_in(alice)
    page = client.get(f"/o/{alice.org.slug}/api-keys/").content.decode()
    token = re.search(r'name="form_token" value="([0-9a-f]+)"', page).group(1)
    body = {"name": "laptop", "scopes": ["memories:read"], "form_token": token}
    first = client.post(f"/o/{alice.org.slug}/api-keys/new/", body)
    again = client.post(f"/o/{alice.org.slug}/api-keys/new/", body, follow=True)
    assert first.status_code == 200 and b"msk_" in first.content
    assert again.redirect_chain and b"already created" in again.content
    assert ApiKey.objects.filter(name="laptop").count() == 1


def test_revoking_a_key_from_the_dashboard_with_htmx_returns_the_row(alice):
    client = signed_in(alice)
    key = alice.api_key
    response = client.post(f"/o/{alice.org.slug}/api-keys/{key.id}/revoke/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and b"revoked" in response.content
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None


@pytest.fixture
def world(alice, bob, charlie) -> World:
    isolation.load_registrations()
    w = World(alice=alice, bob=bob, charlie=charlie)
    for build in isolation.WORLD_BUILDERS:
        build(w)
    return w


def test_every_dashboard_post_is_protected_by_csrf(world):
    client = signed_in(world.alice, enforce_csrf=True)
    checked = 0
    for route in dashboard_routes():
        if "<str:token>" in route:
            continue
        response = client.post(_fill_route(route, world))
        if response.status_code == 405:
            continue
        assert response.status_code == 403, (
            f"POST {route} without a CSRF token answered {response.status_code}"
        )
        checked += 1
    assert checked >= 5


def test_a_member_is_not_offered_what_only_admins_may_do_and_a_refusal_is_a_page(alice, bob):
    org_page = signed_in(bob).get(f"/o/{bob.org.slug}/").content.decode()
    assert "New project" not in org_page and f"/o/{bob.org.slug}/api-keys/" not in org_page
    admin_page = signed_in(alice).get(f"/o/{alice.org.slug}/").content.decode()
    assert "New project" in admin_page and f"/o/{alice.org.slug}/api-keys/" in admin_page
    refused = signed_in(bob).get(f"/o/{bob.org.slug}/projects/new/")
    assert refused.status_code == 403
    assert b"You can't do that here" in refused.content and b"app.css" in refused.content


def test_an_invitation_link_opened_signed_out_says_what_it_is_and_comes_back_after_sign_in(alice, db):
    signed_in(alice).post(
        f"/o/{alice.org.slug}/members/invite/", {"email": "erin@acme.test", "role": "member"}
    )
    token = re.search(r"https?://\S+/invitations/(\S+)/", mail.outbox[-1].body).group(1)
    page = Client().get(f"/invitations/{token}/")
    body = page.content.decode()
    assert page.status_code == 200 and f"Join {alice.org.name}" in body and "erin@acme.test" in body
    assert f"/accounts/login/?next=/invitations/{token}/" in body and "/accounts/signup/?next=" in body
    assert Client().post(f"/invitations/{token}/").status_code == 200  # nothing accepted signed out
    assert not Membership.objects.filter(user__email="erin@acme.test").exists()


@pytest.fixture
def charlies_ids(charlie) -> dict[str, str]:
    """Ids of charlie's invitation, membership and API key: org B's, unknown in org A."""
    from apps.tenants import services

    invitation, _token = services.invitation_create(
        organization=charlie.org, actor=charlie.principal, email="dan@borg.test", role="member"
    )
    membership = Membership.objects.get(user=charlie.user, organization=charlie.org)
    return {"invitation": str(invitation.id), "member": str(membership.pk), "key": str(charlie.api_key.id)}


@pytest.mark.parametrize(
    ("path", "kind", "unknown"),
    [
        ("invitations/{id}/revoke/", "invitation", "00000000-0000-4000-8000-000000000000"),
        ("members/{id}/role/", "member", "999999"),
        ("members/{id}/remove/", "member", "999999"),
        ("api-keys/{id}/revoke/", "key", "00000000-0000-4000-8000-000000000000"),
    ],
)
def test_an_unknown_or_another_orgs_id_is_404_and_changes_nothing(alice, charlies_ids, path, kind, unknown):
    client = signed_in(alice)
    for target in (unknown, charlies_ids[kind]):
        response = client.post(f"/o/{alice.org.slug}/{path.format(id=target)}", {"role": "member"})
        assert response.status_code == 404, (path, target)
    assert Invitation.objects.get(id=charlies_ids["invitation"]).is_pending
    assert Membership.objects.get(pk=charlies_ids["member"]).role == Role.OWNER
    assert ApiKey.objects.get(id=charlies_ids["key"]).revoked_at is None
