"""POST /api/v1/hooks/claude-code in process: sessions by Claude Code's id, events numbered on the
server, idempotent deliveries, the project from the key or the URL, the control group, and a
slow database answered without context."""

from __future__ import annotations

import random
import threading

import psycopg
import pytest

from apps.agents.models import HookDelivery, HookSession
from apps.memories.services import memory_create
from apps.memories.validation import MemoryDraft
from apps.observer.models import EventBatch, Session
from apps.observer.services import load_scratchpad
from apps.tenants import services as tenants
from apps.tenants.roles import Role
from tests.agents.recorded import CWD, deliveries
from tests.processes import Worker, database_url

pytestmark = pytest.mark.django_db(transaction=False)
HOOKS = "hooks/claude-code"


@pytest.fixture
def claude(alice, api_client, memory_group):
    """Claude Code's deliveries with alice's key, to alice's project named in the URL."""
    client = api_client(alice.key)

    def send(payload, *, project=alice.project.id, expect=200):
        url = f"{HOOKS}?project={project}" if project else HOOKS
        response = client.post(url, payload)
        assert response.status_code == expect, response.content
        return response.json()

    return send


def remember(person, content: str) -> None:
    memory_create(
        project=person.project,
        actor=person.principal,
        draft=MemoryDraft(
            type="gotcha", content=content, related_files=["shop/orders/signals.py"], confidence=0.9
        ),
    )


def events(session):
    batches = EventBatch.objects.filter(session=session).order_by("id")
    return sorted((e for b in batches for e in b.events), key=lambda e: e["seq"])


def content(session):
    """A session's events as what they say, without their numbering."""
    return sorted(
        (
            e["type"],
            e.get("tool", ""),
            e.get("step"),
            str(e.get("args", "")),
            e.get("result", e.get("text", "")),
            e.get("is_error"),
        )
        for e in events(session)
    )


def test_the_first_delivery_opens_one_session_named_by_claude_codes_id(claude, alice):
    start, prompt = deliveries("cc-1")[:2]
    assert claude(start) == {}  # (nothing learned yet: nothing to add)
    claude(prompt)
    session = Session.objects.get(external_id="cc-1")
    assert (session.project_id, session.root, session.client, session.status) == (
        alice.project.id,
        CWD,
        "claude-code",
        "open",
    )
    assert session.task.startswith("Orders placed with a discount code")
    assert HookSession.objects.filter(session=session, project=alice.project).count() == 1


def test_tool_events_become_calls_and_results_numbered_and_stepped_on_the_server(claude):
    for payload in deliveries("cc-2")[:-1]:
        claude(payload)
    session = Session.objects.get(external_id="cc-2")
    logged = events(session)
    assert [e["seq"] for e in logged] == list(range(1, len(logged) + 1))
    tools = [(e["type"], e.get("tool"), e["step"]) for e in logged if e["type"] != "reasoning"]
    assert tools == [
        ("tool_call", "Read", 1), ("tool_result", "Read", 1),
        ("tool_call", "Grep", 2), ("tool_result", "Grep", 2),
        ("tool_call", "Read", 3), ("tool_result", "Read", 3),
        ("tool_call", "Edit", 4), ("tool_result", "Edit", 4),  # (the call from PreToolUse)
        ("tool_call", "Bash", 5), ("tool_result", "Bash", 5),
        ("tool_call", "Bash", 6), ("tool_result", "Bash", 6),
    ]  # fmt: skip
    failed = next(e for e in logged if e["type"] == "tool_result" and e["step"] == 5)
    assert failed["is_error"] is True and "SECRET_KEY" in failed["result"]
    assert logged[0]["args"]["file_path"] == "shop/orders/models.py"  # (relative to the session's root)
    pad = load_scratchpad(session)
    assert [v["passed"] for v in pad.validations] == [False, True]  # the test runs' verdicts
    assert sorted(pad.edited()) == ["shop/orders/signals.py"]
    assert len([e for e in logged if e["type"] == "reasoning"]) == 2  # (each Stop's closing message)


