"""Isolation probes for the agents' endpoints: the hooks endpoint names its project in the query
(`?project=`), so charlie's key sent with org A's project must be a 404."""

from tests.isolation import api_query_scoped, api_request, world_builder

HOOKS = "/api/v1/hooks/claude-code"
SHARED_ID = "5b0c8d1e-claude-session-probe"
api_query_scoped("POST", HOOKS)


@world_builder
def agents(world) -> None:
    from apps.agents.hooks import read_hook
    from apps.agents.services import hook_deliver

    hook = read_hook({"session_id": SHARED_ID, "hook_event_name": "SessionStart", "cwd": "/home/alice/acme"})
    hook_deliver(principal=world.alice.principal, project_id=world.alice.project.id, hook=hook)


@api_request("POST", HOOKS)
def _hook(world):
    body = {
        "session_id": SHARED_ID,
        "hook_event_name": "PostToolUse",
        "cwd": "/home/alice/acme",
        "tool_name": "Read",
        "tool_input": {"file_path": "/home/alice/acme/a.py"},
        "tool_response": "x = 1",
        "tool_use_id": "toolu_probe",
    }
    return {"query": {"project": str(world.alice.project.id)}, "body": body}
