"""`memorysaas sync [--watch]`: the offline replica, pushed and pulled."""

from __future__ import annotations

import sys
import time

import click

from memorysaas_client.cli.group import Env, main, note
from memorysaas_client.errors import ApiError, Unreachable
from memorysaas_client.replica import Replica
from memorysaas_client.sdk import Client


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
        note(f"{error}; {replica.pending()} changes stay queued.")
        return False
    except ApiError as error:
        note(f"sync refused: {error}")
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
        note(f"push failed ({report.push_error}); {replica.pending()} changes stay queued")
        return False
    return True
