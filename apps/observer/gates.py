"""Promotion gates by session type (the table in docs/api/observer.md).

A gate says when a session may promote (`trigger`), how many new memories it may write
(`cap`), which signal classes count and with what minimum sessions and confidence reduction
(`rules`; None means every class at the table's minimum), and which explicit note types pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Rule:
    min_sessions: int | None = None  # None: the signal class's own minimum
    reduction: float = 0.0


@dataclass(frozen=True)
class Gate:
    trigger: str  # "validation" (build: validation passed) | "end" | "success" | "never"
    cap: int
    rules: dict[str, Rule] | None = None
    excluded: frozenset[str] = frozenset()
    note_types: frozenset[str] | None = None  # None: every type
    floor: float = 0.0  # candidates below this confidence are dropped (before the trust penalty)
    outcomes: bool = False  # writes work_unit_outcome / dead_end / calibration memories
    extras: tuple[str, ...] = field(default_factory=tuple)

    def allows(self, kind: str) -> bool:
        if kind in self.excluded:
            return False
        return self.rules is None or kind in self.rules

    def rule(self, kind: str) -> Rule:
        if self.rules is None:
            return Rule()
        return self.rules.get(kind, Rule())


GATES: dict[str, Gate] = {
    "build": Gate("validation", 20, None, floor=0.65, outcomes=True),
    "insights": Gate(
        "end",
        5,
        {
            "co_access": Rule(1, 0.15),
            "self_correction": Rule(1, 0.0),
            "repeated_grep": Rule(1, 0.1),
            "read_abandon": Rule(None, 0.1),
        },
    ),
    "roadmap": Gate("end", 3, {}, note_types=frozenset({"decision", "requirement"})),
    "terminal": Gate(
        "end",
        3,
        {"error_retry": Rule(2, 0.1), "sequence": Rule(3, 0.2)},
        excluded=frozenset({"step_overrun", "test_order"}),
    ),
    "changelog": Gate("never", 0, {}),
    "spec_creation": Gate(
        "success",
        3,
        {"file_access": Rule(1, 0.25)},
        note_types=frozenset({"requirement", "module_insight", "decision"}),
    ),
    "pr_review": Gate("success", 8, {"error_retry": Rule(1, 0.0), "self_correction": Rule(1, 0.0)}),
}

# Build pipelines with more than this many work units promote per validated unit.
INCREMENTAL_UNITS = 5


def gate_for(session_type: str) -> Gate:
    return GATES.get(session_type, GATES["build"])


def gate_open(gate: Gate, *, validated: bool | None, outcome: str) -> bool:
    """Whether the gate lets this session promote. `validated`: the last validation's result,
    None when there was none."""
    if gate.trigger == "never":
        return False
    if gate.trigger == "validation":
        return validated is True
    if gate.trigger == "success":
        return outcome == "success" and validated is not False
    return outcome != "abandoned" or validated is True
