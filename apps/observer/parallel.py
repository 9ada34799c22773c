"""When two sessions of one work unit count as parallel agents.

Sessions of one spec often run one after another: subtask 1, then subtask 2, each editing the
same files on purpose. Only agents that were at work at the same time can trip over each other's
edits, so two sessions are parallel when their active spans overlap, or when both clients said so
by naming the same `parallel_group` (an orchestrator that fans work out knows, even when one agent
happens to finish before the other starts).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Span:
    """A session's active span. `ended`: when it completed, or, still open, when it was last heard
    from (its last event batch; its start if it sent none): an open session that went quiet
    before another began edited nothing alongside it."""

    started: datetime
    ended: datetime
    declared: bool = False  # its client named the parallel group itself


def ran_in_parallel(mine: Span, other: Span) -> bool:
    """Both declared the group, or their spans overlap. Spans that only touch (one ended the
    instant the other started) ran one after the other."""
    if mine.declared and other.declared:
        return True
    return mine.started < other.ended and other.started < mine.ended
