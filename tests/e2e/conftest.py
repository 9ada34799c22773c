"""Browser tests: Debian's chromium driven by Playwright against a real daphne serving the test
database, so pages, htmx, forms, downloads and websockets all run as in production.

- `live_url`: one daphne process for the session, on the test database (tests that use it take
  `transactional_db` so what they create is committed and visible to the server);
- `page_as(person)`: a browser page already signed in as that person;
- `screenshot(page, name)`: saves test-artifacts/screenshots/<name>.png, and also
  docs/screenshots/<name>.png when UPDATE_SCREENSHOTS=1 (how the README's pictures are made).

Chromium is installed by `make test` (Debian package); without it these tests fail with a clear
message rather than skip, unless MEMORYSAAS_SKIP_BROWSER=1 says this machine has no browser.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.test import Client

from tests.processes import database_url, free_port, log_tail, popen_server

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts" / "screenshots"
README_SHOTS = ROOT / "docs" / "screenshots"
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def pytest_collection_modifyitems(items):
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.browser)


HASHING_EMBEDDINGS = {"EMBEDDING_PROVIDER": "hashing", "EMBEDDING_DIMENSIONS": "384"}


def daphne_env(database: str, **extra: str) -> dict[str, str]:
    """What a daphne of the test database starts with (test settings: tasks run inline), and
    `extra` over it."""
    return {
        "DJANGO_SETTINGS_MODULE": "memorysaas.settings.test",
        "DATABASE_URL": database,
        "SECRET_KEY": settings.SECRET_KEY,
        "DB_CONN_MAX_AGE": "0",
        **extra,
    }


@contextlib.contextmanager
def daphne_of_test_database(django_db_blocker, **extra: str) -> Iterator[str]:
    """A daphne serving the test database: its URL, for as long as the block runs."""
    with django_db_blocker.unblock():
        database = database_url()
    port = free_port()
    process = start_daphne(port, daphne_env(database, **extra))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process)


def start_daphne(port: int, env: dict[str, str]) -> subprocess.Popen:
    process = popen_server(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "memorysaas.asgi:application"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
    )
    wait_until_serving(port, process)
    return process


def wait_until_serving(port: int, process: subprocess.Popen) -> None:
    """Poll until daphne answers (or has died): readiness by condition, not by sleeping."""
    for _ in range(1200):
        if process.poll() is not None:
            raise AssertionError(f"daphne on {port} exited: {log_tail(process.log, 3000)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=1).status_code in (200, 503):
                return
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.1)
    raise AssertionError(f"daphne on {port} never served")


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="session")
def live_url(django_db_setup, django_db_blocker):
    """A daphne serving the app on the test database (test settings: tasks run inline)."""
    with daphne_of_test_database(django_db_blocker) as url:
        yield url


@pytest.fixture(scope="package")
def _playwright():
    """Package-scoped: Playwright's sync API keeps an event loop running in this thread, which
    would break async_to_sync in the tests that run after these."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("MEMORYSAAS_SKIP_BROWSER") == "1":
            pytest.skip("MEMORYSAAS_SKIP_BROWSER=1: this machine has no browser")
        pytest.fail(
            f"{CHROMIUM} is missing: `make test` installs Debian's chromium as root (apt-get install chromium)"
        )
    from playwright.sync_api import expect, sync_playwright

    # A busy 2-core machine can take more than expect's default 5 s to answer an htmx request:
    # assertions wait as long as actions do (a wait for a state, never a measure of speed).
    expect.set_options(timeout=15_000)
    # The ORM calls our tests make beside it are still plain synchronous calls.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            yield playwright
    finally:
        os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


@pytest.fixture(scope="package")
def browser(_playwright):
    browser = _playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield browser
    browser.close()


def session_cookie(person) -> str:
    client = Client()
    client.force_login(person.user, backend="django.contrib.auth.backends.ModelBackend")
    return client.cookies[settings.SESSION_COOKIE_NAME].value


@pytest.fixture
def page_as(browser, live_url, transactional_db):
    """`page_as(person, color_scheme="light")` → a page signed in as `person`."""
    contexts = []

    def make(person=None, *, color_scheme: str = "light"):
        context = browser.new_context(
            base_url=live_url,
            color_scheme=color_scheme,
            accept_downloads=True,
            viewport={"width": 1280, "height": 860},
        )
        context.set_default_timeout(15_000)
        if person is not None:
            context.add_cookies(
                [{"name": settings.SESSION_COOKIE_NAME, "value": session_cookie(person), "url": live_url}]
            )
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def screenshot():
    def save(page, name: str) -> Path:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        if os.environ.get("UPDATE_SCREENSHOTS") == "1":
            README_SHOTS.mkdir(parents=True, exist_ok=True)
            (README_SHOTS / f"{name}.png").write_bytes(path.read_bytes())
        return path

    return save
