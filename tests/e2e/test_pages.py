"""The dashboard in a browser: the health page, browsing and filtering, confirming and
correcting a memory through the dialog (mouse and keyboard), a memory created through the API
showing up in an open page without a reload, teach and import, the module map. Saves the
screenshots the README shows (UPDATE_SCREENSHOTS=1 copies them to docs/screenshots)."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import expect

from apps.governance import services as governance
from apps.memories import services as memory_services
from apps.memories.models import Memory, MemoryVersion
from apps.review import services as review_services
from tests.memories.factories import make_memory


@pytest.fixture(autouse=True)
def hashing_embeddings(settings):
    """Memories made here (in the test process) embed with the fast hashing provider."""
    settings.EMBEDDING_PROVIDER = "hashing"


def base_of(person) -> str:
    return f"/o/{person.org.slug}/p/{person.project.slug}"


def api(live_url, person, method: str, path: str, **kwargs) -> httpx.Response:
    # Generous: the server loads its embedding model on first use.
    return httpx.request(
        method,
        f"{live_url}/api/v1/{path}",
        headers={"Authorization": f"Bearer {person.key}"},
        timeout=120,
        **kwargs,
    )


def warm_up(live_url, person) -> None:
    """Make the live server load its embedding model before the page waits on it."""
    response = api(
        live_url, person, "POST", f"projects/{person.project.id}/search", json={"query": "warm up"}
    )
    assert response.status_code == 200, response.text


def count_live_refreshes(page) -> None:
    """Count, in `window.liveRefreshes`, the swaps the memory list makes when a live event asks
    it to re-fetch: a test waits for the one its own action causes before it moves focus, so the
    re-rendered list does not land between a focus and a key press."""
    page.evaluate(
        """() => {
            window.liveRefreshes = 0;
            document.addEventListener("htmx:afterSettle", (event) => {
                const cause = event.detail.requestConfig?.triggeringEvent?.type || "";
                if (cause.startsWith("live-") && event.detail.target?.id === "memory-list") {
                    window.liveRefreshes += 1;
                }
            });
        }"""
    )


def populate(alice, bob) -> dict[str, Memory]:
    """A small but lifelike project: several types, sources and modules, usage, a dispute, a
    stale memory, a recipe."""
    made = {
        "jwt": make_memory(
            alice,
            content="verify_jwt rejects tokens whose clock skew exceeds 30 s; keep NTP on the workers.",
            type="gotcha",
            related_files=["auth/tokens.py"],
            session_id="build-042",
            work_unit_ref={
                "methodology": "native",
                "hierarchy": ["Auth", "Refresh tokens"],
                "label": "Refresh tokens",
            },
            confidence=0.86,
        ),
        "migrations": make_memory(
            bob,
            content="Migrations run before the web process starts; a slow migration blocks every deploy.",
            type="gotcha",
            source="observer_inferred",
            related_files=["deploy/entrypoint.sh"],
            session_id="build-051",
            needs_review=True,
            confidence=0.62,
        ),
        "money": make_memory(
            alice,
            content="Invoices round half-even and money is stored as integer cents, never floats.",
            type="decision",
            source="user_taught",
            related_files=["billing/money.py"],
            user_verified=True,
            confidence=0.95,
        ),
        "undefined_table": make_memory(
            bob,
            content="psycopg.errors.UndefinedTable in tests means the test database missed a migration: run with --create-db.",
            type="error_pattern",
            source="qa_auto",
            related_files=["tests/conftest.py"],
            session_id="qa-007",
            confidence=0.74,
        ),
        "stripe": make_memory(
            bob,
            content="Mocking the Stripe client per test did not work: webhooks bypass it.",
            type="dead_end",
            related_files=["billing/stripe.py"],
            payload={
                "approach_tried": "Mock the Stripe client in each test",
                "why_it_failed": "Webhooks call the real endpoint",
                "alternative_used": "stripe-mock in a container",
            },
            confidence=0.7,
        ),
        "modal": make_memory(
            bob,
            content="The settings modal animates for 300 ms; clicks sent before that land on the backdrop.",
            type="e2e_observation",
            source="mcp_auto",
            related_files=["web/settings/Modal.tsx"],
            session_id="qa-018",
            confidence=0.8,
        ),
        "staging": make_memory(
            alice,
            content="The staging database is reset every night at 02:00 UTC.",
            type="pattern",
            related_files=["deploy/staging.yml"],
        ),
        "cron": make_memory(
            alice,
            content="The legacy cron runs reports at 06:00.",
            type="pattern",
            related_files=["legacy/cron.py"],
        ),
    }
    made["recipe"] = review_services.recipe_save(
        project=alice.project,
        actor=alice.principal,
        task_pattern="Add an API endpoint",
        steps=[
            {
                "order": 1,
                "description": "Add input and output schemas",
                "canonical_file": "apps/memories/api.py",
            },
            {"order": 2, "description": "Register the route on the router"},
            {
                "order": 3,
                "description": "Register its isolation probe",
                "canonical_file": "tests/isolation.py",
            },
        ],
    )
    governance.dispute_open(
        memory=made["staging"], actor=bob.principal, reason="It is reset weekly, on Sundays."
    )
    memory_services.memories_files_deleted(project=alice.project, paths=["legacy/cron.py"])
    for _ in range(3):
        memory_services.memories_record_access(
            memory_ids=[made["jwt"].id, made["money"].id, made["recipe"].id]
        )
    memory_services.memories_record_access(memory_ids=[made["undefined_table"].id, made["modal"].id])
    return made


def test_health_browse_filter_confirm_and_correct(page_as, live_url, alice, bob, screenshot):
    made = populate(alice, bob)
    warm_up(live_url, alice)
    base = base_of(alice)
    page = page_as(alice)

    page.goto(f"{base}/")
    expect(page.get_by_test_id("health-score")).to_be_visible()
    expect(page.get_by_test_id("stat-total")).to_have_text(str(len(made)))
    expect(page.get_by_test_id("module-bars").get_by_role("link", name="billing")).to_be_visible()
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    screenshot(page, "health")

    page.get_by_role("complementary", name="Sections").get_by_role("link", name="Memories").click()
    cards = page.get_by_test_id("memory-card")
    expect(cards).to_have_count(len(made))
    expect(cards.first.get_by_test_id("provenance")).to_contain_text("used")
    screenshot(page, "memory-browser")

    page.get_by_label("Type").select_option("gotcha")
    expect(page).to_have_url(re.compile(r"type=gotcha"))
    expect(cards).to_have_count(2)
    page.get_by_label("Module").fill("auth")
    page.get_by_role("button", name="Apply filters").click()
    expect(cards).to_have_count(1)
    expect(cards.first).to_contain_text("verify_jwt rejects tokens")
    page.get_by_label("Module").fill("")
    page.get_by_role("button", name="Apply filters").click()
    expect(cards).to_have_count(2)

    migrations = cards.filter(has_text="Migrations run before the web process starts")
    expect(migrations.get_by_test_id("review-badge")).to_be_visible()
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    count_live_refreshes(page)
    migrations.get_by_role("button", name="Confirm").click()
    expect(migrations.get_by_test_id("verified-badge")).to_be_visible()
    expect(migrations.get_by_test_id("review-badge")).to_have_count(0)
    # The confirmation's live event re-renders the list: let that land before moving focus.
    page.wait_for_function("() => window.liveRefreshes >= 1")
    confirmed = Memory.objects.get(pk=made["migrations"].pk)
    assert confirmed.user_verified and not confirmed.needs_review

    # The correction dialog, by keyboard: Enter opens it, Escape closes it, focus comes back.
    jwt = cards.filter(has_text="verify_jwt rejects tokens")
    correct_link = jwt.get_by_role("link", name="Correct")
    correct_link.focus()
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog", name="Correct this memory")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("radio").first).to_be_focused()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(correct_link).to_be_focused()

    correct_link.click()
    expect(dialog).to_be_visible()
    dialog.get_by_label("Content is inaccurate").check()
    dialog.get_by_label("Corrected text").fill(
        "verify_jwt rejects tokens whose clock skew exceeds 60 s (raised from 30 s in v2)."
    )
    dialog.get_by_label("Note (optional)").fill("The limit changed in v2.")
    screenshot(page, "correct-dialog")
    dialog.get_by_role("button", name="Save correction").click()
    expect(dialog).to_be_hidden()
    corrected = cards.filter(has_text="exceeds 60 s (raised from 30 s in v2)")
    expect(corrected.get_by_test_id("verified-badge")).to_be_visible()
    memory = Memory.objects.get(pk=made["jwt"].pk)
    assert memory.version == 2 and memory.content.startswith(
        "verify_jwt rejects tokens whose clock skew exceeds 60 s"
    )
    assert MemoryVersion.objects.get(memory=memory, version=1).content.startswith(
        "verify_jwt rejects tokens whose clock skew exceeds 30 s"
    )

    corrected.get_by_role("link", name="Details & history").click()
    expect(page).to_have_url(re.compile(rf"/memories/{memory.id}/$"))
    history = page.get_by_test_id("history")
    expect(history).to_contain_text("corrected")
    expect(history).to_contain_text("exceeds 30 s; keep NTP on the workers")
    expect(page.get_by_role("link", name="Dispute this memory")).to_be_visible()
    screenshot(page, "memory-detail")


def test_a_memory_created_through_the_api_appears_without_reload(page_as, live_url, alice, bob):
    make_memory(alice, content="Existing memory so the list is not empty.", type="pattern")
    base = base_of(alice)
    page = page_as(alice)
    page.goto(f"{base}/memories/")
    expect(page.get_by_test_id("memory-card")).to_have_count(1)
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    page.evaluate("window.__sameDocument = true")

    response = api(
        live_url,
        alice,
        "POST",
        f"projects/{alice.project.id}/memories",
        json={
            "type": "gotcha",
            "content": "Celery beat must run as a single replica or schedules fire twice.",
            "related_files": ["deploy/beat.yml"],
        },
    )
    assert response.status_code == 201, response.text

    arrived = page.get_by_test_id("memory-card").filter(has_text="Celery beat must run as a single replica")
    expect(arrived).to_be_visible()
    expect(page.get_by_test_id("memory-card")).to_have_count(2)
    assert page.evaluate("window.__sameDocument") is True  # no reload happened


def test_teach_import_and_the_module_map(page_as, live_url, alice, bob, screenshot):
    populate(alice, bob)
    warm_up(live_url, alice)
    base = base_of(alice)
    page = page_as(alice)

    page.goto(f"{base}/teach/")
    screenshot(page, "teach")
    page.get_by_label("Type").select_option("error_pattern")
    page.get_by_label("What should agents know?").fill(
        "ECONNRESET from the payments sandbox means the test card expired; use 4242 4242 4242 4242."
    )
    page.get_by_label("Files").fill("billing/stripe.py")
    page.get_by_role("region", name="Add a memory").get_by_label("Project — everyone in").check()
    page.get_by_role("button", name="Teach", exact=True).click()
    expect(page).to_have_url(re.compile(r"/memories/[0-9a-f-]+/$"))
    expect(page.get_by_test_id("verified-badge")).to_be_visible()
    taught = Memory.objects.get(content__startswith="ECONNRESET")
    assert (taught.source, taught.type, taught.user_verified) == ("user_taught", "error_pattern", True)

    page.goto(f"{base}/teach/")
    page.get_by_label("File kind").select_option("AGENTS.md")
    page.get_by_label("Paste the file").fill(
        "# Conventions\n- Never log request bodies: they carry tokens.\n- Always add a type hint to new functions.\n"
    )
    page.get_by_role("button", name="Preview").click()
    preview = page.get_by_test_id("import-preview")
    expect(preview.get_by_role("row")).to_have_count(3)
    expect(page.get_by_label("Type of rule 1")).to_have_value("gotcha")
    page.get_by_label("Keep rule 2").uncheck()
    page.get_by_role("button", name="Save the kept rules as memories").click()
    expect(page).to_have_url(re.compile(r"source=user_taught"))
    expect(page.get_by_test_id("memory-card").filter(has_text="Never log request bodies")).to_be_visible()
    assert not Memory.objects.filter(content__contains="type hint").exists()

    page.get_by_role("complementary", name="Sections").get_by_role("link", name="Module map").click()
    module_map = page.get_by_test_id("module-map")
    expect(module_map.get_by_role("link", name="billing")).to_be_visible()
    screenshot(page, "module-map")
    module_map.get_by_role("link", name="billing").click()
    expect(page).to_have_url(re.compile(r"module=billing"))
    billing = Memory.objects.filter(related_files__overlap=["billing/money.py", "billing/stripe.py"]).count()
    expect(page.get_by_test_id("memory-card")).to_have_count(billing)


def test_the_import_cards_scope_labels_choose_the_import_cards_scope(page_as, alice):
    """The two forms shared radio ids, so clicking the import card's "Personal — only you"
    checked the teach form's radio and the import went out to the whole project."""
    page = page_as(alice)
    page.goto(f"{base_of(alice)}/teach/")
    teach = page.get_by_role("region", name="Add a memory")
    imports = page.locator("#import")
    imports.get_by_text("Personal — only you").click()
    expect(imports.get_by_role("radio", name="Personal — only you")).to_be_checked()
    expect(teach.get_by_role("radio", name="Personal — only you")).not_to_be_checked()
    expect(teach.get_by_role("radio", name=re.compile("^Project — everyone in"))).to_be_checked()

    imports.get_by_label("Paste the file").fill("# Rules\n- Never commit .env files to the repository.\n")
    imports.get_by_role("button", name="Preview").click()
    expect(page.get_by_test_id("import-scope")).to_contain_text("Personal — only you")
    page.get_by_role("button", name="Save the kept rules as memories").click()
    expect(page).to_have_url(re.compile(r"source=user_taught"))
    memory = Memory.objects.get(content__contains="Never commit .env")
    assert (memory.scope, memory.owner) == ("personal", alice.user)


