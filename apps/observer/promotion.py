"""The promotion pipeline (docs/api/observer.md, "Promotion"):

validation filter → cross-session frequency → trust gate → scoring → synthesis → memories'
door (services.memories_take_in: secret scan, embedding, novelty, the writes), all in one
transaction.

`promote(session, pad, ...)` runs inside the caller's transaction (services.session_finalize
holds the session row locked), so a worker killed half way leaves nothing behind and the re-run
starts clean; and every memory carries the tag `obs:<ident>` of its pattern, so a pattern seen
again reinforces its memory instead of adding a duplicate.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.db import connection
from django.db.models import Q

from apps.memories import selectors as memory_selectors
from apps.memories import services as memory_services
from apps.memories.kinds import normalize_type
from apps.memories.validation import MemoryDraft, WorkUnitRef
from apps.observer import synthesis, text_rules
from apps.observer.detectors import CLASSES, SIGNAL_FLOOR, Signal
from apps.observer.gates import Gate
from apps.observer.models import Session
from apps.observer.scratchpad import Scratchpad
from apps.tenants.models import Project
from apps.tenants.principal import Principal

NOVELTY_THRESHOLD = 0.88
TAINT_FACTOR = 0.7
QUORUM_BOOST = 0.05
CONFIDENCE_CAP = 0.95
PREFETCH_ALWAYS = 0.8
PREFETCH_OFTEN = 0.5
PREFETCH_MAX = 12
PREFETCH_MIN_SESSIONS = 3
DEAD_END_MIN_STEPS = 20
# Signals whose cross-session tables still learn from a session that failed validation:
# navigation, errors and costs happened whatever the outcome.
OUTCOME_BLIND = {"file_access", "co_access", "error_retry", "context_token_spike", "step_overrun"}
STORED_KEY_LENGTH = 700  # PatternStat.key


@dataclass
class Stat:
    session_count: int
    total: float
    total2: float
    directional: int
    task_types: list[str]
    sessions: list[str]
    data: dict[str, Any]
    promoted_memory_id: UUID | None


@dataclass
class Candidate:
    kind: str
    ident: str
    memory_type: str
    data: dict[str, Any]
    confidence: float
    files: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    payload: dict[str, Any] = field(default_factory=dict)
    step: int = 0
    sessions: int = 1
    source: str = "observer_inferred"
    needs_review: bool = True
    early: bool = False
    content: str = ""
    tags: list[str] = field(default_factory=list)
    stat_key: tuple[str, str] | None = None
    existing_id: UUID | None = None
    trust: list[str] = field(default_factory=list)
    commit_sha: str = ""


@dataclass
class Result:
    created: list[UUID] = field(default_factory=list)
    reinforced: list[UUID] = field(default_factory=list)
    discarded: int = 0
    llm_calls: int = 0
    candidates: list[dict[str, Any]] = field(default_factory=list)
    module_counts: dict[str, int] = field(default_factory=dict)


# ---------------------------------------------------------------- cross-session tables


def stored_key(key: str) -> str:
    """A pattern's key as its PatternStat row holds it: whole when it fits, else its start and a
    hash of all of it, so two long keys alike at the start stay two rows and each finds its row
    again."""
    if len(key) <= STORED_KEY_LENGTH:
        return key
    digest = hashlib.blake2b(key.encode(), digest_size=8).hexdigest()
    return f"{key[: STORED_KEY_LENGTH - len(digest) - 1]}\u2026{digest}"


def _merge(signals: list[Signal]) -> list[Signal]:
    """One signal per (kind, stored key): a session counts once per pattern."""
    merged: dict[tuple[str, str], Signal] = {}
    for s in signals:
        row = (s.kind, stored_key(s.key))
        current = merged.get(row)
        if current is None:
            merged[row] = s
        else:
            current.total += s.total
            current.total2 = max(current.total2, s.total2)
            current.directional = max(current.directional, s.directional)
    return list(merged.values())


def update_stats(*, project_id: UUID, session: Session, signals: list[Signal]) -> dict[tuple[str, str], Stat]:
    """Add this session to the frequency tables; one statement. Returns the updated rows by their
    signals' (kind, key) (with their merged `data` only where promotion reads it: error
    fingerprints' resolutions)."""
    if not signals:
        return {}
    merged = _merge(signals)
    keys = {(s.kind, stored_key(s.key)): s.key for s in merged}
    rows = [
        {
            "kind": s.kind,
            "key": stored_key(s.key),
            "module": s.module[:300],
            "total": float(s.total),
            "total2": float(s.total2),
            "directional": int(s.directional),
            "data": {k: v for k, v in s.data.items() if v not in ("", None, [], {})},
        }
        for s in merged
    ]
    with connection.cursor() as cursor:
        # the rows travel as one JSON document: cheaper to send than seven arrays quoted item by item
        cursor.execute(
            """
            INSERT INTO observer_patternstat AS p (project_id, kind, key, module, session_count, total, total2,
                directional, task_types, sessions, data, first_seen, last_seen)
            SELECT %s, u.kind, u.key, u.module, 1, u.total, u.total2, u.directional,
                   ARRAY[%s]::varchar[], ARRAY[%s]::varchar[], u.data, now(), now()
            FROM jsonb_to_recordset(%s::jsonb)
                 AS u(kind text, key text, module text, total float8, total2 float8, directional int, data jsonb)
            ON CONFLICT (project_id, kind, key) DO UPDATE SET
                session_count = p.session_count + 1,
                total = p.total + EXCLUDED.total,
                total2 = p.total2 + EXCLUDED.total2,
                directional = p.directional + EXCLUDED.directional,
                task_types = CASE WHEN EXCLUDED.task_types[1] = ANY(p.task_types) THEN p.task_types
                                  ELSE p.task_types || EXCLUDED.task_types END,
                sessions = (p.sessions || EXCLUDED.sessions)[greatest(1, cardinality(p.sessions) - 18):],
                data = p.data || EXCLUDED.data,
                module = CASE WHEN EXCLUDED.module <> '' THEN EXCLUDED.module ELSE p.module END,
                last_seen = now()
            RETURNING kind, key, session_count, total, total2, directional, task_types, sessions,
                      CASE WHEN kind = 'error_retry' THEN data END, promoted_memory_id
            """,
            [str(project_id), session.session_type, str(session.id), json.dumps(rows)],
        )
        return {
            (kind, keys[(kind, key)]): Stat(
                count, total, total2, directional, types, sessions, _json(data), promoted
            )
            for kind, key, count, total, total2, directional, types, sessions, data, promoted in cursor.fetchall()
        }


