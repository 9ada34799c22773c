"""Isolation probes for the graph endpoints (project_id is registered by the tenants probes)."""

from tests.isolation import api_param, api_request, world_builder


@api_request("POST", "/api/v1/projects/{project_id}/graph/index")
def _index(world):
    return {"body": {"files": [{"path": "a.py", "content": "import os\n"}]}}


@api_param("job_id")
def _job_id(world):
    return world.index_job.id


@api_request("GET", "/api/v1/projects/{project_id}/graph/impact")
def _impact(world):
    return {"query": {"target": "a.py"}}


@api_request("GET", "/api/v1/projects/{project_id}/graph/dependencies")
def _dependencies(world):
    return {"query": {"file": "a.py"}}


@api_request("GET", "/api/v1/projects/{project_id}/graph/nodes")
def _nodes(world):
    return {"query": {"q": "a"}}


@api_request("GET", "/api/v1/projects/{project_id}/graph/chunks")
def _chunks(world):
    return {"query": {"q": "a"}}


@world_builder
def graph(world) -> None:
    from apps.graph import services
    from apps.graph.models import IndexJob

    services.index_changes(world.alice.project, changed={"a.py": b"import os\n"})
    world.objects["index_job"] = IndexJob.objects.create(project=world.alice.project, kind="incremental")
