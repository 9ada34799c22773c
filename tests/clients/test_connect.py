"""`memorysaas connect`: the files it writes parse, keep what was there, and a second run changes
nothing. The blocks are the ones the agents' docs give."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from memorysaas_client.connect import blocks, claude_hooks

from tests.clients.cli import run

ROOT = Path(__file__).resolve().parents[2]
URL = "http://memory.example:8000"
PROJECT = "6f1c2a34-0000-4000-8000-00000000abcd"
THEIR_HOOK = {"type": "command", "command": "echo formatted", "timeout": 30}


@pytest.fixture
def repo(tmp_path) -> Path:
    """A project whose agents are already configured with things of their own."""
    root = tmp_path / "repo"
    (root / ".claude").mkdir(parents=True)
    (root / ".claude" / "settings.json").write_text(
        json.dumps(
            {
                "permissions": {"allow": ["Bash(npm test)"]},
                "hooks": {"PostToolUse": [{"matcher": "Edit|Write", "hooks": [THEIR_HOOK]}]},
            }
        )
    )
    (root / ".mcp.json").write_text(
        json.dumps({"mcpServers": {"github": {"type": "http", "url": "https://gh"}}})
    )
    (root / ".codex").mkdir()
    (root / ".codex" / "config.toml").write_text(
        '# my codex settings\nmodel = "gpt-5"\n\n[mcp_servers.docs]\ncommand = "docs-mcp"  # local docs\n'
    )
    (root / ".cursor").mkdir()
    (root / ".cursor" / "mcp.json").write_text(json.dumps({"mcpServers": {"db": {"command": "db-mcp"}}}))
    return root


def connect(home: Path, repo: Path, agent: str, *extra: str):
    done = run(home, "--url", URL, "--project", PROJECT, "connect", agent, "--dir", str(repo), *extra)
    assert done.returncode == 0, done.stderr
    return done


def test_claude_code_gets_its_hooks_and_mcp_server_beside_what_was_there(tmp_path, repo):
    done = connect(tmp_path, repo, "claude-code")
    assert "added     PostToolUse hook" in done.stdout and "added     MCP server memorysaas" in done.stdout
    settings = json.loads((repo / ".claude" / "settings.json").read_text())
    assert settings["permissions"] == {"allow": ["Bash(npm test)"]}
    post = settings["hooks"]["PostToolUse"]
    assert post[0] == {"matcher": "Edit|Write", "hooks": [THEIR_HOOK]}  # theirs stays first, untouched
    assert post[1]["hooks"][0]["url"] == f"{URL}/api/v1/hooks/claude-code?project={PROJECT}"
    assert set(settings["hooks"]) == set(claude_hooks(URL, PROJECT))
    servers = json.loads((repo / ".mcp.json").read_text())["mcpServers"]
    assert servers["github"] == {"type": "http", "url": "https://gh"}
    assert servers["memorysaas"]["url"] == f"{URL}/mcp"

    before = (repo / ".claude" / "settings.json").read_bytes()
    again = connect(tmp_path, repo, "claude-code")
    assert "added" not in again.stdout and "updated" not in again.stdout
    assert (repo / ".claude" / "settings.json").read_bytes() == before


def test_a_new_address_replaces_our_hooks_instead_of_doubling_them(tmp_path, repo):
    connect(tmp_path, repo, "claude-code")
    moved = run(tmp_path, "--url", "https://memory.acme.dev", "--project", PROJECT, "connect", "claude-code",
                "--dir", str(repo))  # fmt: skip
    assert "updated   Stop hook" in moved.stdout
    settings = json.loads((repo / ".claude" / "settings.json").read_text())
    urls = [h.get("url") for g in settings["hooks"]["Stop"] for h in g["hooks"]]
    assert urls == [f"https://memory.acme.dev/api/v1/hooks/claude-code?project={PROJECT}"]
    assert settings["hooks"]["PostToolUse"][0] == {"matcher": "Edit|Write", "hooks": [THEIR_HOOK]}


def test_codex_keeps_the_files_comments_and_other_servers(tmp_path, repo):
    connect(tmp_path, repo, "codex")
    text = (repo / ".codex" / "config.toml").read_text()
    assert text.startswith("# my codex settings\n") and "# local docs" in text
    config = tomllib.loads(text)
    assert config["model"] == "gpt-5" and config["mcp_servers"]["docs"] == {"command": "docs-mcp"}
    assert config["mcp_servers"]["memorysaas"] == {
        "url": f"{URL}/mcp",
        "bearer_token_env_var": "MEMORYSAAS_KEY",
    }
    stdio = connect(tmp_path, repo, "codex", "--mcp", "stdio")
    assert "updated   MCP server memorysaas" in stdio.stdout
    config = tomllib.loads((repo / ".codex" / "config.toml").read_text())
    assert config["mcp_servers"]["memorysaas"] == {"command": "memorysaas", "args": ["mcp"]}
    assert "unchanged" in connect(tmp_path, repo, "codex", "--mcp", "stdio").stdout


def test_cursor_gets_its_server_beside_the_others(tmp_path, repo):
    connect(tmp_path, repo, "cursor")
    servers = json.loads((repo / ".cursor" / "mcp.json").read_text())["mcpServers"]
    assert servers["db"] == {"command": "db-mcp"}
    assert servers["memorysaas"] == {
        "url": f"{URL}/mcp",
        "headers": {"Authorization": "Bearer ${env:MEMORYSAAS_KEY}"},
    }


def test_a_file_that_does_not_parse_is_left_alone(tmp_path, repo):
    (repo / ".cursor" / "mcp.json").write_text("{not json")
    refused = run(tmp_path, "--url", URL, "connect", "cursor", "--dir", str(repo))
    assert refused.returncode == 1 and "is not valid JSON" in refused.stderr
    assert (repo / ".cursor" / "mcp.json").read_text() == "{not json"


def test_the_blocks_are_the_ones_the_agent_docs_give():
    """What the command writes and the Connect page shows is what docs/agents tells a person to
    paste: the hooks of claude-code.md, the MCP entries of mcp.md."""
    docs = ROOT / "docs" / "agents"
    hooks_doc = (docs / "claude-code.md").read_text()
    hooks = json.loads(re.search(r"```json\n(.*?)```", hooks_doc, re.S).group(1))
    assert hooks == {"hooks": claude_hooks("http://127.0.0.1:8000", "PROJECT_ID")}
    mcp_doc = (docs / "mcp.md").read_text()
    ours = blocks("http://127.0.0.1:8000", "PROJECT_ID")
    documented = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", mcp_doc, re.S)]
    assert json.loads(ours["claude_mcp"]) in documented and json.loads(ours["cursor_mcp"]) in documented
    codex = tomllib.loads(re.search(r"```toml\n(.*?)```", mcp_doc, re.S).group(1))
    assert tomllib.loads(ours["codex_config"]) == codex


def test_our_entry_keeps_what_the_person_added_to_it(tmp_path, repo):
    config = repo / ".codex" / "config.toml"
    config.write_text(
        '[mcp_servers.memorysaas]\nurl = "http://old:8000/mcp"\nenabled_tools = ["search_memory"]\n'
    )
    assert "updated   MCP server memorysaas" in connect(tmp_path, repo, "codex").stdout
    entry = tomllib.loads(config.read_text())["mcp_servers"]["memorysaas"]
    assert entry == {
        "url": f"{URL}/mcp",
        "bearer_token_env_var": "MEMORYSAAS_KEY",
        "enabled_tools": ["search_memory"],
    }


def test_a_toml_file_that_does_not_parse_is_left_alone(tmp_path, repo):
    config = repo / ".codex" / "config.toml"
    config.write_text("[mcp_servers\nbroken")
    refused = run(tmp_path, "--url", URL, "connect", "codex", "--dir", str(repo))
    assert refused.returncode == 1 and "is not valid TOML" in refused.stderr
    assert config.read_text() == "[mcp_servers\nbroken"