def test_the_dashboard_in_dark_mode(page_as, alice, bob, screenshot):
    populate(alice, bob)
    page = page_as(alice, color_scheme="dark")
    page.goto(f"{base_of(alice)}/")
    expect(page.get_by_test_id("health-score")).to_be_visible()
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(20, 20, 19)"
    screenshot(page, "health-dark")


def test_the_trust_badge_follows_a_level_change_without_reload(page_as, live_url, alice):
    from apps.governance.models import ProjectTrust, TrustLevel

    ProjectTrust.objects.create(project=alice.project, organization=alice.org, level=TrustLevel.STANDARD)
    page = page_as(alice)
    page.goto(f"{base_of(alice)}/memories/")
    badge = page.locator("#trust-badge")
    expect(badge).to_contain_text("Standard")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "open")
    page.evaluate("window.__sameDocument = true")

    response = api(
        live_url, alice, "PUT", f"projects/{alice.project.id}/trust", json={"level": 1, "reason": "test"}
    )
    assert response.status_code == 200, response.text

    expect(badge).to_contain_text("Cautious")
    assert page.evaluate("window.__sameDocument") is True  # no reload happened


def test_on_a_phone_the_page_does_not_scroll_sideways_and_the_navigation_stays_short(
    page_as, live_url, alice, screenshot
):
    make_memory(alice, content="Phones see the same memories.", related_files=["src/mobile/app.py"])
    page = page_as(alice)
    page.set_viewport_size({"width": 390, "height": 844})
    for path in (
        f"/o/{alice.org.slug}/api-keys/",
        f"{base_of(alice)}/sessions/",
        f"{base_of(alice)}/memories/",
    ):
        page.goto(path)
        widths = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
        assert widths[0] <= widths[1], (path, widths)
        sidebar = page.get_by_role("complementary", name="Sections").bounding_box()
        assert sidebar["height"] < 844 * 0.5, (path, sidebar)
    screenshot(page, "phone-memories")
