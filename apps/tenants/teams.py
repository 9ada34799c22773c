"""Teams: who works on which projects. A project that belongs to a team is seen by that team's
members (and by the organization's admins and owners); a team-scoped memory applies in every
project of its team.

Admins create, rename and delete teams, add and remove members, and move projects in and out
of them. Every write leaves an audit row, and every write that
can take access away asks the organization's open sockets to check their caller again.

A team that still owns projects is not deleted: the admin moves them first (to another team,
or out of teams), so no one's project changes hands as a side effect of a delete.

Team-scoped memories follow their home project: when a project moves to another team, its
team memories become that team's; when it leaves every team they become project-scoped (a team
memory needs a team). The memories app does that, through `on_project_team_changed`: this app
sits below it and does not know memories.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from uuid import UUID

from django.db import transaction

from apps.tenants.models import Membership, Organization, Project, Team, TeamMembership, User
from apps.tenants.principal import Principal
from apps.tenants.roles import Perm
from apps.tenants.services import audit_record, require, unique_slug
from memorysaas.kernel.errors import Conflict, Invalid
from memorysaas.kernel.realtime import access_changed
from memorysaas.kernel.schemas import single_line

logger = logging.getLogger(__name__)

# Called inside the transaction that moves a project: (project id, old team id, new team id).
# A listener that raises aborts the move (a half-moved project would be worse than none).
ProjectTeamListener = Callable[[UUID, UUID | None, UUID | None], None]
_PROJECT_TEAM_LISTENERS: list[ProjectTeamListener] = []


def on_project_team_changed(listener: ProjectTeamListener) -> ProjectTeamListener:
    """Register `listener` (idempotent: registering twice keeps one)."""
    if listener not in _PROJECT_TEAM_LISTENERS:
        _PROJECT_TEAM_LISTENERS.append(listener)
    return listener


def _clean_name(name: str) -> str:
    name = (name or "").strip()
    if not 1 <= len(name) <= 120:
        raise Invalid("A team name is 1 to 120 characters.", details={"field": "name"})
    try:
        single_line(name)
    except ValueError as exc:
        raise Invalid(str(exc), details={"field": "name"}) from None
    return name


def _name_free(organization_id, name: str, *, excluding: Team | None = None) -> None:
    taken = Team.objects.filter(organization_id=organization_id, name__iexact=name)
    if excluding is not None:
        taken = taken.exclude(pk=excluding.pk)
    if taken.exists():
        raise Conflict(
            f"The organization already has a team called '{name}'.",
            code="name_taken",
            details={"field": "name"},
        )


@transaction.atomic
def team_create(*, organization: Organization, actor: Principal, name: str) -> Team:
    require(actor, organization.id, Perm.ADMIN)
    name = _clean_name(name)
    _name_free(organization.id, name)
    team = Team.objects.create(
        organization=organization,
        name=name,
        slug=unique_slug(Team.objects.filter(organization=organization), name),
    )
    audit_record(actor=actor, action="team.created", target=team, metadata={"name": name})
    return team


@transaction.atomic
def team_rename(*, team: Team, actor: Principal, name: str) -> Team:
    """A new name; the slug (and so every URL and API path naming the team) stays."""
    require(actor, team.organization_id, Perm.ADMIN)
    name = _clean_name(name)
    if name == team.name:
        return team
    _name_free(team.organization_id, name, excluding=team)
    old, team.name = team.name, name
    team.save(update_fields=["name"])
    audit_record(actor=actor, action="team.renamed", target=team, metadata={"from": old, "to": name})
    return team


@transaction.atomic
def team_delete(*, team: Team, actor: Principal) -> None:
    require(actor, team.organization_id, Perm.ADMIN)
    owned = list(Project.objects.filter(team=team).order_by("name").values_list("name", flat=True))
    if owned:
        raise Conflict(
            f"Team '{team.name}' still owns {len(owned)} project(s): {', '.join(owned[:10])}. "
            "Move them to another team, or out of teams, before deleting it.",
            code="team_has_projects",
            details={"projects": owned},
        )
    members = TeamMembership.objects.filter(team=team).count()
    audit_record(
        actor=actor, action="team.deleted", target=team, metadata={"name": team.name, "members": members}
    )
    team.delete()


@transaction.atomic
def team_member_add(*, team: Team, actor: Principal, user: User) -> TeamMembership:
    require(actor, team.organization_id, Perm.ADMIN)
    if not Membership.objects.filter(organization_id=team.organization_id, user=user).exists():
        raise Invalid("Only members of the organization can join its teams.", details={"field": "user"})
    membership, created = TeamMembership.objects.get_or_create(team=team, user=user)
    if created:
        audit_record(actor=actor, action="team.member_added", target=team, metadata={"user_id": user.pk})
    return membership


@transaction.atomic
def team_member_remove(*, team: Team, actor: Principal, user: User) -> bool:
    """Take `user` off the team. They lose its projects at once: their next request no longer
    sees them, and their open sockets on them close. False when they were not on it."""
    require(actor, team.organization_id, Perm.ADMIN)
    removed, _ = TeamMembership.objects.filter(team=team, user=user).delete()
    if removed:
        audit_record(actor=actor, action="team.member_removed", target=team, metadata={"user_id": user.pk})
        access_changed(team.organization_id)
    return bool(removed)


@transaction.atomic
def project_assign_team(*, project: Project, actor: Principal, team: Team | None) -> Project:
    """Move `project` into `team`, or out of teams with None. Its team memories move with it."""
    require(actor, project.organization_id, Perm.ADMIN)
    if team is not None and team.organization_id != project.organization_id:
        raise Invalid("The team belongs to another organization.", details={"field": "team"})
    old_team_id = project.team_id
    new_team_id = team.pk if team is not None else None
    if old_team_id == new_team_id:
        return project
    Project.objects.select_for_update().filter(pk=project.pk).first()
    project.team = team
    project.save(update_fields=["team"])
    for listener in _PROJECT_TEAM_LISTENERS:
        listener(project.pk, old_team_id, new_team_id)
    audit_record(
        actor=actor,
        action="project.team_changed",
        target=project,
        metadata={
            "from_team_id": str(old_team_id) if old_team_id else None,
            "to_team_id": str(new_team_id) if new_team_id else None,
        },
    )
    access_changed(project.organization_id)  # outside the new team, people lose it
    return project
