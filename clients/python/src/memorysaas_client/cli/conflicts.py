"""`memorysaas conflicts` and `memorysaas resolve`: offline edits the server could not merge.

    memorysaas conflicts                       # what waits: base, mine and theirs, side by side
    memorysaas resolve 3f2a1b4c --keep mine    # or --keep theirs
    memorysaas resolve 3f2a1b4c --content "merged text" --tag auth --tag jwt    # a merge

A resolution is decided against the memory's version `conflicts` showed (`--base-version`
overrides it): if the memory changed since, the service refuses (409) and you look again. The
replica syncs afterwards, so it holds the outcome at once; other devices get it at their next sync.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from memorysaas_client.cli.group import Env, main, note
from memorysaas_client.errors import ApiError

_SHOWN = ("content", "tags", "related_files", "type", "confidence")


def _value(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return ", ".join(value) or "(none)"
    return str(value).replace("\n", " ")[:200]


def _print_conflict(conflict: dict[str, Any]) -> None:
    what = "deleted on the device" if conflict["kind"] == "delete" else ", ".join(conflict["fields"])
    click.echo(
        f"{conflict['id'][:8]}  memory {conflict['memory_id'][:8]}  {what}  from {conflict['device']}"
        f" ({conflict['author'] or 'a key'})  base v{conflict['base_version']}, now v{conflict['current_version']}"
    )
    names = [n for n in _SHOWN if n in conflict["fields"] or n in conflict["mine"]] or ["content"]
    for name in names:
        click.echo(f"  {name}:")
        click.echo(f"    base:   {_value(conflict['base'].get(name))}")
        mine = "(deleted)" if conflict["kind"] == "delete" else _value(conflict["mine"].get(name))
        click.echo(f"    mine:   {mine}")
        click.echo(f"    theirs: {_value(conflict['current'].get(name))}")


@main.command()
@click.option("--all", "everything", is_flag=True, help="Resolved ones too.")
@click.pass_obj
def conflicts(env: Env, everything: bool) -> None:
    """Offline edits waiting for a person (and this device's rejected changes)."""
    with env.client() as api:
        found = api.sync.conflicts(env.project(), status="all" if everything else "open")
    for conflict in found:
        _print_conflict(conflict)
        if conflict["status"] != "open":
            click.echo(f"  resolved: kept {conflict['resolution']} (by {conflict['resolved_by'] or 'a key'})")
    if not found:
        note("No conflicts waiting.")
    replica = env.replica()
    for rejected in replica.rejected():
        change = rejected["change"]
        click.echo(f"rejected {change.get('ref') or change.get('id')}: {rejected['reason']['message']}")


def _find(api, project_id: str, prefix: str) -> dict[str, Any]:
    matches = [c for c in api.sync.conflicts(project_id, status="all") if c["id"].startswith(prefix.lower())]
    if not matches:
        raise click.ClickException(
            f"No conflict {prefix} in this project: `memorysaas conflicts` lists them."
        )
    if len(matches) > 1:
        raise click.ClickException(f"{prefix} names {len(matches)} conflicts: give more of its id.")
    return matches[0]


@main.command()
@click.argument("conflict_id")
@click.option("--keep", type=click.Choice(["mine", "theirs"]), help="Keep one version whole.")
@click.option("--content", help="A merge: the text to keep.")
@click.option(
    "--tag", "tags", multiple=True, help="A merge: its tags (repeat); default: mine and theirs united."
)
@click.option("--base-version", type=click.IntRange(1), help="The memory version you decided against.")
@click.pass_obj
def resolve(
    env: Env,
    conflict_id: str,
    keep: str | None,
    content: str | None,
    tags: tuple[str, ...],
    base_version: int | None,
) -> None:
    """Decide a conflict: --keep mine, --keep theirs, or a merge (--content, --tag)."""
    if (keep is None) == (content is None):
        raise click.UsageError("Give either --keep mine|theirs or --content for a merge.")
    project_id = env.project()
    with env.client() as api:
        conflict = _find(api, project_id, conflict_id)
        fields = None
        if content is not None:
            keep = "merge"
            merged_tags = list(tags) or list(
                dict.fromkeys([*conflict["mine"].get("tags", []), *conflict["current"]["tags"]])
            )
            fields = {"content": content, "tags": merged_tags}
        try:
            resolved = api.sync.resolve(
                conflict["id"],
                keep=keep,
                base_version=base_version or conflict["current_version"],
                fields=fields,
            )
        except ApiError as error:
            note(f"not resolved: {error}")
            sys.exit(1)
        outcome = f"version {resolved['result_version']}" if resolved["result_version"] else "deleted"
        click.echo(f"resolved {resolved['id'][:8]}: kept {resolved['resolution']} ({outcome})")
        replica = env.replica()
        report = replica.sync(api.sync)
        note(
            f"synced: pulled={report.pulled} (replica: {replica.count()} memories, {len(replica.conflicts())} conflicts)"
        )
