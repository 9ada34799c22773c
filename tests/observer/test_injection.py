"""What a session is served (injection.py): the start plan, /context in a session, step injection,
the A/B control group, and what each hand-over counts as."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.utils import timezone

from apps.insights import ab
from apps.memories.models import Memory
from apps.observer import services
from apps.observer.models import Session
from apps.observer.traces import Trace

pytestmark = pytest.mark.django_db(transaction=False)


def memories(**filters):
    return list(Memory.objects.filter(**filters).order_by("created_at"))


def test_context_takes_the_files_relative_to_the_sessions_root(agent, alice):
    from apps.memories.services import memory_create
    from apps.memories.validation import MemoryDraft

    def remember(**fields):
        return memory_create(project=alice.project, actor=alice.principal, draft=MemoryDraft(**fields))

    own = remember(type="gotcha", source="agent_explicit", confidence=0.8,
                   content="Order totals round half-even.", related_files=["orders/models.py"])  # fmt: skip
    other = remember(type="gotcha", source="user_taught", confidence=0.95,
                     content="Invoice totals round half-up.", related_files=["billing/tax.py"])  # fmt: skip
    root = "/home/ada/src/shop"
    session = agent.open(root=root)
    body = {"phase": "implement", "task": "how totals are rounded", "files": [f"{root}/orders/models.py"]}
    url = f"projects/{alice.project.id}/context"
    first = [
        m["id"] for m in agent.client.post(url, {**body, "session_id": session["id"]}).json()["memories"]
    ]
    assert first[0] == str(own.id)  # the file in play, once it is the repository's path
    without = [m["id"] for m in agent.client.post(url, body).json()["memories"]]
    assert without[0] == str(other.id)  # (no session, no root: the absolute path names no file)
    only_root = {"files": [f"{root}/"], "session_id": session["id"]}  # no file once the root is gone
    refused = agent.client.post(url, only_root)
    assert refused.status_code == 422 and refused.json()["error"]["details"] == {"field": "files"}


def test_notes_are_served_by_context_and_step_injection_at_once(agent):
    session = agent.open(task="fix refunds")
    trace = (
        Trace()
        .idle(5, "shop/refunds.py")
        .think("MEMORY:gotcha: Refunds must go through RefundService, never the model.")
    )
    agent.send(session["id"], trace.events)
    context = agent.client.post(
        f"projects/{agent.project_id}/context", {"task": "refunds", "session_id": session["id"]}
    ).json()
    assert context["session_notes"] == 1 and "RefundService" in context["text"]
    step = agent.client.post(f"sessions/{session['id']}/step-injection", {"step": 6}).json()
    assert (
        step["injection"]["type"] == "scratchpad_reflection"
        and "RefundService" in step["injection"]["content"]
    )
    again = agent.client.post(f"sessions/{session['id']}/step-injection", {"step": 7}).json()
    assert again["injection"] is None
    assert Memory.objects.count() == 0  # nothing permanent while the session runs


def test_step_injection_waits_for_step_five_and_never_repeats_a_memory(agent, alice):
    from apps.memories.services import memory_create
    from apps.memories.validation import MemoryDraft

    memory_create(
        project=alice.project,
        actor=alice.principal,
        draft=MemoryDraft(
            type="gotcha",
            content="pricing.py rounds half-even",
            related_files=["shop/pricing.py"],
            confidence=0.9,
        ),
    )
    session = agent.open()
    early = agent.client.post(
        f"sessions/{session['id']}/step-injection", {"step": 2, "files": ["shop/pricing.py"]}
    ).json()
    assert early["injection"] is None and early["reason"] == "warming_up"
    first = agent.client.post(
        f"sessions/{session['id']}/step-injection", {"step": 6, "files": ["shop/pricing.py"]}
    ).json()
    assert first["injection"]["type"] == "gotcha_injection" and "half-even" in first["injection"]["content"]
    second = agent.client.post(
        f"sessions/{session['id']}/step-injection", {"step": 7, "files": ["shop/pricing.py"]}
    ).json()
    assert second["injection"] is None


def test_step_injection_holds_a_disputed_memory_to_its_confidence_times_0_8(agent, alice):
    from apps.memories.services import memory_create, memory_feedback
    from apps.memories.validation import MemoryDraft

    def gotcha(content: str):
        return memory_create(
            project=alice.project, actor=alice.principal,
            draft=MemoryDraft(type="gotcha", content=content, related_files=["shop/pricing.py"], confidence=0.75),
        )  # fmt: skip

    gotcha("pricing.py rounds half-even")
    disputed = gotcha("pricing.py caches tax rates per region")
    memory_feedback(memory=disputed, actor=alice.principal, kind="dispute")
    session = agent.open()
    answer = agent.client.post(
        f"sessions/{session['id']}/step-injection", {"step": 6, "files": ["shop/pricing.py"]}
    ).json()
    # 0.75 is over the step threshold (0.65); 0.75 × 0.8 = 0.6 is not
    assert answer["injection"]["type"] == "gotcha_injection"
    assert "half-even" in answer["injection"]["content"] and "tax rates" not in answer["injection"]["content"]
    assert str(disputed.id) not in answer["injection"]["memory_ids"]


def test_memories_served_by_context_count_as_applied_in_the_session_once(agent, alice, charlie):
    from apps.memories.services import memory_create
    from apps.memories.validation import MemoryDraft

    memory = memory_create(
        project=alice.project, actor=alice.principal,
        draft=MemoryDraft(type="gotcha", content="Refund totals are cached for 60 s; invalidate on refund",
                          related_files=["shop/refunds.py"], confidence=0.9),
    )  # fmt: skip
    session = agent.open()
    body = {"task": "refund totals cache", "files": ["shop/refunds.py"], "session_id": session["id"]}
    for _ in range(2):
        context = agent.client.post(f"projects/{agent.project_id}/context", body).json()
        assert [m["id"] for m in context["memories"]] == [str(memory.id)]
    assert Session.objects.get(id=session["id"]).injected_memory_ids == [memory.id]
    # another tenant's session id, or a malformed one, changes nothing and is no error
    other = services.session_open(project=charlie.project, actor=charlie.principal, data={})
    for session_id in (str(other.id), "not-a-uuid"):
        response = agent.client.post(
            f"projects/{agent.project_id}/context", {**body, "session_id": session_id}
        )
        assert response.status_code == 200
    assert Session.objects.get(id=other.id).injected_memory_ids == []


def test_what_step_injection_and_session_start_hand_over_counts_as_accesses(agent, alice):
    from tests.memories.factories import make_memory

    gotcha = make_memory(alice, content="Refund webhooks arrive twice; dedupe on event id.",
                         related_files=["shop/refunds.py"], confidence=0.9)  # fmt: skip
    recipe = make_memory(
        alice, type="workflow_recipe", content="Refunds: edit the service, then run the tests.",
        payload={"task_pattern": "add refunds", "steps": [{"order": 1, "description": "edit shop/refunds.py"}]},
    )  # fmt: skip
    unit = {"hierarchy": ["epic_9", "story_9_2"]}
    state = make_memory(alice, type="work_state", content="Refund emails half done.", work_unit_ref=unit)
    session = agent.open(task="add refunds", work_unit=unit)
    assert [r["id"] for r in session["start_context"]["recipes"]] == [str(recipe.id)]
    assert session["start_context"]["work_state"]["memory_id"] == str(state.id)
    answer = agent.client.post(
        f"sessions/{session['id']}/step-injection", {"step": 6, "files": ["shop/refunds.py"]}
    ).json()
    assert answer["injection"]["memory_ids"] == [str(gotcha.id)]
    used = {
        m.id: m
        for m in Memory.objects.select_related("usage_row").filter(id__in=[gotcha.id, recipe.id, state.id])
    }
    assert all(m.access_count == 1 and m.last_accessed_at is not None for m in used.values())


def test_step_injection_short_circuits_a_search_for_something_known(agent, alice):
    from apps.memories.services import memory_create
    from apps.memories.validation import MemoryDraft

    memory_create(
        project=alice.project, actor=alice.principal,
        draft=MemoryDraft(type="module_insight", content="Order hooks are registered in shop/hooks.py via register_order_hook", confidence=0.9),
    )  # fmt: skip
    session = agent.open()
    answer = agent.client.post(
        f"sessions/{session['id']}/step-injection", {"step": 8, "searches": ["register_order_hook"]}
    ).json()
    assert answer["injection"]["type"] == "search_short_circuit"


def test_work_unit_outcome_and_resume_work_state(agent):
    unit = {"hierarchy": ["spec_9", "subtask_2"], "label": "Spec 9 / Subtask 2"}
    first = agent.open(work_unit=unit)
    agent.send(
        first["id"], Trace().edit("shop/cart.py").note("gotcha", "cart totals are cached per request").events
    )
    agent.complete(first["id"], outcome="abandoned")
    resumed = agent.open(work_unit=unit)
    state = resumed["start_context"]["work_state"]
    if resumed["ab_group"] != "control":
        assert state["edited_files"] == ["shop/cart.py"] and state["notes"] == [
            "cart totals are cached per request"
        ]
    agent.send(resumed["id"], Trace().edit("shop/cart.py").events)
    agent.validate(resumed["id"])
    agent.complete(resumed["id"])
    (outcome,) = memories(type="work_unit_outcome")
    assert outcome.payload["outcome"] == "success" and outcome.work_unit_ref["hierarchy"] == [
        "spec_9",
        "subtask_2",
    ]


def test_the_control_group_gets_no_memory(agent, monkeypatch):
    import uuid

    groups = [ab.assign(uuid.uuid4(), uuid.uuid4(), ab.Split()) for _ in range(2000)]
    assert 0.02 < groups.count("control") / len(groups) < 0.08
    monkeypatch.setattr(services, "ab_group", lambda session_id, project=None: "control")
    session = agent.open(task="refunds", files=["shop/refunds.py"])
    assert session["ab_group"] == "control" and session["start_context"]["prefetch"] == []
    agent.send(session["id"], Trace().idle(6, "shop/refunds.py").note("gotcha", "refunds are async").events)
    answer = agent.client.post(f"sessions/{session['id']}/step-injection", {"step": 7}).json()
    assert answer == {"step": 7, "injection": None, "reason": "control_group"}


def test_context_for_a_control_session_serves_and_records_nothing(agent, alice, monkeypatch):
    """/context served a control session its memories and listed them as applied in it: the
    A/B comparison then measured memory against memory."""
    from tests.memories.factories import make_memory

    memory = make_memory(alice, content="Refunds are asynchronous.", related_files=["shop/refunds.py"])
    monkeypatch.setattr(services, "ab_group", lambda session_id, project=None: "control")
    session = agent.open(task="refunds")
    body = {
        "phase": "implement",
        "task": "refunds",
        "files": ["shop/refunds.py"],
        "session_id": session["id"],
    }
    context = agent.client.post(f"projects/{alice.project.id}/context", body).json()
    assert context["memories"] == [] and context["text"] == "" and context["control_group"] is True
    assert Session.objects.get(id=session["id"]).injected_memory_ids == []
    assert Memory.objects.get(id=memory.id).access_count == 0
    del body["session_id"]  # (outside the session, the same ask is served)
    assert agent.client.post(f"projects/{alice.project.id}/context", body).json()["memories"]


def test_context_counts_an_access_once_per_session(agent, alice):
    """Every /context call within one session counted each memory again: a few calls cleared
    needs_review, which ten separate injections are meant to earn."""
    from tests.memories.factories import make_memory

    memory = make_memory(alice, content="Refunds are asynchronous.", related_files=["shop/refunds.py"])
    session = agent.open(task="refunds")
    body = {
        "phase": "implement",
        "task": "refunds",
        "files": ["shop/refunds.py"],
        "session_id": session["id"],
    }
    for _ in range(3):
        served = agent.client.post(f"projects/{alice.project.id}/context", body).json()
        assert [m["id"] for m in served["memories"]] == [str(memory.id)]
    assert Memory.objects.get(id=memory.id).access_count == 1
    assert Session.objects.get(id=session["id"]).injected_memory_ids == [memory.id]


def test_step_injection_on_a_completed_session_is_a_409(agent, alice):
    """It answered 200, injected, and counted accesses for a session already finalized."""
    from tests.memories.factories import make_memory

    memory = make_memory(alice, content="pricing.py rounds half-even", related_files=["shop/pricing.py"])
    session = agent.open()
    agent.complete(session["id"])
    response = agent.client.post(
        f"sessions/{session['id']}/step-injection", {"step": 6, "files": ["shop/pricing.py"]}
    )
    assert response.status_code == 409 and response.json()["error"]["code"] == "session_closed"
    assert Memory.objects.get(id=memory.id).access_count == 0


def test_session_start_never_offers_a_stale_recipe_or_work_state(agent, alice):

    from tests.memories.factories import make_memory

    steps = {
        "task_pattern": "add refunds",
        "steps": [
            {"order": 1, "description": "edit shop/refunds.py"},
            {"order": 2, "description": "run the tests"},
        ],
    }
    fresh = make_memory(
        alice, type="workflow_recipe", content="Refunds: edit the service, then test.", payload=steps
    )
    stale = make_memory(
        alice, type="workflow_recipe", content="Refunds: edit the old module, then test.", payload=steps
    )
    unit = {"hierarchy": ["epic_7", "story_7_1"]}
    state = make_memory(alice, type="work_state", content="Half way through refunds.", work_unit_ref=unit)
    Memory.objects.filter(id__in=[stale.id, state.id]).update(stale_at=timezone.now())

    session = agent.open(task="add refunds to the shop", work_unit=unit)

    offered = {recipe["id"] for recipe in session["start_context"]["recipes"]}
    assert str(fresh.id) in offered and str(stale.id) not in offered
    assert (session["start_context"]["work_state"] or {}).get("memory_id") != str(state.id)


@pytest.mark.django_db(transaction=True)
def test_two_step_injections_at_once_inject_a_memory_once(agent, alice):
    """Both read the session's injected memories before either wrote: each gave the same memory,
    which was listed twice and counted as two accesses."""
    from tests.memories.factories import make_memory
    from tests.processes import Worker, wait_until_another_session_waits_for_a_lock

    memory = make_memory(alice, content="pricing.py rounds half-even", related_files=["shop/pricing.py"])
    session = agent.open()
    url, body = f"sessions/{session['id']}/step-injection", {"step": 6, "files": ["shop/pricing.py"]}
    with transaction.atomic():
        Session.objects.select_for_update().get(id=session["id"])  # (as a third request holding it)
        steps = [Worker(lambda: agent.client.post(url, body).json()) for _ in range(2)]
        wait_until_another_session_waits_for_a_lock()
    answers = [step.finish() for step in steps]
    assert sorted(a["injection"] is None for a in answers) == [False, True]
    assert Session.objects.get(id=session["id"]).injected_memory_ids == [memory.id]
    assert Memory.objects.get(id=memory.id).access_count == 1


def test_resuming_after_a_session_that_never_completed_sees_its_notes(agent):
    """The work state read the stored checkpoint, which a session under 500 events has not
    written yet: an agent that crashed mid-unit left its successor nothing."""
    unit = {"hierarchy": ["spec_4"], "label": "Spec 4"}
    crashed = agent.open(work_unit=unit)
    agent.send(crashed["id"], Trace().edit("shop/cart.py").note("gotcha", "cart totals are cached").events)
    state = agent.open(work_unit=unit)["start_context"]["work_state"]
    assert state["session_id"] == crashed["id"] and state["notes"] == ["cart totals are cached"]


def test_context_serves_only_a_running_sessions_notes(agent, alice):
    """A completed session's notes went to promotion; /context served them again as notes."""
    session = agent.open()
    agent.send(session["id"], Trace().note("gotcha", "refund webhooks retry for a day").events)
    body = {"phase": "implement", "task": "refunds", "session_id": session["id"]}
    assert agent.client.post(f"projects/{alice.project.id}/context", body).json()["session_notes"] == 1
    agent.complete(session["id"])
    assert agent.client.post(f"projects/{alice.project.id}/context", body).json()["session_notes"] == 0


