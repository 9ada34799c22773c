"""The live-update websocket: one connection per open project page, one group per project.

`ws/projects/<project_id>/` authenticates the browser's session (or an `Authorization: Bearer
msk_…` header for other clients), checks that the caller may read the project — an outsider is
closed with 4404 exactly as a missing project is — and joins the project's group. When access
is taken away in the organization (a member removed, a key or device revoked), every open socket
checks its caller again and closes with 4404 if it may no longer read the project. Every message
is JSON: `{"event": "memory.created", "seq": 42, "data": {...}}`. The first one, `hello`, carries
the project's current sequence number, so a client that reconnects knows at once whether it
missed anything. Sequence numbers come from the database (memorysaas.kernel.realtime), so they agree
across every web and worker process; with REDIS_URL the group spans processes through Redis.

static/js/app.js turns these messages into DOM events (`live-any`, `live-memory`,
`live-memory-created`, `live-gap`) that htmx elements listen to with
`hx-trigger="live-memory from:body"` to re-fetch themselves in place.
"""

from __future__ import annotations

import io
from uuid import UUID

from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.core.handlers.asgi import ASGIRequest
from django.utils import timezone

from memorysaas.kernel.errors import ApiError
from memorysaas.kernel.realtime import project_group, session_group

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_RATE_LIMITED = 4429


def bearer_token(scope) -> str | None:
    """The key an `Authorization: Bearer` header carries ("" when it carries none), or None
    without such a header (a browser cannot send one on a websocket)."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


@database_sync_to_async
def _principal(scope, *, connecting: bool = False):
    """The caller, or None. A key presented to connect is checked by the API's own
    authentication, so a key guessed over a socket spends the same failed-authentication budget
    as one guessed over HTTP (ApiError 429 once the address has none left); an open socket's key
    checked again is only looked up (it was no guess, and its address may since be locked out)."""
    from apps.tenants.auth import principal_auth
    from apps.tenants.principal import Principal
    from apps.tenants.services import api_key_authenticate

    raw = bearer_token(scope)
    if raw is not None and not connecting:
        api_key = api_key_authenticate(raw)
        return Principal.for_api_key(api_key) if api_key is not None else None
    if raw is not None:
        try:
            return principal_auth(ASGIRequest({**scope, "method": "GET"}, io.BytesIO()))
        except ApiError as error:
            if error.status == 429:
                raise
            return None
    user = scope.get("user")
    if user is not None and user.is_authenticated:
        return Principal.for_user(user)
    return None


@database_sync_to_async
def _project_seq(principal, project_id: UUID) -> int | None:
    """The project's current sequence number, or None when the caller cannot read it."""
    from apps.tenants.models import Project
    from apps.tenants.roles import Perm

    project = Project.objects.visible_to(principal).filter(id=project_id).first()
    if project is None or not principal.has(project.organization_id, Perm.MEMORIES_READ):
        return None
    return project.event_seq


class ProjectConsumer(AsyncJsonWebsocketConsumer):
    group: str | None = None
    signed_in: str | None = None  # the browser session's group (realtime.session_group)
    key_expires_at = None  # when the caller's API key stops working (no event reaches it after)

    async def connect(self) -> None:
        try:
            principal = await _principal(self.scope, connecting=True)
        except ApiError:  # (its address is locked out: no key it sends is looked at)
            await self.close(code=CLOSE_RATE_LIMITED)
            return
        if principal is None:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        project_id = self.scope["url_route"]["kwargs"]["project_id"]
        seq = await _project_seq(principal, project_id)
        if seq is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.key_expires_at = principal.api_key.expires_at if principal.api_key is not None else None
        self.group = project_group(project_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        session = self.scope.get("session")
        if principal.api_key is None and session is not None and session.session_key:
            self.signed_in = session_group(session.session_key)
            await self.channel_layer.group_add(self.signed_in, self.channel_name)
        await self.accept()
        await self.send_json({"event": "hello", "seq": seq, "data": {"project": str(project_id)}})

    async def disconnect(self, code: int) -> None:
        for group in (self.group, self.signed_in):
            if group is not None:
                await self.channel_layer.group_discard(group, self.channel_name)

    async def receive(self, text_data=None, bytes_data=None, **kwargs) -> None:
        """Frames that are not JSON text are ignored: channels raised on them, which killed the
        consumer without `disconnect`, and its place in the group stayed behind."""
        if text_data is None:
            return
        try:
            content = await self.decode_json(text_data)
        except ValueError:
            return
        await self.receive_json(content, **kwargs)

    async def receive_json(self, content, **kwargs) -> None:
        """Clients only listen; a ping is answered so they can check the line."""
        if isinstance(content, dict) and content.get("type") == "ping":
            await self.send_json({"event": "pong", "seq": None, "data": {}})

    async def access_recheck(self, message: dict) -> None:
        """Someone lost access in the organization (realtime.access_changed): is it this caller?
        A browser's user is read again from its session (as a request would): the one resolved
        when the socket opened would outlive a password change or a deactivation."""
        if "user" in self.scope and bearer_token(self.scope) is None:
            self.scope["user"] = await get_user(self.scope)
        principal = await _principal(self.scope)
        project_id = self.scope["url_route"]["kwargs"]["project_id"]
        if principal is None or await _project_seq(principal, project_id) is None:
            await self._shut()

    async def project_event(self, message: dict) -> None:
        if self.key_expires_at is not None and timezone.now() >= self.key_expires_at:
            await self._shut()  # the key expired while the socket was open: nothing more for it
            return
        await self.send_json({"event": message["event"], "seq": message["seq"], "data": message["data"]})

    async def session_ended(self, message: dict) -> None:
        """The browser session this socket came from signed out (realtime.session_ended)."""
        await self._shut()

    async def _shut(self) -> None:
        await self.close(code=CLOSE_NOT_FOUND)
        await self.disconnect(CLOSE_NOT_FOUND)
        self.group = self.signed_in = None
