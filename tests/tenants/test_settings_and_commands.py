"""Production settings, management commands and the role matrix as the README states it."""

import os
import re
import secrets
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from apps.tenants.models import ApiKey, Organization
from apps.tenants.roles import PERMISSION_LABELS, ROLE_ORDER, ROLE_PERMISSIONS
from apps.tenants.services import api_key_authenticate
from tests.processes import database_url

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )


def test_production_refuses_to_start_without_a_real_secret_key():
    env = {"DJANGO_SETTINGS_MODULE": "memorysaas.settings.production", "SECRET_KEY": ""}
    result = _manage("check", env=env)
    assert result.returncode != 0 and "SECRET_KEY" in result.stderr
    weak = _manage("check", env={**env, "SECRET_KEY": "short"})
    assert weak.returncode != 0


def test_production_passes_check_deploy_with_no_warning():
    env = {
        "DJANGO_SETTINGS_MODULE": "memorysaas.settings.production",
        "SECRET_KEY": secrets.token_urlsafe(64),
    }
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=env)
    assert result.returncode == 0, result.stderr + result.stdout
    assert "no issues" in result.stdout


def test_bootstrap_demo_is_idempotent_and_prints_working_credentials(db):
    outputs = []
    for _ in range(2):
        out = StringIO()
        call_command("bootstrap_demo", stdout=out)
        outputs.append(dict(line.split("=", 1) for line in out.getvalue().splitlines()))
    first, second = outputs
    assert first["ORG"] == second["ORG"] == "demo" and first["PROJECT_ID"] == second["PROJECT_ID"]
    assert Organization.objects.filter(slug="demo").count() == 1
    assert api_key_authenticate(first["API_KEY"]) is None  # replaced by the second run
    key = api_key_authenticate(second["API_KEY"])
    assert key is not None and str(key.project_id) == second["PROJECT_ID"]
    assert set(second) >= {"ORG", "PROJECT_ID", "API_KEY", "LOGIN", "PASSWORD"}


def test_bootstrap_demo_with_a_key_file_keeps_the_key_across_runs(db, tmp_path):
    """`make run` passes a key file: an agent set up with the demo key keeps working after a
    restart; a key that no longer works (revoked) is replaced and the file rewritten."""
    key_file = tmp_path / "keys" / "demo_api_key"

    def run() -> str:
        out = StringIO()
        call_command("bootstrap_demo", "--key-file", str(key_file), stdout=out)
        return dict(line.split("=", 1) for line in out.getvalue().splitlines())["API_KEY"]

    first, second = run(), run()
    assert first == second and api_key_authenticate(second) is not None
    assert key_file.read_text().strip() == first and key_file.stat().st_mode & 0o777 == 0o600
    key = api_key_authenticate(first)
    key.revoked_at = timezone.now()
    key.save(update_fields=["revoked_at"])
    third = run()
    assert third != first and api_key_authenticate(third) is not None
    assert key_file.read_text().strip() == third


def test_create_api_key_prints_the_key_once(db):
    call_command("bootstrap_demo", stdout=StringIO())
    out = StringIO()
    call_command(
        "create_api_key", "--org", "demo", "--scopes", "memories:read,sync", "--name", "cli", stdout=out
    )
    key = out.getvalue().strip()
    assert re.fullmatch(r"msk_[a-z0-9]{8}_[A-Za-z0-9]{40}", key)
    assert sorted(ApiKey.objects.get(prefix=key.split("_")[1]).scopes) == ["memories:read", "sync"]


def test_create_api_key_names_a_project_that_is_not_there_plainly(db):
    call_command("bootstrap_demo", stdout=StringIO())
    for project in ("zzzzzzzz-1180-41a7-b1e9-51bc2f8faf9d", "no-such-project"):  # (36 characters, not a UUID)
        with pytest.raises(CommandError, match="No project"):
            call_command("create_api_key", "--org", "demo", "--project", project, stdout=StringIO())


def test_the_readme_role_matrix_matches_the_code():
    readme = (ROOT / "README.md").read_text()
    rows = {}
    for line in readme.splitlines():
        match = re.match(r"\| `([a-z:]+)`[^|]*\|(.*)\|\s*$", line)
        if match and match.group(1) in PERMISSION_LABELS:
            cells = [c.strip() for c in match.group(2).split("|")]
            rows[match.group(1)] = [c == "✓" for c in cells]
    assert set(rows) == set(PERMISSION_LABELS)
    for perm, allowed in rows.items():
        assert allowed == [perm in ROLE_PERMISSIONS[r] for r in ROLE_ORDER], perm


_ASGI_REQUESTS = """
import asyncio

from asgiref.sync import sync_to_async
from asgiref.testing import ApplicationCommunicator

from memorysaas.asgi import application
from django.db import connection


def sessions():
    with connection.cursor() as cursor:
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return cursor.fetchone()[0]


async def get(path):
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "headers": [(b"host", b"127.0.0.1"), (b"authorization", b"Bearer msk_abcdefgh_" + b"x" * 40)], "client": ("127.0.0.1", 5000),
             "server": ("127.0.0.1", 8000)}
    app = ApplicationCommunicator(application, scope)
    await app.send_input({"type": "http.request", "body": b""})
    start = await app.receive_output(30)
    await app.receive_output(30)
    await app.wait(30)  # the request's end (connections handed back) runs after the body is sent
    return start["status"]


async def main():
    before = await sync_to_async(sessions)()
    statuses = [await get("/api/v1/me") for _ in range(8)]
    after = await sync_to_async(sessions)()
    print(statuses, "new_sessions", after - before)

asyncio.run(main())
"""


def test_the_web_server_reuses_database_connections_across_requests(django_db_setup):
    """Django runs each ASGI request's sync code in a thread of its own; without the pool that
    `memorysaas.asgi` turns on, each request would open a new PostgreSQL connection. Eight
    requests that each read the database (an unknown API key is looked up) through the real
    ASGI application must not open eight connections."""
    env = {k: v for k, v in os.environ.items() if k != "DB_POOL"}
    result = subprocess.run(
        [sys.executable, "-c", _ASGI_REQUESTS],
        cwd=ROOT,
        env={
            **env,
            "DJANGO_SETTINGS_MODULE": "memorysaas.settings.local",
            "DATABASE_URL": database_url(),
        },
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    statuses, new = result.stdout.rsplit("new_sessions", 1)
    assert statuses.strip() == str([401] * 8), result.stdout
    assert int(new) <= 3, result.stdout


@pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")), reason="an external server is tuned by its operator"
)
@pytest.mark.django_db
def test_the_embedded_server_runs_with_the_configured_shared_buffers():
    from django.db import connection

    wanted = os.environ.get("EMBEDDED_PG_SHARED_BUFFERS", "1GB")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_size_bytes(current_setting('shared_buffers')) = pg_size_bytes(%s)", [wanted]
        )
        assert cursor.fetchone()[0] is True
