"""Usage and feedback: confirm, correct, flag and dispute, reinforcement by the observer, and the
accesses that restart a memory's decay clock and, counted, reward it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from uuid import UUID

from django.db import connection, transaction
from django.db.models import F

from apps.memories import selectors
from apps.memories.models import (
    FeedbackKind,
    Memory,
    MemoryFeedback,
    MemoryUsage,
)
from apps.memories.services.indexing import _announce
from apps.memories.services.propagation import propagation_queue
from apps.memories.services.redaction import _redacted_fields
from apps.memories.services.update import _restart_clock, _save_change, _update, memory_locked
from apps.tenants.principal import Principal
from apps.tenants.roles import Perm
from apps.tenants.services import audit_record, require
from memorysaas.kernel import events as org_events
from memorysaas.kernel.errors import Invalid

CONFIDENCE_CAP = 0.95
FLAG_PENALTY = 0.2
ACCESS_REWARD = 0.05
ACCESSES_FOR_REWARD = 5
ACCESSES_TO_CLEAR_REVIEW = 10
# An access outside a session (a /context call without session_id) counts toward those rewards
# only when the memory's last counted access is older than this: within a session each memory
# counts once, and without one a loop of calls would otherwise clear a review in seconds.
UNPACED_ACCESS_GAP = timedelta(hours=1)
_NOW = "statement_timestamp()"  # (not now(): two accesses in one transaction are two statements)


@transaction.atomic
def memory_feedback(
    *,
    memory: Memory,
    actor: Principal,
    kind: str,
    content: str | None = None,
    note: str = "",
    session_id: str = "",
) -> Memory:
    """Record feedback and apply it.

    confirm → user_verified, review cleared; correct → new content (old kept in history),
    verified and review cleared (unless the correction held a secret); flag → confidence −0.2
    and needs_review; dispute → disputed (retrieval ×0.8) and needs_review; used / helpful →
    counters only. All but flag and dispute restart the decay clock. Confirm and helpful lift
    the memories this one validates, flag and dispute lower those derived from it (after the
    commit: services.propagation).
    """
    kind = FeedbackKind(kind).value
    memory = memory_locked(memory)
    # (a steward reviews what a redaction took out; a member's correction is kept, not cleared)
    for_steward = selectors.waits_for_steward(memory) and not actor.has(
        memory.organization_id, Perm.MEMORIES_REVIEW
    )
    if kind == FeedbackKind.CONFIRM and for_steward:
        require(actor, memory.organization_id, Perm.MEMORIES_REVIEW)
    clean, _ = _redacted_fields({"note": note, "session_id": session_id}, model=MemoryFeedback)
    given = MemoryFeedback.objects.create(
        organization_id=memory.organization_id,
        memory=memory,
        kind=kind,
        note=clean["note"],
        actor_user=actor.user if actor.user is not None and actor.user.pk else None,
        actor_label=actor.label,
        session_id=clean["session_id"][:100],
    )
    propagation_queue(feedback=given)  # (on commit: a correction that fails queues nothing)
    if kind in (FeedbackKind.CONFIRM, FeedbackKind.CORRECT, FeedbackKind.USED, FeedbackKind.HELPFUL):
        _restart_clock(memory)  # someone just used or vouched for it: a use, for the decay clock
    if kind == FeedbackKind.CORRECT:
        if not content or not content.strip():
            raise Invalid("A correction needs the corrected content.", details={"field": "content"})
        memory, kinds = _update(memory, actor, {"content": content}, "corrected")
        # A person's correction is verified and ends the review, unless it brought a secret along
        # (redacted, as in any write): that one waits for a steward.
        cleared = not (kinds or for_steward)
        Memory.objects.filter(pk=memory.pk).update(user_verified=cleared, needs_review=not cleared)
        MemoryUsage.objects.filter(memory=memory).update(uncorrected_access_count=0)
        memory.refresh_from_db()
        return memory
    if kind in (FeedbackKind.USED, FeedbackKind.HELPFUL):
        counter = "used_count" if kind == FeedbackKind.USED else "helpful_count"
        Memory.objects.filter(pk=memory.pk).update(**{counter: F(counter) + 1})
        memory.refresh_from_db()
        return memory
    changed: set[str] = set()
    newly_needs_review = not memory.needs_review and kind in (FeedbackKind.FLAG, FeedbackKind.DISPUTE)
    if kind == FeedbackKind.CONFIRM:
        memory.user_verified, memory.needs_review = True, False
        changed = {"user_verified", "needs_review"}
    elif kind == FeedbackKind.FLAG:
        memory.confidence = round(max(0.0, memory.confidence - FLAG_PENALTY), 4)
        memory.needs_review = True
        memory.flag_count += 1
        MemoryUsage.objects.filter(memory=memory).update(uncorrected_access_count=0)
        changed = {"confidence", "needs_review", "flag_count"}
    elif kind == FeedbackKind.DISPUTE:
        memory.disputed, memory.needs_review = True, True
        MemoryUsage.objects.filter(memory=memory).update(uncorrected_access_count=0)
        changed = {"disputed", "needs_review"}
    _save_change(memory, actor, f"feedback_{kind}", changed)
    if newly_needs_review:
        _announce(memory.project_id, ("review.needed", [memory]))
        org_events.emit(
            memory.organization_id,
            "memory.review_needed",
            org_events.review_payload(memory.project_id, [memory]),
        )
    audit_record(actor=actor, action=f"memory.feedback.{kind}", target=memory)
    return memory


@transaction.atomic
def memory_reinforce(
    *, memory: Memory, actor: Principal, session_id: str | None = None, confidence_delta: float = 0.05
) -> Memory:
    """Another session observed what this memory says (the observer's novelty check found it
    above 0.88 cosine): add the session to its provenance, raise confidence (capped at 0.95),
    restart its decay clock. New version."""
    memory = memory_locked(memory)
    if session_id and session_id not in memory.provenance_session_ids:
        memory.provenance_session_ids = [*memory.provenance_session_ids, session_id[:100]]
    memory.confidence = round(
        min(CONFIDENCE_CAP, max(memory.confidence, memory.confidence + confidence_delta)), 4
    )
    _save_change(memory, actor, "reinforced", {"provenance_session_ids", "confidence"})
    _restart_clock(memory)
    return memory


def memories_record_access(*, memory_ids: Sequence[UUID | str], paced: bool = False) -> None:
    """Each injection is an access: after 5 uncorrected accesses confidence +0.05 (cap 0.95),
    after 10 needs_review clears — not for a memory whose review is a steward's (a
    redacted secret, an open dispute, an observer memory tainted by outside text). One
    statement; no version bump (bookkeeping only).
    `paced` (an access outside any session): it counts toward those rewards only if the
    memory's last counted access is older than UNPACED_ACCESS_GAP (measured from that, not from
    the last access, a memory used every hour would never count again); access_count counts it
    anyway.
    The counts go to the narrow usage rows; a memory row is written only for those of its
    memories whose confidence or review flag the access changes.

    Locks go memory row, then usage row, as in feedback and reinforcement (which lock the memory
    FOR UPDATE, then write its usage): the memories are first locked FOR KEY SHARE, which waits
    for those and for a delete (a memory deleted meanwhile is skipped, not a foreign-key error)
    but not for plain updates or other accesses."""
    if not memory_ids:
        return
    # Whether this access counts toward the rewards (its old usage row `u`).
    counts = f"(NOT %(paced)s OR u.last_counted_at IS NULL OR u.last_counted_at <= {_NOW} - %(gap)s)"
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH counted AS (
                INSERT INTO memories_memoryusage AS u (memory_id, access_count,
                    uncorrected_access_count, last_accessed_at, last_counted_at)
                SELECT id, 1, 1, now(), {_NOW}
                FROM memories_memory WHERE id = ANY(%(ids)s::uuid[])
                ORDER BY id FOR KEY SHARE
                ON CONFLICT (memory_id) DO UPDATE SET
                    access_count = u.access_count + 1,
                    uncorrected_access_count = u.uncorrected_access_count + {counts}::int,
                    last_counted_at = CASE WHEN {counts} THEN {_NOW} ELSE u.last_counted_at END,
                    last_accessed_at = now()
                -- (counted by this statement: its own timestamp, not its transaction's; a paced
                -- access that did not count keeps an older one, so it pays no reward again)
                RETURNING memory_id, uncorrected_access_count AS n, last_counted_at = {_NOW} AS counts
            )
            UPDATE memories_memory m SET
                confidence = CASE
                    WHEN counted.n %% %(every)s = 0 AND confidence < %(cap)s
                    THEN least(%(cap)s, confidence + %(reward)s)
                    ELSE confidence END,
                needs_review = CASE
                    WHEN counted.n >= %(clear)s AND NOT secrets_redacted AND NOT disputed
                        AND NOT ('obs:tainted' = ANY(tags))
                    THEN false ELSE needs_review END
            FROM counted
            WHERE m.id = counted.memory_id AND counted.counts AND (
                (counted.n %% %(every)s = 0 AND m.confidence < %(cap)s)
                OR (counted.n >= %(clear)s AND m.needs_review AND NOT m.secrets_redacted AND NOT m.disputed
                    AND NOT ('obs:tainted' = ANY(m.tags)))
            )
            """,
            {
                "ids": [str(i) for i in memory_ids],
                "paced": paced,
                "gap": UNPACED_ACCESS_GAP,
                "every": ACCESSES_FOR_REWARD,
                "cap": CONFIDENCE_CAP,
                "reward": ACCESS_REWARD,
                "clear": ACCESSES_TO_CLEAR_REVIEW,
            },
        )


def memory_dispute_cleared(*, memory_id: UUID) -> None:
    """No dispute on the memory is open any more: its disputed badge goes. Not a new version
    (what the memory says did not change)."""
    Memory.objects.filter(pk=memory_id).update(disputed=False)
