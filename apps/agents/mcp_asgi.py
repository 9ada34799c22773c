"""The remote MCP endpoint at `/mcp`: the official SDK's Streamable HTTP transport behind the
REST API's own authentication.

- Every request is authenticated before the SDK sees it, by the API's `principal_auth` (the same
  keys, scopes, roles, project limits and failed-key lockout): no key or a wrong one is a 401 in
  the API's error envelope. The principal rides on the request's scope to the tool handlers.
- Stateless, JSON responses: no MCP session lives in one process, so any web node can answer
  any request behind a load balancer, and a tool call is one plain request and response.
- The Host header is checked against ALLOWED_HOSTS as Django checks it; the SDK's own DNS
  rebinding guard is off because it knows only localhost, and a request without the bearer key
  reaches nothing anyway.
"""

from __future__ import annotations

import asyncio
import io
import logging
from typing import Any

import anyio
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.db import connections
from django.http import HttpResponse
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from apps.agents.mcp_server import PRINCIPAL_SCOPE_KEY, mcp
from apps.tenants.auth import principal_auth
from apps.tenants.principal import Principal
from memorysaas.kernel.errors import ApiError, envelope_for, error_response

logger = logging.getLogger(__name__)

MCP_PATH = "/mcp"

_endpoint = mcp.streamable_http_app(
    streamable_http_path=MCP_PATH,
    stateless_http=True,
    json_response=True,
    transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
)


def is_mcp_path(path: str) -> bool:
    return path == MCP_PATH or path.startswith(MCP_PATH + "/")


class _SessionManagerHolder:
    """The SDK's session manager serves requests only inside its `run()`, which an application
    enters in its ASGI lifespan; daphne sends no lifespan events, so the first request enters it
    in a task of its own that holds it for the life of the process."""

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self._manager = manager
        self._running: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None  # (kept: the loop holds tasks only weakly)

    async def ready(self) -> None:
        if self._running is None:  # (no await before the assignment: one request starts it)
            loop = asyncio.get_running_loop()
            self._running = loop.create_future()
            self._task = loop.create_task(self._hold(self._running))
        await asyncio.shield(self._running)

    async def _hold(self, running: asyncio.Future[None]) -> None:
        try:
            async with self._manager.run():
                running.set_result(None)
                await anyio.sleep_forever()
        except BaseException as error:
            if not running.done():
                running.set_exception(error)
            logger.exception("The MCP session manager stopped")
            raise


_holder = _SessionManagerHolder(mcp.session_manager)


def _authenticate(scope: dict[str, Any]) -> Principal:
    """The request's principal, by the API's own authentication; ApiError (401, 429) or
    DisallowedHost otherwise."""
    request = ASGIRequest(scope, io.BytesIO())
    try:
        request.get_host()
        principal = principal_auth(request)
    finally:
        connections.close_all()  # (a thread of this request's own: its connection goes back now)
    if principal is None:
        raise ApiError(401, "Authentication required: send 'Authorization: Bearer <api key>'.")
    return principal


async def _answer(send, response: HttpResponse) -> None:
    headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in response.items()]
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})


def _refusal(error: ApiError) -> HttpResponse:
    response = envelope_for(error)
    if error.status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="memorysaas"'
    return response


async def mcp_app(scope, receive, send) -> None:
    """The ASGI application for http requests under /mcp."""
    # Each request's synchronous work (authentication, the tools' ORM calls) runs on a thread of
    # its own, as a Django view's does, not queued behind every other request's.
    async with ThreadSensitiveContext():
        try:
            principal = await sync_to_async(_authenticate, thread_sensitive=True)(scope)
        except ApiError as error:
            await _answer(send, _refusal(error))
            return
        except DisallowedHost:
            await _answer(send, error_response(400, "This host is not served here.", code="disallowed_host"))
            return
        if scope["method"] == "GET":
            # (the spec's answer for "no server-initiated stream here": stateless and JSON-only,
            # this server never has anything to push, and an open GET would hold a connection)
            refused = error_response(405, "Send MCP messages by POST.", code="method_not_allowed")
            refused["Allow"] = "POST, DELETE"
            await _answer(send, refused)
            return
        await _holder.ready()
        await _endpoint({**scope, PRINCIPAL_SCOPE_KEY: principal}, receive, send)
