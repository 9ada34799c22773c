"""Pages kept current by the workers under the default settings — no REDIS_URL, so the channel
layer is PostgreSQL's LISTEN/NOTIFY and the queue the ORM's: a daphne and a qcluster per lane as
`make run` starts them. A graph index started through the API shows its progress and final counts
on an open Module map; a session finalized by a worker shows its promoted memory on an open
Sessions page; neither page is reloaded."""

from __future__ import annotations

import io
import re
import tarfile

import pytest
from django.conf import settings
from playwright.sync_api import expect

from apps.observer.traces import Trace
from tests.e2e.conftest import session_cookie
from tests.e2e.test_pages import api, base_of
from tests.live_stack import LiveStack, default_env

# Two modules of a small repository: four files that import one another.
REPOSITORY = {
    "shop/totals.py": "from shop.money import cents\n\n\ndef total(items):\n    return cents(sum(i.price for i in items))\n",
    "shop/money.py": "def cents(value):\n    return int(round(value * 100))\n",
    "billing/refunds.py": "from shop.totals import total\n\n\ndef refund(order):\n    return -total(order.items)\n",
    "billing/invoices.py": "from billing.refunds import refund\n\n\ndef credit_note(order):\n    return refund(order)\n",
}


@pytest.fixture
def stack(transactional_db):
    live = LiveStack(default_env())
    try:
        yield live.start()
    finally:
        live.stop()


@pytest.fixture
def page_on(browser, stack):
    """`page_on(person)`: a page of the default stack's daphne, signed in as `person`."""
    contexts = []

    def make(person):
        context = browser.new_context(base_url=stack.url, viewport={"width": 1280, "height": 860})
        context.set_default_timeout(30_000)
        context.add_cookies(
            [{"name": settings.SESSION_COOKIE_NAME, "value": session_cookie(person), "url": stack.url}]
        )
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


def _open_live(page, path: str) -> None:
    """Open the page and wait until its socket has said hello (events from now on reach it)."""
    page.goto(path)
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    expect(page.locator("body")).to_have_attribute("data-live-seq", re.compile(r"^\d+$"))


def _archive() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path, content in REPOSITORY.items():
            data = content.encode()
            info = tarfile.TarInfo(f"repo/{path}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_graph_index_shows_its_progress_and_counts_on_an_open_module_map(alice, stack, page_on):
    page = page_on(alice)
    _open_live(page, f"{base_of(alice)}/modules/")
    expect(page.get_by_test_id("modules-empty")).to_be_visible()
    # What the page's socket hands over, as app.js turns it into DOM events.
    page.evaluate(
        "window.graphEvents = []; document.body.addEventListener('live-graph', e => graphEvents.push(e.detail.data))"
    )

    response = api(
        stack.url,
        alice,
        "POST",
        f"projects/{alice.project.id}/graph/index",
        files={"archive": ("repo.tar.gz", _archive(), "application/gzip")},
    )
    assert response.status_code == 202, response.text
    job = response.json()["id"]

    status = page.get_by_test_id("index-status")
    expect(status).to_have_attribute("data-status", "done")
    expect(status).to_contain_text("Knowledge graph: 4 files")
    expect(page.get_by_test_id("module-map")).to_contain_text("billing")
    expect(page.get_by_test_id("module-map")).to_contain_text("shop")
    received = page.evaluate("graphEvents")
    running = [e for e in received if e["job"] == job and e["status"] == "running"]
    assert running, received  # progress reached the page while the worker indexed
    assert received[-1] == {"job": job, "status": "done", "progress": 100}
    assert [e["progress"] for e in running] == sorted(e["progress"] for e in running)


def test_a_session_finalized_by_a_worker_shows_its_promoted_memory_on_an_open_sessions_page(
    alice, stack, page_on
):
    page = page_on(alice)
    _open_live(page, f"{base_of(alice)}/sessions/")

    response = api(
        stack.url, alice, "POST", f"projects/{alice.project.id}/sessions", json={"session_type": "build"}
    )
    assert response.status_code == 201, response.text
    session_id = response.json()["id"]
    row = page.locator(f'[data-testid="session-row"][data-session-id="{session_id}"]')
    expect(row).to_be_visible()  # announced by daphne as the session opened

    trace = (
        Trace()
        .read("shop/refunds.py")
        .note(
            "gotcha",
            "Refund totals come from shop/refunds.py, never from the cached order total.",
            ["shop/refunds.py"],
        )
    )
    for path, body in (
        (f"sessions/{session_id}/events", {"events": trace.events}),
        (f"sessions/{session_id}/validation", {"passed": True}),
        (f"sessions/{session_id}/complete", {"outcome": "success"}),
    ):
        response = api(stack.url, alice, "POST", path, json=body)
        assert response.status_code in (200, 202), response.text

    # The finalize runs in the interactive lane's worker; what it promoted reaches the open page.
    promoted = row.locator("td.num").nth(1)
    expect(promoted).to_have_text("1")
    expect(row.locator('[data-status="completed"]')).to_have_text("success")
