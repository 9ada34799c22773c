"""The per-session A/B metrics: what each one is, and how a session's raw figures become the
values the rollups sum (pure: no Django).

- tool calls per task: the session's tool calls (a session is one task);
- re-reads: files the session read that an earlier session had already read (the project's
  file-access table held them before this session started);
- QA first-pass rate: sessions whose first validation passed, of those validated;
- dead-end re-entry rate: sessions that ended up reinforcing a `dead_end` memory that existed
  before they started, i.e. that tried a recorded failed approach again;
- user correction rate: memories flagged or corrected in the session ÷ memories used in it
  (pooled over the group's sessions);
- tokens per task: input + output tokens the session reported;
- steps over plan: steps taken minus the steps its plan announced (sessions with a plan);
- memories injected and used per session.

The graph boost rate is counted per retrieval, not per session (see retrieval.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MEAN, RATE = "mean", "rate"
RELATIVE, ABSOLUTE = "relative", "absolute"


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    higher_is_better: bool
    kind: str  # MEAN: values averaged; RATE: successes over trials
    effect: str  # how full is compared with control


METRICS: tuple[Metric, ...] = (
    Metric("tool_calls", "Tool calls per task", "calls", False, MEAN, RELATIVE),
    Metric("rereads", "Re-reads of files read in an earlier session", "files", False, MEAN, RELATIVE),
    Metric("qa_first_pass", "QA first-pass rate", "rate", True, RATE, ABSOLUTE),
    Metric("dead_end_reentry", "Dead-end re-entry rate", "rate", False, RATE, ABSOLUTE),
    Metric(
        "correction_rate", "User correction rate (flagged or corrected ÷ used)", "rate", False, RATE, ABSOLUTE
    ),
    Metric("tokens", "Tokens per task", "tokens", False, MEAN, RELATIVE),
    Metric("steps_over_plan", "Steps over plan", "steps", False, MEAN, ABSOLUTE),
    Metric("injected", "Memories injected per session", "memories", True, MEAN, ABSOLUTE),
    Metric("used", "Memories used per session", "memories", True, MEAN, ABSOLUTE),
)
BY_KEY = {m.key: m for m in METRICS}
GRAPH_BOOST = Metric(
    "graph_boost_rate", "Graph boost rate (boost changed the top 8)", "rate", True, RATE, ABSOLUTE
)


@dataclass(frozen=True)
class RawSession:
    """What the rollup reads about one finalized session."""

    tool_calls: int
    rereads: int
    first_validation: bool | None
    reentries: int
    tokens: list[int] | None  # the scratchpad's [input, output, peak input, steps with usage]
    planned_steps: int | None
    steps: int | None
    injected: int
    used: int
    corrected: int


def session_values(raw: RawSession) -> dict[str, Any]:
    """The SessionMetrics fields of one session."""
    tokens = raw.tokens or []
    return {
        "tool_calls": raw.tool_calls,
        "rereads": raw.rereads,
        "qa_first_pass": raw.first_validation,
        "dead_end_reentry": raw.reentries > 0,
        "tokens": tokens[0] + tokens[1] if len(tokens) >= 4 and tokens[3] > 0 else None,
        "steps_over_plan": raw.steps - raw.planned_steps
        if raw.planned_steps and raw.steps is not None
        else None,
        "injected": raw.injected,
        "used": raw.used,
        "corrected": raw.corrected,
    }


def contributions(fields: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Each metric's (n, value) for one session's fields: n = 0 leaves the session out of it."""
    out: dict[str, tuple[float, float]] = {}
    for key in ("tool_calls", "rereads", "tokens", "steps_over_plan", "injected", "used"):
        if fields[key] is not None:
            out[key] = (1, float(fields[key]))
    if fields["qa_first_pass"] is not None:
        out["qa_first_pass"] = (1, 1.0 if fields["qa_first_pass"] else 0.0)
    out["dead_end_reentry"] = (1, 1.0 if fields["dead_end_reentry"] else 0.0)
    if fields["used"]:
        out["correction_rate"] = (fields["used"], float(min(fields["corrected"], fields["used"])))
    return out
