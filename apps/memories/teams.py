"""Team memories follow their home project when an admin moves it (apps/tenants/teams.py):
into another team, they become that team's; out of every team, they become project-scoped,
since a team memory needs a team. Registered from `MemoriesConfig.ready`."""

from __future__ import annotations

from uuid import UUID

from apps.memories.models import Memory, MemoryScope


def follow_project_team(project_id: UUID, old_team_id: UUID | None, new_team_id: UUID | None) -> None:
    moving = Memory.objects.filter(project_id=project_id, scope=MemoryScope.TEAM)
    if new_team_id is not None:
        moving.update(team_id=new_team_id)
    else:
        moving.update(scope=MemoryScope.PROJECT, team_id=None)
