"""Confidence that moves along relations between memories, when people judge one of them.

Confirming a memory (or marking it helpful) is evidence for the memories it `validates`; flagging
or disputing it is evidence against the memories `derived_from` it. That evidence is second hand,
so the step is small, scaled by the relation's own confidence, and bounded three ways:

- one hop: a propagated change never propagates further (a chain of inferred moves would shift
  memories nobody looked at, by amounts nobody could trace);
- per source: what one memory's feedback can move one related memory adds up to at most three
  steps in each direction, however often it is confirmed or flagged;
- absolute: a lift stops at the ceiling every other reward stops at, a drop at a floor, so a
  related memory is questioned, never written off (its own review decides that).

No Django here: the service feeds it numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Direction(StrEnum):
    LIFT = "lift"
    LOWER = "lower"


LIFT_STEP = 0.05  # as much as five uncorrected accesses earn
LOWER_STEP = 0.10  # half of what a flag costs the flagged memory itself
MAX_STEPS_PER_SOURCE = 3
CEILING = 0.95
FLOOR = 0.10

# Feedback kind → the direction it moves related memories, and the relation it follows:
# `validates` from the judged memory (it validates them), `derived_from` into it (they derive
# from it).
LIFTING_KINDS = frozenset({"confirm", "helpful"})
LOWERING_KINDS = frozenset({"flag", "dispute"})


@dataclass(frozen=True)
class Rule:
    direction: Direction
    relation_type: str
    outgoing: bool  # follow the judged memory's own relations (else the relations pointing at it)


LIFT_RULE = Rule(Direction.LIFT, "validates", outgoing=True)
LOWER_RULE = Rule(Direction.LOWER, "derived_from", outgoing=False)


def rule_for(kind: str) -> Rule | None:
    """How feedback of `kind` propagates, or None for kinds that move nothing (used, correct)."""
    if kind in LIFTING_KINDS:
        return LIFT_RULE
    if kind in LOWERING_KINDS:
        return LOWER_RULE
    return None


def propagated(
    current: float, *, direction: Direction, relation_confidence: float, moved_before: float
) -> float:
    """The related memory's new confidence. `moved_before`: how far feedback on the same source
    memory already moved it in this direction (a positive amount)."""
    step = (LIFT_STEP if direction == Direction.LIFT else LOWER_STEP) * max(
        0.0, min(1.0, relation_confidence)
    )
    room = MAX_STEPS_PER_SOURCE * (LIFT_STEP if direction == Direction.LIFT else LOWER_STEP) - moved_before
    if direction == Direction.LIFT:
        delta = min(step, room, CEILING - current)
    else:
        delta = min(step, room, current - FLOOR)
    if delta <= 1e-9:
        return current
    return round(current + delta if direction == Direction.LIFT else current - delta, 4)
