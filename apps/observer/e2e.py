"""E2E observations: what the calls of browser and app-driving tools (an MCP server's, named
`mcp__<server>__<tool>` as Claude Code names them, or a loop's own `browser_click`) show about
the running application, classified without an LLM.

A call that failed and then worked on the same target is the lesson:
- `timing`: it worked after a wait (a wait call between, or an error that says the element was
  animating, loading, not yet visible or stable, or a timeout);
- `precondition`: it worked after other actions (those actions are what it needs first);
- `mcp_gotcha`: a failure that is the tool's own quirk (an invalid selector, an unsupported
  key, a protocol error), whether or not it later worked another way.
A failure never recovered from and not the tool's quirk may be a bug in the application, not a
fact about it, and teaches nothing here. Routine successful calls teach nothing either.

Pure code: no Django.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Tools the seeds' QA agent drives the app with, and the common browser verbs (Playwright's,
# Puppeteer's MCP servers), matched on the tool part of an MCP name or a bare tool name.
E2E_TOOLS = frozenset({
    "take_screenshot", "click_by_text", "fill_input", "get_page_structure", "eval", "send_keyboard_shortcut",
    "navigate", "click", "fill", "type", "hover", "press_key", "select_option", "screenshot", "snapshot",
    "evaluate", "wait_for", "drag", "upload_file", "go_back", "go_forward",
})  # fmt: skip
# An MCP server by these names drives a browser or an app: all its tools count.
E2E_SERVERS = re.compile(r"playwright|puppeteer|browser|electron|chrom|selenium|webdriver|cypress|e2e", re.I)
WAIT_TOOLS = re.compile(r"wait|sleep|delay", re.I)
NAVIGATION = re.compile(r"navigate|goto|go_to|open_url|open_page", re.I)
TIMING_ERROR = re.compile(
    r"timeout|timed out|animat|not (?:yet )?(?:visible|stable|attached|ready|interactable|enabled)|detached|"
    r"still loading|intercepts pointer events|not receive pointer events|transition",
    re.I,
)
TOOL_QUIRK = re.compile(
    r"invalid selector|unknown (?:key|tool|command)|not supported|unsupported|protocol error|mcp error|"
    r"invalid (?:argument|params|parameter)|execution context was destroyed|no such (?:tool|method)",
    re.I,
)
TARGET_ARGS = ("text", "selector", "element", "ref", "label", "name", "key", "url", "locator")
MAX_CALLS = 80


def tool_parts(tool: str) -> tuple[str, str]:
    """(server, tool) of `mcp__server__tool`; ("", tool) for a bare name."""
    if tool.startswith("mcp__"):
        server, _, name = tool[5:].partition("__")
        return server, name or server
    return "", tool


def is_e2e_tool(tool: str) -> bool:
    server, name = tool_parts(tool)
    base = name.lower().removeprefix("browser_")
    return base in E2E_TOOLS or bool(server and E2E_SERVERS.search(server))


def target_of(args: dict) -> str:
    """What a call acted on: the text, selector, key or address it names."""
    for key in TARGET_ARGS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())[:120]
    return ""


@dataclass
class Call:
    step: int
    tool: str
    target: str
    is_error: bool
    result: str


@dataclass
class Observation:
    observation_type: str
    tool: str
    target: str
    error: str
    app_state: str
    content: str
    before: list[str]

    @property
    def key(self) -> str:
        """What makes two sessions' observations one fact: its kind, tool, target and error."""
        return f"{self.observation_type}|{self.tool}|{self.target}|{self.error}"


def _label(call: Call) -> str:
    name = tool_parts(call.tool)[1]
    return f'`{name}` on "{call.target}"' if call.target else f"`{name}`"


def _state_before(calls: list[Call], index: int) -> str:
    """The address the app was at: the last navigation that worked before `index`."""
    for call in reversed(calls[:index]):
        if not call.is_error and NAVIGATION.search(tool_parts(call.tool)[1]) and call.target:
            return call.target
    return ""


def _recovery(calls: list[Call], index: int) -> int | None:
    failed = calls[index]
    for later in range(index + 1, len(calls)):
        call = calls[later]
        if call.tool == failed.tool and call.target == failed.target:
            return later if not call.is_error else None
    return None


def _observed(calls: list[Call], index: int, normalize) -> Observation | None:
    failed = calls[index]
    error = normalize(failed.result) if failed.result else "error"
    state = _state_before(calls, index)
    where = f" (at {state})" if state else ""
    if TOOL_QUIRK.search(failed.result):
        content = f"{_label(failed)} fails with the tool's own error: {error}{where}. Use it another way."
        return Observation("mcp_gotcha", failed.tool, failed.target, error, state, content, [])
    recovered = _recovery(calls, index)
    if recovered is None:
        return None
    between = calls[index + 1 : recovered]
    waited = any(WAIT_TOOLS.search(tool_parts(c.tool)[1]) for c in between)
    if waited or TIMING_ERROR.search(failed.result):
        content = f"{_label(failed)} fails until the UI settles ({error}){where}: wait before acting on it."
        return Observation("timing", failed.tool, failed.target, error, state, content, [])
    needed = [_label(c) for c in between if not c.is_error][:5]
    if not needed:
        return None  # the same call simply worked on a retry: nothing to tell
    content = f"{_label(failed)} works only after {', then '.join(needed)}{where} (before that: {error})."
    return Observation("precondition", failed.tool, failed.target, error, state, content, needed)


def classify(calls: list[Call], normalize=lambda text: text.strip()[:200]) -> list[Observation]:
    """The observations a session's E2E calls make, each once (its first occurrence).
    `normalize`: how an error's text is reduced to what stays the same between runs."""
    found: dict[str, Observation] = {}
    for index, call in enumerate(calls[:MAX_CALLS]):
        if not call.is_error:
            continue
        observation = _observed(calls, index, normalize)
        if observation is not None:
            found.setdefault(observation.key, observation)
    return list(found.values())
