"""Type-specific payloads (the extended types' structured fields), validated per memory type.

Pure pydantic, no Django. A type without a schema here accepts any JSON object; a type with
one rejects unknown fields and wrong shapes, so a client cannot store a half-formed recipe.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator

from memorysaas.kernel.jsontypes import JsonTyped


class _Payload(JsonTyped):
    model_config = ConfigDict(extra="forbid")


class RecipeStep(_Payload):
    order: int = Field(ge=1)
    description: str = Field(min_length=1, max_length=500)
    canonical_file: str | None = Field(None, max_length=500)
    canonical_line: int | None = Field(None, ge=1)


class WorkflowRecipePayload(_Payload):
    task_pattern: str = Field(min_length=1, max_length=300)
    steps: list[RecipeStep] = Field(min_length=1, max_length=50)
    last_validated_at: str | None = None
    success_count: int = Field(0, ge=0)


class DeadEndPayload(_Payload):
    approach_tried: str = Field(min_length=1, max_length=1000)
    why_it_failed: str = Field(min_length=1, max_length=1000)
    alternative_used: str = Field("", max_length=1000)
    task_context: str = Field("", max_length=1000)


class PrefetchPatternPayload(_Payload):
    always_read_files: list[str] = Field(default_factory=list, max_length=100)
    frequently_read_files: list[str] = Field(default_factory=list, max_length=100)
    module_trigger: str = Field("", max_length=300)
    session_count: int = Field(0, ge=0)


class TaskCalibrationPayload(_Payload):
    module: str = Field(min_length=1, max_length=300)
    methodology: str = Field("native", max_length=40)
    average_actual_steps: float = Field(ge=0)
    average_planned_steps: float = Field(gt=0)
    ratio: float = Field(ge=0)
    sample_count: int = Field(ge=1)


class CausalDependencyPayload(_Payload):
    trigger_file: str = Field(min_length=1, max_length=500)
    dependent_files: list[str] = Field(min_length=1, max_length=50)
    weight: float | None = Field(None, ge=0, le=1)


class WorkUnitOutcomePayload(_Payload):
    outcome: Literal["success", "failure", "abandoned"]
    steps: int | None = Field(None, ge=0)
    planned_steps: int | None = Field(None, ge=0)
    summary: str = Field("", max_length=2000)


class ContextCostPayload(_Payload):
    module: str = Field(min_length=1, max_length=300)
    average_tokens: float = Field(ge=0)
    sample_count: int = Field(ge=1)


E2E_OBSERVATION_TYPES = ("precondition", "timing", "ui_behavior", "test_sequence", "mcp_gotcha")


class E2EObservationPayload(_Payload):
    """What an agent saw the running application do through a browser or app-driving tool."""

    observation_type: Literal[E2E_OBSERVATION_TYPES]  # type: ignore[valid-type]
    mcp_tool_used: str = Field(min_length=1, max_length=200)
    app_state: str = Field("", max_length=500)


MAX_METHODOLOGY_STATE_CHARS = 20_000


class WorkStatePayload(_Payload):
    """Where a work unit was left, in its methodology's own terms (native: completed subtasks,
    the one in progress, key decisions; bmad: stories done, the current story; tdd: tests green
    and red): kept as it is and handed to the next session of the work unit."""

    methodology_state: dict[str, Any] = Field(default_factory=dict)

    @field_validator("methodology_state")
    @classmethod
    def bounded(cls, value: dict[str, Any]) -> dict[str, Any]:
        if len(json.dumps(value, ensure_ascii=False)) > MAX_METHODOLOGY_STATE_CHARS:
            raise ValueError(f"at most {MAX_METHODOLOGY_STATE_CHARS} characters of JSON")
        return value


PAYLOAD_SCHEMAS: dict[str, type[_Payload]] = {
    "workflow_recipe": WorkflowRecipePayload,
    "dead_end": DeadEndPayload,
    "prefetch_pattern": PrefetchPatternPayload,
    "task_calibration": TaskCalibrationPayload,
    "causal_dependency": CausalDependencyPayload,
    "work_unit_outcome": WorkUnitOutcomePayload,
    "context_cost": ContextCostPayload,
    "e2e_observation": E2EObservationPayload,
    "work_state": WorkStatePayload,
}


class PayloadError(ValueError):
    def __init__(self, memory_type: str, errors: list[dict[str, Any]]) -> None:
        super().__init__(f"invalid payload for {memory_type}")
        self.errors = errors


def validate_payload(memory_type: str, payload: dict[str, Any] | None) -> dict[str, Any]:
    """The payload normalised for its type; an empty payload is always allowed."""
    if not payload:
        return {}
    schema = PAYLOAD_SCHEMAS.get(memory_type)
    if schema is None:
        return dict(payload)
    try:
        return schema.model_validate(payload).model_dump(exclude_none=True)
    except ValidationError as exc:
        errors = [
            {"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]} for e in exc.errors()
        ]
        raise PayloadError(memory_type, errors) from None


def payload_text(memory_type: str, payload: dict[str, Any]) -> str:
    """Searchable words in a payload (recipe steps, dead-end reasons), for keyword and embedding."""
    if not payload:
        return ""
    if memory_type == "workflow_recipe":
        steps = " ".join(s.get("description", "") for s in payload.get("steps", []))
        return f"{payload.get('task_pattern', '')} {steps}".strip()
    if memory_type == "dead_end":
        keys = ("approach_tried", "why_it_failed", "alternative_used")
        return " ".join(str(payload.get(k, "")) for k in keys).strip()
    if memory_type == "e2e_observation":
        return f"{payload.get('mcp_tool_used', '')} {payload.get('app_state', '')}".strip()
    return ""
