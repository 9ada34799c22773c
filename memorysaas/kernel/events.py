"""Organization events for the outside world (webhooks), raised by the apps that own the facts.

An app calls `emit(organization_id, "dispute.opened", {...})` where the fact happens, inside its
transaction; whoever wants such events (apps/webhooks) subscribes at start-up. The apps that
emit stay ignorant of who listens: the webhooks app sits above them, and they must not import it.

A subscriber runs in the emitter's transaction, so what it writes (a delivery to send) exists
if and only if the fact was committed. A subscriber that fails is logged and skipped inside a
savepoint: a broken webhook must never undo a dispute or a finished session.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.db import DatabaseError, transaction

logger = logging.getLogger(__name__)

EVENT_TYPES: tuple[str, ...] = (
    "memory.review_needed",
    "dispute.opened",
    "dispute.resolved",
    "session.completed",
    "graph.index_completed",
    "insights.weekly",
)

Subscriber = Callable[[UUID | str, str, dict[str, Any]], None]
_SUBSCRIBERS: list[Subscriber] = []


def subscribe(subscriber: Subscriber) -> None:
    """Call `subscriber(organization_id, event_type, payload)` for every event (once per function)."""
    if subscriber not in _SUBSCRIBERS:
        _SUBSCRIBERS.append(subscriber)


def emit(
    organization_id: UUID | str | None,
    event_type: str,
    payload: dict[str, Any] | None,
    *,
    only_known: bool = False,
) -> None:
    """Announce `event_type` for the organization to every subscriber. A None payload means there
    is nothing to announce; with `only_known`, an event type outside EVENT_TYPES is skipped (a
    caller that passes its live-update event names through) rather than an error."""
    if organization_id is None or payload is None:
        return
    if event_type not in EVENT_TYPES:
        if only_known:
            return
        raise ValueError(f"unknown event type {event_type!r}; known: {list(EVENT_TYPES)}")
    for subscriber in _SUBSCRIBERS:
        try:
            with transaction.atomic():
                subscriber(organization_id, event_type, payload)
        except (DatabaseError, ValueError, TypeError, LookupError):
            logger.exception("event %s for organization %s: a subscriber failed", event_type, organization_id)


# ---------------------------------------------------------------- payloads
# Each event's payload is built here, in one place, so that docs/webhooks.md describes them all.
# They read attributes of the emitter's objects without importing their apps.


def review_payload(project_id: UUID | str, memories: list[Any]) -> dict[str, Any] | None:
    """memory.review_needed: the memories of one write that wait for a steward (None: none do)."""
    ids = [str(m.id) for m in memories if m.needs_review]
    if not ids:
        return None
    return {"project_id": str(project_id), "memory_ids": ids}


def session_payload(session: Any) -> dict[str, Any]:
    """session.completed: the session as finalized (its promotions and outcome)."""
    return {
        "project_id": str(session.project_id),
        "session_id": str(session.id),
        "session_type": session.session_type,
        "outcome": session.outcome or None,
        "ab_group": session.ab_group,
        "promoted_memory_ids": [str(i) for i in session.promoted_memory_ids],
        "reinforced_memory_ids": [str(i) for i in session.reinforced_memory_ids],
    }


def index_payload(job: Any, result: Any) -> dict[str, Any]:
    """graph.index_completed: what the index job covered."""
    return {
        "project_id": str(job.project_id),
        "job_id": job.id,
        "kind": job.kind,
        "files": result.files,
        "nodes": result.nodes,
        "edges": result.edges,
    }