def test_what_session_start_offers_counts_once_and_as_applied_in_the_session(agent, alice):
    """Session start counted its recipe as an access but not as injected: /context in the same
    session packed it and counted it again, and the session review left it out of "applied"."""
    from apps.review.selectors import session_review
    from tests.memories.factories import make_memory

    recipe = make_memory(
        alice, type="workflow_recipe", content="Refunds: edit the service, then run the tests.",
        payload={"task_pattern": "add refunds", "steps": [{"order": 1, "description": "edit shop/refunds.py"}]},
    )  # fmt: skip
    session = agent.open(task="add refunds")
    assert [r["id"] for r in session["start_context"]["recipes"]] == [str(recipe.id)]
    body = {"phase": "define", "task": "add refunds", "session_id": session["id"]}
    context = agent.client.post(f"projects/{agent.project_id}/context", body).json()
    assert str(recipe.id) in [m["id"] for m in context["memories"]]
    assert Memory.objects.get(id=recipe.id).access_count == 1
    stored = Session.objects.get(id=session["id"])
    assert stored.injected_memory_ids == [recipe.id]
    review = session_review(principal=alice.principal, project=alice.project, session=stored)
    assert [m.id for m in review.applied] == [recipe.id]


REFUND_FACTS = [
    "Refund webhooks retry for a day before giving up",
    "Refunds post a negative ledger line, never delete the charge",
    "Refund emails wait for the webhook, not the API answer",
    "Partial refunds round each line half-even",
    "Refunds over the charge are refused by the gateway",
    "Refund reasons are free text the gateway truncates at 500",
]


