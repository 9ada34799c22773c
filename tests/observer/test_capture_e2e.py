"""Browser and app-driving tool calls become e2e_observation memories (source mcp_auto) with their
payload; the e2e_observation and work_state payloads are validated wherever memories are made."""

from __future__ import annotations

import pytest

from apps.memories.models import Memory
from apps.observer import e2e
from apps.observer.traces import Trace

pytestmark = pytest.mark.django_db(transaction=False)

PW = "mcp__playwright__browser_"
APP = "mcp__electron__"


def timing_trace() -> Trace:
    return (
        Trace()
        ._tool(f"{PW}navigate", {"url": "http://localhost:3000/settings"}, "navigated")
        ._tool(f"{PW}click", {"element": "Save", "ref": "e12"},
               "TimeoutError: locator.click: Timeout 5000ms exceeded; element is not stable", error=True)
        ._tool(f"{PW}wait_for", {"time": 1}, "waited 1s")
        ._tool(f"{PW}click", {"element": "Save", "ref": "e12"}, "clicked")
    )  # fmt: skip


def precondition_trace() -> Trace:
    return (
        Trace()
        ._tool(
            f"{APP}click_by_text", {"text": "Memory Panel"}, "No element with text Memory Panel", error=True
        )
        ._tool(f"{APP}click_by_text", {"text": "Settings"}, "clicked")
        ._tool(f"{APP}click_by_text", {"text": "Enable Graphiti"}, "clicked")
        ._tool(f"{APP}click_by_text", {"text": "Memory Panel"}, "clicked")
    )


def e2e_memories():
    return list(Memory.objects.filter(type="e2e_observation").order_by("created_at"))


def test_tools_are_told_apart_by_their_names():
    assert e2e.is_e2e_tool("mcp__playwright__browser_click")
    assert e2e.is_e2e_tool("mcp__electron__take_screenshot")
    assert e2e.is_e2e_tool("mcp__my-chrome-driver__anything")  # a browser server: all its tools
    assert e2e.is_e2e_tool("browser_navigate")  # a home-grown loop's own tool
    assert not e2e.is_e2e_tool("mcp__github__create_issue")
    assert not e2e.is_e2e_tool("Bash") and not e2e.is_e2e_tool("Read")


def test_a_call_that_worked_after_a_wait_is_a_timing_observation(agent):
    agent.run(timing_trace(), passed=True)
    (memory,) = e2e_memories()
    assert memory.source == "mcp_auto" and memory.needs_review and memory.confidence == pytest.approx(0.75)
    assert memory.payload == {
        "observation_type": "timing",
        "mcp_tool_used": f"{PW}click",
        "app_state": "http://localhost:3000/settings",
    }
    assert '`browser_click` on "Save"' in memory.content and "wait" in memory.content
    assert {"e2e", "e2e:timing", "browser_click"} <= set(memory.tags)


def test_a_call_that_worked_after_other_actions_is_a_precondition(agent):
    agent.run(precondition_trace(), passed=True)
    (memory,) = e2e_memories()
    assert memory.payload["observation_type"] == "precondition"
    assert memory.payload["mcp_tool_used"] == f"{APP}click_by_text"
    assert '"Settings"' in memory.content and '"Enable Graphiti"' in memory.content


def test_a_tool_quirk_is_an_mcp_gotcha_even_in_a_failed_session(agent):
    trace = Trace()._tool(
        f"{APP}send_keyboard_shortcut", {"key": "Hyper+K"}, "Error: unknown key Hyper+K", error=True
    )
    agent.run(trace, passed=False, outcome="failure")
    (memory,) = e2e_memories()
    assert memory.payload["observation_type"] == "mcp_gotcha" and "unknown key" in memory.content


def test_routine_calls_other_mcp_tools_and_unrecovered_failures_teach_nothing(agent):
    trace = (
        Trace()
        ._tool(f"{PW}navigate", {"url": "http://localhost:3000"}, "navigated")
        ._tool(f"{PW}take_screenshot", {}, "saved screenshot.png")
        ._tool("mcp__github__create_issue", {"title": "x"}, "Error: timeout", error=True)
        ._tool("mcp__github__create_issue", {"title": "x"}, "created #12")
        ._tool(f"{PW}click", {"element": "Checkout"}, "Element not found", error=True)
    )
    agent.run(trace, passed=True)
    assert e2e_memories() == []


def test_the_same_observation_in_another_session_reinforces_it(agent):
    agent.run(timing_trace(), passed=True)
    second = agent.run(timing_trace(), passed=True)
    (memory,) = e2e_memories()
    assert second["reinforced_memory_ids"] == [str(memory.id)]


def create(agent, memory_type, payload, expect):
    body = {"type": memory_type, "content": "Seen in the app.", "payload": payload}
    response = agent.client.post(f"projects/{agent.project_id}/memories", body)
    assert response.status_code == expect, response.content
    return response.json()


def test_an_e2e_observation_payload_is_validated_when_created(agent):
    good = {"observation_type": "ui_behavior", "mcp_tool_used": f"{PW}snapshot", "app_state": "/cart"}
    assert create(agent, "e2e_observation", good, 201)["payload"] == good
    for bad in (
        {"observation_type": "vibes", "mcp_tool_used": "x"},
        {"observation_type": "timing"},
        {"observation_type": "timing", "mcp_tool_used": "x", "colour": "red"},
    ):
        assert "error" in create(agent, "e2e_observation", bad, 422)


def test_a_work_state_payload_holds_its_methodology_state(agent):
    state = {"methodology_state": {"completed_subtasks": ["1", "2"], "in_progress_subtask": "3"}}
    assert create(agent, "work_state", state, 201)["payload"] == state
    assert "error" in create(agent, "work_state", {"completed_subtasks": ["1"]}, 422)
    assert "error" in create(agent, "work_state", {"methodology_state": ["not", "an", "object"]}, 422)
    huge = {"methodology_state": {"notes": "x" * 20_001}}
    assert "error" in create(agent, "work_state", huge, 422)
