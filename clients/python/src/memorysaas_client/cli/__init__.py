"""The `memorysaas` command.

    memorysaas login                      # approve this device in the dashboard; saves its key
    memorysaas remember "verify_jwt rejects skewed clocks" --type gotcha --file auth/tokens.py
    memorysaas search "jwt clock skew"    # the service, or the offline replica when it is away
    memorysaas context "add rate limiting to login" --file auth/views.py
    memorysaas sync [--watch]             # push offline work, pull the change feed
    memorysaas conflicts                  # offline edits waiting for a person
    memorysaas resolve 3f2a1b4c --keep mine   # or --keep theirs, or --content "…" for a merge
    memorysaas index [--full]             # the repository's changed files to the code graph
    memorysaas stale-check                # memories about files changed since their commit go stale
    memorysaas export --format markdown -o memories.md
    memorysaas connect claude-code        # or codex, cursor: hooks and MCP entries, merged in
    memorysaas mcp                        # a stdio MCP server, for agents that start one

Settings: `--url`, `--project` (and `--key`) over MEMORYSAAS_URL, MEMORYSAAS_PROJECT,
MEMORYSAAS_KEY, over what `login` saved.
"""

from __future__ import annotations

import click

# Each module registers its commands on the group.
from memorysaas_client.cli import account, agents, conflicts, indexing, memories, staleness, syncing  # noqa: F401
from memorysaas_client.cli.group import main


def run() -> None:
    main(prog_name="memorysaas")


def main_args(argv: list[str]) -> int:
    """Run the command with `argv` in this process and return its exit status (for tests)."""
    try:
        main.main(args=argv, prog_name="memorysaas", standalone_mode=False)
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0