def _json(value: Any) -> dict[str, Any]:
    """jsonb from a raw cursor arrives as text (Django leaves decoding to JSONField)."""
    if isinstance(value, str):
        return json.loads(value)
    return value or {}


def update_module_stats(*, project_id: UUID, modules: list[str], success: bool) -> dict[str, int]:
    if not modules:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO observer_modulestat AS m (project_id, module, session_count, success_count, last_seen)
            SELECT %s, u.module, 1, %s, now() FROM unnest(%s::text[]) AS u(module)
            ON CONFLICT (project_id, module) DO UPDATE SET
                session_count = m.session_count + 1,
                success_count = m.success_count + EXCLUDED.success_count,
                last_seen = now()
            RETURNING module, session_count
            """,
            [str(project_id), 1 if success else 0, [m[:300] for m in modules]],
        )
        return dict(cursor.fetchall())


# ---------------------------------------------------------------- candidates


def _confidence(priority: float, sessions: int, minimum: int, reduction: float, quorum: int) -> float:
    value = priority + 0.05 * max(0, sessions - minimum) - reduction + QUORUM_BOOST * max(0, quorum - 1)
    return round(max(0.05, min(CONFIDENCE_CAP, value)), 4)


def _signal_candidate(
    signal: Signal, stat: Stat, *, count: int, confidence: float, pad: Scratchpad, task: str
) -> Candidate | None:
    kind, d = signal.kind, dict(signal.data)
    files, payload = list(signal.files), {}
    memory_type = CLASSES[kind].promotes_to
    if kind == "co_access":
        a, b = files
        share = stat.directional / max(1, stat.session_count)
        first, second = (a, b) if share >= 0.5 else (b, a)
        d.update(directional_share=max(share, 1 - share), first=first, task_types=stat.task_types)
        payload = {
            "trigger_file": first,
            "dependent_files": [second],
            "weight": round(min(1.0, count / 10), 3),
        }
    elif kind == "error_retry":
        d.update({k: v for k, v in stat.data.items() if v})
    elif kind == "test_order":
        share = stat.total / max(1, stat.session_count)
        if share < 0.7:
            return None  # only a tests-first habit is worth telling the next agent
        d.update(module=signal.module, test_first_share=share)
    elif kind == "sequence":
        d["descriptions"] = [_describe(step) for step in d["steps"]]
        payload = {
            "task_pattern": (task or " then ".join(d["descriptions"][:2]))[:300],
            "steps": [{"order": i + 1, "description": text} for i, text in enumerate(d["descriptions"])],
            "success_count": count,
        }
    elif kind == "step_overrun":
        actual, planned = stat.total / stat.session_count, stat.total2 / stat.session_count
        ratio = actual / planned if planned else 0
        if 0.75 <= ratio < 1.3:
            return None  # plans are about right here
        d.update(module=signal.module, actual=actual, planned=planned, ratio=round(ratio, 1))
        payload = {
            "module": signal.module,
            "average_actual_steps": round(actual, 2),
            "average_planned_steps": round(planned, 2),
            "ratio": round(ratio, 3),
            "sample_count": stat.session_count,
        }
    elif kind in ("import_chase", "config_touch"):
        trigger, *rest = files
        payload = {"trigger_file": trigger, "dependent_files": rest[:50] or [trigger], "weight": None}
        payload = {k: v for k, v in payload.items() if v is not None}
        d["module"] = signal.module
    elif kind == "context_token_spike":
        spikes = int(stat.total2)
        if not d.get("spike") or spikes < CLASSES[kind].min_sessions:
            return None
        d.update(module=signal.module, average_tokens=stat.total / stat.session_count)
        payload = {
            "module": signal.module,
            "average_tokens": round(d["average_tokens"]),
            "sample_count": spikes,
        }
        count = spikes
    elif kind == "external_reference":
        d["module"] = signal.module
    content = synthesis.template(kind, d, sessions=count, files=files)
    return Candidate(
        kind=kind,
        ident=signal.ident,
        memory_type=memory_type,
        data=d,
        confidence=confidence,
        files=[f for f in files if f],
        modules=[signal.module] if signal.module and signal.module != "." else [],
        payload=payload,
        step=signal.step,
        sessions=count,
        early=kind in pad.early,
        content=content,
        stat_key=(signal.kind, signal.key),
        existing_id=stat.promoted_memory_id,
    )


def _describe(step: str) -> str:
    tool, _, target = step.partition(":")
    verbs = {
        "Read": "Read",
        "Edit": "Edit",
        "Write": "Write",
        "Grep": "Search",
        "Glob": "List",
        "Bash": "Run",
    }
    verb = verbs.get(tool, tool)
    if tool == "Bash" and target:
        return f"Run `{target}`"
    return (
        f"{verb} files in `{target}`"
        if target and target != "."
        else f"{verb} (repository root)"
        if target
        else verb
    )


def signal_candidates(
    *,
    signals: list[Signal],
    stats: dict[tuple[str, str], Stat],
    gate: Gate,
    pad: Scratchpad,
    siblings: set[str],
    task: str = "",
    tightened: dict[str, float] | None = None,
) -> list[Candidate]:
    """`tightened`: signal class -> factor on its minimum sessions (thresholds.tightened_for)."""
    out = []
    for signal in _merge(signals):
        if signal.stat_only or not gate.allows(signal.kind):
            continue
        cls = CLASSES[signal.kind]
        if cls.priority < SIGNAL_FLOOR:
            continue
        stat = stats.get((signal.kind, signal.key))
        if stat is None:
            continue
        rule = gate.rule(signal.kind)
        minimum = rule.min_sessions or cls.min_sessions
        if tightened and signal.kind in tightened:
            minimum = math.ceil(minimum * tightened[signal.kind])
        quorum = 1 + len(siblings.intersection(stat.sessions))
        if quorum >= 2:
            minimum = 1  # confirmed by a parallel agent: one session is enough
        count = stat.session_count
        if count < minimum:
            continue
        confidence = _confidence(cls.priority, count, minimum, rule.reduction, quorum)
        if confidence < gate.floor:
            continue
        candidate = _signal_candidate(signal, stat, count=count, confidence=confidence, pad=pad, task=task)
        if candidate is not None:
            if quorum >= 2:
                candidate.tags.append("obs:quorum")
            out.append(candidate)
    return out


def note_candidates(pad: Scratchpad, gate: Gate, *, start: int = 0) -> list[Candidate]:
    out = []
    for note in pad.notes[start:]:
        try:
            memory_type = normalize_type(note["type"])
        except ValueError:
            memory_type = "gotcha"
        if gate.note_types is not None and memory_type not in gate.note_types:
            continue
        out.append(
            Candidate(
                kind="note",
                ident=T_ident("note", note["content"]),
                memory_type=memory_type,
                data={},
                confidence=0.8,
                files=note["related_files"],
                step=note.get("step") or 0,
                source="agent_explicit",
                needs_review=False,
                early=True,
                content=note["content"],
            )
        )
    return out


def T_ident(kind: str, text: str) -> str:
    return Signal(kind, text_rules.normalize_pattern(text)).ident


def dead_end_candidates(pad: Scratchpad, task: str) -> list[Candidate]:
    """Dead ends: tried for more than 20 steps, with explicit abandonment language."""
    if pad.step <= DEAD_END_MIN_STEPS:
        return []
    out = []
    for step, sentence, path in pad.dead_ends[:2]:
        data = {"why": sentence, "task": task[:200]}
        out.append(
            Candidate(
                kind="dead_end",
                ident=T_ident("dead_end", sentence),
                memory_type="dead_end",
                data=data,
                confidence=0.75,
                files=[path] if path else [],
                modules=[text_rules.module_of(path)] if path else [],
                payload={
                    "approach_tried": (task or sentence)[:1000],
                    "why_it_failed": sentence[:1000],
                    "task_context": task[:1000],
                },
                step=step,
                content=synthesis.template("dead_end", data, sessions=1, files=[]),
            )
        )
    return out


def outcome_candidate(session: Session, pad: Scratchpad) -> Candidate | None:
    label = (session.work_unit or {}).get("label") or " / ".join(
        (session.work_unit or {}).get("hierarchy", [])
    )
    if not label:
        return None
    steps = session.steps or pad.step
    data = {"label": label, "outcome": session.outcome or "success", "steps": steps}
    edited = pad.edited()
    return Candidate(
        kind="work_unit_outcome",
        ident=T_ident("work_unit_outcome", f"{session.id}"),
        memory_type="work_unit_outcome",
        data=data,
        confidence=0.8,
        files=edited[:20],
        modules=text_rules.modules_of(edited, 10),
        payload={
            "outcome": data["outcome"],
            "steps": steps,
            **({"planned_steps": pad.planned_steps} if pad.planned_steps else {}),
            "summary": (session.task or "")[:2000],
        },
        step=0,
        content=synthesis.template("work_unit_outcome", data, sessions=1, files=edited),
    )


def prefetch_candidates(*, project_id: UUID, modules: dict[str, int], minimum: int) -> list[Candidate]:
    """Per module the session worked in: files read in >80% (then >50%) of its sessions."""
    out = []
    for module, module_sessions in modules.items():
        if module_sessions < minimum or module == ".":
            continue
        with connection.cursor() as cursor:
            cursor.execute(
                """
                SELECT key, session_count FROM observer_patternstat
                WHERE project_id = %s AND kind = 'file_access' AND module = %s AND session_count >= %s
                ORDER BY session_count DESC, key LIMIT 50
                """,
                [str(project_id), module, max(1, int(module_sessions * PREFETCH_OFTEN))],
            )
            rows = cursor.fetchall()
        always = [p for p, n in rows if n / module_sessions > PREFETCH_ALWAYS][:PREFETCH_MAX]
        often = [p for p, n in rows if PREFETCH_OFTEN < n / module_sessions <= PREFETCH_ALWAYS]
        often = often[: PREFETCH_MAX - len(always)]
        if not always and len(often) < 2:
            continue
        data = {"module": module, "always": always, "often": often}
        out.append(
            Candidate(
                kind="prefetch",
                ident=T_ident("prefetch", module),
                memory_type="prefetch_pattern",
                data=data,
                confidence=_confidence(0.72, module_sessions, minimum, 0.0, 1),
                files=always + often,
                modules=[module],
                payload={
                    "always_read_files": always,
                    "frequently_read_files": often,
                    "module_trigger": module,
                    "session_count": module_sessions,
                },
                sessions=module_sessions,
                content=synthesis.template("prefetch", data, sessions=module_sessions, files=always),
            )
        )
    return out


# ---------------------------------------------------------------- trust, novelty, storage


def apply_trust(candidate: Candidate, pad: Scratchpad) -> None:
    """The trust defence: anything that arose after external content is tainted."""
    first_external = pad.external[0][0] if pad.external else None
    if first_external is not None and candidate.step and candidate.step >= first_external:
        candidate.trust.append("after_external_content")
    if candidate.kind == "external_reference":
        candidate.trust.append("external_query")
    candidate.trust.extend(text_rules.suspicious(candidate.content))
    if candidate.trust:
        candidate.confidence = round(candidate.confidence * TAINT_FACTOR, 4)
        candidate.needs_review = True
        candidate.tags.append("obs:tainted")
        candidate.tags.extend(f"trust:{reason}" for reason in dict.fromkeys(candidate.trust))


def store(
    *,
    project: Project,
    actor: Principal,
    candidates: list[Candidate],
    cap: int,
    result: Result,
    session: Session | None = None,
) -> None:
    """Novelty, synthesis, embeddings and the writes, for candidates already gated and trusted.
    `session` gives provenance (absent for cross-session synthesis)."""
    if not candidates:
        return
    # the memories already written for these patterns: by their tag, or the id their pattern's
    # row points at (gone when deprecated)
    tags = [f"obs:{c.ident}" for c in candidates]
    linked = [c.existing_id for c in candidates if c.existing_id]
    by_tag: dict[str, UUID] = {}
    live: set[UUID] = set()
    for memory_id, memory_tags in (
        memory_selectors.memories_of_project(project=project)
        .filter(Q(tags__overlap=tags) | Q(id__in=linked), deprecated=False)
        .values_list("id", "tags")
    ):
        live.add(memory_id)
        for tag in memory_tags:
            by_tag.setdefault(tag, memory_id)
    fresh: list[Candidate] = []
    for c in candidates:
        existing = c.existing_id or by_tag.get(f"obs:{c.ident}")
        if existing in live:
            c.existing_id = existing
            _reinforce(existing, actor, session, result)
        else:
            c.existing_id = None
            fresh.append(c)
    fresh.sort(key=lambda c: (not c.early, -c.confidence))
    result.discarded += max(0, len(fresh) - cap)
    fresh = fresh[:cap]
    if not fresh:
        return

    rewritten, called = synthesis.rewrite([{"kind": c.kind, "content": c.content} for c in fresh])
    result.llm_calls += int(called)
    for c, text in zip(fresh, rewritten, strict=True):
        if text:
            c.content = text

    work_unit = (session.work_unit if session else None) or {}
    methodology = session.methodology if session else project.methodology
    ref = (
        WorkUnitRef(methodology=methodology, hierarchy=work_unit.get("hierarchy", [])[:10],
                    label=work_unit.get("label", "")[:200])
        if work_unit.get("hierarchy") or work_unit.get("label") else None
    )  # fmt: skip
    drafts = [
        MemoryDraft(
            content=c.content[:4000],
            type=c.memory_type,
            source=c.source,
            confidence=c.confidence,
            tags=["observer", f"obs:{c.ident}", f"signal:{c.kind}", *c.tags][:30],
            related_files=c.files[:100],
            related_modules=c.modules[:50],
            payload=c.payload,
            session_id=str(session.id) if session else "",
            needs_review=c.needs_review,
            methodology=methodology,
            work_unit_ref=ref,
            commit_sha=c.commit_sha,
        )
        for c in fresh
    ]
    # Secret scan, embedding, novelty against the stored memories, and the writes: memories' door.
    intake = memory_services.memories_take_in(
        project=project,
        actor=actor,
        drafts=drafts,
        novelty=NOVELTY_THRESHOLD,
        session_id=str(session.id) if session else None,
        already=[*result.reinforced, *result.created],
    )
    result.discarded += intake.discarded
    result.reinforced.extend(intake.reinforced)
    for index, memory in intake.created:
        c = fresh[index]
        result.created.append(memory.id)
        result.candidates.append({"kind": c.kind, "type": c.memory_type, "memory_id": str(memory.id),
                                  "confidence": c.confidence, "trust": c.trust})  # fmt: skip
    _link_stats(project.id, [(fresh[index].stat_key, memory.id) for index, memory in intake.created
                             if fresh[index].stat_key])  # fmt: skip


def _reinforce(memory_id: UUID, actor: Principal, session: Session | None, result: Result) -> None:
    if memory_id in result.reinforced or memory_id in result.created:
        return
    memory = memory_selectors.memory_by_id(memory_id)
    memory_services.memory_reinforce(
        memory=memory, actor=actor, session_id=str(session.id) if session else None
    )
    result.reinforced.append(memory_id)


def _link_stats(project_id: UUID, links: list[tuple[tuple[str, str], UUID]]) -> None:
    """Each pattern's row points at the memory written for it: one statement for all of them."""
    if not links:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE observer_patternstat p SET promoted_memory_id = u.memory_id
            FROM unnest(%s::text[], %s::text[], %s::uuid[]) AS u(kind, key, memory_id)
            WHERE p.project_id = %s AND p.kind = u.kind AND p.key = u.key
            """,
            [
                [kind for (kind, _), _ in links],
                [stored_key(key) for (_, key), _ in links],
                [str(memory_id) for _, memory_id in links],
                str(project_id),
            ],
        )
