"""Live updates: services publish project events; the project's websocket group receives them.

Each message carries the project's next sequence number, taken from the database so that any
number of web and worker processes agree on one order. A client that sees a gap re-fetches.
Call `publish` from `transaction.on_commit` so nothing is announced that was rolled back.
"""

from __future__ import annotations

import logging
from typing import Any
from uuid import UUID

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection

logger = logging.getLogger(__name__)


def project_group(project_id: UUID | str) -> str:
    return f"project.{project_id}"


def next_project_seq(project_id: UUID | str) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE tenants_project SET event_seq = event_seq + 1 WHERE id = %s RETURNING event_seq",
            [str(project_id)],
        )
        row = cursor.fetchone()
    return row[0] if row else 0


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    import json

    return json.loads(json.dumps(data, cls=DjangoJSONEncoder))


def publish(project_id: UUID | str, event: str, data: dict[str, Any] | None = None) -> int:
    """Send `event` to everyone watching the project. Returns the sequence number used."""
    seq = next_project_seq(project_id)
    layer = get_channel_layer()
    if layer is None:
        return seq
    message = {"type": "project.event", "event": event, "seq": seq, "data": _jsonable(data or {})}
    try:
        async_to_sync(layer.group_send)(project_group(project_id), message)
    except Exception:
        # A broken channel layer must not fail the write that already committed.
        logger.exception("Could not publish %s for project %s", event, project_id)
    return seq
