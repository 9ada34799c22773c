"""Automatic capture from Claude Code's hooks: a failing test run's failures become error
patterns, and a browser MCP server's calls e2e observations, when the session ends."""

from __future__ import annotations

import pytest

from apps.memories.models import Memory
from tests.agents.recorded import CWD

pytestmark = pytest.mark.django_db(transaction=False)

PYTEST_OUTPUT = "\n".join(
    [
        "Command exited with non-zero status code 1",
        *(f"shop/orders/tests/test_noise.py::test_{i} PASSED" for i in range(400)),  # a long run
        "=========================== short test summary info ============================",
        "FAILED shop/orders/tests/test_signals.py::test_discounted_order_is_confirmed - "
        "AssertionError: assert 0 == 1 (emails sent)",
        "1 failed, 400 passed in 2.31s",
    ]
)


def hook(session_id: str, name: str, n: int = 0, **fields):
    base = {"session_id": session_id, "cwd": CWD, "permission_mode": "default", "hook_event_name": name}
    if "tool_name" in fields:
        base["tool_use_id"] = f"toolu_{n:04d}"
    return {**base, **fields}


def session(session_id: str):
    mcp = "mcp__playwright__browser_"
    return [
        hook(session_id, "SessionStart", source="startup"),
        hook(session_id, "UserPromptSubmit", prompt="Discounted orders get no confirmation email."),
        hook(session_id, "PostToolUse", 1, tool_name="Read", tool_input={"file_path": f"{CWD}/shop/orders/signals.py"},
             tool_response={"type": "text", "file": {"content": "def send_confirmation(): ..."}}),
        hook(session_id, "PostToolUseFailure", 2, tool_name="Bash",
             tool_input={"command": "pytest shop/orders"}, error=PYTEST_OUTPUT, is_interrupt=False),
        hook(session_id, "PostToolUse", 3, tool_name=f"{mcp}navigate", tool_input={"url": "http://localhost:8000/cart"},
             tool_response=[{"type": "text", "text": "Navigated to http://localhost:8000/cart"}]),
        hook(session_id, "PostToolUseFailure", 4, tool_name=f"{mcp}click", tool_input={"element": "Apply code"},
             error="TimeoutError: Timeout 5000ms exceeded. Element is animating", is_interrupt=False),
        hook(session_id, "PostToolUse", 5, tool_name=f"{mcp}wait_for", tool_input={"time": 2},
             tool_response=[{"type": "text", "text": "Waited for 2"}]),
        hook(session_id, "PostToolUse", 6, tool_name=f"{mcp}click", tool_input={"element": "Apply code"},
             tool_response=[{"type": "text", "text": "Clicked"}]),
        hook(session_id, "SessionEnd", reason="prompt_input_exit"),
    ]  # fmt: skip


def test_a_failing_test_run_and_a_browser_session_are_captured_at_session_end(
    alice, api_client, memory_group
):
    client = api_client(alice.key)
    for payload in session("cc-capture"):
        response = client.post(f"hooks/claude-code?project={alice.project.id}", payload)
        assert response.status_code == 200, response.content
    (qa,) = Memory.objects.filter(source="qa_auto")
    assert qa.type == "error_pattern" and "test_discounted_order_is_confirmed" in qa.content
    assert "assert 0 == 1" in qa.content
    assert qa.related_files == ["shop/orders/tests/test_signals.py"]
    (seen,) = Memory.objects.filter(source="mcp_auto")
    assert seen.payload == {
        "observation_type": "timing",
        "mcp_tool_used": "mcp__playwright__browser_click",
        "app_state": "http://localhost:8000/cart",
    }


def test_a_git_commit_run_through_bash_tags_what_the_session_promotes(alice, api_client, memory_group):
    client = api_client(alice.key)
    sid = "cc-commit"
    note = "MEMORY:gotcha:Order confirmations are sent from shop/orders/signals.py, not the view."
    for payload in [
        hook(sid, "SessionStart", source="startup"),
        hook(sid, "PostToolUse", 1, tool_name="Edit",
             tool_input={"file_path": f"{CWD}/shop/orders/signals.py", "old_string": "a", "new_string": "b"},
             tool_response={"filePath": f"{CWD}/shop/orders/signals.py"}),
        hook(sid, "PostToolUse", 2, tool_name="Bash", tool_input={"command": "pytest shop/orders"},
             tool_response={"stdout": "3 passed in 0.4s", "stderr": ""}),
        hook(sid, "PostToolUse", 3, tool_name="Bash", tool_input={"command": "git add -A && git commit -m 'Fix'"},
             tool_response={"stdout": "[main 3f2a9c1] Fix\n 1 file changed, 1 insertion(+)", "stderr": ""}),
        hook(sid, "Stop", last_assistant_message=note),
        hook(sid, "SessionEnd", reason="prompt_input_exit"),
    ]:  # fmt: skip
        assert client.post(f"hooks/claude-code?project={alice.project.id}", payload).status_code == 200
    (memory,) = Memory.objects.filter(type="gotcha")
    assert memory.commit_sha == "3f2a9c1"
