"""Writing agent sessions as events: a small builder used by the tests, the evaluation traces
and the ingest benchmark, so a trace reads like what the agent did."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from typing import Any


class Trace:
    """Events of one session, numbered (`seq`) and stepped as an agent would send them.

    Each tool use is a step: a `tool_call`, its `tool_result`, and a `step_complete`.
    """

    def __init__(
        self, *, start: datetime | None = None, seconds_per_step: float = 5.0, tokens: int = 0
    ) -> None:
        self.events: list[dict[str, Any]] = []
        self.seq = 0
        self.step = 0
        self.clock = start or datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
        self.seconds_per_step = seconds_per_step
        self.tokens = tokens

    def _add(self, **event: Any) -> Trace:
        self.seq += 1
        self.events.append({"seq": self.seq, **event})
        return self

    def _tool(
        self,
        tool: str,
        args: dict[str, Any],
        result: str = "",
        *,
        error: bool = False,
        wait: float | None = None,
    ) -> Trace:
        self.step += 1
        self.clock += timedelta(seconds=self.seconds_per_step if wait is None else wait)
        ts = self.clock.isoformat()
        self._add(type="tool_call", step=self.step, tool=tool, args=args, ts=ts)
        self._add(type="tool_result", step=self.step, tool=tool, is_error=error, result=result)
        if self.tokens:
            self._add(
                type="step_complete",
                step=self.step,
                input_tokens=self.tokens,
                output_tokens=self.tokens // 20,
            )
        return self

    def read(self, path: str, result: str = "", *, wait: float | None = None) -> Trace:
        return self._tool("Read", {"file_path": path}, result or f"# {path}\n", wait=wait)

    def edit(self, path: str) -> Trace:
        return self._tool("Edit", {"file_path": path, "old_string": "a", "new_string": "b"}, "ok")

    def write(self, path: str) -> Trace:
        return self._tool("Write", {"file_path": path, "content": "..."}, "ok")

    def grep(self, pattern: str, result: str = "") -> Trace:
        return self._tool("Grep", {"pattern": pattern}, result)

    def glob(self, pattern: str, files: list[str]) -> Trace:
        return self._tool("Glob", {"pattern": pattern}, "\n".join(files))

    def bash(self, command: str, result: str = "ok", *, error: bool = False) -> Trace:
        return self._tool("Bash", {"command": command}, result, error=error)

    def web_search(self, query: str, result: str = "results") -> Trace:
        return self._tool("WebSearch", {"query": query}, result)

    def web_fetch(self, url: str, result: str = "page") -> Trace:
        return self._tool("WebFetch", {"url": url}, result)

    def think(self, text: str) -> Trace:
        return self._add(type="reasoning", step=self.step, text=text)

    def note(self, memory_type: str, content: str, files: list[str] | None = None) -> Trace:
        memory = {"type": memory_type, "content": content, "related_files": files or []}
        return self._add(type="record_memory", step=self.step, memory=memory)

    def plan(self, steps: int) -> Trace:
        return self._add(type="plan", step=self.step, planned_steps=steps)

    def tokens_used(self, input_tokens: int, output_tokens: int = 0) -> Trace:
        return self._add(
            type="step_complete", step=self.step, input_tokens=input_tokens, output_tokens=output_tokens
        )

    def commit(self, sha: str, files: list[str]) -> Trace:
        return self._add(type="commit", step=self.step, sha=sha, files=files)

    def idle(self, steps: int, path: str = "README.md") -> Trace:
        for _ in range(steps):
            self.read(path)
        return self


def session_spec(
    open_: dict[str, Any], trace: Trace, *, validation: bool | None, outcome: str, steps: int | None = None
) -> dict[str, Any]:
    """One recorded session as `eval_observer` replays it: the open body, the events, the
    validation (None: never validated) and the completion."""
    return {
        "open": open_,
        "events": trace.events,
        "validation": None
        if validation is None
        else {"passed": validation, "report": "" if validation else "2 tests failed"},
        "complete": {"outcome": outcome, "steps": steps},
    }


def trace_set(
    name: str, doc: str | None, sessions: list[dict[str, Any]], *, expected: list[dict], forbidden: list[dict]
) -> dict[str, Any]:
    """A trace file's content: its sessions, the memories they should produce and texts that must
    never be promoted (`eval_observer` replays it). The description is the doc's first line."""
    return {
        "name": name,
        "description": (doc or name).strip().splitlines()[0],
        "sessions": sessions,
        "expected": expected,
        "forbidden": forbidden,
    }


def print_trace_set(content: dict[str, Any]) -> None:
    """Write a trace file to stdout, as the fixtures' `__main__` records them."""
    json.dump(content, sys.stdout, indent=1)
    sys.stdout.write("\n")
