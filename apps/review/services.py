"""Writes the dashboard makes. Each goes through `apps.memories.services`, so every change is a
new version with its history, an audit row, a re-embedding when the text moved and a live
update on commit. Permission checks are the views' (they know the page's role rules)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from apps.memories import selectors as memory_selectors
from apps.memories import services as memory_services
from apps.memories.kinds import Source
from apps.memories.models import FeedbackKind, Memory
from apps.memories.validation import MemoryDraft
from apps.review.rules_import import Rule
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from apps.tenants.roles import Perm
from memorysaas.kernel.errors import Invalid

TAUGHT_CONFIDENCE = 0.9
IMPORT_TAG = "imported"


class CorrectionReason:
    """The correction dialog's choices: what a person may say is wrong with a memory."""

    INCORRECT = "incorrect"
    OUTDATED = "outdated"
    TOO_SPECIFIC = "too_specific"
    DUPLICATE = "duplicate"

    CHOICES = (
        (INCORRECT, "Content is inaccurate — I'll correct it"),
        (OUTDATED, "No longer applies — mark as outdated"),
        (TOO_SPECIFIC, "Too specific — I'll generalize it"),
        (DUPLICATE, "It's a duplicate of another memory"),
    )
    # These mean the text itself must change.
    NEEDS_TEXT = (INCORRECT, TOO_SPECIFIC)
    # How each reads at the head of the feedback note (the memory's page shows notes as written).
    NOTE_LABELS = {
        INCORRECT: "Inaccurate",
        OUTDATED: "No longer applies",
        TOO_SPECIFIC: "Too specific",
        DUPLICATE: "Duplicate",
        "rejected": "Rejected in the session review",
    }


# Notes written before the labels began with the reason's code: "[too_specific] see the ADR".
_CODED_NOTE = re.compile(r"\[(" + "|".join(CorrectionReason.NOTE_LABELS) + r")\] ?(.*)", re.DOTALL)


def reason_note(reason: str, note: str = "") -> str:
    """`Too specific: see the ADR`, or the label alone without a note."""
    label = CorrectionReason.NOTE_LABELS[reason]
    note = note.strip()
    return f"{label}: {note}" if note else label


def readable_note(note: str) -> str:
    """A feedback note for display: an old coded one reads as a new one would."""
    coded = _CODED_NOTE.fullmatch(note)
    return reason_note(coded[1], coded[2]) if coded else note


@dataclass(frozen=True)
class CorrectionResult:
    memory: Memory
    outcome: str  # corrected | deprecated | flagged


def memory_correct(
    *,
    memory: Memory,
    actor: Principal,
    reason: str,
    content: str = "",
    note: str = "",
    may_deprecate: bool = False,
) -> CorrectionResult:
    """Apply the correction dialog.

    New text (required for "incorrect" and "too specific") is a `correct` feedback: a new
    version, the old text kept in history, the memory verified. "Outdated" or "duplicate"
    without new text flags the memory (−0.2 confidence, needs review) with the reason as note;
    a reviewer (`may_deprecate`) also retires it, so agents stop receiving it.
    """
    labels = dict(CorrectionReason.CHOICES)
    if reason not in labels:
        raise Invalid("Choose what is wrong with this memory.", details={"field": "reason"})
    content = content.strip()
    note_text = reason_note(reason, note)
    changed = bool(content) and content != memory.content.strip()
    if reason in CorrectionReason.NEEDS_TEXT and not changed:
        problem = "it is the same as before" if content else "it is empty"
        raise Invalid(f"Write the corrected text: {problem}.", details={"field": "content"})
    if changed:
        memory = memory_services.memory_feedback(
            memory=memory, actor=actor, kind=FeedbackKind.CORRECT, content=content, note=note_text
        )
        return CorrectionResult(memory, "corrected")
    return _flag_or_retire(
        memory=memory, actor=actor, note=note_text, may_deprecate=may_deprecate, change=reason
    )


@transaction.atomic
def _flag_or_retire(
    *, memory: Memory, actor: Principal, note: str, may_deprecate: bool, change: str
) -> CorrectionResult:
    """A `flag` feedback (the trust rules count it); a reviewer also retires the memory."""
    memory = memory_services.memory_feedback(memory=memory, actor=actor, kind=FeedbackKind.FLAG, note=note)
    if not may_deprecate:
        return CorrectionResult(memory, "flagged")
    memory = memory_services.memory_update(
        memory=memory, actor=actor, changes={"deprecated": True, "needs_review": False}, change=change
    )
    return CorrectionResult(memory, "deprecated")


def memory_reject(
    *, memory: Memory, actor: Principal, may_deprecate: bool, note: str = ""
) -> CorrectionResult:
    """The session review's ✗. A reviewer retires the memory (deprecated: agents stop receiving
    it, its history stays, `memory_restore` brings it back); anyone else flags it wrong for a
    reviewer, as the correction dialog's "outdated" does."""
    return _flag_or_retire(
        memory=memory,
        actor=actor,
        note=reason_note("rejected", note),
        may_deprecate=may_deprecate,
        change="rejected",
    )


def memory_restore(*, memory: Memory, actor: Principal) -> Memory:
    """Undo a rejection or deprecation: agents receive it again, after another review."""
    return memory_services.memory_update(
        memory=memory, actor=actor, changes={"deprecated": False, "needs_review": True}, change="restored"
    )


