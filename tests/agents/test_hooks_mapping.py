"""Claude Code hook payloads mapped to observer events and answers (apps.agents.hooks, pure)."""

from __future__ import annotations

import json

import pytest

from apps.agents import hooks as H
from tests.agents.recorded import deliveries, events_of


def hook(**payload):
    return H.read_hook({"session_id": "s1", "hook_event_name": "PostToolUse", **payload})


def test_the_recorded_session_reads_as_documented():
    recorded = [H.read_hook(d) for d in deliveries("abc", n=7)]
    assert [h.event for h in recorded][:3] == ["SessionStart", "UserPromptSubmit", "PostToolUse"]
    assert all(h.session_id == "abc" and h.cwd == "/home/dev/shop" for h in recorded)
    (failure,) = [h for h in recorded if h.event == "PostToolUseFailure"]
    assert failure.tool_name == "Bash" and "SECRET_KEY" in failure.error and not failure.is_interrupt
    assert recorded[-1].reason == "prompt_input_exit" and recorded[0].source == "startup"


def test_a_field_of_the_wrong_type_reads_as_absent():
    read = H.read_hook(
        {"session_id": 5, "hook_event_name": "PostToolUse", "tool_input": "x", "prompt": ["a"]}
    )
    assert (read.session_id, read.tool_input, read.prompt, read.event) == ("", {}, "", "PostToolUse")


def test_a_read_result_is_the_files_text_so_its_imports_are_seen():
    read = deliveries("abc")[2]
    event = H.tool_result_event(H.read_hook(read))
    assert event["type"] == "tool_result" and event["is_error"] is False
    assert event["result"].startswith("from django.db import models")


@pytest.mark.parametrize(
    ("tool", "response", "text"),
    [
        ("Grep", {"mode": "files_with_matches", "filenames": [], "numFiles": 0}, ""),
        ("Glob", {"filenames": ["a.py", "b/c.py"], "numFiles": 2}, "a.py\nb/c.py"),
        ("Bash", {"stdout": "ok", "stderr": "warn", "interrupted": False}, "ok\nwarn"),
        ("Grep", {"mode": "content", "content": "a.py:1:x", "numLines": 1}, "a.py:1:x"),
        ("mcp__x__y", [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}], "one\ntwo"),
        ("Task", "plain", "plain"),
    ],
)
def test_tool_responses_become_the_text_the_observer_reads(tool, response, text):
    assert H.result_text(tool, response) == text


def test_a_failure_is_an_error_result_and_an_interruption_is_not():
    failed = hook(hook_event_name="PostToolUseFailure", tool_name="Bash", error="exit 1")
    assert H.tool_result_event(failed) == {
        "type": "tool_result",
        "tool": "Bash",
        "is_error": True,
        "result": "exit 1",
    }
    stopped = hook(hook_event_name="PostToolUseFailure", tool_name="Bash", error="x", is_interrupt=True)
    assert H.tool_result_event(stopped)["is_error"] is False


def test_call_and_result_keys_follow_the_tool_use_id_else_the_content():
    with_id = hook(tool_name="Read", tool_input={"file_path": "/a"}, tool_use_id="toolu_1")
    assert (H.call_key(with_id), H.result_key(with_id)) == ("call:toolu_1", "result:toolu_1")
    anonymous = hook(tool_name="Read", tool_input={"file_path": "/a"}, tool_response="x")
    again = hook(tool_name="Read", tool_input={"file_path": "/a"}, tool_response="x")
    other = hook(tool_name="Read", tool_input={"file_path": "/b"}, tool_response="x")
    assert H.call_key(anonymous) == H.call_key(again) != H.call_key(other)
    assert H.result_key(anonymous) != H.call_key(anonymous)


def test_arguments_are_bounded_and_storable():
    big = hook(
        tool_name="Write",
        tool_input={
            "file_path": "/a",
            "content": "x\x00" * 5000,
            "deep": {"a": {"b": {"c": {"d": {"e": 1}}}}},
        },
    )
    args = H.tool_call_event(big)["args"]
    assert len(args["content"]) == H.ARG_LIMIT and "\x00" not in args["content"]
    assert isinstance(args["deep"]["a"]["b"]["c"], str)  # (kept as its JSON text)
    lone = hook(tool_name="Bash", tool_response={"stdout": "bad \ud800 byte"})
    H.tool_result_event(lone)["result"].encode("utf-8")  # no UnicodeEncodeError


def test_a_test_run_is_a_bash_call_that_runs_a_suite():
    assert H.test_command(
        hook(tool_name="Bash", tool_input={"command": "DJANGO_SETTINGS_MODULE=x pytest -q"})
    )
    assert H.test_command(hook(tool_name="Bash", tool_input={"command": "npm run test"}))
    assert not H.test_command(hook(tool_name="Bash", tool_input={"command": "git status"}))
    assert not H.test_command(hook(tool_name="Read", tool_input={"file_path": "pytest.ini"}))


def test_only_edits_name_a_file_to_inject_for():
    assert H.edited_file(hook(tool_name="Edit", tool_input={"file_path": "/r/a.py"})) == "/r/a.py"
    assert (
        H.edited_file(hook(tool_name="NotebookEdit", tool_input={"notebook_path": "/r/n.ipynb"}))
        == "/r/n.ipynb"
    )
    assert H.edited_file(hook(tool_name="Read", tool_input={"file_path": "/r/a.py"})) == ""


@pytest.mark.parametrize(
    ("validated", "edited", "outcome"),
    [(True, False, "success"), (False, True, "failure"), (None, True, "success"), (None, False, "abandoned")],
)
def test_the_outcome_is_the_last_test_verdict_else_whether_files_changed(validated, edited, outcome):
    assert H.outcome_for(validated=validated, edited=edited) == outcome


def test_answers_carry_context_only_where_claude_code_takes_it_and_never_a_decision():
    answer = H.reply("UserPromptSubmit", "remember this")
    assert answer == {
        "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "remember this"}
    }
    assert (
        H.reply("Stop", "text") == {}
        and H.reply("SessionEnd", "text") == {}
        and H.reply("PreToolUse", "  ") == {}
    )
    long = H.reply("SessionStart", "line\n" * 5000)["hookSpecificOutput"]["additionalContext"]
    assert len(long) <= H.CONTEXT_LIMIT
    assert "decision" not in json.dumps(answer) and "permissionDecision" not in json.dumps(answer)


def test_the_start_plan_text_lists_files_recipes_work_state_and_gotchas_with_citations():
    plan = {
        "prefetch": [
            {"file": "shop/orders/models.py", "tier": "always"},
            {"file": "shop/orders/signals.py", "tier": "often"},
        ],
        "recipes": [{"id": "0123456789abcdef", "content": "Read urls, edit views, run pytest"}],
        "work_state": {
            "session_id": "x",
            "outcome": "failure",
            "edited_files": ["a.py"],
            "notes": ["half done"],
        },
    }
    text = H.start_plan_text(
        plan, [{"id": "fedcba9876543210", "type": "gotcha", "content": "Use the test settings"}]
    )
    assert (
        "shop/orders/models.py (read in most sessions)" in text
        and "shop/orders/signals.py (often read)" in text
    )
    assert "[Memory #01234567]" in text and "[Memory #fedcba98]" in text and "half done" in text
    assert H.start_plan_text({"prefetch": [], "recipes": [], "work_state": None}, []) == ""


def test_every_recorded_event_is_handled():
    assert {d["hook_event_name"] for d in deliveries("x")} <= H.HANDLED
    assert len(events_of(deliveries("x"), "UserPromptSubmit")) == 2
