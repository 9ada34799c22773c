"""Running the installed `memorysaas` command as a person would: its console script, in a HOME of
its own with none of this machine's memorysaas settings, and approving its login in the browser."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import httpx
from django.conf import settings

from tests.e2e.conftest import session_cookie

MEMORYSAAS = str(Path(sys.executable).parent / "memorysaas")
USER_CODE = re.compile(r"^\s+([B-DF-HJ-NP-TV-XZ]{4}-[B-DF-HJ-NP-TV-XZ]{4})\s*$")


def cli_env(home: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """A person's shell with nothing of this machine's memorysaas settings: the HOME, and `extra`."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("MEMORYSAAS_", "XDG_"))}
    return {**keep, "HOME": str(home), **(extra or {})}


def run(
    home: Path, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [MEMORYSAAS, *args], env=cli_env(home, env), cwd=cwd, capture_output=True, text=True, timeout=120
    )


def key_env(url: str, person, scopes: list[str]) -> dict[str, str]:
    """A CI job's environment: the server, and a key of the person's project with `scopes`."""
    from apps.tenants import services

    _, key = services.api_key_create(
        organization=person.org, actor=person.principal, name="ci", scopes=scopes, project=person.project
    )
    return {"MEMORYSAAS_URL": url, "MEMORYSAAS_KEY": key, "MEMORYSAAS_PROJECT": str(person.project.id)}


def git(repo: Path, *args: str) -> str:
    """git in `repo`, as someone with a name and an email; its output."""
    done = subprocess.run(
        ["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=repo, check=True, capture_output=True
    )
    return done.stdout.decode().strip()


def approve(url: str, person, user_code: str) -> None:
    """What the person does in the browser: open /device with the code, approve into their project."""
    with httpx.Client(
        base_url=url, cookies={settings.SESSION_COOKIE_NAME: session_cookie(person)}
    ) as browser:
        page = browser.get("/device/", params={"user_code": user_code})
        assert page.status_code == 200, page.text[:500]
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        decided = browser.post(
            "/device/decide/",
            data={"csrfmiddlewaretoken": token, "user_code": user_code, "project": str(person.project.id)},
        )
        assert decided.status_code == 302, decided.text[:500]


def login(url: str, home: Path, person) -> subprocess.CompletedProcess:
    process = subprocess.Popen(
        [MEMORYSAAS, "--url", url, "login", "--no-browser", "--name", "test-laptop"],
        env=cli_env(home),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    shown: list[str] = []
    code = None
    for line in process.stdout:  # (the code is printed before the command starts polling)
        shown.append(line)
        match = USER_CODE.match(line)
        if match:
            code = match.group(1)
            break
    assert code, f"no user code in {''.join(shown)!r}"
    approve(url, person, code)
    rest = []
    reader = threading.Thread(target=lambda: rest.extend(process.stdout))
    reader.start()
    assert process.wait(timeout=60) == 0, process.stderr.read()
    reader.join()
    return subprocess.CompletedProcess(process.args, 0, "".join(shown + rest), process.stderr.read())
