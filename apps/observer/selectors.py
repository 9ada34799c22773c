"""Reads for the observer: sessions, in-session notes, the session-start plan, the step-injection
decider (seeds/003 §9) and co-access partners for the retrieval engine's graph path."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import connection
from django.db.models import Case, F, FloatField, When

from apps.memories.codetokens import analyze
from apps.memories.kinds import DISPUTE_PENALTY
from apps.memories.models import TENANT_MATCH, Memory
from apps.observer import text as T
from apps.observer.models import Session, SessionStatus
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from memorysaas.kernel.errors import NotFound

INJECTION_TYPES = ("gotcha", "error_pattern", "dead_end")
INJECTION_MIN_CONFIDENCE = 0.65
FIRST_INJECTION_STEP = 5
PREFETCH_MAX = 12


def _as_uuid(value: str | UUID) -> UUID | None:
    try:
        return value if isinstance(value, UUID) else UUID(str(value))
    except ValueError:
        return None


def sessions_visible(principal: Principal):
    """Sessions of the projects the principal sees, narrowed to its key's project if it has one."""
    sessions = Session.objects.visible_to(principal)
    if principal.project_limit is not None:
        sessions = sessions.filter(project_id=principal.project_limit)
    return sessions


def session_get(*, principal: Principal, session_id: str | UUID) -> Session:
    """The session if its project is visible to the principal (404 otherwise)."""
    as_id = _as_uuid(session_id)
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
    as_id = _as_uuid(session_id)
    if as_id is None:
        return None
    return sessions_for(project=project).select_related("user", "api_key").filter(id=as_id).first()


def session_notes(*, session_id: str, project: Project) -> list[dict[str, Any]]:
    """Explicit notes of a running session (record_memory events, MEMORY: lines): served by
    /context and step injection at once, long before any promotion."""
    from apps.observer.services import load_scratchpad

    as_id = _as_uuid(session_id)
    # (a completed session's notes went to promotion: retrieval serves what became of them)
    session = (
        Session.objects.for_project(project).filter(id=as_id, status=SessionStatus.OPEN).first()
        if as_id
        else None
    )
    if session is None:
        return []
    return list(load_scratchpad(session).notes)


def session_root(*, session_id: str, project: Project) -> str:
    """The repository root a session of `project` named when it opened ("" for none, or for no
    such session): /context takes the files it is given relative to it, as the session's own."""
    as_id = _as_uuid(session_id)
    if not as_id:
        return ""
    return Session.objects.for_project(project).filter(id=as_id).values_list("root", flat=True).first() or ""


# ---------------------------------------------------------------- session start


def start_context(*, session: Session, principal: Principal, files: list[str]) -> dict[str, Any]:
    """The session-start plan: files to prefetch (read in >80%, then >50%, of past sessions of
    the modules in play; at most 12), the work state when resuming a work unit, and workflow
    recipes matching the task."""
    from apps.observer.services import load_scratchpad

    modules = _modules_in_play(session, files)
    prefetch: list[dict[str, Any]] = []
    if modules:
        with connection.cursor() as cursor:
            cursor.execute(
                """
                SELECT f.key, f.module, f.session_count::float / m.session_count AS share
                FROM observer_patternstat f
                JOIN observer_modulestat m ON m.project_id = f.project_id AND m.module = f.module
                WHERE f.project_id = %s AND f.kind = 'file_access' AND f.module = ANY(%s)
                  AND m.session_count >= 3 AND f.session_count::float / m.session_count > 0.5
                ORDER BY share DESC, f.session_count DESC, f.key LIMIT %s
                """,
                [str(session.project_id), modules, PREFETCH_MAX],
            )
            prefetch = [
                {
                    "file": key,
                    "module": module,
                    "share": round(share, 2),
                    "tier": "always" if share > 0.8 else "often",
                }
                for key, module, share in cursor.fetchall()
            ]
    # What is injected at session start is never stale (a related file was deleted).
    applicable = Memory.objects.applicable_in(session.project, principal).filter(
        deprecated=False, stale_at__isnull=True
    )
    recipes = []
    if session.task.strip():
        from apps.memories.search import search

        found = search(
            principal=principal, project=session.project, query=session.task, files=files, phase=None,
            limit=3, types=["workflow_recipe"], rerank=False, include_stale=False, use_hyde=False,
        )  # fmt: skip
        recipes = [
            {"id": str(h.memory.id), "content": h.memory.content, "payload": h.memory.payload}
            for h in found.hits
        ][:3]
    work_state = None
    if session.work_unit_key:
        previous = (
            Session.objects.for_project(session.project)
            .filter(work_unit_key=session.work_unit_key)
            .exclude(id=session.id)
            .exclude(outcome="success")
            .order_by("-started_at")
            .first()
        )
        state_memory = (
            applicable.filter(type="work_state", work_unit_ref__hierarchy=session.work_unit.get("hierarchy"))
            .order_by("-updated_at")
            .first()
        )
        if state_memory is not None:
            work_state = {"memory_id": str(state_memory.id), "content": state_memory.content}
        elif previous is not None:
            # (its scratchpad as it stands: the stored checkpoint of a session that never
            # completed — the usual one to resume — lags its events)
            pad = load_scratchpad(previous)
            work_state = {
                "session_id": str(previous.id),
                "outcome": previous.outcome or previous.status,
                "edited_files": previous.edited_files[:20],
                "notes": [n["content"] for n in pad.notes][-5:],
                "last_validation": pad.validations[-1] if pad.validations else None,
            }
    return {"modules": modules, "prefetch": prefetch, "work_state": work_state, "recipes": recipes}


