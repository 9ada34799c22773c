"""Sync names its project in the query or body, not the path: tested in tests/sync/test_sync.py.
Conflicts are named in the path, and probed like every other object."""

from tests.isolation import api_param, api_request, api_unscoped, page_param, world_builder

api_unscoped(
    "GET", "/api/v1/sync/pull", "project in the query (test_outsiders_get_404_for_another_orgs_project)"
)
api_unscoped(
    "POST", "/api/v1/sync/push", "project in the body (test_outsiders_get_404_for_another_orgs_project)"
)


@world_builder
def sync_conflict(world) -> None:
    from apps.memories.models import Memory
    from apps.memories.services import memory_update
    from apps.sync.conflicts import conflict_record
    from tests.memories.factories import make_memory

    memory = make_memory(world.alice, content="Probe conflict memory.")
    memory_update(memory=memory, actor=world.alice.principal, changes={"content": "Probe, edited."})
    world.objects["conflict_a"] = conflict_record(
        memory=Memory.objects.get(id=memory.id),
        actor=world.bob.principal,
        base_version=1,
        mine={"content": "Probe, edited offline."},
        fields=["content"],
    )


@api_param("conflict_id")
def _conflict_id(world):
    return world.conflict_a.id


@page_param("conflict_id")
def _page_conflict_id(world):
    return world.conflict_a.id


@api_request("POST", "/api/v1/sync/conflicts/{conflict_id}/resolve")
def _resolve(world):
    return {"body": {"keep": "theirs", "base_version": world.conflict_a.memory.version}}
