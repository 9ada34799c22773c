"""Claude Code's hook deliveries made into the observer's sessions and events, and the context
each one answers with.

A delivery is handled in two parts. The write (open the session on first sight, number the
delivery's events, ingest them, record a test run's verdict, complete) is one transaction,
serialised per session by its `HookSession` row, so deliveries that arrive together, twice or
out of order leave the state one clean delivery would. The answer (answers.py: start plan,
packed /context, step injection) is built afterwards in a transaction of its own. Both run
within time limits (budget.py): a hook must answer inside Claude Code's timeout.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.utils import timezone

from apps.agents import answers
from apps.agents import hooks as H
from apps.agents.budget import budget, set_timeout, within
from apps.agents.models import HookDelivery, HookSession
from apps.memories.validation import clean_paths
from apps.observer import external, selectors
from apps.observer import services as observer
from apps.observer.models import Session, SessionStatus
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from apps.tenants.roles import Perm
from apps.tenants.selectors import project_get
from memorysaas.kernel.errors import ApiError

logger = logging.getLogger(__name__)

# Statement timeouts (milliseconds) for the two parts of a delivery. Claude Code waits for a
# hook as long as its `timeout` says (docs/agents/claude-code.md suggests 10 s); these keep a
# slow database well inside that.
WRITE_BUDGET_MS = 2000
CONTEXT_BUDGET_MS = 1500
CLIENT = "claude-code"
# A session with no delivery for this long is over, whether or not its SessionEnd came.
IDLE_AFTER = timedelta(hours=2)
IDLE_BATCH = 500


class Refused(ApiError):
    """The key may not deliver to this project (403), or no project it sees is named (404): answered
    as the error it is, not as a hook's non-blocking nothing."""


def hook_project(*, principal: Principal, project_id: UUID | None) -> Project:
    """The project a delivery is for: the one the key is limited to, or the one the hook's URL
    names (`?project=<id>`); not found unless the principal sees it, forbidden unless it may
    write observer events there."""
    if project_id is None and principal.project_limit is None:
        raise Refused(
            404,
            "No project named: add ?project=<project id> to the hook's URL, or use a key limited to one project.",
            code="project_required",
            details={"field": "project"},
        )
    try:
        return project_get(
            principal=principal,
            project_id=project_id or principal.project_limit,
            permission=Perm.OBSERVER_WRITE,
        )
    except ApiError as exc:
        raise Refused(exc.status, exc.message, code=exc.code, details=exc.details) from None


@dataclass
class Target:
    """Who delivers, to which project (resolved only when a delivery needs the row: a session
    found by its id was checked in the query that found it)."""

    principal: Principal
    project_id: UUID | None
    _project: Project | None = None

    @property
    def project(self) -> Project:
        if self._project is None:
            self._project = hook_project(principal=self.principal, project_id=self.project_id)
        return self._project

    @property
    def named_project_id(self) -> UUID | None:
        return self.project_id or self.principal.project_limit


@dataclass
class Held:
    """A session's hook state, its row locked for the rest of the transaction."""

    session_id: UUID
    organization_id: UUID
    status: str
    ab_group: str
    root: str
    has_task: bool
    edited: bool
    quiet: bool  # no delivery for a few minutes
    last_seq: int
    tool_steps: int
    validated_step: int | None
    validation_passed: bool | None
    known: dict[str, int] = field(default_factory=dict)  # keys already delivered → their step
    opened: bool = False

    @property
    def open(self) -> bool:
        return self.status == SessionStatus.OPEN

    def told_nothing(self, principal: Principal) -> bool:
        """The A/B control group is told nothing, and neither is a key that may not read memories
        (it may record what the agent does: it may not read what the project knows)."""
        return self.ab_group == "control" or not principal.has(self.organization_id, Perm.MEMORIES_READ)

    def told_only_at_start(self) -> bool:
        """The A/B passive group gets the session-start plan and the prompt's context, never the
        notes added mid-session (before an edit)."""
        return self.ab_group == "passive"