def _modules_in_play(session: Session, files: list[str]) -> list[str]:
    if files:
        return list(dict.fromkeys(T.module_of(f) for f in files))[:10]
    words = {w for w in analyze(session.task).words.split() if len(w) > 2} if session.task else set()
    if not words:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT module FROM observer_modulestat WHERE project_id = %s ORDER BY session_count DESC LIMIT 200",
            [str(session.project_id)],
        )
        known = [row[0] for row in cursor.fetchall()]
    return [m for m in known if any(part.lower() in words for part in m.replace("-", "_").split("/"))][:5]


# ---------------------------------------------------------------- step injection


def _format(memories: list[Memory]) -> str:
    lines = [f"- [{m.type}] {m.content}" for m in memories]
    return "MEMORY CONTEXT (from earlier sessions):\n" + "\n".join(lines)


def step_injection(
    *, session: Session, principal: Principal, step: int, files: list[str], searches: list[str]
) -> dict[str, Any]:
    """seeds/003 §9: nothing before step 5; then (1) unseen gotchas, error patterns and dead
    ends for files just read or edited, (2) new scratchpad notes, (3) a memory that already
    answers what the agent is searching for. Never the same memory twice in a session."""
    from apps.observer.services import injection_record, load_scratchpad

    if step < FIRST_INJECTION_STEP:
        return {"step": step, "injection": None, "reason": "warming_up"}
    pad = load_scratchpad(session)
    seen = set(session.injected_memory_ids)
    # A disputed memory is still used, at confidence × 0.8 (seeds/003 §15).
    in_use = Case(
        When(disputed=True, then=F("confidence") * DISPUTE_PENALTY),
        default=F("confidence"),
        output_field=FloatField(),
    )
    applicable = (
        Memory.objects.applicable_in(session.project, principal)
        .filter(deprecated=False, stale_at__isnull=True)
        .alias(in_use=in_use)
        .filter(in_use__gte=INJECTION_MIN_CONFIDENCE)
        .exclude(id__in=seen)
        .only("id", "type", "content", "confidence")
    )
    files = files or pad.recent_files(5)
    if files:
        found = list(
            applicable.filter(type__in=INJECTION_TYPES, related_files__overlap=files).order_by(
                "-in_use", "id"
            )[:4]
        )
        if found:
            injection_record(session=session, memory_ids=[m.id for m in found], notes_upto=pad.notes_injected)
            return _answer(step, "gotcha_injection", _format(found), found)
    if len(pad.notes) > pad.notes_injected:
        notes = pad.notes[pad.notes_injected :]
        injection_record(session=session, memory_ids=[], notes_upto=len(pad.notes))
        text = "SCRATCHPAD (this session):\n" + "\n".join(f"- [{n['type']}] {n['content']}" for n in notes)
        return {
            "step": step,
            "injection": {"type": "scratchpad_reflection", "content": text, "memory_ids": []},
        }
    for pattern in searches or pad.recent_searches():
        # (as the keyword index holds them: 3 to 200 characters; longer is no word PostgreSQL takes)
        lexemes = [w for w in analyze(pattern).whole if 2 < len(w) <= 200][:8]
        if not lexemes:
            continue
        known = (
            applicable.extra(where=[TENANT_MATCH], params=[session.project.organization_id, lexemes])
            .order_by("-in_use", "id")
            .first()
        )
        if known is not None:
            injection_record(session=session, memory_ids=[known.id], notes_upto=pad.notes_injected)
            return _answer(step, "search_short_circuit", f"MEMORY CONTEXT: {known.content}", [known])
    return {"step": step, "injection": None, "reason": "nothing_new"}


def _answer(step: int, kind: str, text: str, memories: list[Memory]) -> dict[str, Any]:
    return {
        "step": step,
        "injection": {"type": kind, "content": text, "memory_ids": [str(m.id) for m in memories]},
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