@transaction.atomic
def memories_confirm_all(
    *, memories: Sequence[Memory], actor: Principal, session_id: str = ""
) -> tuple[int, int]:
    """Confirm each memory (verified, review cleared, a new version and a `confirm` feedback
    naming the session), all or none, but those that wait for a steward when the actor is not
    one. Returns (how many were confirmed, how many were left for a steward)."""
    steward = bool(memories) and actor.has(memories[0].organization_id, Perm.MEMORIES_REVIEW)
    left = 0
    for memory in memories:
        if not steward and memory_selectors.waits_for_steward(memory):
            left += 1
            continue
        memory_services.memory_feedback(
            memory=memory, actor=actor, kind=FeedbackKind.CONFIRM, session_id=session_id
        )
    return len(memories) - left, left


def memory_pin_toggle(*, memory: Memory, actor: Principal) -> Memory:
    pinned = not memory.pinned
    return memory_services.memory_update(
        memory=memory, actor=actor, changes={"pinned": pinned}, change="pinned" if pinned else "unpinned"
    )


def memory_teach(
    *,
    project: Project,
    actor: Principal,
    memory_type: str,
    content: str,
    scope: str,
    related_files: Sequence[str] = (),
    related_modules: Sequence[str] = (),
    tags: Sequence[str] = (),
) -> Memory:
    """A `user_taught` memory: a person wrote it, so it starts verified and highly trusted."""
    draft = _draft(
        type=memory_type,
        content=content,
        scope=scope,
        source=Source.USER_TAUGHT,
        confidence=TAUGHT_CONFIDENCE,
        user_verified=True,
        related_files=list(related_files),
        related_modules=list(related_modules),
        tags=list(tags),
    )
    return memory_services.memory_create(project=project, actor=actor, draft=draft)


def recipe_payload(*, task_pattern: str, steps: list[dict], previous: dict | None = None) -> dict[str, Any]:
    """A workflow recipe's payload; what the observer counted (successes, last validation) stays."""
    payload: dict[str, Any] = {"task_pattern": task_pattern, "steps": steps}
    for kept in ("success_count", "last_validated_at"):
        if previous and kept in previous:
            payload[kept] = previous[kept]
    return payload


def recipe_save(
    *,
    project: Project,
    actor: Principal,
    task_pattern: str,
    steps: list[dict],
    content: str = "",
    scope: str = "project",
    tags: Sequence[str] = (),
    memory: Memory | None = None,
) -> Memory:
    """Create a workflow recipe by hand, or edit one (a new version; history kept)."""
    content = content.strip() or recipe_summary(task_pattern, steps)
    files = list(dict.fromkeys(s["canonical_file"] for s in steps if s.get("canonical_file")))
    if memory is None:
        draft = _draft(
            type="workflow_recipe",
            content=content,
            scope=scope,
            source=Source.USER_TAUGHT,
            confidence=TAUGHT_CONFIDENCE,
            user_verified=True,
            related_files=files,
            tags=list(tags),
            payload=recipe_payload(task_pattern=task_pattern, steps=steps),
        )
        return memory_services.memory_create(project=project, actor=actor, draft=draft)
    changes = {
        "content": content,
        "payload": recipe_payload(task_pattern=task_pattern, steps=steps, previous=memory.payload),
        "related_files": list(dict.fromkeys([*files, *memory.related_files]))
        if files
        else memory.related_files,
        "tags": list(tags),
    }
    return memory_services.memory_update(memory=memory, actor=actor, changes=changes, change="edited")


def recipe_summary(task_pattern: str, steps: list[dict]) -> str:
    listed = " ".join(f"{s['order']}) {s['description']}" for s in steps)
    return f"How to {task_pattern[:1].lower()}{task_pattern[1:]}: {listed}"[:4000]


def rules_draft(rule: Rule, *, source_name: str, scope: str = "project") -> MemoryDraft:
    """The draft one previewed rule becomes: user-taught, verified, tagged with where it came from."""
    payload: dict[str, Any] = {}
    if rule.type == "workflow_recipe":
        payload = recipe_payload(
            task_pattern=rule.task_pattern or rule.heading or "Imported recipe", steps=rule.steps
        )
    origin = source_name.lower().lstrip(".").replace(".", "-") or "rules"
    return _draft(
        type=rule.type,
        content=rule.content,
        scope=scope,
        source=Source.USER_TAUGHT,
        confidence=TAUGHT_CONFIDENCE,
        user_verified=True,
        related_files=rule.related_files,
        tags=[IMPORT_TAG, origin[:100]],
        payload=payload,
        context_prefix=f"{source_name} › {rule.heading}"[:500] if rule.heading else source_name[:500],
    )


def rules_import(
    *, project: Project, actor: Principal, rules: Sequence[Rule], source_name: str, scope: str = "project"
) -> list[Memory]:
    """Store the previewed rules in one transaction: all of them or none."""
    drafts = [rules_draft(rule, source_name=source_name, scope=scope) for rule in rules]
    return memory_services.memories_create_batch(project=project, actor=actor, drafts=drafts)


def _draft(**fields: Any) -> MemoryDraft:
    try:
        return MemoryDraft(**fields)
    except ValueError as exc:
        raise Invalid("The memory would not be valid.", details=_messages(exc)) from None


def _messages(exc: ValueError) -> list[str]:
    errors = getattr(exc, "errors", None)
    if callable(errors):
        return [f"{'.'.join(str(p) for p in e['loc']) or 'memory'}: {e['msg']}" for e in errors()]
    return [str(exc)]
