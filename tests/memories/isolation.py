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


@world_builder
def commits(world) -> None:
    from tests.memories.factories import make_memory

    world.objects["commit_a"] = "3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f"
    make_memory(
        world.alice, content="Learned at Acme's commit.", related_files=["a.py"], commit_sha=world.commit_a
    )


@api_param("commit")
def _commit(world):
    return world.commit_a


@api_request("POST", "/api/v1/projects/{project_id}/commits/{commit}/changed-files")
def _changed_files(world):
    return {"body": {"files": ["a.py"]}}
