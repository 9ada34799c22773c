"""A simulated population of agent sessions, fed through the real HTTP API (open, events,
validation, complete: the observer finalizes each one as it would in production).

The sessions are `changelog` sessions by default: the observer watches them as any other but
promotes nothing from them, which keeps 400 of them quick (a build session's promotions embed
new memories); what the A/B rollup reads is the same for every session type.

Each session's figures are its group's base plus a zero-mean noise cycle kept per group, so a
group's mean is its base whatever the random split hands it, while the values still vary (an
interval has real width). `tool_call_ratio` is full's tool calls over control's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from apps.observer.traces import Trace

NOISE = (-4, -2, 0, 2, 4, -3, 3, -1, 1, 0)
CONTROL_TOOL_CALLS = 16
TOKENS = 9_000


@dataclass
class Population:
    sessions: list[dict[str, Any]] = field(default_factory=list)
    groups: dict[str, int] = field(default_factory=lambda: defaultdict(int))


def _events(tool_calls: int, tokens: int, files: list[str]) -> list[dict[str, Any]]:
    trace = Trace().plan(tool_calls - 2)
    for i in range(tool_calls):
        if i % 3 == 2:
            trace.grep(f"pattern_{i}")
        else:
            trace.read(files[i % len(files)])
    trace.tokens_used(tokens, tokens // 20)
    return trace.events


def populate(
    agent: Any,
    n: int,
    *,
    tool_call_ratio: float,
    passed: Callable[[dict[str, Any]], bool] = lambda session: session["index"] % 3 != 0,
    before_events: Callable[[dict[str, Any]], None] | None = None,
    phase: str | None = None,
    session_type: str = "changelog",
) -> Population:
    population = Population()
    seen: dict[str, int] = defaultdict(int)
    for i in range(n):
        session = agent.open(
            task=f"task {i}", session_type=session_type, **({"phase": phase} if phase else {})
        )
        group = session["ab_group"]
        session["index"] = i
        k = seen[group]
        seen[group] += 1
        base = CONTROL_TOOL_CALLS if group == "control" else CONTROL_TOOL_CALLS * tool_call_ratio
        tool_calls = max(3, round(base + NOISE[k % len(NOISE)] * base / CONTROL_TOOL_CALLS))
        tokens = TOKENS + 500 * NOISE[(k + 3) % len(NOISE)]  # no effect on tokens in any group
        if before_events is not None:
            before_events(session)
        files = [f"module_{(i + j) % 7}.py" for j in range(4)]  # (at the root: no module synthesis)
        agent.send(session["id"], _events(tool_calls, tokens, files))
        agent.validate(session["id"], passed=passed(session))
        agent.complete(session["id"], outcome="success")
        population.sessions.append(session)
        population.groups[group] += 1
    return population