_HOLD = f"""
    SELECT h.session_id, h.organization_id, s.status, s.ab_group, s.root, s.task <> '',
        cardinality(s.edited_files) > 0, h.last_delivery_at < now() - interval '5 minutes', h.last_seq,
        h.tool_steps, h.validated_step, h.validation_passed,
        (SELECT json_object_agg(d.key, d.step) FROM {HookDelivery._meta.db_table} d
         WHERE d.hook_session_id = h.session_id AND d.key = ANY(%s::varchar[])),
        set_config('statement_timeout', %s, true)
    FROM {HookSession._meta.db_table} h JOIN {Session._meta.db_table} s ON s.id = h.session_id
    WHERE h.project_id = %s AND s.external_id = %s AND h.project_id IN ({{visible}})
    FOR UPDATE OF h
"""


def _hold(target: Target, external_id: str, keys: list[str]) -> Held | None:
    """The session's hook state, its row locked, if the principal sees its project; the rest of
    the transaction runs under the write budget's statement timeout (set by the same statement,
    which saves a round trip on every delivery)."""
    project_id = target.named_project_id
    if project_id is None:
        return None
    visible, params = Project.objects.visible_to(target.principal).values("id").query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            _HOLD.format(visible=visible), [keys, str(WRITE_BUDGET_MS), str(project_id), external_id, *params]
        )
        row = cursor.fetchone()
    if row is None:
        return None
    session_id, organization_id, *fields, known, _ = row
    if not target.principal.has(organization_id, Perm.OBSERVER_WRITE):
        raise Refused(403, f"This needs the '{Perm.OBSERVER_WRITE}' permission.")
    if isinstance(known, str):  # (json is not decoded by every driver configuration)
        known = json.loads(known)
    return Held(session_id, organization_id, *fields, known=known or {})


def _hold_or_open(*, target: Target, hook: H.Hook, keys: list[str], opens: bool) -> Held | None:
    """The session's hook state, locked; the session is opened first when this is its first
    delivery and `opens`. (Opening waits for any other first delivery of the same id.)"""
    held = _hold(target, hook.session_id, keys)
    if held is not None:
        return held
    project = target.project  # (the 404 or 403 of a project the key may not deliver to)
    if not opens:
        return None
    set_timeout(WRITE_BUDGET_MS)
    data = {"session_type": "build", "task": hook.prompt, "root": hook.cwd, "client": CLIENT}
    session, opened = external.session_open_external(
        project=project, actor=target.principal, external_id=hook.session_id, data=data
    )
    if opened:
        HookSession.objects.create(session=session, organization_id=project.organization_id, project=project)
    held = _hold(target, hook.session_id, keys)
    if held is not None:
        held.opened = opened
    return held


_RECORD = f"""
    WITH added AS (
        INSERT INTO {HookDelivery._meta.db_table} (hook_session_id, key, step)
        SELECT %s, u.key, u.step FROM unnest(%s::varchar[], %s::int[]) AS u(key, step))
    UPDATE {HookSession._meta.db_table} SET last_seq = %s, tool_steps = %s, validated_step = %s,
        validation_passed = %s, last_delivery_at = now()
    WHERE session_id = %s
"""


def _record(held: Held, fresh: list[tuple[str, int, dict[str, Any]]]) -> None:
    """Number the delivery's new events (after the session's last), log their keys, ingest
    them. `fresh`: (key, step, event) for what this delivery adds."""
    events = []
    for _, step, event in fresh:
        held.last_seq += 1
        events.append({**event, "seq": held.last_seq, "step": step, "ts": timezone.now().isoformat()})
    keys = [key for key, _, _ in fresh]
    with connection.cursor() as cursor:
        cursor.execute(_RECORD, [str(held.session_id), keys, [s for _, s, _ in fresh], held.last_seq,
                                 held.tool_steps, held.validated_step, held.validation_passed,
                                 str(held.session_id)])  # fmt: skip
    if events:
        observer.events_ingest(session=held.session_id, events=events)


