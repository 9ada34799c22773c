"""`memorysaas remember`, `search`, `context` and `export`: the project's memories, online or from the replica."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from memorysaas_client.cli.group import Env, main, memory_line, note
from memorysaas_client.errors import ApiError, MemorysaasError, Unreachable
from memorysaas_client.kinds import TYPE_NAMES
from memorysaas_client.replica import InvalidChange


@main.command()
@click.argument("content")
@click.option("--type", "type_", default="gotcha", show_default=True, type=click.Choice(TYPE_NAMES))
@click.option("--file", "files", multiple=True, help="A related file (repeatable).")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.pass_obj
def remember(env: Env, content: str, type_: str, files: tuple[str, ...], tags: tuple[str, ...]) -> None:
    """Store a memory (offline: queued in the replica until the next sync)."""
    project = env.project()
    try:
        with env.client() as api:
            memory = api.memories.create(project, type=type_, content=content, tags=tags, related_files=files)
        click.echo(f"Stored {memory.id} ({memory.type}).")
    except Unreachable:
        try:
            local_id = env.replica().remember(type=type_, content=content, tags=tags, related_files=files)
        except InvalidChange as error:
            raise click.ClickException(str(error)) from None
        click.echo(f"Queued {local_id} offline: `memorysaas sync` sends it.")
    except ApiError as error:
        raise click.ClickException(str(error)) from None


@main.command()
@click.argument("query")
@click.option("--limit", default=8, show_default=True, type=click.IntRange(1, 50))
@click.option(
    "--type", "types", multiple=True, type=click.Choice(TYPE_NAMES), help="Only this type (repeatable)."
)
@click.option("--file", "files", multiple=True, help="A file in play (repeatable).")
@click.option("--offline", is_flag=True, help="Search the replica only, without asking the service.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@click.pass_obj
def search(
    env: Env,
    query: str,
    limit: int,
    types: tuple[str, ...],
    files: tuple[str, ...],
    offline: bool,
    as_json: bool,
) -> None:
    """Search the project's memories; from the offline replica when the service is unreachable."""
    found: list[dict[str, Any]] | None = None
    if not offline:
        try:
            with env.client() as api:
                result = api.search(env.project(), query, files=files, types=types or None, limit=limit)
            found = [h.memory.model_dump(mode="json") for h in result.results]
        except Unreachable as error:
            note(f"{error}: searching the offline replica.")
        except ApiError as error:
            raise click.ClickException(str(error)) from None
    if found is None:
        found = env.replica().find(query, limit, types=types)
        if not found:
            note(f"No memory in the replica matches {query!r} (run `memorysaas sync` first?).")
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    for memory in found:
        click.echo(memory_line(memory))


@main.command()
@click.argument("task", default="")
@click.option("--file", "files", multiple=True, help="A file in play (repeatable).")
@click.option("--phase", help="define, implement, validate, refine, explore or reflect.")
@click.option("--budget", type=click.IntRange(50, 32000), help="Most tokens of context.")
@click.pass_obj
def context(env: Env, task: str, files: tuple[str, ...], phase: str | None, budget: int | None) -> None:
    """Print the packed context for a task and/or files, as an agent would receive it."""
    if not task.strip() and not files:
        raise click.UsageError("Give a task, --file, or both.")
    try:
        with env.client() as api:
            packed = api.context(env.project(), task=task, files=files, phase=phase, token_budget=budget)
    except MemorysaasError as error:
        raise click.ClickException(str(error)) from None
    click.echo(packed.text or "(nothing relevant yet)")
    note(
        f"{packed.token_count}/{packed.token_budget} tokens, {len(packed.memories)} memories, phase {packed.phase}"
    )


@main.command()
@click.option("--format", "form", type=click.Choice(["json", "markdown"]), default="json", show_default=True)
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False, writable=True), help="A file (default: stdout)."
)
@click.pass_obj
def export(env: Env, form: str, output: str | None) -> None:
    """Export the project's memories (from the replica when the service is unreachable)."""
    try:
        with env.client() as api:
            memories = [m.model_dump(mode="json") for m in api.memories.iterate(env.project())]
    except Unreachable as error:
        note(f"{error}: exporting the offline replica.")
        memories = env.replica().all()
    except ApiError as error:
        raise click.ClickException(str(error)) from None
    text = json.dumps(memories, indent=2) + "\n" if form == "json" else _markdown(memories)
    if output:
        Path(output).write_text(text)
        note(f"Wrote {len(memories)} memories to {output}.")
    else:
        click.echo(text, nl=False)


def _markdown(memories: list[dict[str, Any]]) -> str:
    lines = ["# Project memories", ""]
    for kind in sorted({m["type"] for m in memories}):
        lines += [f"## {kind}", ""]
        for memory in (m for m in memories if m["type"] == kind):
            files = ", ".join(f"`{f}`" for f in memory.get("related_files") or [])
            lines.append(f"- {memory['content']}" + (f" ({files})" if files else ""))
        lines.append("")
    return "\n".join(lines)
