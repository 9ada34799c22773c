"""Roles, API-key scopes and the permission matrix between them (README: "Role matrix").

Pure data: no Django import, so the matrix can be read and tested on its own.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    VIEWER = "viewer"
    MEMBER = "member"
    STEWARD = "steward"
    ADMIN = "admin"
    OWNER = "owner"

    @property
    def rank(self) -> int:
        return ROLE_ORDER.index(self)

    def at_least(self, other: Role) -> bool:
        return self.rank >= other.rank


ROLE_ORDER = [Role.VIEWER, Role.MEMBER, Role.STEWARD, Role.ADMIN, Role.OWNER]


class Perm(StrEnum):
    """What a request may do. The first six are also the scopes an API key can carry."""

    MEMORIES_READ = "memories:read"
    MEMORIES_WRITE = "memories:write"
    OBSERVER_WRITE = "observer:write"
    GRAPH_WRITE = "graph:write"
    SYNC = "sync"
    ADMIN = "admin"
    MEMORIES_REVIEW = "memories:review"
    MEMBERS_MANAGE = "members:manage"
    ORG_OWN = "org:own"


API_KEY_SCOPES: tuple[str, ...] = tuple(
    str(perm.value)  # plain strings: they are listed back to clients in errors
    for perm in (
        Perm.MEMORIES_READ,
        Perm.MEMORIES_WRITE,
        Perm.OBSERVER_WRITE,
        Perm.GRAPH_WRITE,
        Perm.SYNC,
        Perm.ADMIN,
    )
)

_VIEWER = frozenset({Perm.MEMORIES_READ})
_MEMBER = _VIEWER | {Perm.MEMORIES_WRITE, Perm.OBSERVER_WRITE, Perm.GRAPH_WRITE, Perm.SYNC}
_STEWARD = _MEMBER | {Perm.MEMORIES_REVIEW}
_ADMIN = _STEWARD | {Perm.ADMIN, Perm.MEMBERS_MANAGE}
_OWNER = _ADMIN | {Perm.ORG_OWN}

ROLE_PERMISSIONS: dict[Role, frozenset[str]] = {
    Role.VIEWER: _VIEWER,
    Role.MEMBER: _MEMBER,
    Role.STEWARD: _STEWARD,
    Role.ADMIN: _ADMIN,
    Role.OWNER: _OWNER,
}

PERMISSION_LABELS: dict[str, str] = {
    Perm.MEMORIES_READ: "Read memories, search, fetch context, view the dashboard",
    Perm.MEMORIES_WRITE: "Create, edit and give feedback on memories; open disputes",
    Perm.OBSERVER_WRITE: "Open agent sessions and send their events",
    Perm.GRAPH_WRITE: "Index the repository into the knowledge graph",
    Perm.SYNC: "Sync a device's offline replica",
    Perm.MEMORIES_REVIEW: "Confirm or reject observer memories, resolve disputes, pin, delete any memory",
    Perm.ADMIN: "Manage API keys, projects and teams",
    Perm.MEMBERS_MANAGE: "Invite people, change roles (up to admin), remove members",
    Perm.ORG_OWN: "Make owners, export or delete the organization",
}


def permissions_for_role(role: str | Role) -> frozenset[str]:
    return ROLE_PERMISSIONS[Role(role)]


def can_assign_role(actor_role: str | Role, target_role: str | Role) -> bool:
    """Owners assign any role; admins assign up to admin; nobody else assigns roles."""
    actor, target = Role(actor_role), Role(target_role)
    if actor is Role.OWNER:
        return True
    return actor is Role.ADMIN and target is not Role.OWNER