# ---------------------------------------------------------------- deliveries


def hook_deliver(*, principal: Principal, project_id: UUID | None, hook: H.Hook) -> dict[str, Any]:
    """Handle one delivery; returns the JSON to answer with ({} for nothing to add). Raises
    `Refused` when the key may not deliver to the project (for any event, handled or not)."""
    target = Target(principal, project_id)
    handler = _HANDLERS.get(hook.event)
    if handler is None or not hook.session_id:
        target.project  # noqa: B018  (the key and project are checked all the same)
        return {}
    return handler(target, hook)


def _session_start(target: Target, hook: H.Hook) -> dict[str, Any]:
    with budget():
        held = _hold_or_open(target=target, hook=hook, keys=[], opens=True)
        _touch(held)
    if held is None or held.told_nothing(target.principal):
        return {}
    text = within(
        CONTEXT_BUDGET_MS,
        "start plan",
        lambda: answers.start_plan(principal=target.principal, session_id=held.session_id, gotchas=True),
    )
    return H.reply(hook.event, text)


def _user_prompt(target: Target, hook: H.Hook) -> dict[str, Any]:
    with budget():
        held = _hold_or_open(target=target, hook=hook, keys=[], opens=True)
        _touch(held)
        first = (
            held is not None and held.open and (held.opened or _task_set(target.principal, held, hook.prompt))
        )
    if held is None or held.told_nothing(target.principal):
        return {}
    # (a session that has ended, one a --resume brought back, still gets context: only the
    # recording stops, and what it wrote itself is still left out)
    session_id = str(held.session_id)
    plan = ""
    if first:
        plan = within(
            CONTEXT_BUDGET_MS,
            "start plan",
            lambda: answers.start_plan(principal=target.principal, session_id=held.session_id, gotchas=False),
        )
    context = within(
        CONTEXT_BUDGET_MS,
        "context",
        lambda: answers.prompt_context(
            principal=target.principal, project=target.project, prompt=hook.prompt, session_id=session_id
        ),
    )
    return H.reply(hook.event, H.prompt_context_text(plan, context))


def _touch(held: Held | None) -> None:
    """A delivery that records no event still says the session is alive (to the idle sweep,
    which waits hours: a session heard from minutes ago needs no write)."""
    if held is not None and held.open and held.quiet:
        HookSession.objects.filter(pk=held.session_id).update(last_delivery_at=timezone.now())


def _task_set(principal: Principal, held: Held, prompt: str) -> bool:
    if held.has_task:
        return False
    session = selectors.session_get(principal=principal, session_id=held.session_id)
    return external.session_task_set(session=session, task=prompt)


def _pre_tool(target: Target, hook: H.Hook) -> dict[str, Any]:
    """A tool is about to run: its call is recorded (once, by its tool-use id: its PostToolUse
    may come first), and before an Edit or Write, what is known about that file is added."""
    if not hook.tool_use_id:  # (paired with its result by nothing: PostToolUse records it)
        target.project  # noqa: B018  (checked all the same)
        return {}
    key = H.call_key(hook)
    with budget():
        held = _hold_or_open(target=target, hook=hook, keys=[key], opens=True)
        if held is None or not held.open:
            return {}
        step = held.known.get(key)
        if step is None:
            held.tool_steps += 1
            step = held.tool_steps
            _record(held, [(key, step, H.tool_call_event(hook))])
    file = H.edited_file(hook)
    if not file or held.told_nothing(target.principal) or held.told_only_at_start():
        return {}
    files = clean_paths([file], held.root)
    text = within(
        CONTEXT_BUDGET_MS,
        "step injection",
        lambda: answers.step_injection(
            principal=target.principal, session_id=held.session_id, step=step, files=files
        ),
    )
    return H.reply(hook.event, text)


