"""A small project history for the Insights page, made through the public API as agents and
people would make it: memories, sessions with events and injections, feedback, searches, a
dispute. Then, because everything happens within a second here, the week is spread over its
days (sessions, feedback and latency samples moved back to the day they stand for, one
snapshot taken per day as the hourly job would have)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from apps.insights import rollups, snapshots
from apps.insights.experiments import experiment_current
from apps.insights.history import RetrievalSample
from apps.insights.models import ExperimentPeriod
from apps.memories.models import Memory, MemoryFeedback
from apps.observer.models import Session
from apps.tenants.models import Project
from memorysaas.kernel import latency

TEXTS = [
    ("gotcha", "Run migrations with --plan first: the billing table locks for minutes."),
    ("decision", "Background jobs use django-q2 with the ORM broker in development."),
    ("dead_end", "Caching search results in Redis did not help: invalidation cost more than it saved."),
    ("pattern", "Services take keyword-only arguments and return the saved model."),
    ("gotcha", "The embedded PostgreSQL needs its data dir on a local disk, not NFS."),
    ("error_pattern", "psycopg OperationalError after a restart: the pool reconnects within 4 s."),
    ("decision", "Webhook secrets are shown once and rotated, never logged."),
    ("gotcha", "Playwright needs the Debian chromium; the bundled one cannot be downloaded."),
]


def populate(client, project_id: str, *, days: int = 7, sessions_per_day: int = 16) -> dict[str, Any]:
    """Memories, sessions, feedback and searches through the API, spread over `days` days."""
    ids = []
    for i, (kind, text) in enumerate(TEXTS):
        body = {"type": kind, "content": text, "needs_review": i % 3 == 0}
        response = client.post(f"projects/{project_id}/memories", body)
        assert response.status_code == 201, response.content
        ids.append(response.json()["id"])
    now = timezone.now()
    # The A/B experiment's period opens with the project; the week below happened before "now".
    project = Project.objects.get(id=project_id)
    period = experiment_current(project=project)
    ExperimentPeriod.objects.filter(pk=period.pk).update(started_at=now - timedelta(days=days + 1))
    made: list[str] = []
    for day in range(days):
        when = now - timedelta(days=days - 1 - day)
        day_sessions = []
        for n in range(sessions_per_day):
            opened = client.post(
                f"projects/{project_id}/sessions", {"session_type": "build", "task": f"task {day}-{n}"}
            )
            assert opened.status_code == 201, opened.content
            session = opened.json()
            context = client.post(
                f"projects/{project_id}/context",
                {"task": "migrations and background jobs", "session_id": session["id"]},
            )
            assert context.status_code == 200, context.content
            calls = 12 if session["ab_group"] == "control" else 9
            events = [
                {
                    "seq": k + 1,
                    "type": "tool_call",
                    "tool": "Read",
                    "args": {"path": f"src/m{k}.py"},
                }
                for k in range(calls + n % 3)
            ]
            used = 1000 * len(events)  # tokens: about a thousand a call
            events.append(
                {
                    "seq": len(events) + 1,
                    "type": "step_complete",
                    "input_tokens": used,
                    "output_tokens": used // 8,
                }
            )
            assert client.post(f"sessions/{session['id']}/events", {"events": events}).status_code == 200
            outcome = "success" if (n + day) % 4 else "failure"
            assert client.post(f"sessions/{session['id']}/complete", {"outcome": outcome}).status_code in (
                200,
                202,
            )
            day_sessions.append(session["id"])
        for j, memory_id in enumerate(ids[: 3 + day % 4]):
            kind = ("used", "helpful", "used", "flag", "used", "correct")[(j + day) % 6]
            body = (
                {"kind": kind}
                if kind != "correct"
                else {"kind": kind, "content": TEXTS[j][1] + " (corrected)"}
            )
            response = client.post(f"memories/{memory_id}/feedback", body)
            assert response.status_code == 200, response.content
        for q in ("migrations", "webhook secret", "django-q2 broker"):
            assert client.post(f"projects/{project_id}/search", {"query": q}).status_code == 200
        latency.flush()
        _move_to(when, project_id, day_sessions)
        snapshots.snapshot_project(project, now=when)
        made += day_sessions
    rollups.rollup_run()  # (the A/B rollup, as its schedule would)
    return {"memory_ids": ids, "session_ids": made}


def _move_to(when, project_id: str, session_ids: list[str]) -> None:
    """What was made just now, dated to the day it stands for."""
    recent = timezone.now() - timedelta(minutes=10)
    Session.objects.filter(id__in=session_ids).update(started_at=when, finalized_at=when)
    Memory.objects.filter(project_id=project_id, created_at__gte=recent).update(created_at=when)
    MemoryFeedback.objects.filter(memory__project_id=project_id, created_at__gte=recent).update(
        created_at=when
    )
    RetrievalSample.objects.filter(project_id=project_id, at__gte=recent).update(at=when)