def _context_ids(
    agent, session_id: str = "", task: str = "refund webhooks ledger emails gateway"
) -> list[str]:
    body = {"phase": "implement", "task": task} | ({"session_id": session_id} if session_id else {})
    response = agent.client.post(f"projects/{agent.project_id}/context", body)
    assert response.status_code == 200, response.content
    return [m["id"] for m in response.json()["memories"]]


def test_a_sessions_own_promotions_are_not_served_back_to_it_but_are_to_another(agent):
    """Partial QA promotes a running session's notes; its /context already serves those notes
    first, and would have served them again as memories, as if the team knew them."""
    mine, theirs = agent.open(task="refunds"), agent.open(task="refunds")
    for unit, fact in enumerate(REFUND_FACTS, start=1):
        note = {
            "seq": unit,
            "type": "record_memory",
            "step": unit,
            "memory": {"type": "gotcha", "content": fact},
        }
        agent.send(mine["id"], [note])
        agent.validate(mine["id"], True, work_unit=f"subtask_{unit}")
    promoted = {str(m.id) for m in memories(session_id=mine["id"])}
    assert len(promoted) == len(REFUND_FACTS)
    assert promoted & set(_context_ids(agent, theirs["id"]))  # another session is given them
    assert promoted & set(_context_ids(agent))  # and so is a call naming no session
    own = agent.client.post(
        f"projects/{agent.project_id}/context",
        {"phase": "implement", "task": "refund webhooks ledger emails gateway", "session_id": mine["id"]},
    ).json()
    assert not promoted & {m["id"] for m in own["memories"]}
    assert own["session_notes"] == len(REFUND_FACTS)  # (its notes, served as its own)