def _post_tool(target: Target, hook: H.Hook) -> dict[str, Any]:
    """A tool ran (or failed): its call (unless PreToolUse recorded it) and its result are
    recorded, once; a test run's verdict becomes the session's validation."""
    call, result = H.call_key(hook), H.result_key(hook)
    with budget():
        held = _hold_or_open(target=target, hook=hook, keys=[call, result], opens=True)
        if held is None or not held.open or result in held.known:
            return {}
        fresh = []
        step = held.known.get(call)
        if step is None:
            held.tool_steps += 1
            step = held.tool_steps
            fresh.append((call, step, H.tool_call_event(hook)))
        outcome = H.tool_result_event(hook)
        fresh.append((result, step, outcome))
        command = H.test_command(hook)
        verdict = None if hook.is_interrupt or not command else not outcome["is_error"]
        # The latest test run decides, however late an earlier one's result arrives.
        if verdict is not None and (held.validated_step is None or step >= held.validated_step):
            held.validated_step, held.validation_passed = step, verdict
        else:
            verdict = None
        _record(held, fresh)
        if verdict is not None:
            observer.validation_record(
                session=Session(id=held.session_id), actor=target.principal, passed=verdict, work_unit="",
                report=f"$ {command}\n{outcome['result'][:1500]}",
            )  # fmt: skip
    return {}


def _stop(target: Target, hook: H.Hook) -> dict[str, Any]:
    """Claude finished a turn (Stop comes after every answer, not at the session's end): its
    closing message is recorded as reasoning, once."""
    key = H.stop_key(hook)
    with budget():
        held = _hold_or_open(target=target, hook=hook, keys=[key], opens=bool(hook.last_message.strip()))
        if held is not None and held.open and hook.last_message.strip() and key not in held.known:
            _record(held, [(key, held.tool_steps, H.reasoning_event(hook.last_message))])
    return {}


def _session_end(target: Target, hook: H.Hook) -> dict[str, Any]:
    """The session ended: it is completed and its finalize (promotion) queued. Its outcome is
    its last test run's verdict (H.outcome_for). Ending again changes nothing."""
    with budget():
        held = _hold_or_open(target=target, hook=hook, keys=[], opens=False)
        if held is None or not held.open:
            return {}
        outcome = H.outcome_for(validated=held.validation_passed, edited=held.edited)
        observer.session_complete(session=Session(id=held.session_id), outcome=outcome, steps=held.tool_steps)
    return {}


def hook_sessions_complete_idle(*, now: datetime | None = None) -> int:
    """Complete every open hooks session that has had no delivery for IDLE_AFTER: its SessionEnd
    never came. Each is completed as SessionEnd would (its outcome from its test runs), under its
    row, so a delivery arriving meanwhile is not lost: the session is passed over, or the
    delivery finds it closed. Returns how many were completed."""
    cutoff = (now or timezone.now()) - IDLE_AFTER
    idle = list(
        HookSession.objects.filter(
            last_delivery_at__lt=cutoff, session__status=SessionStatus.OPEN
        ).values_list("session_id", flat=True)[:IDLE_BATCH]
    )
    completed = 0
    for session_id in idle:
        with transaction.atomic():
            held = (
                HookSession.objects.select_for_update(skip_locked=True, of=("self",))
                .select_related("session")
                .defer("session__scratchpad")
                .filter(
                    session_id=session_id, last_delivery_at__lt=cutoff, session__status=SessionStatus.OPEN
                )
                .first()
            )
            if held is None:
                continue
            outcome = H.outcome_for(validated=held.validation_passed, edited=bool(held.session.edited_files))
            observer.session_complete(session=held.session, outcome=outcome, steps=held.tool_steps)
            completed += 1
    return completed


_HANDLERS: dict[str, Callable[[Target, H.Hook], dict[str, Any]]] = {
    H.SESSION_START: _session_start,
    H.USER_PROMPT: _user_prompt,
    H.PRE_TOOL: _pre_tool,
    H.POST_TOOL: _post_tool,
    H.POST_TOOL_FAILURE: _post_tool,
    H.STOP: _stop,
    H.SESSION_END: _session_end,
}
