"""Isolation probes for the memories endpoints."""

from tests.isolation import api_param, api_request, world_builder


@world_builder
def memories(world) -> None:
    from tests.memories.factories import make_memory

    world.objects["memory_a"] = make_memory(world.alice, content="Acme's secret sauce: retry twice.")


@api_param("memory_id")
def _memory_id(world):
    return world.memory_a.id


@api_request("POST", "/api/v1/projects/{project_id}/memories")
def _create(world):
    return {"body": {"type": "gotcha", "content": "probe"}}


@api_request("PATCH", "/api/v1/memories/{memory_id}")
def _patch(world):
    return {"body": {"tags": ["probe"]}}


@api_request("POST", "/api/v1/memories/{memory_id}/feedback")
def _feedback(world):
    return {"body": {"kind": "used"}}


@api_request("POST", "/api/v1/projects/{project_id}/search")
def _search(world):
    return {"body": {"query": "secret sauce"}}


@api_request("POST", "/api/v1/projects/{project_id}/context")
def _context(world):
    return {"body": {"task": "retry", "phase": "implement"}}
