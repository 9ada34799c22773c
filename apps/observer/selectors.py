"""Reads for the observer: sessions, and co-access partners for the retrieval engine's graph path.
(What a session is served — start plan, notes, step injection — is in injection.py.)"""

from __future__ import annotations

from uuid import UUID

from django.db import connection
from django.db.models import OuterRef, Subquery
from django.db.models.functions import Coalesce

from apps.observer.models import EventBatch, Session
from apps.observer.parallel import Span, ran_in_parallel
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from memorysaas.kernel.errors import NotFound
from memorysaas.kernel.ids import as_uuid

INJECTION_TYPES = ("gotcha", "error_pattern", "dead_end")
INJECTION_MIN_CONFIDENCE = 0.65
FIRST_INJECTION_STEP = 5
PREFETCH_MAX = 12


def sessions_visible(principal: Principal):
    """Sessions of the projects the principal sees, narrowed to its key's project if it has one."""
    sessions = Session.objects.visible_to(principal)
    if principal.project_limit is not None:
        sessions = sessions.filter(project_id=principal.project_limit)
    return sessions


def session_get(*, principal: Principal, session_id: str | UUID) -> Session:
    """The session if its project is visible to the principal (404 otherwise)."""
    as_id = as_uuid(session_id)
    session = (
        sessions_visible(principal)
        .select_related("project", "project__organization")
        .defer("scratchpad")  # large; read only when this process has no fresh copy
        .filter(id=as_id)
        .first()
        if as_id
        else None
    )
    if session is None:
        raise NotFound("No such session.")
    return session


def sessions_for(*, project: Project):
    return Session.objects.for_project(project).defer("scratchpad").order_by("-started_at")


def session_in_project(*, project: Project, session_id: str | UUID) -> Session | None:
    """One session of `project` (None when the id is malformed or belongs elsewhere); the
    caller has resolved `project` inside the principal's scope."""
    as_id = as_uuid(session_id)
    if as_id is None:
        return None
    return sessions_for(project=project).select_related("user", "api_key").filter(id=as_id).first()


def parallel_siblings(session: Session) -> dict[str, list[str]]:
    """The files edited by each other session of `session`'s parallel group that ran alongside it
    (parallel.ran_in_parallel), by session id. `session` has ended."""
    if not session.parallel_group or session.ended_at is None:
        return {}
    last_heard = EventBatch.objects.filter(session=OuterRef("pk")).order_by("-id").values("received_at")[:1]
    rows = (
        Session.objects.filter(project_id=session.project_id, parallel_group=session.parallel_group)
        .exclude(id=session.id)
        .annotate(active_until=Coalesce("ended_at", Subquery(last_heard), "started_at"))
        .values_list("id", "edited_files", "started_at", "active_until", "parallel_declared")
    )
    mine = Span(session.started_at, session.ended_at, session.parallel_declared)
    return {
        str(sid): files
        for sid, files, started, until, declared in rows
        if ran_in_parallel(mine, Span(started, until, declared))
    }


# ---------------------------------------------------------------- retrieval graph path


def coaccess_partners(project_id: UUID, files: list[str]) -> dict[str, float]:
    """Neighbour provider: files used together with `files` in past sessions (co-access) or
    changed with them in git history (co-change). Weight grows with the evidence, capped at
    0.8 (behaviour is strong evidence, a little below an import)."""
    if not files:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT split_part(key, E'\\t', 1), split_part(key, E'\\t', 2), kind, session_count, total
            FROM observer_patternstat
            WHERE project_id = %s AND kind IN ('co_access', 'co_change')
              AND (split_part(key, E'\\t', 1) = ANY(%s) OR split_part(key, E'\\t', 2) = ANY(%s))
            ORDER BY session_count + total DESC LIMIT 200
            """,
            [str(project_id), files, files],
        )
        rows = cursor.fetchall()
    in_play = set(files)
    out: dict[str, float] = {}
    for a, b, kind, sessions, total in rows:
        other = b if a in in_play else a
        evidence = sessions if kind == "co_access" else total / 2
        weight = min(0.8, 0.2 * evidence)
        if weight > out.get(other, 0):
            out[other] = round(weight, 3)
    return out