def test_what_a_session_stored_itself_is_left_out_until_another_session_reinforces_it(agent, alice):
    from apps.memories.services import memory_create, memory_reinforce
    from apps.memories.validation import MemoryDraft

    mine, theirs = agent.open(task="refunds"), agent.open(task="refunds")
    stored = memory_create(  # (as an agent's `remember` in its session does)
        project=alice.project,
        actor=alice.principal,
        draft=MemoryDraft(type="gotcha", content=REFUND_FACTS[0], confidence=0.9, session_id=mine["id"]),
    )
    earlier = memory_create(
        project=alice.project,
        actor=alice.principal,
        draft=MemoryDraft(
            type="gotcha", content=REFUND_FACTS[1], confidence=0.9, session_id="an-earlier-one"
        ),
    )
    assert str(stored.id) in _context_ids(agent, theirs["id"])
    served = _context_ids(agent, mine["id"])
    assert str(stored.id) not in served and str(earlier.id) in served
    memory_reinforce(memory=stored, actor=alice.principal, session_id=theirs["id"])
    assert str(stored.id) in _context_ids(agent, mine["id"])  # another session vouched for it


def test_step_injection_does_not_hand_a_session_its_own_gotcha(agent, alice):
    from apps.memories.services import memory_create
    from apps.memories.validation import MemoryDraft

    mine, theirs = agent.open(), agent.open()
    memory_create(
        project=alice.project,
        actor=alice.principal,
        draft=MemoryDraft(
            type="gotcha",
            content="pricing.py rounds half-even",
            related_files=["shop/pricing.py"],
            confidence=0.9,
            session_id=mine["id"],
        ),
    )
    body = {"step": 6, "files": ["shop/pricing.py"]}
    own = agent.client.post(f"sessions/{mine['id']}/step-injection", body).json()
    assert own["injection"] is None
    other = agent.client.post(f"sessions/{theirs['id']}/step-injection", body).json()
    assert other["injection"]["type"] == "gotcha_injection" and "half-even" in other["injection"]["content"]
