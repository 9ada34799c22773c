"""`memorysaas connect` and `memorysaas mcp`: plugging agents in."""

from __future__ import annotations

from pathlib import Path

import click

from memorysaas_client.cli.group import Env, main, note
from memorysaas_client.connect import AGENTS, KEY_VAR, ConfigError


@main.command()
@click.argument("agent", type=click.Choice(sorted(AGENTS)))
@click.option(
    "--dir", "where", default=".", type=click.Path(file_okay=False, exists=True), help="The project's root."
)
@click.option(
    "--mcp",
    "transport",
    type=click.Choice(["http", "stdio"]),
    default="http",
    show_default=True,
    help="http: the service's /mcp with MEMORYSAAS_KEY; stdio: this machine's `memorysaas mcp` (works offline).",
)
@click.pass_obj
def connect(env: Env, agent: str, where: str, transport: str) -> None:
    """Write (or merge) memorysaas's hooks and MCP server into an agent's project files."""
    try:
        changes = AGENTS[agent](
            Path(where), url=env.profile.url, project_id=env.profile.project_id, transport=transport
        )
    except ConfigError as error:
        raise click.ClickException(str(error)) from None
    for change in changes:
        click.echo(str(change))
    if not env.profile.project_id:
        note("No project known: the hook URL names none, which only a key limited to one project can use.")
    if transport == "http" or agent == "claude-code":
        note(
            f'The agent reads the key from {KEY_VAR}: run `eval "$(memorysaas env)"` in the shell that starts it.'
        )


@main.command()
@click.pass_obj
def mcp(env: Env) -> None:
    """Serve the memorysaas MCP tools over stdio (an agent starts this command itself)."""
    from memorysaas_client.mcp_server import Backend, build_server  # (the MCP SDK loads only here)

    build_server(Backend(env.profile, env.client())).run("stdio")
