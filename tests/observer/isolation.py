"""Isolation probes for the observer's endpoints (project_id comes from the tenants probes)."""

from tests.isolation import api_param, api_request, api_unscoped, world_builder

api_unscoped("POST", "/api/v1/ping", "an authenticated no-op; returns nothing about anyone")


@world_builder
def observer(world) -> None:
    from apps.observer import services

    session = services.session_open(
        project=world.alice.project, actor=world.alice.principal, data={"task": "probe"}
    )
    world.objects["session_a"] = session


@api_param("session_id")
def _session_id(world):
    return world.session_a.id


@api_request("POST", "/api/v1/projects/{project_id}/sessions")
def _open(world):
    return {"body": {"session_type": "build"}}


@api_request("POST", "/api/v1/sessions/{session_id}/events")
def _events(world):
    return {"body": {"events": [{"seq": 1, "type": "reasoning", "text": "probe"}]}}


@api_request("POST", "/api/v1/sessions/{session_id}/validation")
def _validation(world):
    return {"body": {"passed": True}}


@api_request("POST", "/api/v1/sessions/{session_id}/complete")
def _complete(world):
    return {"body": {"outcome": "success"}}


@api_request("POST", "/api/v1/sessions/{session_id}/step-injection")
def _step(world):
    return {"body": {"step": 6, "files": ["a.py"]}}


@api_request("POST", "/api/v1/projects/{project_id}/observer/git-log")
def _git_log(world):
    return {"body": {"log": "commit 1a2b3c4d5e6f\n\na.py\nb.py\n"}}
