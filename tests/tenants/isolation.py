"""Isolation probes for tenancy endpoints and pages."""

from apps.tenants.models import Invitation, Membership
from tests.isolation import api_param, api_request, api_unscoped, page_param, world_builder

api_unscoped("GET", "/api/v1/health", "public liveness report; no tenant data")
api_unscoped("GET", "/api/v1/me", "describes the caller only (test_me_lists_only_own_orgs)")
api_unscoped("GET", "/api/v1/orgs", "lists the caller's orgs (test_lists_leak_nothing)")
api_unscoped("GET", "/api/v1/projects", "lists visible projects (test_lists_leak_nothing)")
api_unscoped(
    "POST", "/api/v1/projects", "creates in an org named in the body (test_cannot_create_in_foreign_org)"
)


@world_builder
def tenancy(world) -> None:
    from datetime import timedelta

    from django.utils import timezone

    world.objects["membership_a"] = Membership.objects.get(organization=world.alice.org, user=world.bob.user)
    world.objects["invitation_a"] = Invitation.objects.create(
        organization=world.alice.org,
        email="dave@acme.test",
        role="member",
        token_hash=Invitation.hash_token("probe-token"),
        expires_at=timezone.now() + timedelta(days=1),
    )


@api_param("project_id")
def _project_id(world):
    return world.alice.project.id


@api_param("org")
def _org(world):
    return world.alice.org.slug


@api_param("key_id")
def _key_id(world):
    return world.alice.api_key.id


@api_request("POST", "/api/v1/orgs/{org}/api-keys")
def _create_key(world):
    return {"body": {"name": "probe", "scopes": ["memories:read"]}}


@page_param("org_slug")
def _org_slug(world):
    return world.alice.org.slug


@page_param("project_slug")
def _project_slug(world):
    return world.alice.project.slug


@page_param("membership_id")
def _membership_id(world):
    return world.membership_a.pk


@page_param("invitation_id")
def _invitation_id(world):
    return world.invitation_a.id


@page_param("key_id")
def _page_key_id(world):
    return world.alice.api_key.id


@world_builder
def account_data(world) -> None:
    from apps.tenants import gdpr, services

    world.objects["device_a"], _ = services.device_register(
        organization=world.alice.org, actor=world.alice.principal, name="alice-laptop"
    )
    world.objects["export_a"] = gdpr.export_request(user=world.alice.user, fmt="json")


@page_param("device_id")
def _device_id(world):
    return world.device_a.id


@page_param("export_id")
def _export_id(world):
    return world.export_a.id


@world_builder
def teams(world) -> None:
    from apps.tenants.models import Team, TeamMembership

    team = Team.objects.create(organization=world.alice.org, name="Probe team", slug="probe-team")
    TeamMembership.objects.create(team=team, user=world.bob.user)
    world.objects["team_a"] = team


@api_param("team")
def _team(world):
    return world.team_a.slug


@page_param("team_slug")
def _team_slug(world):
    return world.team_a.slug


@api_param("user_id")
def _user_id(world):
    return world.bob.user.pk


@page_param("user_id")
def _page_user_id(world):
    return world.bob.user.pk


@page_param("project_id")
def _page_project_id(world):
    return world.alice.project.id


@api_request("POST", "/api/v1/orgs/{org}/teams")
def _create_team(world):
    return {"body": {"name": "Probe"}}


@api_request("PATCH", "/api/v1/orgs/{org}/teams/{team}")
def _rename_team(world):
    return {"body": {"name": "Renamed"}}


@api_request("POST", "/api/v1/orgs/{org}/teams/{team}/members")
def _add_team_member(world):
    return {"body": {"user": world.bob.user.email}}


@api_request("POST", "/api/v1/orgs/{org}/teams/{team}/projects")
def _assign_team_project(world):
    return {"body": {"project_id": str(world.alice.project.id)}}
