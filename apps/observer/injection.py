"""Serving memories to an agent: what it is given at session start, what /context packs for a
task, and what is added before a step. This sits above memories (it runs their search and
records each hand-over as an access) and the observer's sessions (it reads their notes and
scratchpad and records what each session was given), so neither needs the other's internals.

Every hand-over counts: a memory given to a running session is recorded as applied in it
(once), and as an access that restarts its decay clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.db.models import Case, F, FloatField, When

from apps.memories.kinds import DISPUTE_PENALTY, universal_phase
from apps.memories.models import TENANT_MATCH, Memory
from apps.memories.search import NO_HYDE, SearchRequest, Stages, search
from apps.memories.search.codetokens import analyze
from apps.memories.search.packing import PackItem, budget_for, pack
from apps.memories.selectors import memories_visible, without_session_only
from apps.memories.services import memories_record_access
from apps.memories.thresholds import injection_min_confidence
from apps.memories.validation import clean_paths
from apps.observer import text_rules
from apps.observer.models import Session, SessionStatus
from apps.observer.services import (
    context_injection_record,
    injection_record,
    load_scratchpad,
)
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from memorysaas.kernel.errors import Invalid
from memorysaas.kernel.ids import as_uuid

logger = logging.getLogger(__name__)

INJECTION_TYPES = ("gotcha", "error_pattern", "dead_end")
INJECTION_MIN_CONFIDENCE = 0.65
FIRST_INJECTION_STEP = 5
PREFETCH_MAX = 12


# ---------------------------------------------------------------- /context


def build_context(
    *,
    principal: Principal,
    project: Project,
    phase: str | None,
    task: str,
    files: Sequence[str] = (),
    session_id: str = "",
    token_budget: int | None = None,
) -> dict[str, Any]:
    """What an agent is given for a phase, task and files: the best applicable memories packed
    into the phase's budget (or `token_budget`), session notes first. Stale memories and ones
    whose decayed confidence (× 0.8 when disputed) is under the project's injection threshold
    are never injected, and a session in the A/B control group is given nothing. What the named
    session alone wrote (its promotions, the notes it stored as memories) is left out of the
    ranking: its notes come first already, and its own words are not the team's knowledge.
    Each injected memory is recorded as an access: once per session when a running session is
    named (asking again within it hands over nothing new), at every call otherwise."""
    phase_name = universal_phase(phase)
    asking = _asking_session(session_id=session_id, project=project)
    if asking.control:
        budget, _ = budget_for(phase_name, token_budget)
        return {
            "phase": phase_name, "text": "", "token_count": 0, "token_budget": budget, "memories": [],
            "session_notes": 0, "timings_ms": {}, "control_group": True,
        }  # fmt: skip
    files = clean_paths(files, asking.root)
    if not task.strip() and not files:  # (the files were the session's root alone)
        raise Invalid("Send a task, files, or both.", details={"field": "files"})
    query = task.strip() or " ".join(files)
    result = search(
        SearchRequest(
            principal=principal,
            project=project,
            query=query,
            files=files,
            phase=phase_name,
            # Files alone ask what is known about them, not how they relate: their paths, read as
            # a structural question, would credit only their neighbours on the graph path.
            query_kind=None if task.strip() else "identifier",
            limit=25,
            include_stale=False,
            not_from_session=session_id.strip(),
        ),
        NO_HYDE,  # proactive injection never waits on an LLM
    )
    minimum = injection_min_confidence(project)
    items = [
        PackItem(
            memory_id=str(hit.memory.id),
            memory_type=hit.memory.type,
            content=hit.memory.content,
            citation_text=hit.memory.citation_text,
            related_files=hit.memory.related_files,
            score=hit.score,
        )
        for hit in result.hits
        # a disputed memory is still used, at confidence × 0.8
        if (hit.components["confidence"] or 0.0) * (hit.components["dispute"] or 1.0) >= minimum
    ]
    notes = [n["content"] for n in asking.notes]
    started = time.perf_counter()
    packed = pack(items, phase=phase_name, token_budget=token_budget, notes=notes)
    used = [item.memory_id for item, _ in packed.items]
    new = (
        context_injection_record(session_id=session_id, project=project, memory_ids=used)
        if session_id
        else None
    )
    # Within a session each memory counts once; outside one, repeated calls are paced.
    memories_record_access(memory_ids=used if new is None else new, paced=new is None)
    timings = {**result.timings_ms, "pack": round((time.perf_counter() - started) * 1000, 3)}
    return {
        "phase": phase_name,
        "text": packed.text,
        "token_count": packed.token_count,
        "token_budget": packed.budget,
        "memories": [
            {
                "id": item.memory_id,
                "type": item.memory_type,
                "citation": item.cite,  # (as the text cites it: a citation text's line breaks made spaces)
                "tokens": tokens,
                "score": round(item.score, 6),
                "related_files": list(item.related_files),
            }
            for item, tokens in packed.items
        ],
        "session_notes": packed.notes,
        "timings_ms": timings,
    }


@dataclass(frozen=True)
class _Asking:
    """The session a /context call names, as one read of its row gives it: whether the A/B test
    serves it no memory, the repository root it opened with (the files /context is given are
    taken relative to it, as the session's own), and, while it runs, its explicit notes that
    have content (record_memory events, MEMORY: lines), served long before any promotion. All
    empty where no session of the project is named."""

    control: bool = False
    root: str = ""
    notes: tuple[dict[str, Any], ...] = ()


# What the scratchpad cache needs of a session row; the scratchpad itself (a long session's is
# large) is read only when this process holds no copy at the row's stamp.
_PAD_FIELDS = ("id", "status", "ab_group", "root", "session_type", "checkpoint_batch", "scratchpad_stamp")


def _asking_session(*, session_id: str, project: Project) -> _Asking:
    as_id = as_uuid(session_id) if session_id else None
    session = (
        Session.objects.for_project(project).filter(id=as_id).only(*_PAD_FIELDS).first() if as_id else None
    )
    if session is None:
        return _Asking()
    notes: tuple[dict[str, Any], ...] = ()
    # (a completed session's notes went to promotion: retrieval serves what became of them)
    if session.status == SessionStatus.OPEN:
        try:
            notes = tuple(
                n for n in load_scratchpad(session).notes if isinstance(n, dict) and n.get("content")
            )
        except Exception:
            logger.exception("session notes could not be read for session %s", session_id)
    return _Asking(control=session.ab_group == "control", root=session.root or "", notes=notes)


# ---------------------------------------------------------------- session start


def start_context(*, session: Session, principal: Principal, files: list[str]) -> dict[str, Any]:
    """The session-start plan: files to prefetch (read in >80%, then >50%, of past sessions of
    the modules in play; at most 12), the work state when resuming a work unit, and workflow
    recipes matching the task."""
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
    applicable = memories_visible(principal=principal, project=session.project).filter(
        deprecated=False, stale_at__isnull=True
    )
    recipes = []
    if session.task.strip():
        request = SearchRequest(
            principal=principal,
            project=session.project,
            query=session.task,
            files=files,
            phase=None,
            limit=3,
            types=["workflow_recipe"],
            include_stale=False,
        )
        found = search(request, Stages(rerank=False, hyde=False))
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
        return text_rules.modules_of(files, 10)
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


def start_injection_record(*, session: Session, start_context: dict[str, Any]) -> None:
    """What session start hands the agent (workflow recipes, the work unit's work-state memory)
    is injected: each memory counts as applied in the session and as an access, once (a later
    /context or step injection in the session does not count it again)."""
    ids = [recipe["id"] for recipe in start_context.get("recipes", [])]
    state = start_context.get("work_state") or {}
    if "memory_id" in state:  # (resuming from a past session's notes names no memory)
        ids.append(state["memory_id"])
    if not ids:
        return
    new = context_injection_record(session_id=session.id, project=session.project, memory_ids=ids)
    if new:
        session.injected_memory_ids = [*session.injected_memory_ids, *(UUID(i) for i in new)]
    memories_record_access(memory_ids=ids if new is None else new)


# ---------------------------------------------------------------- step injection


def _format(memories: list[Memory]) -> str:
    lines = [f"- [{m.type}] {m.content}" for m in memories]
    return "MEMORY CONTEXT (from earlier sessions):\n" + "\n".join(lines)


def step_injection(
    *, session: Session, principal: Principal, step: int, files: list[str], searches: list[str]
) -> dict[str, Any]:
    """Nothing before step 5; then (1) unseen gotchas, error patterns and dead
    ends for files just read or edited, (2) new scratchpad notes, (3) a memory that already
    answers what the agent is searching for. Never the same memory twice in a session."""
    if step < FIRST_INJECTION_STEP:
        return {"step": step, "injection": None, "reason": "warming_up"}
    pad = load_scratchpad(session)
    seen = set(session.injected_memory_ids)
    # A disputed memory is still used, at confidence × 0.8.
    in_use = Case(
        When(disputed=True, then=F("confidence") * DISPUTE_PENALTY),
        default=F("confidence"),
        output_field=FloatField(),
    )
    # (what this session wrote itself it has as its notes: it is not the team's knowledge)
    applicable = (
        without_session_only(memories_visible(principal=principal, project=session.project), str(session.id))
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


def step_injection_for(
    *, session_id: Any, principal: Principal, step: int, files: list[str]
) -> dict[str, Any]:
    """What to add before a step of an open session (as the step-injection endpoint answers),
    holding its row as that endpoint does, so two injections at once never give one memory
    twice. A session that is no longer open gets nothing."""
    with transaction.atomic():
        session = (
            Session.objects.select_for_update()
            .select_related("project")
            .filter(pk=session_id, status=SessionStatus.OPEN)
            .first()
        )
        if session is None:
            return {"step": step, "injection": None, "reason": "session_closed"}
        return step_injection(session=session, principal=principal, step=step, files=files, searches=[])
