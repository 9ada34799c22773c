"""Dashboard page for teams (`/o/<org>/teams/`): everyone in the organization sees its teams;
admins create, rename and delete them, add and remove members and move projects in and out.
Each form posts to its own small view, which calls apps/tenants/teams.py and comes back here."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.tenants import selectors, teams
from apps.tenants.dashboard import org_page, posted_text
from apps.tenants.roles import Perm
from memorysaas.kernel.errors import ApiError, NotFound
from memorysaas.kernel.ids import as_uuid


def _team_or_404(org, team_slug: str):
    try:
        return selectors.team_get(organization=org, ref=team_slug)
    except NotFound as exc:
        raise Http404(exc.message) from None


@org_page()
def teams_page(request, org):
    principal = request.principal
    org_teams = list(selectors.teams_for(organization=org))
    projects = list(selectors.projects_for(principal=principal, organization=org))
    people = list(selectors.members_for(organization=org))
    rows = []
    for team in org_teams:
        members = list(selectors.team_members_for(team=team))
        on_team = {m.user_id for m in members}
        rows.append(
            {
                "team": team,
                "members": members,
                "candidates": [p.user for p in people if p.user_id not in on_team],
                "projects": [p for p in projects if p.team_id == team.id],
                "movable": [p for p in projects if p.team_id != team.id],
            }
        )
    return render(
        request,
        "tenants/teams.html",
        {
            "org": org,
            "rows": rows,
            "projects": projects,
            "can_admin": principal.has(org.id, Perm.ADMIN),
        },
    )


def _done(request, org, action, success: str):
    """Run `action`; a refusal is shown as a message on the teams page."""
    try:
        action()
    except ApiError as exc:
        messages.error(request, exc.message)
    else:
        messages.success(request, success)
    return redirect("teams", org.slug)


@org_page(Perm.ADMIN)
@require_POST
def team_create(request, org):
    name = posted_text(request, "name").strip()
    return _done(
        request,
        org,
        lambda: teams.team_create(organization=org, actor=request.principal, name=name),
        f"Created team {name}.",
    )


@org_page(Perm.ADMIN)
@require_POST
def team_rename(request, org, team_slug):
    team = _team_or_404(org, team_slug)
    name = posted_text(request, "name").strip()
    return _done(
        request,
        org,
        lambda: teams.team_rename(team=team, actor=request.principal, name=name),
        f"Renamed to {name}.",
    )


@org_page(Perm.ADMIN)
@require_POST
def team_delete(request, org, team_slug):
    team = _team_or_404(org, team_slug)
    return _done(
        request, org, lambda: teams.team_delete(team=team, actor=request.principal), f"Deleted {team.name}."
    )


@org_page(Perm.ADMIN)
@require_POST
def team_member_add(request, org, team_slug):
    team = _team_or_404(org, team_slug)

    def add():
        user = selectors.org_member_get(organization=org, ref=posted_text(request, "user"))
        teams.team_member_add(team=team, actor=request.principal, user=user)

    return _done(request, org, add, f"Added to {team.name}.")


@org_page(Perm.ADMIN)
@require_POST
def team_member_remove(request, org, team_slug, user_id):
    team = _team_or_404(org, team_slug)
    member = selectors.team_members_for(team=team).filter(user_id=user_id).first()
    if member is None:
        raise Http404("No such member of this team.")
    return _done(
        request,
        org,
        lambda: teams.team_member_remove(team=team, actor=request.principal, user=member.user),
        f"Removed {member.user.email} from {team.name}.",
    )


@org_page(Perm.ADMIN)
@require_POST
def team_project_assign(request, org, team_slug):
    team = _team_or_404(org, team_slug)

    def assign():
        project = (
            selectors.projects_for(principal=request.principal, organization=org)
            .filter(id=as_uuid(posted_text(request, "project")))
            .first()
        )
        if project is None:
            raise NotFound("No such project in this organization.")
        teams.project_assign_team(project=project, actor=request.principal, team=team)

    return _done(request, org, assign, f"Moved the project into {team.name}.")


@org_page(Perm.ADMIN)
@require_POST
def team_project_remove(request, org, team_slug, project_id):
    team = _team_or_404(org, team_slug)
    project = (
        selectors.projects_for(principal=request.principal, organization=org)
        .filter(id=project_id, team=team)
        .first()
    )
    if project is None:
        raise Http404("No such project in this team.")
    return _done(
        request,
        org,
        lambda: teams.project_assign_team(project=project, actor=request.principal, team=None),
        f"{project.name} no longer belongs to {team.name}.",
    )
