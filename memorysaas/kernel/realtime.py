"""Live updates: services publish project events; the project's websocket group receives them.

Each message carries the project's next sequence number, taken from the database so that any
number of web and worker processes agree on one order. A client that sees a gap re-fetches.
Call `publish` from `transaction.on_commit` so nothing is announced that was rolled back;
progress inside a long transaction goes through `outside_transaction`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection

logger = logging.getLogger(__name__)
T = TypeVar("T")


def project_group(project_id: UUID | str) -> str:
    return f"project.{project_id}"


def session_group(session_key: str) -> str:
    """The sockets a browser session opened (named by a digest: no session key in the layer)."""
    import hashlib

    return f"session.{hashlib.sha256(session_key.encode()).hexdigest()[:40]}"


def session_ended(session_key: str | None) -> None:
    """A browser session signed out: the sockets it opened close (they would otherwise go on
    receiving the project's events until the page was left)."""
    layer = get_channel_layer()
    if layer is None or not session_key:
        return
    try:
        async_to_sync(layer.group_send)(session_group(session_key), {"type": "session.ended"})
    except Exception:
        logger.exception("Could not close a signed-out session's sockets")


def next_project_seq(project_id: UUID | str, count: int = 1) -> int:
    """Take `count` sequence numbers (one statement); returns the last (0 without a project)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE tenants_project SET event_seq = event_seq + %s WHERE id = %s RETURNING event_seq",
            [count, str(project_id)],
        )
        row = cursor.fetchone()
    return row[0] if row else 0


# The ids of an organization's projects. Projects belong to the tenants app, above this kernel,
# so tenants registers the lookup from its AppConfig.ready() (register_projects_of).
_projects_of: Callable[[UUID | str], Iterable[UUID]] | None = None


def register_projects_of(fn: Callable[[UUID | str], Iterable[UUID]]) -> None:
    """Tell access_changed how to list an organization's project ids."""
    global _projects_of
    _projects_of = fn


def access_changed(organization_id: UUID | str) -> None:
    """After a commit that took access away (a member removed, a key or device revoked), every
    open socket on the organization's projects checks its caller again and closes if the caller
    may no longer read the project: access was otherwise checked only when a socket opened."""
    from django.db import transaction

    def send() -> None:
        layer = get_channel_layer()
        if layer is None or _projects_of is None:
            return
        groups = [project_group(p) for p in _projects_of(organization_id)]

        async def go() -> None:
            for group in groups:
                await layer.group_send(group, {"type": "access.recheck"})

        try:
            async_to_sync(go)()
        except Exception:
            logger.exception("Could not ask organization %s's sockets to check access again", organization_id)

    transaction.on_commit(send)


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    import json

    return json.loads(json.dumps(data, cls=DjangoJSONEncoder))


def publish(project_id: UUID | str, event: str, data: dict[str, Any] | None = None) -> int:
    """Send `event` to everyone watching the project. Returns the sequence number used."""
    return publish_many(project_id, [(event, data)])[0]


def publish_many(project_id: UUID | str, events: Sequence[tuple[str, dict[str, Any] | None]]) -> list[int]:
    """Send several events to the project's watchers, in order: one statement numbers them all and
    one hop to the channel layer sends them. Returns the sequence numbers used."""
    last = next_project_seq(project_id, len(events))
    seqs = [last - len(events) + 1 + i if last else 0 for i in range(len(events))]
    layer = get_channel_layer()
    if layer is None or not events:
        return seqs
    group = project_group(project_id)
    messages = [
        {"type": "project.event", "event": event, "seq": seq, "data": _jsonable(data or {})}
        for (event, data), seq in zip(events, seqs, strict=True)
    ]

    async def send() -> None:
        for message in messages:
            await layer.group_send(group, message)

    try:
        async_to_sync(send)()
    except Exception:
        # A broken channel layer must not fail the write that already committed.
        logger.exception("Could not publish %s for project %s", [e for e, _ in events], project_id)
    return seqs


def outside_transaction(fn: Callable[[], T]) -> T:
    """Run `fn` on a database connection of its own, committed at once, when the caller is inside
    a transaction: progress reported from a long one (a full graph index) would otherwise hold
    the project's row — where event numbers come from — until it ends, and every other write
    to the project that announces itself would wait that long; and a rollback would hand the
    numbers already sent out again. Returns what `fn` returned."""
    from django.db import connection as caller

    if not caller.in_atomic_block:
        return fn()
    outcome: list[Any] = []

    def run() -> None:
        from django.db import connection as own

        try:
            outcome.append((True, fn()))
        except BaseException as error:  # raised again in the caller's thread
            outcome.append((False, error))
        finally:
            own.close()

    worker = threading.Thread(target=run, name="outside-transaction")
    worker.start()
    worker.join()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value
