"""A workflow recipe counts a success when a session that was given it followed it (worked on
one of the files its steps name) and succeeded; once per session, however often its finalize
runs; never for a failed session or one that went elsewhere."""

from __future__ import annotations

from apps.memories.models import Memory
from apps.observer import services
from apps.observer.models import Session, SessionStatus
from tests.memories.factories import make_memory

RECIPE = {
    "task_pattern": "add refunds",
    "steps": [
        {"order": 1, "description": "Add the refund service.", "canonical_file": "shop/refunds.py"},
        {"order": 2, "description": "Run the tests."},
    ],
}


def _recipe(alice, **payload) -> Memory:
    return make_memory(
        alice,
        type="workflow_recipe",
        content="Refunds: add the service in shop/refunds.py, then run the tests.",
        confidence=0.7,
        payload={**RECIPE, **payload},
    )


def _session(agent, *, edit: str, passed: bool = True, outcome: str = "success") -> dict:
    session = agent.open(task="add refunds to the shop")
    events = [
        {"seq": 1, "type": "tool_call", "step": 1, "tool": "Read", "args": {"file_path": edit}},
        {"seq": 2, "type": "tool_call", "step": 2, "tool": "Edit", "args": {"file_path": edit}},
        {"seq": 3, "type": "tool_result", "step": 2, "tool": "Edit", "is_error": False, "result": "ok"},
    ]
    agent.send(session["id"], events)
    agent.validate(session["id"], passed)
    agent.complete(session["id"], outcome)
    return session


def test_a_followed_recipe_in_a_successful_session_counts_one_success(agent, alice):
    recipe = _recipe(alice, success_count=3)
    session = _session(agent, edit="shop/refunds.py")
    assert str(recipe.id) in {r["id"] for r in session["start_context"]["recipes"]}

    recipe.refresh_from_db()
    assert recipe.payload["success_count"] == 4 and recipe.payload["last_validated_at"]
    assert recipe.confidence == 0.75 and recipe.version == 2
    assert session["id"] in recipe.provenance_session_ids
    assert recipe.versions.first().change == "recipe_succeeded"
    stored = Session.objects.get(id=session["id"])
    assert stored.report["recipes_succeeded"] == [str(recipe.id)]


def test_a_session_counts_once_however_often_its_finalize_runs(agent, alice):
    recipe = _recipe(alice)
    session = _session(agent, edit="shop/refunds.py")
    # a second delivery of the finalize task, and the agent completing again
    assert Session.objects.get(id=session["id"]).status == SessionStatus.COMPLETED
    assert services.session_finalize(session["id"]) is None
    agent.complete(session["id"])
    recipe.refresh_from_db()
    assert recipe.payload["success_count"] == 1 and recipe.version == 2


def test_a_failed_session_or_one_that_did_not_follow_it_counts_nothing(agent, alice):
    recipe = _recipe(alice)
    _session(agent, edit="shop/refunds.py", passed=False)
    _session(agent, edit="shop/refunds.py", outcome="failure")
    _session(agent, edit="shop/orders.py")  # given the recipe, worked elsewhere
    recipe.refresh_from_db()
    assert recipe.payload.get("success_count", 0) == 0 and recipe.version == 1


def test_a_recipe_that_names_no_file_counts_when_it_was_given(agent, alice):
    recipe = make_memory(
        alice,
        type="workflow_recipe",
        content="Refunds: write the migration, then run the tests.",
        payload={"task_pattern": "add refunds", "steps": [{"order": 1, "description": "Run the tests."}]},
    )
    _session(agent, edit="shop/anything.py")
    recipe.refresh_from_db()
    assert recipe.payload["success_count"] == 1


def test_a_success_saves_the_recipe_from_the_unused_rule(agent, alice):
    from datetime import timedelta

    from django.utils import timezone

    from apps.memories.services import prune_preview

    recipe = _recipe(alice)
    Memory.objects.filter(id=recipe.id).update(created_at=timezone.now() - timedelta(days=90))

    def unused():
        rules = prune_preview(project=alice.project)["rules"]
        return next(r for r in rules if r["rule"] == "recipe_unused")

    assert unused()["count"] == 1
    _session(agent, edit="shop/refunds.py")
    assert unused()["count"] == 0
