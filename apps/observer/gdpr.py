"""What the observer gives to an export and removes in an erasure (see apps/tenants/gdpr.py).

A person's sessions are the ones they (or their API keys) opened: their events, scratchpads and
reports are deleted on erasure. The cross-session frequency tables hold paths and counts, not
who did what, and stay with the project.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from apps.observer.models import EventBatch, Session


def _sessions_of(user):
    return Session.objects.filter(Q(user=user) | Q(api_key__created_by=user))


def _row(session: Session) -> dict[str, Any]:
    return {
        "id": str(session.id),
        "project": f"{session.project.organization.slug}/{session.project.slug}",
        "session_type": session.session_type,
        "task": session.task,
        "status": session.status,
        "outcome": session.outcome,
        "started_at": session.started_at.isoformat(),
        "ended_at": session.ended_at.isoformat() if session.ended_at else None,
        "events": [
            e for events in session.batches.order_by("id").values_list("events", flat=True) for e in events
        ],
        "promoted_memory_ids": [str(i) for i in session.promoted_memory_ids],
    }


def export_user(user) -> dict[str, Any]:
    sessions = _sessions_of(user).select_related("project__organization").order_by("started_at")
    return {"observer_sessions": [_row(s) for s in sessions]}


def export_organization(organization) -> dict[str, Any]:
    sessions = Session.objects.filter(organization=organization).select_related("project__organization")
    return {"observer_sessions": [_row(s) for s in sessions.order_by("started_at")]}


def user_identifiers(user) -> list[str]:
    return [str(i) for i in _sessions_of(user).values_list("id", flat=True)]


def delete_user_data(user, alias: str) -> dict[str, int]:
    ids = list(_sessions_of(user).values_list("id", flat=True))
    batches, _ = EventBatch.objects.filter(session_id__in=ids).delete()
    sessions, _ = Session.objects.filter(id__in=ids).delete()
    return {"observer_sessions": len(ids), "observer_rows": batches + sessions}
