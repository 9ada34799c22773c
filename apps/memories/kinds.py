"""The memory vocabulary: types, sources, scopes, phases and the product numbers tied to them.

Pure data (no Django import). The numbers are product decisions: default half-lives, phase
weights, source trust and packing budgets (docs/architecture.md lists what each one drives).
"""

from __future__ import annotations

import math
from enum import StrEnum

# The types themselves are shared with the client distribution (a device checks an offline
# memory's type by the same list): one definition, imported.
from memorysaas_client.kinds import TYPE_ALIASES as TYPE_ALIASES
from memorysaas_client.kinds import TYPE_NAMES as TYPE_NAMES
from memorysaas_client.kinds import MemoryKind as MemoryKind
from memorysaas_client.kinds import normalize_type as normalize_type


class Source(StrEnum):
    AGENT_EXPLICIT = "agent_explicit"
    OBSERVER_INFERRED = "observer_inferred"
    QA_AUTO = "qa_auto"
    MCP_AUTO = "mcp_auto"
    COMMIT_AUTO = "commit_auto"
    USER_TAUGHT = "user_taught"


class Scope(StrEnum):
    PERSONAL = "personal"
    PROJECT = "project"
    TEAM = "team"
    ORG = "org"


class Phase(StrEnum):
    DEFINE = "define"
    IMPLEMENT = "implement"
    VALIDATE = "validate"
    REFINE = "refine"
    EXPLORE = "explore"
    REFLECT = "reflect"


class RelationKind(StrEnum):
    REQUIRED_WITH = "required_with"
    CONFLICTS_WITH = "conflicts_with"
    VALIDATES = "validates"
    SUPERSEDES = "supersedes"
    DERIVED_FROM = "derived_from"


# Days; a type missing here does not decay. Decisions never decay.
DEFAULT_HALF_LIFE_DAYS: dict[str, float] = {
    "work_state": 7,
    "e2e_observation": 30,
    "error_pattern": 60,
    "gotcha": 60,
    "module_insight": 90,
    "dead_end": 90,
    "causal_dependency": 120,
    "workflow_recipe": 120,
    "task_calibration": 180,
}

# What each universal phase wants to see first.
PHASE_WEIGHTS: dict[str, dict[str, float]] = {
    "define": {
        "requirement": 1.5, "decision": 1.3, "workflow_recipe": 1.5, "task_calibration": 1.4,
        "pattern": 1.2, "work_state": 1.1, "preference": 1.0, "module_insight": 1.0,
        "gotcha": 0.8, "error_pattern": 0.7, "causal_dependency": 0.9, "dead_end": 1.2,
        "e2e_observation": 0.6, "prefetch_pattern": 0.5, "work_unit_outcome": 1.0, "context_cost": 1.3,
    },
    "implement": {
        "gotcha": 1.5, "error_pattern": 1.3, "causal_dependency": 1.3, "pattern": 1.2,
        "module_insight": 1.2, "prefetch_pattern": 1.1, "work_state": 1.0, "dead_end": 1.3,
        "workflow_recipe": 1.4, "work_unit_outcome": 0.9, "e2e_observation": 0.7,
        "requirement": 0.8, "decision": 0.7, "task_calibration": 0.5, "preference": 0.9, "context_cost": 0.4,
    },
    "validate": {
        "error_pattern": 1.5, "requirement": 1.4, "e2e_observation": 1.5, "gotcha": 1.2,
        "decision": 1.1, "module_insight": 0.9, "dead_end": 0.8, "work_state": 0.5,
        "prefetch_pattern": 0.3, "causal_dependency": 1.0, "task_calibration": 0.8,
        "workflow_recipe": 0.6, "work_unit_outcome": 1.1, "context_cost": 0.3,
    },
    "refine": {
        "pattern": 1.4, "error_pattern": 1.3, "gotcha": 1.2, "dead_end": 1.4, "decision": 1.0,
        "module_insight": 1.1, "work_state": 0.9, "requirement": 0.7, "e2e_observation": 0.8,
        "workflow_recipe": 1.0, "causal_dependency": 1.1, "work_unit_outcome": 0.8, "context_cost": 0.4,
    },
    "explore": {
        "decision": 1.4, "module_insight": 1.3, "pattern": 1.2, "workflow_recipe": 1.1,
        "requirement": 1.0, "preference": 1.0, "dead_end": 0.9, "work_unit_outcome": 1.0,
        "gotcha": 0.8, "error_pattern": 0.7, "e2e_observation": 0.9, "causal_dependency": 1.1,
        "task_calibration": 0.6, "context_cost": 0.5,
    },
    "reflect": {
        "work_unit_outcome": 1.5, "task_calibration": 1.4, "dead_end": 1.3, "error_pattern": 1.2,
        "decision": 1.2, "module_insight": 1.1, "e2e_observation": 1.0, "work_state": 0.7,
        "gotcha": 0.8, "context_cost": 1.3, "workflow_recipe": 0.6, "prefetch_pattern": 0.4,
    },
}  # fmt: skip

SOURCE_TRUST: dict[str, float] = {
    "user_taught": 1.4,
    "agent_explicit": 1.2,
    "qa_auto": 1.1,
    "mcp_auto": 1.0,
    "commit_auto": 1.0,
    "observer_inferred": 0.85,
}

DISPUTE_PENALTY = 0.8

# Context packing: total budget and per-type share of it.
PACKING: dict[str, tuple[int, dict[str, float]]] = {
    "define": (2500, {"workflow_recipe": 0.30, "requirement": 0.20, "decision": 0.20, "dead_end": 0.15,
                      "task_calibration": 0.10, "other": 0.05}),
    "implement": (3000, {"gotcha": 0.30, "error_pattern": 0.25, "causal_dependency": 0.15, "pattern": 0.15,
                         "dead_end": 0.10, "other": 0.05}),
    "validate": (2500, {"error_pattern": 0.30, "requirement": 0.25, "e2e_observation": 0.25,
                        "work_unit_outcome": 0.15, "other": 0.05}),
    "refine": (2000, {"error_pattern": 0.35, "gotcha": 0.25, "dead_end": 0.20, "pattern": 0.15,
                      "other": 0.05}),
    "explore": (2000, {"module_insight": 0.40, "decision": 0.25, "pattern": 0.20, "causal_dependency": 0.15}),
    "reflect": (1500, {"work_unit_outcome": 0.40, "task_calibration": 0.35, "dead_end": 0.15, "other": 0.10}),
}  # fmt: skip


def default_half_life(memory_type: str) -> float | None:
    days = DEFAULT_HALF_LIFE_DAYS.get(memory_type)
    return None if days is None or math.isinf(days) else float(days)


# Methodology phase names (the native plugin's) onto the six universal phases.
NATIVE_PHASES = {
    "planning": "define",
    "spec": "define",
    "coding": "implement",
    "qa_review": "validate",
    "qa_fix": "refine",
    "debugging": "refine",
    "insights": "explore",
}


def universal_phase(name: str | None) -> str:
    """A universal phase for a universal or native methodology phase name; `explore` otherwise."""
    key = (name or "").strip().lower()
    if key in Phase.__members__.values():
        return key
    return NATIVE_PHASES.get(key, Phase.EXPLORE.value)