def test_session_end_completes_the_session_and_its_finalize_runs(claude):
    for payload in deliveries("cc-3"):
        claude(payload)
    session = Session.objects.get(external_id="cc-3")
    assert (session.status, session.outcome, session.steps) == ("completed", "success", 6)
    assert session.report["validated"] is True


def test_repeated_and_reordered_deliveries_change_nothing(claude):
    clean = deliveries("cc-clean", n=1)
    for payload in clean:
        claude(payload)
    messy = deliveries("cc-messy", n=1)
    body, end = messy[:-1], messy[-1]
    # A PostToolUse before its PreToolUse, SessionStart after the first prompt, every delivery twice.
    edit_pre = next(i for i, d in enumerate(body) if d["hook_event_name"] == "PreToolUse")
    body[edit_pre], body[edit_pre + 1] = body[edit_pre + 1], body[edit_pre]
    body[0], body[1] = body[1], body[0]
    for payload in body:
        claude(payload)
        claude(payload)
    claude(end)
    a, b = Session.objects.get(external_id="cc-clean"), Session.objects.get(external_id="cc-messy")
    assert content(b) == content(a)
    fields = ("task", "root", "status", "outcome", "steps", "event_count", "edited_files")
    assert [getattr(b, f) for f in fields] == [getattr(a, f) for f in fields]
    same = ("gate", "gate_open", "validated", "signals")  # (what it promotes differs: it is the second)
    assert [b.report[k] for k in same] == [a.report[k] for k in same]
    # Once it has ended, the whole session delivered again, in any order, adds nothing.
    before = (b.event_count, EventBatch.objects.filter(session=b).count(), Session.objects.count())
    again = deliveries("cc-messy", n=1)
    random.Random(7).shuffle(again)
    for payload in again:
        assert claude(payload) is not None
    b.refresh_from_db()
    assert (b.event_count, EventBatch.objects.filter(session=b).count(), Session.objects.count()) == before


@pytest.mark.django_db(transaction=True)  # (each thread commits on its own connection)
def test_first_deliveries_at_once_open_one_session(alice, memory_group):
    from apps.agents.hooks import read_hook
    from apps.agents.services import hook_deliver

    tools = [d for d in deliveries("cc-4") if d["hook_event_name"] == "PostToolUse"][:4]
    start = threading.Barrier(len(tools))

    def deliver(payload):
        def work():
            start.wait(timeout=30)
            return hook_deliver(
                principal=alice.principal, project_id=alice.project.id, hook=read_hook(payload)
            )

        return work

    workers = [Worker(deliver(payload)) for payload in tools]
    assert [worker.finish() for worker in workers] == [{}] * len(tools)
    (session,) = Session.objects.filter(external_id="cc-4")
    assert session.event_count == 8 and [e["seq"] for e in events(session)] == list(range(1, 9))
    assert HookDelivery.objects.filter(hook_session__session=session).count() == 8


def test_the_project_comes_from_a_project_key_or_the_query(alice, api_client, memory_group):
    payload = deliveries("cc-5")[0]
    org_key = api_client(alice.key)
    missing = org_key.post(HOOKS, payload)
    assert missing.status_code == 404 and missing.json()["error"]["details"] == {"field": "project"}
    _, limited = tenants.api_key_create(
        organization=alice.org, actor=alice.principal, name="claude code", scopes=["observer:write", "memories:read"],
        project=alice.project,
    )  # fmt: skip
    assert api_client(limited).post(HOOKS, payload).status_code == 200
    assert Session.objects.get(external_id="cc-5").project_id == alice.project.id


def test_a_key_that_may_not_write_observer_events_is_refused(alice, api_client):
    _, reader = tenants.api_key_create(
        organization=alice.org,
        actor=alice.principal,
        name="reader",
        scopes=["memories:read"],
        project=alice.project,
    )
    response = api_client(reader).post(HOOKS, deliveries("cc-6")[0])
    assert response.status_code == 403 and not Session.objects.filter(external_id="cc-6").exists()


