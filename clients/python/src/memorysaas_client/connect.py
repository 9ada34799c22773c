"""The configuration that plugs an agent into memorysaas, and `memorysaas connect`, which merges
it into the agent's files without touching anything else there.

- Claude Code: the hooks in `.claude/settings.json` (HTTP hooks posting to
  `/api/v1/hooks/claude-code`; SessionStart as a command hook, the only kind Claude Code runs
  there) and the MCP server in the project's `.mcp.json`;
- Codex CLI: `[mcp_servers.memorysaas]` in `.codex/config.toml` (edited with tomlkit, so the
  file's comments and layout stay);
- Cursor: `mcpServers.memorysaas` in `.cursor/mcp.json`.

Every block names the key by its environment variable (`MEMORYSAAS_KEY`), never by value: the
files can be committed and shared. The same builders render the dashboard's Connect page, so what
it shows is what this command writes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

KEY_VAR = "MEMORYSAAS_KEY"
SERVER_NAME = "memorysaas"
HOOK_PATH = "/api/v1/hooks/claude-code"
EDIT_TOOLS = "Edit|Write|MultiEdit|NotebookEdit"
# event → (matcher or None, timeout in seconds). PreToolUse only before edits: the call itself is
# recorded from PostToolUse, PreToolUse is there to add what is known about the file.
CLAUDE_EVENTS: dict[str, tuple[str | None, int]] = {
    "SessionStart": (None, 10),
    "UserPromptSubmit": (None, 10),
    "PreToolUse": (EDIT_TOOLS, 5),
    "PostToolUse": ("*", 5),
    "PostToolUseFailure": ("*", 5),
    "Stop": (None, 5),
    "SessionEnd": (None, 5),
}
COMMAND_EVENTS = frozenset({"SessionStart"})  # Claude Code runs no http hook there
HTTP_KEYS = ("url", "headers", "http_headers", "bearer_token_env_var", "type")
STDIO_KEYS = ("command", "args", "type")


def hook_url(url: str, project_id: str) -> str:
    query = f"?project={project_id}" if project_id else ""
    return f"{url.rstrip('/')}{HOOK_PATH}{query}"


def mcp_url(url: str) -> str:
    return f"{url.rstrip('/')}/mcp"


def _claude_hook(event: str, url: str, project_id: str, timeout: int) -> dict[str, Any]:
    target = hook_url(url, project_id)
    if event in COMMAND_EVENTS:
        # stdin (the hook's input) is posted as is; -f keeps an error's body out of stdout, which
        # Claude Code would read as the hook's answer, and `|| true` makes any failure silent.
        command = (
            f'curl -fsS --max-time {timeout - 2} -X POST "{target}"'
            f" -H \"Authorization: Bearer ${KEY_VAR}\" -H 'Content-Type: application/json'"
            " --data-binary @- || true"
        )
        return {"type": "command", "command": command, "timeout": timeout}
    return {
        "type": "http",
        "url": target,
        "headers": {"Authorization": f"Bearer ${KEY_VAR}"},
        "allowedEnvVars": [KEY_VAR],
        "timeout": timeout,
    }


def claude_hooks(url: str, project_id: str) -> dict[str, list[dict[str, Any]]]:
    """`hooks` of `.claude/settings.json`: one matcher group per event."""
    hooks: dict[str, list[dict[str, Any]]] = {}
    for event, (matcher, timeout) in CLAUDE_EVENTS.items():
        group: dict[str, Any] = {"matcher": matcher} if matcher else {}
        group["hooks"] = [_claude_hook(event, url, project_id, timeout)]
        hooks[event] = [group]
    return hooks


def mcp_entry(agent: str, url: str, *, transport: str = "http") -> dict[str, Any]:
    """The MCP server's entry for `agent` (claude-code, codex, cursor): the remote server at
    `/mcp` with the key from the environment, or (`stdio`) the local `memorysaas mcp`, which uses
    the login and answers searches from the replica when the service is away."""
    if transport == "stdio":
        entry: dict[str, Any] = {"command": "memorysaas", "args": ["mcp"]}
        return {"type": "stdio", **entry} if agent == "claude-code" else entry
    if agent == "codex":
        return {"url": mcp_url(url), "bearer_token_env_var": KEY_VAR}
    if agent == "cursor":
        return {"url": mcp_url(url), "headers": {"Authorization": f"Bearer ${{env:{KEY_VAR}}}"}}
    return {"type": "http", "url": mcp_url(url), "headers": {"Authorization": f"Bearer ${{{KEY_VAR}}}"}}


# ---------------------------------------------------------------- the blocks, as text


def _json(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2) + "\n"


def blocks(url: str, project_id: str) -> dict[str, str]:
    """The text to paste, per file (the dashboard's Connect page shows these)."""
    codex = tomlkit.document()
    servers = tomlkit.table(is_super_table=True)
    servers[SERVER_NAME] = mcp_entry("codex", url)
    codex["mcp_servers"] = servers
    return {
        "claude_settings": _json({"hooks": claude_hooks(url, project_id)}),
        "claude_mcp": _json({"mcpServers": {SERVER_NAME: mcp_entry("claude-code", url)}}),
        "claude_mcp_command": (
            f"claude mcp add --transport http {SERVER_NAME} {mcp_url(url)}"
            f' --header "Authorization: Bearer ${KEY_VAR}"'
        ),
        "codex_config": tomlkit.dumps(codex),
        "cursor_mcp": _json({"mcpServers": {SERVER_NAME: mcp_entry("cursor", url)}}),
    }


# ---------------------------------------------------------------- merging into what is there


class ConfigError(ValueError):
    """An existing file this command will not overwrite (it is not the JSON or TOML it should be)."""


@dataclass(frozen=True)
class Change:
    path: Path
    what: str  # e.g. "PostToolUse hook" or "MCP server memorysaas"
    action: str  # added, updated, unchanged

    def __str__(self) -> str:
        return f"{self.action:<9} {self.what} in {self.path}"


def _is_ours(hook: Any) -> bool:
    if not isinstance(hook, dict):
        return False
    return HOOK_PATH in str(hook.get("url", "")) or HOOK_PATH in str(hook.get("command", ""))


def merge_claude_hooks(settings: dict[str, Any], ours: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    """Put our hook group in each event, in place: groups of other hooks stay as they are, and a
    hook of ours already there (an older URL, another project) is replaced, not doubled. Returns
    the action per event."""
    hooks = settings.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise ConfigError("`hooks` is not an object")
    actions: dict[str, str] = {}
    for event, (group,) in ours.items():
        groups = hooks.get(event, [])
        if not isinstance(groups, list):
            raise ConfigError(f"`hooks.{event}` is not a list")
        if group in groups:
            actions[event] = "unchanged"
            continue
        had_ours = False
        kept = []
        for existing in groups:
            if isinstance(existing, dict) and isinstance(existing.get("hooks"), list):
                theirs = [h for h in existing["hooks"] if not _is_ours(h)]
                had_ours = had_ours or len(theirs) < len(existing["hooks"])
                if not theirs:
                    continue
                existing = {**existing, "hooks": theirs}
            kept.append(existing)
        hooks[event] = [*kept, group]
        actions[event] = "updated" if had_ours else "added"
    return actions


def merge_server(servers: MutableMapping[str, Any], entry: dict[str, Any]) -> str:
    """Set our MCP server's entry in `servers`, in place. An entry of ours already there keeps
    its keys that are not ours (a tool filter, say) and loses those of the other transport."""
    current = servers.get(SERVER_NAME)
    if current is None:
        servers[SERVER_NAME] = dict(entry)
        return "added"
    if not isinstance(current, MutableMapping):
        raise ConfigError(f"the `{SERVER_NAME}` entry is not a table")
    other = STDIO_KEYS if "url" in entry else HTTP_KEYS
    stale = [key for key in current if key in other and key not in entry]
    differing = [key for key, value in entry.items() if current.get(key) != value]
    for key in stale:
        del current[key]
    for key in differing:
        current[key] = entry[key]
    return "updated" if stale or differing else "unchanged"


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists() or not path.read_text().strip():
        return {}
    try:
        document = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"{path} is not valid JSON ({error}); fix or move it, then run this again"
        ) from None
    if not isinstance(document, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return document


def _write_if_changed(path: Path, before: str | None, after: str) -> None:
    if before != after:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(after)


def _edit_json(path: Path, edit: Callable[[dict[str, Any]], list[Change]]) -> list[Change]:
    before = path.read_text() if path.exists() else None
    document = _read_json(path)
    changes = edit(document)
    if any(c.action != "unchanged" for c in changes):
        _write_if_changed(path, before, _json(document))
    return changes


def _mcp_servers(document: dict[str, Any], path: Path) -> dict[str, Any]:
    servers = document.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise ConfigError(f"`mcpServers` in {path} is not an object")
    return servers


def connect_claude_code(root: Path, *, url: str, project_id: str, transport: str = "http") -> list[Change]:
    settings_path = root / ".claude" / "settings.json"
    mcp_path = root / ".mcp.json"

    def hooks(document: dict[str, Any]) -> list[Change]:
        actions = merge_claude_hooks(document, claude_hooks(url, project_id))
        return [Change(settings_path, f"{event} hook", action) for event, action in actions.items()]

    def server(document: dict[str, Any]) -> list[Change]:
        action = merge_server(
            _mcp_servers(document, mcp_path), mcp_entry("claude-code", url, transport=transport)
        )
        return [Change(mcp_path, f"MCP server {SERVER_NAME}", action)]

    return [*_edit_json(settings_path, hooks), *_edit_json(mcp_path, server)]


def connect_cursor(root: Path, *, url: str, project_id: str, transport: str = "http") -> list[Change]:
    path = root / ".cursor" / "mcp.json"

    def server(document: dict[str, Any]) -> list[Change]:
        action = merge_server(_mcp_servers(document, path), mcp_entry("cursor", url, transport=transport))
        return [Change(path, f"MCP server {SERVER_NAME}", action)]

    return _edit_json(path, server)


def connect_codex(root: Path, *, url: str, project_id: str, transport: str = "http") -> list[Change]:
    path = root / ".codex" / "config.toml"
    before = path.read_text() if path.exists() else None
    try:
        document = tomlkit.parse(before or "")
    except TOMLKitError as error:
        raise ConfigError(
            f"{path} is not valid TOML ({error}); fix or move it, then run this again"
        ) from None
    if "mcp_servers" not in document:
        document["mcp_servers"] = tomlkit.table(is_super_table=True)
    servers = document["mcp_servers"]
    if not isinstance(servers, MutableMapping):
        raise ConfigError(f"`mcp_servers` in {path} is not a table")
    action = merge_server(servers, mcp_entry("codex", url, transport=transport))
    if action != "unchanged":
        _write_if_changed(path, before, tomlkit.dumps(document))
    return [Change(path, f"MCP server {SERVER_NAME}", action)]


AGENTS: dict[str, Callable[..., list[Change]]] = {
    "claude-code": connect_claude_code,
    "codex": connect_codex,
    "cursor": connect_cursor,
}
