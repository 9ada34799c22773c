"""`memorysaas index [--full]`: the repository, from git, to the project's code graph."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from memorysaas_client import config
from memorysaas_client.cli.group import Env, main
from memorysaas_client.errors import MemorysaasError
from memorysaas_client.gitindex import (
    GitError,
    archive,
    batches,
    head_commit,
    knows_commit,
    overlay,
    pending_changes,
)
from memorysaas_client.gitindex import repository_root as git_root
from memorysaas_client.sdk import Client

INDEX_STATE = "index"


@main.command()
@click.option("--full", is_flag=True, help="Upload the whole working tree (replaces the graph).")
@click.option(
    "--path", "where", default=".", type=click.Path(file_okay=False, exists=True), help="In the repository."
)
@click.pass_obj
def index(env: Env, full: bool, where: str) -> None:
    """Send the files changed since the last index (from git) to the project's code graph."""
    project = env.project()
    try:
        root = git_root(Path(where))
        head = head_commit(root)
    except GitError as error:
        raise click.ClickException(f"not a git repository with a commit ({error})") from None
    state = config.read_state(INDEX_STATE)
    key = f"{env.profile.url} {project} {root}"
    last = state.get(key) or {}
    try:
        with env.client() as api:
            if full or not last.get("commit") or not knows_commit(root, last["commit"]):
                data, count = archive(root)
                job = api.graph.index_archive(project, data)
                click.echo(f"Uploaded {count} files ({len(data)} bytes): index job {job.id} {job.status}.")
            else:
                _index_changes(api, project, root, last)
    except MemorysaasError as error:
        raise click.ClickException(str(error)) from None
    state[key] = {"commit": head, "overlay": overlay(root)}  # (what the server holds now)
    config.write_state(INDEX_STATE, state)


def _index_changes(api: Client, project: str, root: Path, last: dict[str, Any]) -> None:
    sent = 0
    for batch in batches(root, pending_changes(root, last["commit"], last.get("overlay", {}))):
        job = api.graph.index_batch(project, **batch)
        sent += 1
        click.echo(
            f"Sent {len(batch['files'])} files, {len(batch['deleted'])} deleted,"
            f" {len(batch['renamed'])} renamed: index job {job.id} {job.status}."
        )
    if not sent:
        click.echo(f"Nothing changed since the last index ({last['commit'][:12]} and its edits).")