def test_another_tenants_project_is_not_found_and_its_session_ids_are_never_joined(
    claude, charlie, api_client, alice
):
    for payload in deliveries("cc-shared")[:3]:
        claude(payload)
    as_charlie = api_client(charlie.key)
    foreign = as_charlie.post(f"{HOOKS}?project={alice.project.id}", deliveries("cc-shared")[3])
    assert foreign.status_code == 404 and foreign.json()["error"]["code"] == "not_found"
    # The same Claude Code id in charlie's own project is charlie's own session.
    for payload in deliveries("cc-shared")[:3]:
        assert as_charlie.post(f"{HOOKS}?project={charlie.project.id}", payload).status_code == 200
    ours, theirs = (
        Session.objects.get(external_id="cc-shared", project=p) for p in (alice.project, charlie.project)
    )
    assert ours.event_count == theirs.event_count == 2 and ours.id != theirs.id
    assert theirs.organization_id == charlie.org.id and ours.task == theirs.task


def test_a_viewer_whose_key_had_observer_write_is_refused_once_demoted(
    person_with_role, api_client, memory_group
):
    member = person_with_role(Role.MEMBER)
    response = api_client(member.key).post(f"{HOOKS}?project={member.project.id}", deliveries("cc-7")[0])
    assert response.status_code == 200
    member.user.memberships.update(role=Role.VIEWER)
    response = api_client(member.key).post(f"{HOOKS}?project={member.project.id}", deliveries("cc-7")[1])
    assert response.status_code == 403


def test_events_it_does_not_handle_and_a_bad_body_are_answered_plainly(claude):
    notification = {
        "session_id": "cc-8",
        "hook_event_name": "Notification",
        "message": "Claude needs your permission",
    }
    assert claude(notification) == {}
    assert not Session.objects.filter(external_id="cc-8").exists()
    refused = claude({"hook_event_name": "Stop"}, expect=422)
    assert refused["error"]["code"] == "validation_error"


def test_the_control_group_gets_no_context_but_its_session_is_recorded(alice, api_client, monkeypatch):
    from apps.observer import services

    remember(alice, "Orders signals need the test settings")
    monkeypatch.setattr(services, "ab_group", lambda session_id, project=None: "control")
    client = api_client(alice.key)
    answers = [client.post(f"{HOOKS}?project={alice.project.id}", d).json() for d in deliveries("cc-9")[:7]]
    assert answers == [{}] * 7
    assert Session.objects.get(external_id="cc-9").event_count == 8  # (4 calls, 4 results)


@pytest.mark.django_db(transaction=True)  # (another connection locks a table the test's rows are in)
def test_a_slow_database_is_answered_in_time_without_context(claude, alice, monkeypatch):
    from apps.agents import services

    monkeypatch.setattr(services, "CONTEXT_BUDGET_MS", 300)
    remember(alice, "Orders placed with a discount code: the orders signal skips their confirmation email")
    start, prompt = deliveries("cc-10")[:2]
    claude(start)
    with psycopg.connect(database_url(), autocommit=False) as other:
        other.execute("LOCK TABLE memories_memory IN ACCESS EXCLUSIVE MODE")  # every read of it waits
        answer = claude(prompt)
    assert answer == {}  # the context was left out, not waited for
    session = Session.objects.get(external_id="cc-10")
    assert session.task.startswith("Orders placed")  # the write part was not held up
    again = claude({**prompt, "prompt": "What do we know about the discount code emails?"})
    assert "discount code" in again["hookSpecificOutput"]["additionalContext"]  # (free again: it is served)


