"""Writes for the observer: open a session, ingest event batches, record validation, complete,
finalize (promotion), step injection bookkeeping, and git cold start.

Ingest does constant work per event: accept its `seq` once, update the scratchpad, append the
batch to the log. No LLM, no embedding, no memory is written while a session runs. The
scratchpad lives in this process between batches (keyed by session and `scratchpad_stamp`,
which every write to the scratchpad draws anew, whichever process makes it, so a stale copy is
never used) and is checkpointed in the session row; any process rebuilds it from the checkpoint
plus the batches logged since. A copy enters the cache only once its write has committed.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import DatabaseError, connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from apps.memories import secrets_scan
from apps.memories import services as memory_services
from apps.memories.validation import clean_paths, clean_root, from_root
from apps.observer import abgroups, capture, promotion, qa_report, text_rules, thresholds
from apps.observer.detectors import derive, parallel_conflicts
from apps.observer.gates import INCREMENTAL_UNITS, gate_for, gate_open
from apps.observer.methodology import plugin_for
from apps.observer.models import EventBatch, Outcome, Session, SessionStatus
from apps.observer.scratchpad import GLOB_ARGS, PATH_ARGS, Scratchpad
from apps.observer.selectors import parallel_siblings, sessions_visible
from apps.tenants.models import Project
from apps.tenants.principal import SYSTEM, Principal
from apps.tenants.roles import Perm
from apps.tenants.services import require
from memorysaas.kernel import events as org_events
from memorysaas.kernel.errors import ApiError, NotFound
from memorysaas.kernel.ids import as_uuid
from memorysaas.kernel.realtime import publish

logger = logging.getLogger(__name__)

CHECKPOINT_EVERY = 500
SYNTHESIS_THRESHOLDS = (5, 10, 20, 50, 100)
MAX_COMMIT_FILES = 30
# A finalize still unfinished this long after it was queued failed or was lost: past the queue's
# timeout (10 minutes) and its redelivery of a lost task (15). Queued again a few times at most,
# so a session whose finalize always fails does not cost a worker every half hour for good.
FINALIZE_STALLED_AFTER = timedelta(minutes=30)
MAX_FINALIZE_ATTEMPTS = 5
_CACHE_SIZE = 512
# Per session: the stamp of a committed state of its scratchpad, and that state.
_pads: OrderedDict[UUID, tuple[UUID | None, Scratchpad]] = OrderedDict()
_pads_lock = threading.Lock()  # (the request threads of a process share the cache)


# ---------------------------------------------------------------- scratchpad cache


def _cached(session: Session) -> Scratchpad | None:
    with _pads_lock:
        hit = _pads.get(session.id)
        if hit is None or hit[0] != session.scratchpad_stamp:
            return None
        _pads.move_to_end(session.id)
        return hit[1]


def _take_cached(session: Session) -> Scratchpad | None:
    """The cached scratchpad, taken out of the cache for a write to change it in place (the caller
    holds the session's row): a write that fails, before or at its commit, then leaves no copy
    holding what the database never stored. The write `_remember`s it under its new stamp."""
    with _pads_lock:
        hit = _pads.pop(session.id, None)
    return hit[1] if hit is not None and hit[0] == session.scratchpad_stamp else None


def _take(session: Session) -> Scratchpad:
    pad = _take_cached(session)
    return pad if pad is not None else _rebuilt(session)


def _remember(session: Session, pad: Scratchpad) -> None:
    """Cache `pad` as the session's state at its current stamp, once that state has committed:
    until then (and for good, when the commit fails) the database may not hold it, and another
    process's next write could make any count this write reached, though never its stamp."""
    session_id, stamp = session.id, session.scratchpad_stamp
    transaction.on_commit(lambda: _keep(session_id, stamp, pad))


def _keep(session_id: UUID, stamp: UUID | None, pad: Scratchpad) -> None:
    with _pads_lock:
        _pads[session_id] = (stamp, pad)
        _pads.move_to_end(session_id)
        while len(_pads) > _CACHE_SIZE:
            _pads.popitem(last=False)


def forget(session_id: UUID) -> None:
    with _pads_lock:
        _pads.pop(session_id, None)


def load_scratchpad(session: Session) -> Scratchpad:
    """The session's scratchpad as of its last accepted batch: from this process's cache, or the
    checkpoint plus a replay of the batches logged after it."""
    pad = _cached(session)
    if pad is not None:
        return pad
    pad = _rebuilt(session)
    _remember(session, pad)
    return pad


def _rebuilt(session: Session) -> Scratchpad:
    pad = Scratchpad.from_dict(session.scratchpad) if session.scratchpad else Scratchpad(session.session_type)
    for events in (
        EventBatch.objects.filter(session=session, id__gt=session.checkpoint_batch)
        .order_by("id")
        .values_list("events", flat=True)
    ):
        for event in events:
            if pad.accept(event["seq"]):  # a checkpoint may already hold some of them
                pad.observe(event)
    return pad


@contextmanager
def _committed() -> Iterator[None]:
    """A write's transaction. A failure of its COMMIT (a deferred constraint, a serialization
    failure, the connection lost) answers 503 `commit_failed`: the client sends the write again,
    which ingest's `seq`s make safe. Errors before the commit pass through as they are."""
    body_done = False
    try:
        with transaction.atomic():
            yield
            body_done = True
    except DatabaseError as exc:
        if not body_done:
            raise
        logger.warning("An observer write failed at commit: %s", exc)
        raise ApiError(503, "The write could not be committed; send it again.", code="commit_failed") from exc


def _checkpoint(session: Session, pad: Scratchpad, batch_id: int) -> None:
    session.scratchpad = pad.to_dict()
    session.checkpoint_events = session.event_count
    session.checkpoint_batch = batch_id


# ---------------------------------------------------------------- open


def _work_unit(methodology: str, work_unit: dict[str, Any] | None) -> tuple[dict, str, str, bool]:
    """The work unit's reference, its key, its parallel group and whether the client named that
    group. Without one named, sessions of one parent unit (the subtasks of a spec) form the
    group; they count as parallel only where they overlap in time (parallel.py)."""
    plugin = plugin_for(methodology)
    work_unit = work_unit or {}
    declared = str(work_unit.get("parallel_group") or "").strip()
    hierarchy = [str(h) for h in work_unit.get("hierarchy", []) if str(h).strip()]
    if not hierarchy and not work_unit.get("label"):
        return {}, "", "", False
    ref = plugin.work_unit_ref(hierarchy, str(work_unit.get("label", "")))
    key = "/".join(ref["hierarchy"]) or ref["label"]
    parallel = declared or ("/".join(ref["hierarchy"][:-1]) if len(hierarchy) > 1 else "")
    return ref, key[:300], parallel[:300], bool(declared)


def ab_group(session_id: UUID, project: Project) -> str:
    """The session's A/B group (the experiment's assigner, registered by the insights app)."""
    return abgroups.assign(session_id, project)


def session_open(*, project: Project, actor: Principal, data: dict[str, Any]) -> Session:
    # `<private>` spans go first: a secret's value runs to whitespace and could take a tag with it.
    if isinstance(data.get("task"), str):
        data = {**data, "task": text_rules.strip_private(data["task"])}
    data = secrets_scan.redact(data, secrets_scan.plugin_findings(secrets_scan.strings(data)), set())
    methodology = data.get("methodology") or project.methodology or "native"
    plugin = plugin_for(methodology)
    ref, key, parallel, declared = _work_unit(methodology, data.get("work_unit"))
    session = Session(
        organization_id=project.organization_id,
        project=project,
        user=actor.user if actor.user is not None and actor.user.pk else None,
        api_key=actor.api_key,
        session_type=data.get("session_type") or "build",
        methodology=plugin.id if methodology in ("native", "bmad", "tdd") else methodology[:40],
        phase=(data.get("phase") or "")[:60],
        universal_phase=plugin.map_phase(data.get("phase")),
        work_unit=ref,
        work_unit_key=key,
        parallel_group=parallel,
        parallel_declared=declared,
        task=(data.get("task") or "")[:4000],
        client=(data.get("client") or "")[:100],
        root=clean_root(data.get("root") or "")[:500],
    )
    session.ab_group = ab_group(session.id, project)
    session.scratchpad = Scratchpad(session.session_type).to_dict()
    session.save()
    transaction.on_commit(lambda: publish(project.id, "session.started", {"session_id": str(session.id)}))
    return session


# ---------------------------------------------------------------- ingest

_TEXT_FIELDS = ("text", "result")
# The fields of an event that are not free text (checked by the schema: numbers, flags, the
# type, an ISO time). Everything else (text, results, a tool call's arguments, files, notes, the
# tool's name, a commit sha) is scanned for secrets before the batch is logged.
_STRUCTURAL = frozenset({"seq", "type", "step", "is_error", "input_tokens", "output_tokens", "planned_steps",
                         "ts"})  # fmt: skip


def _unprivate(event: dict[str, Any]) -> dict[str, Any]:
    """`<private>` spans never stored; None fields dropped."""
    out = {k: v for k, v in event.items() if v is not None}
    for key in _TEXT_FIELDS:
        if key in out:
            out[key] = text_rules.strip_private(out[key])
    args = out.get("args")
    if args:
        out["args"] = {k: text_rules.strip_private(v) if isinstance(v, str) else v for k, v in args.items()}
    memory = out.get("memory")
    if memory and isinstance(memory.get("content"), str):
        out["memory"] = {**memory, "content": text_rules.strip_private(memory["content"])}
    return out


def _clean(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events as they are logged: `<private>` spans gone, and every secret in what the
    client wrote replaced by its marker (one detect-secrets pass for the batch). A tool's output
    is where an agent's secrets turn up (`cat .env`, a failing request's headers), and the log,
    the scratchpad, session notes and error fingerprints are all made from these events."""
    events = [_unprivate(event) for event in events]
    free = [{k: v for k, v in event.items() if k not in _STRUCTURAL} for event in events]
    found = secrets_scan.plugin_findings(list(secrets_scan.strings(free)))
    kinds: set[str] = set()
    return [
        {**event, **secrets_scan.redact(text, found, kinds)} for event, text in zip(events, free, strict=True)
    ]


_LOCK_FIELDS = ("id", "organization_id", "project_id", "status", "session_type", "event_count", "last_step",
                "edited_files", "checkpoint_events", "checkpoint_batch", "scratchpad_version", "scratchpad_stamp",
                "root")  # fmt: skip


def _from_root(event: dict[str, Any], root: str) -> dict[str, Any]:
    """The event with the paths it names (a tool call's path arguments and a Glob's pattern, a
    commit's files, a note's related files) under the session's root made relative to it."""
    if not root:
        return event
    out = dict(event)
    args = out.get("args")
    # A Glob's pattern is a path too (`/home/me/shop/orders/**/*.py`); a Grep's is a regex.
    keys = PATH_ARGS + GLOB_ARGS if out.get("tool") == "Glob" else PATH_ARGS
    if isinstance(args, dict) and any(isinstance(args.get(k), str) for k in keys):
        out["args"] = {k: from_root(v, root) if k in keys else v for k, v in args.items()}
    if isinstance(out.get("files"), list):
        out["files"] = [from_root(f, root) for f in out["files"]]
    memory = out.get("memory")
    if isinstance(memory, dict) and isinstance(memory.get("related_files"), list):
        out["memory"] = {**memory, "related_files": [from_root(f, root) for f in memory["related_files"]]}
    return out


# (received_at: statement_timestamp(), not now(): it says when the session was last heard from,
# which parallel.py compares with other sessions' starts, even for batches of one transaction)
_APPEND = f"""
    WITH batch AS (
        INSERT INTO {EventBatch._meta.db_table} (session_id, first_seq, last_seq, count, events, received_at)
        VALUES (%s, %s, %s, %s, %s::jsonb, statement_timestamp()) RETURNING id)
    UPDATE {Session._meta.db_table} SET event_count = %s, last_step = %s, edited_files = %s::varchar[],
        scratchpad_version = scratchpad_version + 1, scratchpad_stamp = gen_random_uuid()
    WHERE id = %s
    RETURNING (SELECT id FROM batch), scratchpad_version, scratchpad_stamp,
        set_config('synchronous_commit', 'off', true)
"""


def _lock_for_ingest(session: Session | UUID, principal: Principal | None) -> Session:
    """The session row, locked. With a principal, the tenant check is part of the same query:
    a session the principal cannot see is a 404, one it may not write to a 403."""
    sessions = Session.objects if principal is None else sessions_visible(principal)
    locked = (
        sessions.select_for_update().only(*_LOCK_FIELDS).filter(id=getattr(session, "id", session)).first()
    )
    if locked is None:
        raise NotFound("No such session.")
    if principal is not None:
        require(principal, locked.organization_id, Perm.OBSERVER_WRITE)
    return locked


def events_ingest(
    *, session: Session | UUID, events: list[dict[str, Any]], principal: Principal | None = None
) -> dict[str, Any]:
    """Append a validated batch. Events whose seq was already accepted are ignored, so posting
    the same batch twice leaves the same state. Returns counts.

    The hot path: one locking SELECT, one statement that appends the batch and advances the
    session, and the scratchpad updated in memory (checkpointed every CHECKPOINT_EVERY events).
    That statement also sets `synchronous_commit = off` for its transaction, which then commits
    without waiting for its WAL flush: a database crash can lose the last few hundred
    milliseconds of acknowledged batches, never consistency: the batch log and the session's
    counters commit together or not at all."""
    with _committed():
        locked = _lock_for_ingest(session, principal)
        if locked.status != SessionStatus.OPEN:
            raise session_closed()
        pad = _take(locked)
        fresh = _clean([_from_root(event, locked.root) for event in events if pad.accept(event["seq"])])
        for event in fresh:
            pad.observe(event)
        if fresh:
            locked.event_count += len(fresh)
            locked.last_step = pad.step
            edited = pad.edited()
            if len(edited) != len(locked.edited_files):
                locked.edited_files = edited[:500]
            seqs = [e["seq"] for e in fresh]
            with connection.cursor() as cursor:
                cursor.execute(_APPEND, [locked.id, min(seqs), max(seqs), len(fresh), json.dumps(fresh),
                                         locked.event_count, locked.last_step, locked.edited_files,
                                         locked.id])  # fmt: skip
                batch_id, locked.scratchpad_version, locked.scratchpad_stamp, _ = cursor.fetchone()
            if locked.event_count - locked.checkpoint_events >= CHECKPOINT_EVERY:
                _checkpoint(locked, pad, batch_id)
                locked.save(update_fields=["scratchpad", "checkpoint_events", "checkpoint_batch"])
        _remember(locked, pad)
    return {
        "accepted": len(fresh),
        "duplicates": len(events) - len(fresh),
        "event_count": locked.event_count,
        "notes": len(pad.notes),
    }


# ---------------------------------------------------------------- validation and complete


def session_closed() -> ApiError:
    """What a write to a session that is no longer open answers."""
    return ApiError(409, "The session is complete; open a new one.", code="session_closed")


def _locked_open(session: Session) -> tuple[Session, Scratchpad]:
    """The session's row, locked, and its scratchpad taken for a write; 409 when it is closed."""
    locked = Session.objects.select_for_update(of=("self",)).select_related("project").get(id=session.id)
    if locked.status != SessionStatus.OPEN:
        raise session_closed()
    return locked, _take(locked)


def _failures(report: str, checks: list[dict[str, Any]], root: str) -> list[dict[str, Any]]:
    """The failed checks a validation names (its structured checks, then its report's failure
    lines), with the paths under the session's root made relative to it."""
    given = [
        qa_report.Failure(name=c["name"], error=c.get("error", ""), files=c.get("files", []),
                          severity=c.get("severity", ""))
        for c in checks if not c.get("passed")
    ]  # fmt: skip
    named = {f.name for f in given}
    found = [*given, *(f for f in qa_report.failures_in_report(report) if f.name not in named)]
    return [
        {"name": f.name[:300], "error": f.error[:1000], "files": clean_paths(f.files, root)[:20],
         "severity": f.severity}
        for f in qa_report.mined(found)
    ]  # fmt: skip


def validation_record(
    *,
    session: Session,
    actor: Principal,
    passed: bool,
    work_unit: str,
    report: str,
    checks: list[dict[str, Any]] | None = None,
) -> dict:
    """A validation result, and the failed checks it names (mined into error patterns at
    finalize). In a build with more than 5 work units, a passed unit promotes its explicit notes
    and self-corrections at once (partial QA)."""
    # What the client wrote is scanned for secrets before anything is read out of it.
    report = secrets_scan.scan(text_rules.strip_private(report)).text
    checks = [
        {**c, "name": text_rules.strip_private(c["name"]), "error": text_rules.strip_private(c.get("error", ""))}
        for c in checks or []
    ]  # fmt: skip
    checks = secrets_scan.redact(checks, secrets_scan.plugin_findings(secrets_scan.strings(checks)), set())
    work_unit = secrets_scan.scan(work_unit).text
    with _committed():
        locked, pad = _locked_open(session)
        failures = _failures(report, checks, locked.root)
        pad.validations.append(
            {"passed": passed, "work_unit": work_unit[:200], "report": report[:2000], "step": pad.step,
             "failures": failures}
        )  # fmt: skip
        promoted: list[str] = []
        units = {v["work_unit"] for v in pad.validations if v["work_unit"]}
        if passed and locked.session_type == "build" and len(units) > INCREMENTAL_UNITS:
            result = _promote_incremental(locked, pad, actor)
            promoted = [str(i) for i in result.created]
        _save_checkpoint(locked, pad)
    return {
        "validations": len(pad.validations),
        "passed": passed,
        "promoted": promoted,
        "failed_checks": len(failures),
    }


def _save_checkpoint(session: Session, pad: Scratchpad) -> None:
    last = (
        EventBatch.objects.filter(session=session).order_by("-id").values_list("id", flat=True).first() or 0
    )
    _checkpoint(session, pad, last)
    session.scratchpad_version += 1  # (the row is locked)
    session.scratchpad_stamp = uuid.uuid4()
    session.save(
        update_fields=[
            "scratchpad",
            "checkpoint_events",
            "checkpoint_batch",
            "scratchpad_version",
            "scratchpad_stamp",
            "promoted_memory_ids",
        ]
    )
    _remember(session, pad)


def _trust_and_store(
    session: Session, pad: Scratchpad, actor: Principal, candidates: list, gate, result: promotion.Result
) -> list:
    """The last steps every promotion shares: drop what this session already promoted, apply the
    trust gate, store under the gate's cap. Returns the candidates that went to `store`."""
    candidates = [c for c in candidates if c.ident not in pad.promoted_keys]
    for c in candidates:
        promotion.apply_trust(c, pad)
    promotion.store(
        project=session.project,
        session=session,
        actor=actor,
        candidates=candidates,
        cap=gate.cap,
        result=result,
    )
    return candidates


def _promote_incremental(session: Session, pad: Scratchpad, actor: Principal) -> promotion.Result:
    gate = gate_for(session.session_type)
    result = promotion.Result()
    candidates = promotion.note_candidates(pad, gate)
    for signal in derive(pad):
        if signal.kind == "self_correction":
            stat = promotion.Stat(1, 0, 0, 0, [], [], {}, None)
            candidates += promotion.signal_candidates(
                signals=[signal], stats={(signal.kind, signal.key): stat}, gate=gate, pad=pad, siblings=set()
            )
    stored = _trust_and_store(session, pad, actor, candidates, gate, result)
    pad.promoted_keys.update(c.ident for c in stored)
    session.promoted_memory_ids = [*session.promoted_memory_ids, *result.created]
    return result


_FINALIZE_QUEUED = ["finalize_queued_at", "finalize_attempts"]


def _queue_finalize(session: Session) -> None:
    """Queue the session's finalize (run inline when the queue is synchronous), noting when and
    how often; the caller saves `_FINALIZE_QUEUED`."""
    from memorysaas.kernel.queue import enqueue

    session.finalize_queued_at = timezone.now()
    session.finalize_attempts += 1
    enqueue("apps.observer.tasks.finalize_session", str(session.id), group="observer.finalize")


def _stalled(sessions: QuerySet[Session], *, now: datetime) -> QuerySet[Session]:
    return sessions.filter(
        status=SessionStatus.FINALIZING,
        finalize_queued_at__lt=now - FINALIZE_STALLED_AFTER,
        finalize_attempts__lt=MAX_FINALIZE_ATTEMPTS,
    )


def session_complete(*, session: Session, outcome: str, steps: int | None) -> Session:
    """Close the session and queue its finalize. Completing again changes nothing, unless its
    finalize has stalled: then that is queued again."""
    with transaction.atomic():
        locked = Session.objects.select_for_update().get(id=session.id)
        if locked.status == SessionStatus.OPEN:
            locked.status = SessionStatus.FINALIZING
            locked.outcome = outcome
            locked.steps = steps
            locked.ended_at = timezone.now()
            _queue_finalize(locked)
            locked.save(update_fields=["status", "outcome", "steps", "ended_at", *_FINALIZE_QUEUED])
        elif _stalled(Session.objects.filter(id=locked.id), now=timezone.now()).exists():
            _queue_finalize(locked)
            locked.save(update_fields=_FINALIZE_QUEUED)
    locked.refresh_from_db()
    return locked


def sessions_finalize_stalled(*, now: datetime | None = None) -> int:
    """Queue again the finalize of every session whose finalize has stalled (a schedule runs
    this). A finalize running now holds its session's row, so it is passed over. Returns how many
    were queued."""
    with transaction.atomic():
        stalled = list(
            _stalled(Session.objects.all(), now=now or timezone.now())
            .select_for_update(skip_locked=True)
            .only("id", "finalize_queued_at", "finalize_attempts")
        )
        for session in stalled:
            _queue_finalize(session)
            session.save(update_fields=_FINALIZE_QUEUED)
            logger.warning(
                "Finalize of session %s had stalled; queued again (attempt %s of %s).",
                session.id,
                session.finalize_attempts,
                MAX_FINALIZE_ATTEMPTS,
            )
    return len(stalled)


def _actor(session: Session) -> Principal:
    if session.api_key_id:
        from apps.tenants.models import ApiKey

        key = ApiKey.objects.filter(id=session.api_key_id).first()
        if key is not None:
            return Principal.for_api_key(key)
    if session.user_id:
        return Principal.for_user(session.user)
    return SYSTEM


def _recipes_worked(session: Session, pad: Scratchpad, actor: Principal) -> list[UUID]:
    """The workflow recipes the session was given and followed: it succeeded, so each counts a
    success. Inside the finalize, which runs once per session, so a session counts once."""
    if not session.injected_memory_ids:
        return []
    return memory_services.recipes_succeeded(
        memory_ids=session.injected_memory_ids, actor=actor, session_id=str(session.id), files=list(pad.files)
    )


def session_finalize(session_id: UUID | str) -> promotion.Result | None:
    """Run the promotion pipeline for a completed session, once. Everything it writes (the
    frequency tables, memories, reinforcements, the session's report) is one transaction: a
    worker killed part way leaves nothing, and the re-run does the whole job."""
    result = promotion.Result()
    with transaction.atomic():
        session = (
            Session.objects.select_for_update(of=("self", "project"))
            .select_related("project__organization")  # memories' audit rows name it; not locked
            .filter(id=session_id)
            .first()
        )
        if session is None or session.status != SessionStatus.FINALIZING:
            return None
        pad = load_scratchpad(session)
        gate = gate_for(session.session_type)
        validated = pad.validations[-1]["passed"] if pad.validations else None
        success = session.outcome == Outcome.SUCCESS and validated is not False
        signals = derive(pad, outcome="success" if success else session.outcome, steps=session.steps)
        siblings = parallel_siblings(session)
        signals += parallel_conflicts(pad, siblings)
        # validation filter: a failed approach teaches only what is outcome-blind
        counted = (
            signals if validated is not False else [s for s in signals if s.kind in promotion.OUTCOME_BLIND]
        )
        stats = promotion.update_stats(project_id=session.project_id, session=session, signals=counted)
        modules = text_rules.modules_of(pad.files, 20)
        result.module_counts = promotion.update_module_stats(
            project_id=session.project_id, modules=modules, success=success
        )
        actor = _actor(session)
        candidates: list[promotion.Candidate] = []
        if gate_open(gate, validated=validated, outcome=session.outcome):
            candidates += promotion.note_candidates(pad, gate)
            candidates += promotion.signal_candidates(
                signals=counted,
                stats=stats,
                gate=gate,
                pad=pad,
                siblings=set(siblings),
                task=session.task,
                tightened=thresholds.tightened_for(session.project_id),
            )
            if gate.allows("file_access"):
                rule = gate.rule("file_access")
                minimum = rule.min_sessions or promotion.PREFETCH_MIN_SESSIONS
                worked = {m: result.module_counts.get(m, 0) for m in pad.modules()}
                candidates += promotion.prefetch_candidates(
                    project_id=session.project_id, modules=worked, minimum=minimum
                )
            candidates += capture.commit_candidates(pad, session.task)
            if gate.outcomes:
                candidates += promotion.dead_end_candidates(pad, session.task)
                outcome = promotion.outcome_candidate(session, pad)
                if outcome is not None:
                    candidates.append(outcome)
        elif gate.outcomes:
            candidates += promotion.dead_end_candidates(pad, session.task)  # genuine dead ends survive
        # a failed check, and what the app did when driven, teach whatever the outcome
        candidates += capture.qa_candidates(pad) + capture.e2e_candidates(pad)
        for c in candidates:
            c.commit_sha = c.commit_sha or capture.commit_for(c.files, pad.commits)
        _trust_and_store(session, pad, actor, candidates, gate, result)
        recipes = _recipes_worked(session, pad, actor) if success else []
        session.status = SessionStatus.COMPLETED
        session.finalized_at = timezone.now()
        session.promoted_memory_ids = [*session.promoted_memory_ids, *result.created]
        session.reinforced_memory_ids = result.reinforced
        session.report = {
            "gate": session.session_type,
            "gate_open": gate_open(gate, validated=validated, outcome=session.outcome),
            "validated": validated,
            "signals": len(signals),
            "candidates": result.candidates,
            "discarded": result.discarded,
            "llm_calls": result.llm_calls,
            "recipes_succeeded": [str(i) for i in recipes],
        }
        fields = ["status", "finalized_at", "promoted_memory_ids", "reinforced_memory_ids", "report"]
        if session.checkpoint_events != session.event_count:  # else the stored one is this one
            session.scratchpad = pad.to_dict()
            fields.append("scratchpad")
        session.save(update_fields=fields)
        due = [(m, n) for m, n in result.module_counts.items() if n in SYNTHESIS_THRESHOLDS and m != "."]
        if due:
            from memorysaas.kernel.queue import enqueue

            for module, count in due:
                enqueue(
                    "apps.observer.tasks.synthesize_module",
                    str(session.project_id),
                    module,
                    count,
                    lane="bulk",
                )
        project_id, sid = session.project_id, str(session.id)
        org_events.emit(session.organization_id, "session.completed", org_events.session_payload(session))
        transaction.on_commit(
            lambda: publish(
                project_id, "session.completed", {"session_id": sid, "created": len(result.created)}
            )
        )
    forget(session.id)
    return result


# ---------------------------------------------------------------- step injection


# Under the session's row lock, the ids not yet recorded (in the order given) are appended; the
# statement answers them, and no row where the session is not one of the project's open ones.
_RECORD_CONTEXT_INJECTION = """
    WITH held AS (
        SELECT id, injected_memory_ids FROM observer_session
        WHERE id = %s AND project_id = %s AND status = 'open' FOR UPDATE
    ), fresh AS (
        SELECT held.id, ARRAY(
            SELECT u.m FROM unnest(%s::uuid[]) WITH ORDINALITY AS u(m, n)
            WHERE NOT u.m = ANY(held.injected_memory_ids) ORDER BY u.n
        ) AS ids FROM held
    ), added AS (
        UPDATE observer_session s SET injected_memory_ids = s.injected_memory_ids || fresh.ids
        FROM fresh WHERE s.id = fresh.id AND cardinality(fresh.ids) > 0
    )
    SELECT ids::text[] FROM fresh
"""


def context_injection_record(
    *, session_id: str | UUID, project: Project, memory_ids: list[UUID] | list[str]
) -> list[str] | None:
    """Memories that /context packed for a session of `project` count as applied in it (each
    once). Returns the ids it newly added, or None when the session id is not one of the
    project's open sessions (which changes nothing). One statement: it runs on every prompt."""
    as_id = as_uuid(session_id)
    if as_id is None:
        return None
    wanted = list(dict.fromkeys(str(i) for i in memory_ids))
    with connection.cursor() as cursor:
        cursor.execute(_RECORD_CONTEXT_INJECTION, [str(as_id), str(project.id), wanted])
        row = cursor.fetchone()
    return None if row is None else [str(i) for i in row[0]]


def session_is_control(*, session_id: str | UUID, project: Project) -> bool:
    """Whether `session_id` is a session of `project` in the A/B control group (served no memory)."""
    as_id = as_uuid(session_id)
    if as_id is None:
        return False
    return Session.objects.filter(id=as_id, project=project, ab_group="control").exists()


def injection_record(*, session: Session, memory_ids: list[UUID], notes_upto: int) -> None:
    """Step injection gave the session these memories (and its notes up to `notes_upto`): each
    memory counts as applied in the session, and as an access (its decay clock restarts: every
    injection is one). The caller holds the session row locked."""
    pad = _take_cached(session)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE observer_session SET injected_memory_ids = injected_memory_ids || ARRAY(
                    SELECT m FROM unnest(%s::uuid[]) AS m WHERE NOT m = ANY(injected_memory_ids)),
                scratchpad = jsonb_set(scratchpad, '{notes_injected}', to_jsonb(%s::int)),
                scratchpad_version = scratchpad_version + 1, scratchpad_stamp = gen_random_uuid()
            WHERE id = %s RETURNING scratchpad_version, scratchpad_stamp
            """,
            [[str(i) for i in memory_ids], notes_upto, str(session.id)],
        )
        session.scratchpad_version, session.scratchpad_stamp = cursor.fetchone()
    if pad is not None:
        pad.notes_injected = notes_upto
        _remember(session, pad)
    memory_services.memories_record_access(memory_ids=memory_ids)


# ---------------------------------------------------------------- git cold start

_COMMIT_LINE = re.compile(r"^(?:commit )?([0-9a-f]{7,40})(?:$| )")
_HEADER = ("Author:", "Date:", "Merge:", "AuthorDate:", "Commit:", "CommitDate:")


def parse_git_log(text: str) -> list[list[str]]:
    """Commits (their changed files) from `git log --name-only` output: the default format,
    `--pretty=format:%H` or `--oneline`."""
    commits: list[list[str]] = []
    current: list[str] | None = None
    for raw in text.splitlines():
        line = text_rules.printable_path(raw.strip())
        if not line or raw.startswith((" ", "\t")) or line.startswith(_HEADER):
            continue
        if _COMMIT_LINE.match(line):
            current = []
            commits.append(current)
        elif (
            current is not None
            and not line.startswith("/")
            and ".." not in line.split("/")
            and len(line) <= 500
        ):
            current.append(line)
    return [c for c in commits if c]


@transaction.atomic
def git_cold_start(*, project: Project, log_text: str) -> dict[str, int]:
    """Seed co-change edges (kind `co_change`) from history, before any session exists."""
    commits = parse_git_log(log_text)
    pairs: dict[str, int] = {}
    modules: dict[str, str] = {}  # a pair's module is its first file's, as a session's co-access
    files: dict[str, int] = {}
    used = 0
    for changed in commits:
        changed = sorted(set(changed))
        if len(changed) < 2 or len(changed) > MAX_COMMIT_FILES:
            continue  # a single file has no partner; a huge commit (a rename, a format) says nothing
        used += 1
        for f in changed:
            files[f] = files.get(f, 0) + 1
        for i, a in enumerate(changed):
            for b in changed[i + 1 :]:
                key = promotion.stored_key(f"{a}\t{b}")
                pairs[key] = pairs.get(key, 0) + 1
                modules[key] = text_rules.module_of(a)
    keys = list(pairs)
    if keys:
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO observer_patternstat AS p (project_id, kind, key, module, session_count, total, total2,
                    directional, task_types, sessions, data, first_seen, last_seen)
                SELECT %s, 'co_change', u.key, u.module, 0, u.n, 0, 0, '{}', '{}', '{}', now(), now()
                FROM unnest(%s::text[], %s::text[], %s::float8[]) AS u(key, module, n)
                ON CONFLICT (project_id, kind, key) DO UPDATE SET total = EXCLUDED.total, last_seen = now()
                """,
                [str(project.id), keys, [modules[k] for k in keys], [float(pairs[k]) for k in keys]],
            )
    return {"commits": len(commits), "commits_used": used, "files": len(files), "edges": len(keys)}
