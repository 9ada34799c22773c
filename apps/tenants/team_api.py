"""Teams of an organization (`/api/v1/orgs/{org}/teams…`): list and read for every member;
create, rename and delete, add and remove members, move projects in and out for admins (the
`admin` permission, which an API key can carry). `{team}` is the team's slug or id."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from ninja import Field, Router, Status

from apps.tenants import selectors, teams
from apps.tenants.principal import Principal
from apps.tenants.roles import Perm
from apps.tenants.services import require
from memorysaas.kernel.errors import NotFound, conflict
from memorysaas.kernel.openapi import link, links, openapi_extra
from memorysaas.kernel.schemas import InputSchema, Name, OutputSchema

router = Router(tags=["teams"])


class TeamMemberOut(OutputSchema):
    user_id: int
    email: str
    name: str
    added_at: datetime


class TeamProjectOut(OutputSchema):
    id: UUID
    slug: str
    name: str


class TeamOut(OutputSchema):
    id: UUID
    slug: str
    name: str
    created_at: datetime
    members: list[TeamMemberOut]
    projects: list[TeamProjectOut]


class TeamIn(InputSchema):
    name: Name


class TeamMemberIn(InputSchema):
    user: str = Field(min_length=1, max_length=254, description="The member's email address or user id.")


class TeamProjectIn(InputSchema):
    project_id: UUID


def _org(request, org: str):
    return selectors.organization_get(principal=request.auth, ref=org)


def _team(request, org: str, team: str):
    organization = _org(request, org)
    return selectors.team_get(organization=organization, ref=team)


def _out(team, principal: Principal) -> dict:
    """The team with its members and the projects of it the caller may see."""
    members = [
        {"user_id": m.user_id, "email": m.user.email, "name": m.user.display_name, "added_at": m.created_at}
        for m in selectors.team_members_for(team=team)
    ]
    projects = selectors.projects_for(principal=principal).filter(team=team)
    return {
        "id": team.id,
        "slug": team.slug,
        "name": team.name,
        "created_at": team.created_at,
        "members": members,
        "projects": [{"id": p.id, "slug": p.slug, "name": p.name} for p in projects],
    }


@router.get("/orgs/{org}/teams", response=list[TeamOut])
def teams_list(request, org: str):
    """The organization's teams, their members, and the projects of each the caller may see."""
    organization = _org(request, org)
    return [_out(team, request.auth) for team in selectors.teams_for(organization=organization)]


@router.post(
    "/orgs/{org}/teams",
    response={201: TeamOut},
    openapi_extra=openapi_extra(
        conflict("The organization already has a team of that name (`name_taken`)."),
        links(
            201,
            GetTeam=link(
                "GET", "/orgs/{org}/teams/{team}", org="$request.path.org", team="$response.body#/slug"
            ),
        ),
    ),
)
def teams_create(request, org: str, payload: TeamIn):
    """Create a team (admins). Its slug is made from the name and never changes."""
    team = teams.team_create(organization=_org(request, org), actor=request.auth, name=payload.name)
    return Status(201, _out(team, request.auth))


@router.get("/orgs/{org}/teams/{team}", response=TeamOut)
def teams_get(request, org: str, team: str):
    return _out(_team(request, org, team), request.auth)


@router.patch(
    "/orgs/{org}/teams/{team}",
    response=TeamOut,
    openapi_extra=conflict("Another team of the organization has that name (`name_taken`)."),
)
def teams_rename(request, org: str, team: str, payload: TeamIn):
    """Rename a team (admins); its slug stays."""
    found = teams.team_rename(team=_team(request, org, team), actor=request.auth, name=payload.name)
    return _out(found, request.auth)


@router.delete(
    "/orgs/{org}/teams/{team}",
    response={204: None},
    openapi_extra=conflict(
        "The team still owns projects (`team_has_projects`, `details.projects` names them): move them"
        " to another team, or out of teams, first."
    ),
)
def teams_delete(request, org: str, team: str):
    """Delete a team that owns no projects (admins). Its members lose nothing but the team."""
    teams.team_delete(team=_team(request, org, team), actor=request.auth)
    return Status(204, None)


@router.post("/orgs/{org}/teams/{team}/members", response={201: TeamOut})
def teams_member_add(request, org: str, team: str, payload: TeamMemberIn):
    """Add a member of the organization to the team (admins). Adding someone
    already on it changes nothing."""
    found = _team(request, org, team)
    user = selectors.org_member_get(organization=found.organization, ref=payload.user)
    teams.team_member_add(team=found, actor=request.auth, user=user)
    return Status(201, _out(found, request.auth))


@router.delete("/orgs/{org}/teams/{team}/members/{user_id}", response={204: None})
def teams_member_remove(request, org: str, team: str, user_id: int):
    """Take someone off the team (admins): they lose its projects at once, open
    live-update sockets included. 404 when they are not on it."""
    found = _team(request, org, team)
    require(request.auth, found.organization_id, Perm.ADMIN)
    member = selectors.team_members_for(team=found).filter(user_id=user_id).first()
    if member is None:
        raise NotFound("No such member of this team.")
    teams.team_member_remove(team=found, actor=request.auth, user=member.user)
    return Status(204, None)


@router.post("/orgs/{org}/teams/{team}/projects", response=TeamOut)
def teams_project_assign(request, org: str, team: str, payload: TeamProjectIn):
    """Move a project into the team (admins). Its team-scoped memories become this team's;
    people outside the team lose the project at once."""
    found = _team(request, org, team)
    project = _org_project(request, found.organization_id, payload.project_id)
    teams.project_assign_team(project=project, actor=request.auth, team=found)
    return _out(found, request.auth)


@router.delete("/orgs/{org}/teams/{team}/projects/{project_id}", response={204: None})
def teams_project_unassign(request, org: str, team: str, project_id: UUID):
    """Take a project out of the team (admins): every member of the organization sees it, and
    its team-scoped memories become project-scoped. A project of the organization that is not
    in this team is left where it is (the answer is the same 204: it is not in the team)."""
    found = _team(request, org, team)
    require(request.auth, found.organization_id, Perm.ADMIN)
    project = _org_project(request, found.organization_id, project_id)
    if project.team_id == found.id:
        teams.project_assign_team(project=project, actor=request.auth, team=None)
    return Status(204, None)


def _org_project(request, organization_id, project_id):
    project = selectors.project_get(principal=request.auth, project_id=project_id)
    if project.organization_id != organization_id:
        raise NotFound("No such project in this organization.", details={"field": "project_id"})
    return project