def test_a_session_whose_end_never_came_is_completed_once_idle(claude):
    from datetime import timedelta

    from django.utils import timezone

    from apps.agents.services import IDLE_AFTER, hook_sessions_complete_idle
    from apps.agents.tasks import idle_sessions_task

    for payload in deliveries("cc-idle")[:-1]:  # (no SessionEnd)
        claude(payload)
    for payload in deliveries("cc-busy")[:3]:
        claude(payload)
    assert hook_sessions_complete_idle() == 0  # both were just heard from
    HookSession.objects.filter(session__external_id="cc-idle").update(
        last_delivery_at=timezone.now() - IDLE_AFTER - timedelta(minutes=1)
    )
    assert idle_sessions_task() == {"completed": 1}
    idle, busy = Session.objects.get(external_id="cc-idle"), Session.objects.get(external_id="cc-busy")
    assert (idle.status, idle.outcome, busy.status) == ("completed", "success", "open")
    assert hook_sessions_complete_idle() == 0  # (once)


def test_a_prompt_keeps_a_session_alive(claude):
    from datetime import timedelta

    from django.utils import timezone

    from apps.agents.services import IDLE_AFTER, hook_sessions_complete_idle

    recorded = deliveries("cc-talk")
    for payload in recorded[:3]:
        claude(payload)
    HookSession.objects.filter(session__external_id="cc-talk").update(
        last_delivery_at=timezone.now() - IDLE_AFTER - timedelta(minutes=1)
    )
    claude(recorded[10])  # a later prompt, no tool call
    assert hook_sessions_complete_idle() == 0


def test_the_idle_sweep_is_scheduled():
    from memorysaas.kernel.schedules import JOBS

    job = JOBS["agents.idle_sessions"]
    assert (job.func, job.schedule_type, job.minutes) == ("apps.agents.tasks.idle_sessions_task", "I", 30)


def test_before_an_edit_claude_is_told_what_is_known_about_the_file(claude, alice):
    remember(alice, "signals.py sends the confirmation email only for orders without a discount code")
    recorded = deliveries("cc-edit")
    # Three tool calls open the session: SessionStart's gotchas or a prompt's context would have
    # given the memory already, and a session is never given one twice.
    for payload in recorded[2:5]:
        claude(payload)
    for n in range(2):  # (step injection starts at the session's fifth step)
        claude({**recorded[2], "tool_use_id": f"toolu_more_{n}"})
    pre_edit = recorded[5]
    assert pre_edit["hook_event_name"] == "PreToolUse" and pre_edit["tool_name"] == "Edit"
    told = claude(pre_edit)["hookSpecificOutput"]
    assert told["hookEventName"] == "PreToolUse" and "without a discount code" in told["additionalContext"]
    assert "permissionDecision" not in told
    assert claude({**pre_edit, "tool_use_id": "toolu_edit_again"}) == {}  # (never the same memory twice)


def test_a_key_that_may_not_read_memories_records_but_is_told_nothing(alice, api_client, memory_group):
    remember(alice, "Orders signals need the test settings")
    _, writer = tenants.api_key_create(
        organization=alice.org,
        actor=alice.principal,
        name="writer",
        scopes=["observer:write"],
        project=alice.project,
    )
    client = api_client(writer)
    answers = [client.post(HOOKS, d).json() for d in deliveries("cc-writer")[:3]]
    assert answers == [{}, {}, {}]
    assert Session.objects.get(external_id="cc-writer").event_count == 2


def test_a_prompt_is_not_answered_with_what_its_own_session_stored(claude, alice):
    fact = "signals.py sends the confirmation email only for orders without a discount code"
    claude(deliveries("cc-own")[0])  # (SessionStart opens it)
    own = Session.objects.get(external_id="cc-own")
    memory_create(
        project=alice.project,
        actor=alice.principal,
        draft=MemoryDraft(type="gotcha", content=fact, confidence=0.9, session_id=str(own.id)),
    )
    prompt = deliveries("cc-own")[1]
    assert prompt["hook_event_name"] == "UserPromptSubmit"
    told_own = claude(prompt).get("hookSpecificOutput", {}).get("additionalContext", "")
    assert fact not in told_own
    told_other = claude(deliveries("cc-other")[1])["hookSpecificOutput"]["additionalContext"]
    assert fact in told_other
