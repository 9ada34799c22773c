"""Per-type payloads (payloads.py): well-formed ones accepted and normalised, malformed ones
refused with where they are wrong, and the text a payload adds to its memory's embedding."""

from __future__ import annotations

import pytest

from apps.memories.payloads import PayloadError, payload_text, validate_payload

GOOD_PAYLOADS = {
    "workflow_recipe": {
        "task_pattern": "add an API endpoint",
        "steps": [{"order": 1, "description": "add the schema"}, {"order": 2, "description": "route it"}],
    },
    "dead_end": {"approach_tried": "raise the clock skew", "why_it_failed": "tokens were expired"},
    "task_calibration": {
        "module": "auth",
        "average_actual_steps": 14,
        "average_planned_steps": 10,
        "ratio": 1.4,
        "sample_count": 5,
    },
    "causal_dependency": {"trigger_file": "schema.sql", "dependent_files": ["models.py"], "weight": 0.7},
    "work_unit_outcome": {"outcome": "success", "steps": 12},
}


@pytest.mark.parametrize("memory_type", sorted(GOOD_PAYLOADS))
def test_a_well_formed_payload_is_accepted(memory_type):
    assert validate_payload(memory_type, GOOD_PAYLOADS[memory_type]) == {
        **_defaults(memory_type),
        **GOOD_PAYLOADS[memory_type],
    }


def _defaults(memory_type: str) -> dict:
    return {
        "workflow_recipe": {"success_count": 0},
        "dead_end": {"alternative_used": "", "task_context": ""},
        "task_calibration": {"methodology": "native"},
        "work_unit_outcome": {"summary": ""},
    }.get(memory_type, {})


def test_recipe_steps_keep_their_fields_and_drop_unset_ones():
    payload = validate_payload("workflow_recipe", GOOD_PAYLOADS["workflow_recipe"])
    assert payload["steps"][0] == {"order": 1, "description": "add the schema"}


@pytest.mark.parametrize(
    ("memory_type", "payload", "bad_loc"),
    [
        ("workflow_recipe", {"task_pattern": "add an endpoint"}, ["steps"]),
        ("workflow_recipe", {"task_pattern": "add an endpoint", "steps": []}, ["steps"]),
        ("workflow_recipe", {"task_pattern": "x", "steps": [{"order": 0, "description": "a"}]}, ["steps", "0", "order"]),
        ("workflow_recipe", {"task_pattern": "x", "steps": [{"order": 1}]}, ["steps", "0", "description"]),
        ("dead_end", {"approach_tried": "retry"}, ["why_it_failed"]),
        ("dead_end", {"approach_tried": "", "why_it_failed": "no"}, ["approach_tried"]),
        ("dead_end", {"approach_tried": "a", "why_it_failed": "b", "mood": "sad"}, ["mood"]),
        ("task_calibration", {**GOOD_PAYLOADS["task_calibration"], "ratio": "fast"}, ["ratio"]),
        ("task_calibration", {**GOOD_PAYLOADS["task_calibration"], "ratio": -1}, ["ratio"]),
        ("task_calibration", {**GOOD_PAYLOADS["task_calibration"], "average_planned_steps": 0}, ["average_planned_steps"]),
        ("task_calibration", {**GOOD_PAYLOADS["task_calibration"], "sample_count": 0}, ["sample_count"]),
        ("causal_dependency", {"trigger_file": "a.py", "dependent_files": ["b.py"], "weight": 2}, ["weight"]),
        ("work_unit_outcome", {"outcome": "meh"}, ["outcome"]),
    ],
)  # fmt: skip
def test_a_malformed_payload_is_rejected_with_where_it_is_wrong(memory_type, payload, bad_loc):
    with pytest.raises(PayloadError) as caught:
        validate_payload(memory_type, payload)
    assert bad_loc in [error["loc"] for error in caught.value.errors]


def test_empty_payloads_pass_and_schemaless_types_keep_any_object():
    assert validate_payload("workflow_recipe", {}) == {}
    assert validate_payload("dead_end", None) == {}
    assert validate_payload("gotcha", {"anything": [1, 2]}) == {"anything": [1, 2]}


def test_payload_text_gives_recipe_steps_and_dead_end_reasons():
    recipe = payload_text("workflow_recipe", GOOD_PAYLOADS["workflow_recipe"])
    assert recipe == "add an API endpoint add the schema route it"
    dead_end = payload_text("dead_end", {**GOOD_PAYLOADS["dead_end"], "alternative_used": "refresh"})
    assert dead_end == "raise the clock skew tokens were expired refresh"
    assert payload_text("task_calibration", GOOD_PAYLOADS["task_calibration"]) == ""
