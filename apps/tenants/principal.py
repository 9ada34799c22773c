"""Who is asking: a signed-in user or an API key, resolved once per request and passed down."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from uuid import UUID

from apps.tenants.roles import Role, permissions_for_role

if TYPE_CHECKING:
    from apps.tenants.models import ApiKey, User


@dataclass(frozen=True)
class Principal:
    user: User | None = None
    api_key: ApiKey | None = None
    roles: Mapping[UUID, Role] = field(default_factory=dict)
    team_ids: frozenset[UUID] = frozenset()

    @classmethod
    def for_user(cls, user: User) -> Principal:
        from apps.tenants.models import Membership, TeamMembership

        roles = {
            org_id: Role(role)
            for org_id, role in Membership.objects.filter(user=user).values_list("organization_id", "role")
        }
        team_ids = frozenset(TeamMembership.objects.filter(user=user).values_list("team_id", flat=True))
        return cls(user=user, roles=roles, team_ids=team_ids)

    @classmethod
    def for_api_key(cls, api_key: ApiKey) -> Principal:
        """A key acts as the person who made it (or whose device holds it), within its scopes:
        with their current role and teams in the key's organization, so a demotion narrows
        what their keys do at once. A key no person made (a deleted creator's) keeps its scopes."""
        from django.contrib.postgres.expressions import ArraySubquery

        from apps.tenants.models import Membership, TeamMembership

        user = api_key.acting_user
        if user is None:
            return cls(api_key=api_key)
        org_id = api_key.organization_id
        # (every request with a key asks this: the role and the teams in one statement)
        teams = TeamMembership.objects.filter(user=user, team__organization_id=org_id).values("team_id")
        row = (
            Membership.objects.filter(user=user, organization_id=org_id)
            .values_list("role", ArraySubquery(teams))
            .first()
        )
        if row is None:
            return cls(user=user, api_key=api_key)
        role, team_ids = row
        return cls(user=user, api_key=api_key, roles={org_id: Role(role)}, team_ids=frozenset(team_ids))

    @property
    def org_ids(self) -> frozenset[UUID]:
        if self.api_key is not None:
            return frozenset({self.api_key.organization_id})
        return frozenset(self.roles)

    @property
    def project_limit(self) -> UUID | None:
        return self.api_key.project_id if self.api_key is not None else None

    @property
    def label(self) -> str:
        if self.api_key is not None:
            return f"api_key:{self.api_key.prefix}"
        if self.user is not None:
            return f"user:{self.user.pk}"
        return "system"

    def role_in(self, org_id: UUID) -> Role | None:
        return self.roles.get(org_id)

    def permissions_in(self, org_id: UUID) -> frozenset[str]:
        role = self.roles.get(org_id)
        if self.api_key is not None:
            if org_id != self.api_key.organization_id:
                return frozenset()
            scopes = frozenset(self.api_key.scopes)
            if self.user is None:
                return scopes
            return scopes & permissions_for_role(role) if role is not None else frozenset()
        return permissions_for_role(role) if role is not None else frozenset()

    def has(self, org_id: UUID, permission: str) -> bool:
        return permission in self.permissions_in(org_id)

    def sees_all_projects_of(self, org_id: UUID) -> bool:
        role = self.roles.get(org_id)
        return role is not None and role.at_least(Role.ADMIN)


SYSTEM = Principal()
