"""`memorysaas mcp`: the local stdio MCP server, driven by the `mcp` SDK's own client over stdio
(the command started as an agent starts it), forwarding to a live daphne — and answering from the
offline replica once the daphne is stopped."""

from __future__ import annotations

import json
from typing import Any

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.types import CallToolResult
from memorysaas_client.config import Profile
from memorysaas_client.mcp_server import Backend, build_server

from apps.agents.mcp_server import mcp as remote_server
from apps.memories.models import Memory
from apps.tenants import services as tenant_services
from tests.clients.cli import MEMORYSAAS, cli_env, run
from tests.e2e.conftest import stop
from tests.memories.factories import make_memory


def call(home, env: dict[str, str], calls: list[tuple[str, dict[str, Any]]]) -> tuple[list[str], list]:
    """List the tools, then make `calls`, in one session with a `memorysaas mcp` process."""
    params = StdioServerParameters(command=MEMORYSAAS, args=["mcp"], env=cli_env(home, env))

    async def main():
        async with Client(stdio_client(params), mode="legacy") as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            return tools, [await client.call_tool(name, arguments) for name, arguments in calls]

    return anyio.run(main)


def answer(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def error_text(result: CallToolResult) -> str:
    assert result.is_error, result.content[0].text[:300]
    return result.content[0].text


def test_the_local_server_has_the_remote_servers_tools():
    """Same names, same argument schemas, same descriptions (the local one may add what it does
    offline), same hints: an agent can be pointed at either."""
    local = build_server(Backend(Profile(url="http://127.0.0.1:9", key="msk_x", project_id="p")))
    ours = {tool.name: tool for tool in anyio.run(local.list_tools)}
    theirs = {tool.name: tool for tool in anyio.run(remote_server.list_tools)}
    assert sorted(ours) == sorted(theirs)
    for name, tool in theirs.items():
        assert ours[name].input_schema == tool.input_schema, name
        assert "ctx" not in tool.input_schema["properties"]  # (the server's call context is no argument)
        assert ours[name].description.startswith(tool.description), name
        assert ours[name].annotations == tool.annotations, name
    assert ours["search_memory"].description != theirs["search_memory"].description  # (offline note)


def test_tools_forward_to_the_service_and_search_the_replica_offline(server, home, alice):
    key = tenant_services.api_key_create(
        organization=alice.org, actor=alice.principal, name="agent",
        scopes=["memories:read", "memories:write", "sync"], project=alice.project,
    )[1]  # fmt: skip
    env = {
        "MEMORYSAAS_URL": server["url"],
        "MEMORYSAAS_KEY": key,
        "MEMORYSAAS_PROJECT": str(alice.project.id),
    }
    webhook = make_memory(
        alice,
        content="Stripe webhooks arrive twice: make the order handler idempotent on the event id.",
        type="gotcha",
        related_files=["shop/views.py"],
    )
    tools, results = call(
        home,
        env,
        [
            ("list_projects", {}),
            ("search_memory", {"query": "why do stripe webhooks arrive twice"}),
            ("get_context", {"task": "handle stripe webhooks", "files": ["shop/views.py"]}),
            ("remember", {"content": "Refunds go through the payments queue.", "type": "decision"}),
            ("memory_feedback", {"memory_id": str(webhook.id), "kind": "helpful"}),
            ("memory_feedback", {"memory_id": "not-an-id", "kind": "confirm"}),
            ("dependencies", {"file": "shop/nowhere.py"}),
        ],
    )
    assert set(tools) == {t.name for t in anyio.run(remote_server.list_tools)}
    projects, found, context, stored, helpful, bad_id, no_file = results
    assert [p["id"] for p in answer(projects)["projects"]] == [str(alice.project.id)]
    assert answer(found)["results"][0]["id"] == str(webhook.id)
    assert str(webhook.id)[:8] in answer(context)["text"]
    assert Memory.objects.filter(
        id=answer(stored)["id"], content="Refunds go through the payments queue."
    ).exists()
    assert answer(helpful)["feedback"] == "helpful"
    assert "is not a memory id" in error_text(bad_id)
    assert "No file 'shop/nowhere.py' in the graph" in error_text(no_file)

    assert run(home, "sync", env=env).returncode == 0
    stop(server["process"])
    _, (offline, queued, graph) = call(
        home,
        env,
        [
            ("search_memory", {"query": "stripe webhooks idempotent"}),
            ("remember", {"content": "Offline: the zqxj cache is per worker.", "type": "gotcha"}),
            ("impact", {"target": "shop/views.py"}),
        ],
    )
    assert answer(offline)["offline"] is True
    assert answer(offline)["results"][0]["id"] == str(webhook.id)
    assert answer(queued)["queued"] is True and answer(queued)["id"].startswith("local:")
    assert "unreachable" in error_text(graph)
