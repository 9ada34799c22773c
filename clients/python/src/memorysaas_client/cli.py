"""The `memorysaas` command.

    memorysaas login                      # approve this device in the dashboard; saves its key
    memorysaas remember "verify_jwt rejects skewed clocks" --type gotcha --file auth/tokens.py
    memorysaas search "jwt clock skew"    # the service, or the offline replica when it is away
    memorysaas context "add rate limiting to login" --file auth/views.py
    memorysaas sync [--watch]             # push offline work, pull the change feed
    memorysaas index [--full]             # the repository's changed files to the code graph
    memorysaas export --format markdown -o memories.md
    memorysaas connect claude-code        # or codex, cursor: hooks and MCP entries, merged in
    memorysaas mcp                        # a stdio MCP server, for agents that start one

Settings: `--url`, `--project` (and `--key`) over MEMORYSAAS_URL, MEMORYSAAS_PROJECT,
MEMORYSAAS_KEY, over what `login` saved.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from memorysaas_client import config
from memorysaas_client.config import Profile
from memorysaas_client.connect import AGENTS, KEY_VAR, ConfigError
from memorysaas_client.device_login import LoginFailed, device_login, this_device
from memorysaas_client.errors import ApiError, MemorysaasError, Unreachable
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
from memorysaas_client.kinds import TYPE_NAMES
from memorysaas_client.models import DeviceCode, Memory
from memorysaas_client.replica import InvalidChange, Replica
from memorysaas_client.sdk import Client

INDEX_STATE = "index"


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


def _memory_line(memory: Memory | dict[str, Any]) -> str:
    data = memory.model_dump(mode="json") if isinstance(memory, Memory) else memory
    return f"{str(data['id'])[:8]}  {data['type']:<16} {data['content'][:100]}"


def _note(text: str) -> None:
    """To stderr: a script reading a command's results reads only results."""
    click.echo(text, err=True)


@click.group(help=__doc__.split("\n\n")[0] if __doc__ else None)
@click.option("--url", envvar=None, help="The service (default: the login's, or MEMORYSAAS_URL).")
@click.option("--project", help="Project id (default: the login's, or MEMORYSAAS_PROJECT).")
@click.option("--key", hidden=True, help="An API key (default: the login's, or MEMORYSAAS_KEY).")
@click.option("--db", help="The offline replica file (default: one per project in the user data directory).")
@click.version_option(package_name="memorysaas")
@click.pass_context
def main(ctx: click.Context, url: str | None, project: str | None, key: str | None, db: str | None) -> None:
    ctx.obj = Env(profile=config.load().with_overrides(url=url, key=key, project=project), db=db)


# ---------------------------------------------------------------- login


@main.command()
@click.option("--name", help="This device's name on the approval page (default: the host name).")
@click.option("--no-browser", is_flag=True, help="Print the address only; do not open a browser.")
@click.pass_obj
def login(env: Env, name: str | None, no_browser: bool) -> None:
    """Log this device in: approve it in the dashboard, and it gets a key of its own."""
    device_name, platform_name = this_device()

    def announce(code: DeviceCode) -> None:
        click.echo(f"To approve this device, open {code.verification_uri} and enter the code:")
        click.echo(f"\n    {code.user_code}\n")
        if code.verification_uri_complete:
            click.echo(f"(or open {code.verification_uri_complete})")
        click.echo(f"Waiting for approval (the code expires in {code.expires_in // 60} minutes)…", nl=True)
        if not no_browser and code.verification_uri_complete:
            click.launch(code.verification_uri_complete)

    with Client(env.profile.url) as api:
        try:
            token = device_login(
                api, announce=announce, device_name=name or device_name, platform_name=platform_name
            )
        except LoginFailed as error:
            raise click.ClickException(str(error)) from None
        except MemorysaasError as error:
            raise click.ClickException(str(error)) from None
    project = token.project
    profile = Profile(
        url=env.profile.url,
        key=token.access_token,
        project_id=str(project.id) if project else "",
        project_slug=project.slug if project else "",
        organization_slug=token.organization.slug,
        device_id=str(token.device_id),
    )
    path = config.save(profile)
    where = f"{token.organization.slug}/{project.slug}" if project else token.organization.slug
    click.echo(f"Logged in to {where} as device {token.device_id} (scopes: {token.scope}).")
    click.echo(f"Saved in {path}.")


@main.command()
def logout() -> None:
    """Forget the saved login (revoke the device in the dashboard to stop its key)."""
    click.echo("Logged out." if config.forget() else "Not logged in.")


@main.command()
@click.pass_obj
def status(env: Env) -> None:
    """Who this device is logged in as, and whether the service answers."""
    profile = env.profile
    click.echo(f"service:  {profile.url}")
    click.echo(
        f"project:  {profile.organization_slug}/{profile.project_slug} ({profile.project_id or 'none'})"
    )
    if not profile.key:
        click.echo("key:      none (run `memorysaas login`)")
        return
    click.echo(f"key:      msk_{profile.key.split('_')[1] if profile.key.count('_') == 2 else '?'}_…")
    try:
        with env.client() as api:
            me = api.me()
        click.echo(f"reachable: yes ({me.kind})")
    except MemorysaasError as error:
        click.echo(f"reachable: no ({error})")


