"""The daily prune's rules: low confidence unused for 60 days, recipes without a successful use
for 60 days, a finished work unit's state and outcome; the preview names what the pass then
does, and a project's pass leaves other projects alone."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from apps.memories import services
from apps.memories.models import Memory, MemoryUsage
from tests.memories.factories import make_memory

RECIPE = {"task_pattern": "add an endpoint", "steps": [{"order": 1, "description": "Write the schema."}]}


def _aged(memory, days: int, *, now=None):
    Memory.objects.filter(id=memory.id).update(created_at=(now or timezone.now()) - timedelta(days=days))


def _unit(hierarchy, methodology="native"):
    return {"methodology": methodology, "hierarchy": hierarchy, "label": ""}


def _retired(*memories) -> dict:
    return dict(Memory.objects.filter(id__in=[m.id for m in memories]).values_list("id", "deprecated"))


def test_low_confidence_is_retired_after_60_days_unused_unless_verified_or_used(alice):
    now = timezone.now()
    # a long half-life, so only the low-confidence rule can name them
    weak = make_memory(alice, content="Weak and unused.", confidence=0.1, decay_half_life_days=365)
    verified = make_memory(
        alice, content="Weak but verified.", confidence=0.1, user_verified=True, decay_half_life_days=365
    )
    used = make_memory(alice, content="Weak but used last week.", confidence=0.1, decay_half_life_days=365)
    young = make_memory(alice, content="Weak and new.", confidence=0.1, decay_half_life_days=365)
    strong = make_memory(alice, content="Strong and unused.", confidence=0.5, decay_half_life_days=365)
    for m in (weak, verified, used, strong):
        _aged(m, 61, now=now)
    _aged(young, 30, now=now)
    MemoryUsage.objects.create(memory=used, access_count=1, last_accessed_at=now - timedelta(days=7))

    preview = services.prune_preview(project=alice.project, now=now)
    low = next(r for r in preview["rules"] if r["rule"] == "low_confidence")
    assert [m["id"] for m in low["memories"]] == [weak.id]

    report = services.memories_decay_and_prune(now=now, project=alice.project)
    assert report["rules"]["low_confidence"] == 1
    assert _retired(weak, verified, used, young, strong) == {
        weak.id: True, verified.id: False, used.id: False, young.id: False, strong.id: False
    }  # fmt: skip


def test_a_recipe_without_a_success_for_60_days_is_retired(alice):
    now = timezone.now()
    stale = make_memory(
        alice, type="workflow_recipe", content="Stale recipe.", payload=RECIPE, decay_half_life_days=3650
    )
    worked = make_memory(
        alice, type="workflow_recipe", content="Worked last month.", decay_half_life_days=3650,
        payload={**RECIPE, "last_validated_at": (now - timedelta(days=30)).isoformat(), "success_count": 4},
    )  # fmt: skip
    garbled = make_memory(
        alice, type="workflow_recipe", content="Odd date.", decay_half_life_days=3650,
        payload={**RECIPE, "last_validated_at": "last tuesday"},
    )  # fmt: skip
    for m in (stale, worked, garbled):
        _aged(m, 90, now=now)
    report = services.memories_decay_and_prune(now=now, project=alice.project)
    assert report["rules"]["recipe_unused"] == 2
    # an unreadable date counts as no success: the recipe's age decides
    assert _retired(stale, worked, garbled) == {stale.id: True, worked.id: False, garbled.id: True}


def test_a_finished_work_unit_retires_its_state_at_once_and_its_outcome_after_60_days(alice):
    now = timezone.now()
    ref = _unit(["12", "3"])
    state = make_memory(alice, type="work_state", content="Halfway through 12/3.", work_unit_ref=ref)
    outcome = make_memory(alice, type="work_unit_outcome", content="12/3 done.", work_unit_ref=ref,
                          payload={"outcome": "success", "steps": 9})  # fmt: skip
    other_state = make_memory(alice, type="work_state", content="Working on 13.", work_unit_ref=_unit(["13"]))
    gotcha = make_memory(alice, content="A gotcha learned in 12/3.", work_unit_ref=ref)
    _aged(state, 10, now=now)
    _aged(outcome, 5, now=now)

    services.memories_decay_and_prune(now=now, project=alice.project)
    assert _retired(state, outcome, other_state, gotcha) == {
        state.id: True, outcome.id: False, other_state.id: False, gotcha.id: False
    }  # fmt: skip
    _aged(state, 66, now=now)  # (the state was written before the unit finished)
    _aged(outcome, 61, now=now)
    assert services.memories_decay_and_prune(now=now, project=alice.project)["rules"]["work_unit_closed"] == 1
    assert Memory.objects.get(id=outcome.id).deprecated


def test_work_after_the_success_reopens_the_unit(alice):
    now = timezone.now()
    ref = _unit(["7"])
    outcome = make_memory(alice, type="work_unit_outcome", content="7 done.", work_unit_ref=ref,
                          payload={"outcome": "success"})  # fmt: skip
    _aged(outcome, 100, now=now)
    state = make_memory(alice, type="work_state", content="7 reopened: a regression.", work_unit_ref=ref)
    services.memories_decay_and_prune(now=now, project=alice.project)
    assert _retired(outcome, state) == {outcome.id: False, state.id: False}


def test_the_preview_names_exactly_what_the_pass_then_does(alice):
    now = timezone.now()
    a = make_memory(alice, content="Weak.", confidence=0.1)
    b = make_memory(alice, type="workflow_recipe", content="Old recipe.", payload=RECIPE)
    c = make_memory(alice, content="Retired long ago.")
    for m in (a, b):
        _aged(m, 200, now=now)
    Memory.objects.filter(id=c.id).update(deprecated=True, deprecated_at=now - timedelta(days=31))
    preview = services.prune_preview(project=alice.project, now=now)
    named = {m["id"] for r in preview["rules"] if r["action"] == "retire" for m in r["memories"]}
    doomed = {m["id"] for r in preview["rules"] if r["action"] == "delete" for m in r["memories"]}
    assert (preview["retire"], preview["delete"]) == (2, 1)
    assert Memory.objects.filter(deprecated=False).count() == 2  # nothing changed

    report = services.memories_decay_and_prune(now=now, project=alice.project)
    assert (report["deprecated"], report["deleted"]) == (2, 1)
    assert set(Memory.objects.filter(deprecated=True).values_list("id", flat=True)) == named
    assert not Memory.objects.filter(id__in=doomed).exists()
    # and a second pass finds nothing left to do
    again = services.memories_decay_and_prune(now=now, project=alice.project)
    assert (again["deprecated"], again["deleted"]) == (0, 0)


def test_a_project_pass_leaves_other_projects_alone(alice, charlie):
    now = timezone.now()
    mine = make_memory(alice, content="Weak, alice's.", confidence=0.1)
    theirs = make_memory(charlie, content="Weak, charlie's.", confidence=0.1)
    _aged(mine, 100, now=now)
    _aged(theirs, 100, now=now)
    assert services.prune_preview(project=alice.project, now=now)["retire"] == 1
    services.memories_decay_and_prune(now=now, project=alice.project)
    assert _retired(mine, theirs) == {mine.id: True, theirs.id: False}
    # the daily job (every project) reaches charlie's
    services.memories_decay_and_prune(now=now)
    assert Memory.objects.get(id=theirs.id).deprecated


def test_pinned_memories_are_never_retired(alice):
    now = timezone.now()
    pinned = make_memory(alice, content="Weak but pinned.", confidence=0.1, pinned=True)
    _aged(pinned, 400, now=now)
    assert services.memories_decay_and_prune(now=now, project=alice.project)["deprecated"] == 0
