"""The MCP server's tools, each bridged from the SDK's async handler to its synchronous body in
`apps.agents.mcp_tools`. Their names, descriptions and argument schemas are the client
distribution's `memorysaas_client.tool_specs`, which `memorysaas mcp` on a device serves too.

Who is calling was settled before any MCP handling (`apps.agents.mcp_asgi` refuses a missing or
wrong key with a 401): the handler finds that principal on the HTTP request that carried the
call. A failure the caller can fix (a bad argument, a missing permission, an id that is not
theirs) becomes a tool error with the API's message, never a crash.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from memorysaas_client import tool_specs

from apps.agents import mcp_tools
from apps.tenants.principal import Principal
from apps.tenants.ratelimit import policy
from apps.tenants.ratelimit.throttle import charge
from memorysaas.kernel.errors import ApiError
from memorysaas.kernel.schemas import refuse_unstorable

PRINCIPAL_SCOPE_KEY = "memorysaas.principal"

INSTRUCTIONS = (
    tool_specs.INSTRUCTIONS
    + "\nProject-limited keys need no `project` argument; otherwise call list_projects first."
)

mcp = MCPServer(name="memorysaas", instructions=INSTRUCTIONS)


def principal_of(ctx: Context) -> Principal:
    request = ctx.request_context.request
    principal = getattr(request, "scope", {}).get(PRINCIPAL_SCOPE_KEY)
    if not isinstance(principal, Principal):
        raise ToolError("Not authenticated: send 'Authorization: Bearer <api key>'.")
    return principal


# The tools that cost what a REST search or context costs are charged the same weight (the
# names of RATE_LIMIT_WEIGHTS); every other call weighs 1, as a REST request does.
TOOL_WEIGHTS = {"search_memory": "search", "recipes": "search", "get_context": "context"}


def charge_call(principal: Principal, tool: str) -> None:
    """Charge the key's (and its organization's) rate-limit buckets for one tool call, as
    the REST API charges a request: MCP is no way around the limits."""
    if not settings.RATE_LIMIT_ENABLED:
        return
    refused = charge(principal, weight=policy.operation_weight(TOOL_WEIGHTS.get(tool, "")))
    if refused is not None:
        raise refused


def call_in_django(body: Callable[..., Any], principal: Principal, arguments: dict[str, Any]) -> Any:
    try:
        charge_call(principal, body.__name__)
        return body(principal=principal, **arguments)
    finally:
        # (the thread is one of the request's own, as in a Django view: its connections go back now)
        connections.close_all()


async def run_tool(ctx: Context, body: Callable[..., Any], **arguments: Any) -> Any:
    principal = principal_of(ctx)
    try:
        # (PostgreSQL stores no NUL character: said here, not as a failed query)
        refuse_unstorable(arguments)
    except ValueError as error:
        raise ToolError(str(error)) from None
    try:
        return await sync_to_async(call_in_django, thread_sensitive=True)(body, principal, arguments)
    except ApiError as error:
        raise ToolError(error.message) from None


def _serve(spec: Callable[..., Any], body: Callable[..., Any]) -> None:
    async def handler(ctx: Context, **arguments: Any) -> Any:
        return await run_tool(ctx, body, **arguments)

    tool_specs.register(mcp, spec, handler, context=Context)


# Each tool's name, description and arguments are the device's server's too (tool_specs); its
# body is the function of the same name in mcp_tools.
for _spec in tool_specs.TOOLS:
    _serve(_spec, getattr(mcp_tools, _spec.__name__))