@main.command("env")
@click.pass_obj
def env_(env: Env) -> None:
    """Print `export` lines for agents that read the key from the environment:
    eval "$(memorysaas env)"."""
    if not env.profile.key:
        raise click.ClickException("Not logged in: run `memorysaas login`.")
    click.echo(f"export MEMORYSAAS_URL={env.profile.url}")
    click.echo(f"export {KEY_VAR}={env.profile.key}")
    if env.profile.project_id:
        click.echo(f"export MEMORYSAAS_PROJECT={env.profile.project_id}")


# ---------------------------------------------------------------- memories


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
            _note(f"{error}: searching the offline replica.")
        except ApiError as error:
            raise click.ClickException(str(error)) from None
    if found is None:
        found = _offline_search(env, query, types, limit)
        if not found:
            _note(f"No memory in the replica matches {query!r} (run `memorysaas sync` first?).")
    if as_json:
        click.echo(json.dumps(found, indent=2))
        return
    for memory in found:
        click.echo(_memory_line(memory))


def _offline_search(env: Env, query: str, types: tuple[str, ...], limit: int) -> list[dict[str, Any]]:
    replica = env.replica()
    wanted = set(types)
    found = []
    for memory_id in replica.search_text(query, limit=limit * 3 if wanted else limit):
        memory = replica.get(memory_id)
        if memory and (not wanted or memory["type"] in wanted):
            found.append(memory)
    return found[:limit]


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
    _note(
        f"{packed.token_count}/{packed.token_budget} tokens, {len(packed.memories)} memories, phase {packed.phase}"
    )


# ---------------------------------------------------------------- sync


@main.command()
@click.option("--watch", is_flag=True, help="Keep syncing, every --interval seconds, until interrupted.")
@click.option(
    "--interval", default=60, show_default=True, type=click.IntRange(1), help="Seconds between syncs."
)
@click.option(
    "--times", type=click.IntRange(1), hidden=True, help="With --watch: stop after this many syncs."
)
@click.pass_obj
def sync(env: Env, watch: bool, interval: int, times: int | None) -> None:
    """Push offline changes, then pull the project's change feed into the replica."""
    replica = env.replica()
    rounds = 0
    failed = False
    with env.client() as api:
        while True:
            failed = not _sync_once(replica, api) or failed
            rounds += 1
            if not watch or (times is not None and rounds >= times):
                break
            time.sleep(interval)  # (the watch's own pace, not a wait for something)
    if failed and not watch:
        sys.exit(1)


def _sync_once(replica: Replica, api: Client) -> bool:
    try:
        report = replica.sync(api.sync)
    except Unreachable as error:
        _note(f"{error}; {replica.pending()} changes stay queued.")
        return False
    except ApiError as error:
        _note(f"sync refused: {error}")
        return False
    click.echo(
        f"pushed={report.pushed} pulled={report.pulled} deleted={report.deleted} conflicts={report.conflicts}"
        f" rejected={report.rejected} (replica: {replica.count()} memories)"
    )
    for conflict in replica.conflicts():
        click.echo(f"conflict {conflict['id']}: {', '.join(conflict['fields'])}")
    for rejected in replica.rejected():
        change = rejected["change"]
        click.echo(f"rejected {change.get('ref') or change.get('id')}: {rejected['reason']['message']}")
    if report.push_error:
        _note(f"push failed ({report.push_error}); {replica.pending()} changes stay queued")
        return False
    return True


# ---------------------------------------------------------------- index


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


# ---------------------------------------------------------------- export


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
        _note(f"{error}: exporting the offline replica.")
        replica = env.replica()
        ids = [row[0] for row in replica.db.execute("SELECT id FROM memories ORDER BY id").fetchall()]
        memories = [m for m in (replica.get(i) for i in ids) if m]
    except ApiError as error:
        raise click.ClickException(str(error)) from None
    text = json.dumps(memories, indent=2) + "\n" if form == "json" else _markdown(memories)
    if output:
        Path(output).write_text(text)
        _note(f"Wrote {len(memories)} memories to {output}.")
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


# ---------------------------------------------------------------- agents


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
    if transport == "http" or agent == "claude-code":
        _note(
            f'The agent reads the key from {KEY_VAR}: run `eval "$(memorysaas env)"` in the shell that starts it.'
        )


@main.command()
@click.pass_obj
def mcp(env: Env) -> None:
    """Serve the memorysaas MCP tools over stdio (an agent starts this command itself)."""
    from memorysaas_client.mcp_server import Backend, build_server  # (the MCP SDK loads only here)

    build_server(Backend(env.profile, env.client())).run("stdio")


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
