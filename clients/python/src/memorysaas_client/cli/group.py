"""The command's group, its shared settings (`Env`) and what every command prints with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from memorysaas_client import config
from memorysaas_client.config import Profile
from memorysaas_client.models import Memory
from memorysaas_client.replica import Replica
from memorysaas_client.sdk import Client

HELP = """memorysaas: your team's memory of the codebase, from the command line.

Settings: --url, --project (and --key) over MEMORYSAAS_URL, MEMORYSAAS_PROJECT, MEMORYSAAS_KEY,
over what `memorysaas login` saved."""


@dataclass
class Env:
    profile: Profile
    db: str | None

    def client(self) -> Client:
        if not self.profile.key:
            raise click.ClickException("Not logged in: run `memorysaas login` (or set MEMORYSAAS_KEY).")
        return Client(self.profile.url, self.profile.key)

    def project(self) -> str:
        if not self.profile.project_id:
            raise click.ClickException(
                "No project: log in again, or pass --project (or set MEMORYSAAS_PROJECT)."
            )
        return self.profile.project_id

    def replica(self) -> Replica:
        path = Path(self.db) if self.db else self.profile.replica_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        return Replica(str(path), project_id=self.project())


def memory_line(memory: Memory | dict[str, Any]) -> str:
    data = memory.model_dump(mode="json") if isinstance(memory, Memory) else memory
    return f"{str(data['id'])[:8]}  {data['type']:<16} {data['content'][:100]}"


def note(text: str) -> None:
    """To stderr: a script reading a command's results reads only results."""
    click.echo(text, err=True)


@click.group(help=HELP)
@click.option("--url", envvar=None, help="The service (default: the login's, or MEMORYSAAS_URL).")
@click.option("--project", help="Project id (default: the login's, or MEMORYSAAS_PROJECT).")
@click.option("--key", hidden=True, help="An API key (default: the login's, or MEMORYSAAS_KEY).")
@click.option("--db", help="The offline replica file (default: one per project in the user data directory).")
@click.version_option(package_name="memorysaas")
@click.pass_context
def main(ctx: click.Context, url: str | None, project: str | None, key: str | None, db: str | None) -> None:
    ctx.obj = Env(profile=config.load().with_overrides(url=url, key=key, project=project), db=db)
