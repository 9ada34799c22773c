"""Claude Code's hook deliveries, read and mapped: the observer events a delivery carries, what
makes a repeated delivery a duplicate, and the JSON a hook answers with. Pure: no Django.

Shapes follow Claude Code's hooks reference (https://code.claude.com/docs/en/hooks): every
delivery has `session_id`, `transcript_path`, `cwd` and `hook_event_name`; tool events add
`tool_name`, `tool_input` and `tool_use_id`, PostToolUse `tool_response`, PostToolUseFailure
`error` and `is_interrupt`; UserPromptSubmit has `prompt`, SessionStart `source`, SessionEnd
`reason`, Stop `last_assistant_message`. A field of the wrong type is read as absent: a newer
Claude Code may change what it sends, and a hook must never fail because of it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apps.observer.text_rules import TEST_RUN

SESSION_START = "SessionStart"
USER_PROMPT = "UserPromptSubmit"
PRE_TOOL = "PreToolUse"
POST_TOOL = "PostToolUse"
POST_TOOL_FAILURE = "PostToolUseFailure"
STOP = "Stop"
SESSION_END = "SessionEnd"
HANDLED = frozenset({SESSION_START, USER_PROMPT, PRE_TOOL, POST_TOOL, POST_TOOL_FAILURE, STOP, SESSION_END})
# The events whose answer Claude Code reads `hookSpecificOutput.additionalContext` from.
TAKES_CONTEXT = frozenset({SESSION_START, USER_PROMPT, PRE_TOOL, POST_TOOL, POST_TOOL_FAILURE})
EDIT_TOOLS = frozenset({"Edit", "Write", "MultiEdit", "NotebookEdit"})

# Claude Code moves added context over 10,000 characters into a file and shows a preview.
CONTEXT_LIMIT = 9_500
RESULT_LIMIT = 8_000  # a tool's output, as the observer keeps it (what it reads is its start)
ARG_LIMIT = 2_000  # one argument's text (a Write's whole file is not needed to learn from it)
ARG_DEPTH = 4  # deeper structure is kept as its JSON text
ID_LIMIT = 200  # Session.external_id; Claude Code's ids are UUIDs
INTERRUPTED = "[interrupted by the user]"


@dataclass(frozen=True)
class Hook:
    """One delivery, read leniently."""

    event: str
    session_id: str
    cwd: str = ""
    prompt: str = ""
    source: str = ""
    reason: str = ""
    tool_name: str = ""
    tool_input: dict[str, Any] = field(default_factory=dict)
    tool_response: Any = None
    tool_use_id: str = ""
    error: str = ""
    is_interrupt: bool = False
    last_message: str = ""


def _text(payload: Mapping[str, Any], key: str) -> str:
    value = payload.get(key)
    return storable(value) if isinstance(value, str) else ""


def read_hook(payload: Mapping[str, Any]) -> Hook:
    tool_input = payload.get("tool_input")
    return Hook(
        event=_text(payload, "hook_event_name"),
        session_id=_text(payload, "session_id").strip()[:ID_LIMIT],
        cwd=_text(payload, "cwd"),
        prompt=_text(payload, "prompt"),
        source=_text(payload, "source"),
        reason=_text(payload, "reason"),
        tool_name=_text(payload, "tool_name")[:200],
        tool_input=tool_input if isinstance(tool_input, dict) else {},
        tool_response=payload.get("tool_response"),
        tool_use_id=_text(payload, "tool_use_id")[:100],
        error=_text(payload, "error"),
        is_interrupt=payload.get("is_interrupt") is True,
        last_message=_text(payload, "last_assistant_message"),
    )


def storable(text: str) -> str:
    """`text` as PostgreSQL can store it: no NUL, no lone surrogate (a binary file's bytes)."""
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def _bounded(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return storable(value[:ARG_LIMIT])
    if isinstance(value, bool | int | float) or value is None:
        return value
    if depth >= ARG_DEPTH:
        return storable(json.dumps(value, default=str)[:ARG_LIMIT])
    if isinstance(value, dict):
        return {storable(str(k))[:200]: _bounded(v, depth + 1) for k, v in list(value.items())[:50]}
    if isinstance(value, list | tuple):
        return [_bounded(v, depth + 1) for v in value[:50]]
    return storable(str(value)[:ARG_LIMIT])


# ---------------------------------------------------------------- tool events


def call_key(hook: Hook) -> str:
    """What makes a repeated delivery of a tool call a duplicate: its tool-use id, or (from a
    Claude Code that sends none) the call's content, so identical anonymous calls count once."""
    if hook.tool_use_id:
        return f"call:{hook.tool_use_id}"
    return "call:~" + _digest(hook.tool_name, hook.tool_input)


def result_key(hook: Hook) -> str:
    if hook.tool_use_id:
        return f"result:{hook.tool_use_id}"
    return "result:~" + _digest(hook.tool_name, hook.tool_input, hook.tool_response, hook.error)


def stop_key(hook: Hook) -> str:
    return "stop:" + _digest(hook.last_message)


def _digest(*parts: Any) -> str:
    blob = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.blake2b(blob.encode("utf-8", "replace"), digest_size=16).hexdigest()


def tool_call_event(hook: Hook) -> dict[str, Any]:
    return {"type": "tool_call", "tool": hook.tool_name or "?", "args": _bounded(hook.tool_input)}


def tool_result_event(hook: Hook) -> dict[str, Any]:
    """PostToolUse is a success; PostToolUseFailure an error, unless the user interrupted the
    tool (an interruption says nothing about the code, and would become an error pattern)."""
    if hook.event == POST_TOOL_FAILURE:
        if hook.is_interrupt:
            return {
                "type": "tool_result",
                "tool": hook.tool_name or "?",
                "is_error": False,
                "result": INTERRUPTED,
            }
        return {"type": "tool_result", "tool": hook.tool_name or "?", "is_error": True,
                "result": storable((hook.error or "error")[:RESULT_LIMIT])}  # fmt: skip
    text = result_text(hook.tool_name, hook.tool_response)
    return {"type": "tool_result", "tool": hook.tool_name or "?", "is_error": False, "result": text}


def result_text(tool: str, response: Any) -> str:
    """A tool's output as the observer reads it: a Read's file text (imports), a Glob's or a
    Grep's file list (an empty one is an empty search), a Bash command's stdout and stderr."""
    text = _response_text(tool, response)
    return storable(text[:RESULT_LIMIT])


def _response_text(tool: str, response: Any) -> str:
    if response is None:
        return ""
    if isinstance(response, str):
        return response
    if isinstance(response, list):  # content blocks ([{"type": "text", "text": ...}])
        return "\n".join(str(b.get("text", "")) for b in response if isinstance(b, dict))
    if not isinstance(response, dict):
        return str(response)
    if tool == "Bash":
        return "\n".join(str(response.get(k) or "") for k in ("stdout", "stderr")).strip()
    file = response.get("file")
    if isinstance(file, dict) and isinstance(file.get("content"), str):
        return file["content"]
    if isinstance(response.get("content"), str):
        return response["content"]
    if isinstance(response.get("filenames"), list):
        return "\n".join(str(f) for f in response["filenames"])
    return json.dumps(response, default=str, ensure_ascii=False)


def reasoning_event(text: str) -> dict[str, Any]:
    """Claude's closing message of a turn: its `MEMORY:<type>:<text>` lines are explicit notes,
    and its self-corrections and dead-end sentences are signals, as any reasoning's."""
    return {"type": "reasoning", "text": storable(text[:50_000])}


def edited_file(hook: Hook) -> str:
    """The file an Edit or Write is about to change ("" for other tools)."""
    if hook.tool_name not in EDIT_TOOLS:
        return ""
    for key in ("file_path", "notebook_path", "path"):
        value = hook.tool_input.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()[:500]
    return ""


def test_command(hook: Hook) -> str:
    """The command when the tool call runs a test suite ("" otherwise): its result is the
    session's validation, as a QA step's would be."""
    if hook.tool_name != "Bash":
        return ""
    command = hook.tool_input.get("command")
    return command[:500] if isinstance(command, str) and TEST_RUN.search(command) else ""


_GIT_COMMIT = re.compile(r"\bgit\b[^|;&]*\bcommit\b")
# What `git commit` prints first: `[main 3f2a9c1] message`, `[main (root-commit) 3f2a9c1] …`.
_COMMITTED = re.compile(r"^\[[^\]\s]+(?: \([^)]*\))? ([0-9a-f]{7,64})\]", re.MULTILINE)


def commit_event(hook: Hook, result: str) -> dict[str, Any] | None:
    """A `git commit` the agent ran through Bash, as the observer's commit event (its files are
    not in git's output: the session's promoted memories all take it as the closing commit)."""
    command = hook.tool_input.get("command") if hook.tool_name == "Bash" else None
    if not isinstance(command, str) or not _GIT_COMMIT.search(command):
        return None
    found = _COMMITTED.search(result)
    return {"type": "commit", "sha": found.group(1), "files": []} if found else None


def test_report(hook: Hook, command: str) -> str:
    """A test run's output as its validation report: its end, where runners print the failures'
    summary (the observer mines those lines)."""
    if hook.event == POST_TOOL_FAILURE:
        output = hook.error or ""
    else:
        output = _response_text(hook.tool_name, hook.tool_response)
    return storable(f"$ {command}\n{output[-RESULT_LIMIT:]}")


def outcome_for(*, validated: bool | None, edited: bool) -> str:
    """The outcome of a session that Claude Code ended (SessionEnd says why it ended, never how
    the work went): its last test run's verdict, else `success` when it changed files and
    `abandoned` when it only looked around."""
    if validated is not None:
        return "success" if validated else "failure"
    return "success" if edited else "abandoned"


# ---------------------------------------------------------------- answers


def reply(event: str, text: str) -> dict[str, Any]:
    """The answer to a delivery: `additionalContext` where the event takes it, else nothing.
    Never a `decision` or a `permissionDecision`: the service informs, it does not block."""
    text = text.strip()
    if not text or event not in TAKES_CONTEXT:
        return {}
    if len(text) > CONTEXT_LIMIT:
        text = text[: CONTEXT_LIMIT - 1].rsplit("\n", 1)[0] + "\n…"
    return {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}


def start_plan_text(plan: Mapping[str, Any], gotchas: list[Mapping[str, Any]]) -> str:
    """The session-start plan as Claude reads it: files to read first, workflow recipes, where
    an unfinished piece of work stands, and the project's strongest warnings."""
    parts: list[str] = []
    prefetch = plan.get("prefetch") or []
    if prefetch:
        lines = [f"- {p['file']} ({'read in most sessions' if p.get('tier') == 'always' else 'often read'})"
                 for p in prefetch]  # fmt: skip
        parts.append("Files earlier sessions on this work read first:\n" + "\n".join(lines))
    recipes = plan.get("recipes") or []
    if recipes:
        parts.append("Workflow recipes:\n" + "\n".join(f"- {r['content']} {_cite(r)}" for r in recipes))
    state = plan.get("work_state")
    if state:
        parts.append(_work_state(state))
    if gotchas:
        parts.append(
            "Known gotchas in this project:\n"
            + "\n".join(f"- [{g['type']}] {g['content']} {_cite(g)}" for g in gotchas)
        )
    if not parts:
        return ""
    return "memorysaas: what earlier sessions in this project learned.\n\n" + "\n\n".join(parts)


def _cite(memory: Mapping[str, Any]) -> str:
    return f"[Memory #{str(memory.get('id', ''))[:8]}]" if memory.get("id") else ""


def _work_state(state: Mapping[str, Any]) -> str:
    if state.get("content"):
        return f"Where this work stands: {state['content']} {_cite({'id': state.get('memory_id')})}".rstrip()
    lines = [f"An earlier session on this work ended {state.get('outcome') or 'unfinished'}."]
    if state.get("edited_files"):
        lines.append("It edited: " + ", ".join(state["edited_files"][:10]))
    lines += [f"- note: {n}" for n in (state.get("notes") or [])]
    return "\n".join(lines)


def prompt_context_text(plan_text: str, context_text: str) -> str:
    return "\n\n".join(t for t in (plan_text.strip(), context_text.strip()) if t)
