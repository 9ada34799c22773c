"""`memorysaas login`, `logout`, `status` and `env`: the device's login."""

from __future__ import annotations

import click

from memorysaas_client import config
from memorysaas_client.cli.group import Env, main
from memorysaas_client.config import Profile
from memorysaas_client.connect import KEY_VAR
from memorysaas_client.device_login import LoginFailed, device_login, this_device
from memorysaas_client.errors import MemorysaasError
from memorysaas_client.models import DeviceCode
from memorysaas_client.sdk import Client


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
    named = f"{profile.organization_slug}/{profile.project_slug} " if profile.project_slug else ""
    click.echo(f"project:  {named}({profile.project_id or 'none'})")
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
