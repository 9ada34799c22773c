"""`memorysaas stale-check`: the files changed since each commit memories were learned at, from
git, so that the memories about them turn stale."""

from __future__ import annotations

from pathlib import Path

import click

from memorysaas_client.cli.group import Env, main, note
from memorysaas_client.errors import MemorysaasError
from memorysaas_client.gitindex import GitError, files_changed_since, knows_commit
from memorysaas_client.gitindex import repository_root as git_root


@main.command("stale-check")
@click.option(
    "--path", "where", default=".", type=click.Path(file_okay=False, exists=True), help="In the repository."
)
@click.pass_obj
def stale_check(env: Env, where: str) -> None:
    """Report the files changed since each commit the project's memories carry; print the
    memories that went stale."""
    project = env.project()
    try:
        root = git_root(Path(where))
    except GitError as error:
        raise click.ClickException(f"not a git repository ({error})") from None
    stale = 0
    try:
        with env.client() as api:
            for item in api.commits.list(project):
                commit = item["commit"]
                if not knows_commit(root, commit):
                    note(f"{commit[:12]}: not in this clone (fetch it to check its memories)")
                    continue
                files = files_changed_since(root, commit)
                if not files:
                    continue
                answer = api.commits.changed_files(project, commit, files)
                stale += len(answer["stale"])
                for memory_id in answer["stale"]:
                    click.echo(f"{str(memory_id)[:8]}  stale: files changed since {commit[:12]}")
    except (MemorysaasError, GitError) as error:
        raise click.ClickException(str(error)) from None
    note(f"{stale} memories marked stale.")
