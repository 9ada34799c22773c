"""The memory types and the names they may be given by. Pure data (no Django): the server's
`apps.memories.kinds` imports them from here, so a device checks an offline memory's type by the
very list the server checks it by."""

from __future__ import annotations

from enum import StrEnum


class MemoryKind(StrEnum):
    GOTCHA = "gotcha"
    DECISION = "decision"
    PREFERENCE = "preference"
    PATTERN = "pattern"
    REQUIREMENT = "requirement"
    ERROR_PATTERN = "error_pattern"
    MODULE_INSIGHT = "module_insight"
    PREFETCH_PATTERN = "prefetch_pattern"
    WORK_STATE = "work_state"
    CAUSAL_DEPENDENCY = "causal_dependency"
    TASK_CALIBRATION = "task_calibration"
    E2E_OBSERVATION = "e2e_observation"
    DEAD_END = "dead_end"
    WORK_UNIT_OUTCOME = "work_unit_outcome"
    WORKFLOW_RECIPE = "workflow_recipe"
    CONTEXT_COST = "context_cost"


# Dex names map onto the 16 memory types.
TYPE_ALIASES: dict[str, str] = {
    "architecture": MemoryKind.MODULE_INSIGHT,
    "dependency": MemoryKind.MODULE_INSIGHT,
    "constraint": MemoryKind.REQUIREMENT,
    "convention": MemoryKind.PREFERENCE,
    "pitfall": MemoryKind.GOTCHA,
    "fix": MemoryKind.ERROR_PATTERN,
}
# Every name a memory's type may be given by (normalize_type also reads them in any case).
TYPE_NAMES = (*(str(kind) for kind in MemoryKind), *TYPE_ALIASES)


def normalize_type(name: str) -> str:
    """The memory type for `name` (a memory type or a Dex alias); ValueError for anything else."""
    key = name.strip().lower()
    if key in TYPE_ALIASES:
        return str(TYPE_ALIASES[key])
    return str(MemoryKind(key))
