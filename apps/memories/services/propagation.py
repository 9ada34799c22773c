"""Feedback on a memory moves the confidence of the memories related to it (the rules, steps and
bounds are in apps/memories/propagation.py), one hop, recorded row by row.

The feedback's own transaction only marks it pending and queues the work: applying it locks the
related memories, and doing that while the judged memory is locked could deadlock with feedback on
one of them going the other way. The task locks the feedback row first, so two runs of it (the
queue delivers at least once) apply it once.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from apps.memories.models import (
    ConfidencePropagation,
    Memory,
    MemoryFeedback,
    MemoryRelation,
)
from apps.memories.propagation import Direction, Rule, propagated, rule_for
from apps.memories.services.update import _save_change
from apps.tenants.principal import SYSTEM
from apps.tenants.services import audit_record

# Pending feedback older than this lost its task (queued on commit, it runs within seconds).
STRANDED_AFTER = timedelta(minutes=10)
STRANDED_BATCH = 500


def _relations(memory_id, rule: Rule):
    """The relations feedback on `memory_id` follows, each with the memory it moves."""
    if rule.outgoing:
        return MemoryRelation.objects.filter(
            memory_id=memory_id, relation_type=rule.relation_type, target_memory__isnull=False
        ).exclude(target_memory_id=memory_id)
    return MemoryRelation.objects.filter(
        target_memory_id=memory_id, relation_type=rule.relation_type
    ).exclude(memory_id=memory_id)


def _moved_id(relation: MemoryRelation, rule: Rule):
    return relation.target_memory_id if rule.outgoing else relation.memory_id


def propagation_queue(*, feedback: MemoryFeedback) -> bool:
    """In the feedback's transaction: when its kind moves related memories and the memory has
    any, mark it pending and queue the task that applies it on commit. Returns whether it did."""
    from memorysaas.kernel.queue import enqueue

    rule = rule_for(feedback.kind)
    if rule is None or not _relations(feedback.memory_id, rule).exists():
        return False
    MemoryFeedback.objects.filter(pk=feedback.pk).update(propagation_pending=True)
    enqueue("apps.memories.tasks.propagate_feedback", feedback.pk, group="memories.propagation")
    return True


def feedback_propagate(*, feedback_id: int) -> list[ConfidencePropagation]:
    """Apply pending feedback to the memories related to the judged one: each whose confidence
    moves gets a new version (change `propagated_lift` / `propagated_lower`), a
    ConfidencePropagation row and an audit row. Feedback already applied, or gone with its
    memory, changes nothing."""
    with transaction.atomic():
        feedback = (
            MemoryFeedback.objects.select_for_update()
            .filter(pk=feedback_id, propagation_pending=True)
            .first()
        )
        if feedback is None:
            return []
        rule = rule_for(feedback.kind)
        changes = _apply(feedback, rule) if rule is not None else []
        MemoryFeedback.objects.filter(pk=feedback.pk).update(propagation_pending=False)
    return changes


def _apply(feedback: MemoryFeedback, rule: Rule) -> list[ConfidencePropagation]:
    relations = {_moved_id(r, rule): r for r in _relations(feedback.memory_id, rule)}
    # Locked in id order, as memories_lock does, so two tasks moving overlapping sets cannot deadlock.
    targets = list(
        Memory.objects.select_for_update().filter(pk__in=list(relations), deprecated=False).order_by("pk")
    )
    moved = _moved_before(feedback.memory_id, [t.pk for t in targets], rule.direction)
    done = set(ConfidencePropagation.objects.filter(feedback=feedback).values_list("memory_id", flat=True))
    changes = []
    for target in targets:
        if target.pk in done:
            continue
        relation = relations[target.pk]
        before = target.confidence
        after = propagated(
            before,
            direction=rule.direction,
            relation_confidence=relation.confidence,
            moved_before=moved.get(target.pk, 0.0),
        )
        if after == before:
            continue
        changes.append(_record(feedback, rule, target, before, after))
    return changes


def _moved_before(source_id, target_ids, direction: Direction) -> dict:
    """How far earlier feedback on the source memory moved each target in this direction."""
    rows = (
        ConfidencePropagation.objects.filter(
            source_memory_id=source_id, memory_id__in=target_ids, direction=direction.value
        )
        .values("memory_id")
        .annotate(before=Sum("confidence_before"), after=Sum("confidence_after"))
    )
    return {row["memory_id"]: abs(row["after"] - row["before"]) for row in rows}


def _record(
    feedback: MemoryFeedback, rule: Rule, target: Memory, before: float, after: float
) -> ConfidencePropagation:
    target.confidence = after
    _save_change(target, SYSTEM, f"propagated_{rule.direction.value}", {"confidence"})
    change = ConfidencePropagation.objects.create(
        organization_id=target.organization_id,
        memory=target,
        source_memory_id=feedback.memory_id,
        feedback=feedback,
        feedback_kind=feedback.kind,
        actor_label=feedback.actor_label,
        relation_type=rule.relation_type,
        direction=rule.direction.value,
        confidence_before=before,
        confidence_after=after,
    )
    audit_record(
        actor=SYSTEM,
        action=f"memory.confidence_{rule.direction.value}",
        target=target,
        metadata={
            "source_memory_id": str(feedback.memory_id),
            "feedback": feedback.kind,
            "feedback_id": feedback.pk,  # (who gave it: on the feedback and propagation rows)
            "relation": rule.relation_type,
            "from": before,
            "to": after,
        },
    )
    return change


def propagations_stranded(*, now=None) -> list[int]:
    """Pending feedback whose task was lost (a broker that could not take it): queue it again."""
    from memorysaas.kernel.queue import enqueue

    cutoff = (now or timezone.now()) - STRANDED_AFTER
    ids = list(
        MemoryFeedback.objects.filter(propagation_pending=True, created_at__lt=cutoff)
        .order_by("created_at")
        .values_list("pk", flat=True)[:STRANDED_BATCH]
    )
    for feedback_id in ids:
        enqueue("apps.memories.tasks.propagate_feedback", feedback_id, group="memories.propagation")
    return ids
