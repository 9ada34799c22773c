"""Module map, workflow recipes, teach and import, ask, connect an agent."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from apps.memories.models import Memory, MemoryVersion
from apps.tenants.roles import Role
from tests.memories.factories import make_memory

pytestmark = pytest.mark.django_db


def test_the_module_map_links_each_module_to_the_filtered_browser(alice, signed_in, base):
    make_memory(alice, content="Token skew.", related_files=["auth/tokens.py"])
    make_memory(alice, content="Login throttle.", related_files=["auth/views.py"], needs_review=True)
    make_memory(
        alice,
        content="Screenshots need a 300 ms settle.",
        related_files=["web/app.tsx"],
        type="e2e_observation",
    )
    page = signed_in(alice).get(f"{base}/modules/").content.decode()
    assert f'href="{base}/memories/?module=auth"' in page and f'href="{base}/memories/?module=web"' in page
    assert "<strong>2</strong> memories" in page and "1 need review" in page and "1 E2E observation" in page
    assert "Index the repository" in page  # no graph yet: counts only
    assert "live-memory from:body" in page and "live-graph from:body" in page


def test_the_module_map_shows_file_coverage_once_the_graph_knows_the_files(alice, signed_in, base):
    from apps.graph.models import GraphNode

    for path in ("auth/tokens.py", "auth/views.py", "auth/models.py", "billing/a.py"):
        GraphNode.objects.create(project=alice.project, kind="file", key=path, path=path, name=path)
    make_memory(alice, content="Token skew.", related_files=["auth/tokens.py"])
    page = signed_in(alice).get(f"{base}/modules/").content.decode()
    assert "1 of 3 files covered (33%)" in page and "0 of 1 files covered (0%)" in page


def test_the_module_map_shows_the_graph_index_progress(alice, charlie, signed_in, base):
    from apps.graph.models import IndexJob

    page = signed_in(alice).get(f"{base}/modules/").content.decode()
    assert 'data-testid="index-status"' not in page  # never indexed: nothing to report
    job = IndexJob.objects.create(project=alice.project, status="running", progress=50)
    IndexJob.objects.create(project=charlie.project, status="failed", error="charlie's archive")
    page = signed_in(alice).get(f"{base}/modules/").content.decode()
    assert 'data-status="running"' in page and '<progress id="index-progress" max="100" value="50"' in page
    IndexJob.objects.filter(pk=job.pk).update(status="failed", error="archive is not a .tar.gz or .zip")
    page = signed_in(alice).get(f"{base}/modules/").content.decode()
    assert "archive is not a .tar.gz or .zip" in page and "charlie" not in page


def test_an_empty_module_map_says_where_modules_come_from(alice, signed_in, base):
    assert 'data-testid="modules-empty"' in signed_in(alice).get(f"{base}/modules/").content.decode()


RECIPE = {
    "task_pattern": "Add an API endpoint",
    "steps": "1. Add the schema @ apps/memories/api.py:30\n2. Register the route\n3. Write its isolation probe @ tests/isolation.py",
    "content": "",
    "tags": "api, backend",
    "scope": "project",
}


def test_a_recipe_is_added_viewed_and_edited_by_hand(alice, signed_in, base):
    client = signed_in(alice)
    response = client.post(f"{base}/recipes/new/", RECIPE)
    recipe = Memory.objects.get(type="workflow_recipe")
    assert response.status_code == 302 and response["Location"] == f"{base}/recipes/{recipe.id}/"
    assert recipe.payload["task_pattern"] == "Add an API endpoint" and len(recipe.payload["steps"]) == 3
    assert recipe.payload["steps"][0] == {
        "order": 1,
        "description": "Add the schema",
        "canonical_file": "apps/memories/api.py",
        "canonical_line": 30,
    }
    assert recipe.source == "user_taught" and recipe.related_files == [
        "apps/memories/api.py",
        "tests/isolation.py",
    ]
    assert recipe.content.startswith("How to add an API endpoint: 1) Add the schema")
    listing = client.get(f"{base}/recipes/").content.decode()
    assert "Add an API endpoint" in listing and "3 steps" in listing
    view = client.get(f"{base}/recipes/{recipe.id}/").content.decode()
    assert "apps/memories/api.py:30" in view and "Edit recipe" in view

    form = client.get(f"{base}/recipes/{recipe.id}/edit/").content.decode()
    assert "Add the schema @ apps/memories/api.py:30" in form
    Memory.objects.filter(pk=recipe.pk).update(payload={**recipe.payload, "success_count": 4})
    client.post(
        f"{base}/recipes/{recipe.id}/edit/",
        {**RECIPE, "steps": "Add the schema\nRegister the route", "content": "Endpoints: schema then route."},
    )
    recipe.refresh_from_db()
    assert [s["description"] for s in recipe.payload["steps"]] == ["Add the schema", "Register the route"]
    assert recipe.payload["success_count"] == 4 and recipe.content == "Endpoints: schema then route."
    assert MemoryVersion.objects.filter(memory=recipe, change="edited").exists()


def _posted_form(html: str) -> dict[str, str]:
    """What a browser sends back from an untouched form: its text inputs and textareas, with the
    textarea's first newline dropped and its line breaks sent as CRLF."""
    fields = {
        name: unescape(value)
        for name, value in re.findall(r'<input type="text" name="(\w+)" value="([^"]*)"', html)
    }
    for name, value in re.findall(r'<textarea name="(\w+)"[^>]*>(.*?)</textarea>', html, re.S):
        fields[name] = unescape(value.removeprefix("\n")).replace("\n", "\r\n")
    return fields


def test_saving_a_recipe_unchanged_keeps_every_step(alice, signed_in, base):
    steps = [
        {"order": 1, "description": "Ping @ team"},
        {"order": 2, "description": "Run the migrations\nthen restart the worker"},
        {
            "order": 3,
            "description": "2. Tag the release",
            "canonical_file": "RELEASE.md",
            "canonical_line": 4,
        },
        {"order": 4, "description": "Open <settings> & check"},
        {"order": 5, "description": "Edit it", "canonical_line": 12},
    ]
    recipe = make_memory(
        alice,
        type="workflow_recipe",
        content="How to ship a release.",
        tags=["release"],
        payload={"task_pattern": "Ship a release", "steps": steps},
    )
    client = signed_in(alice)
    form = _posted_form(client.get(f"{base}/recipes/{recipe.id}/edit/").content.decode())
    assert set(form) == {"task_pattern", "steps", "content", "tags"}
    response = client.post(f"{base}/recipes/{recipe.id}/edit/", form)
    assert response.status_code == 302
    recipe.refresh_from_db()
    assert recipe.payload["steps"] == steps and recipe.payload["task_pattern"] == "Ship a release"
    assert recipe.content == "How to ship a release." and recipe.tags == ["release"]


def test_a_recipe_without_steps_is_refused(alice, signed_in, base):
    response = signed_in(alice).post(f"{base}/recipes/new/", {**RECIPE, "steps": "   \n1.  \n"})
    assert response.status_code == 422 and "Write at least one step." in response.content.decode()
    assert not Memory.objects.exists()


def test_a_recipe_page_is_only_for_recipes(alice, signed_in, base):
    gotcha = make_memory(alice, content="Not a recipe.")
    assert signed_in(alice).get(f"{base}/recipes/{gotcha.id}/").status_code == 404


def test_viewers_cannot_write_recipes_or_teach(person_with_role, signed_in, base):
    viewer = signed_in(person_with_role(Role.VIEWER))
    assert viewer.get(f"{base}/recipes/").status_code == 200
    assert "+ Add a recipe" not in viewer.get(f"{base}/recipes/").content.decode()
    assert viewer.post(f"{base}/recipes/new/", RECIPE).status_code == 403
    assert viewer.get(f"{base}/teach/").status_code == 403
    assert viewer.post(f"{base}/teach/import/", {"action": "save"}).status_code == 403
    assert not Memory.objects.exists()


@pytest.mark.parametrize("path", ["/", "/memories/", "/modules/", "/ask/?q=zebra", "/disputes/", "/trust/"])
def test_viewers_are_not_offered_teach_links_that_lead_to_a_refusal(person_with_role, signed_in, base, path):
    """ "+ Teach a memory" and the sidebar's "Teach" led viewers to a 403."""
    page = signed_in(person_with_role(Role.VIEWER)).get(f"{base}{path}").content.decode()
    assert f'href="{base}/teach/' not in page
    member_page = signed_in(person_with_role(Role.MEMBER)).get(f"{base}{path}").content.decode()
    assert f'href="{base}/teach/"' in member_page


def test_teach_adds_a_verified_user_taught_memory(alice, signed_in, base):
    response = signed_in(alice).post(
        f"{base}/teach/",
        {
            "type": "gotcha",
            "content": "The payments sandbox rejects amounts under 50 cents.",
            "related_files": "billing/stripe.py, billing/tests/test_stripe.py",
            "related_modules": "billing",
            "tags": "payments",
            "scope": "personal",
        },
    )
    memory = Memory.objects.get()
    assert response["Location"] == f"{base}/memories/{memory.id}/"
    assert (memory.source, memory.scope, memory.user_verified, memory.owner) == (
        "user_taught",
        "personal",
        True,
        alice.user,
    )
    assert memory.related_files == ["billing/stripe.py", "billing/tests/test_stripe.py"]
    assert memory.related_modules == ["billing"] and memory.tags == ["payments"]


def test_teaching_a_secret_says_it_was_redacted_and_marked_for_review(alice, signed_in, base):
    key = "sk-ant-api03-" + "Tq4Wn8Lp2Xz6" * 4
    body = {"type": "gotcha", "content": f"Staging reads {key}.", "scope": "project"}
    page = signed_in(alice).post(f"{base}/teach/", body, follow=True).content.decode()
    assert "replaced by its marker" in page and "Agents receive it from their next" not in page
    assert Memory.objects.get().needs_review


def test_teach_refuses_what_is_not_a_memory(alice, signed_in, base):
    client = signed_in(alice)
    assert (
        client.post(f"{base}/teach/", {"type": "gotcha", "content": "", "scope": "project"}).status_code
        == 422
    )
    assert (
        client.post(f"{base}/teach/", {"type": "nope", "content": "x", "scope": "project"}).status_code == 422
    )
    assert (
        client.post(f"{base}/teach/", {"type": "gotcha", "content": "x", "scope": "team"}).status_code == 422
    )
    assert not Memory.objects.exists()


def test_teach_prefills_a_file(alice, signed_in, base):
    assert "auth/tokens.py" in signed_in(alice).get(f"{base}/teach/?file=auth/tokens.py").content.decode()


RULES = """# Rules
- Never commit .env files.
- Always use `uv` to add dependencies.

## Release steps
1. Bump version in pyproject.toml
2. Tag the commit
"""


def test_import_previews_then_saves_the_kept_rules(alice, signed_in, base):
    client = signed_in(alice)
    preview = client.post(
        f"{base}/teach/import/",
        {
            "action": "preview",
            "import-source_name": "CLAUDE.md",
            "import-text": RULES,
            "import-scope": "project",
        },
    )
    page = preview.content.decode()
    assert preview.status_code == 200 and 'data-testid="import-preview"' in page
    assert not Memory.objects.exists()  # nothing until saved
    assert 'name="rule-2-type" id="rule-2-type"' in page and 'value="workflow_recipe" selected' in page
    response = client.post(
        f"{base}/teach/import/",
        {
            "action": "save",
            "import-source_name": "CLAUDE.md",
            "import-scope": "project",
            "rule_count": "3",
            "rule-0-include": "1",
            "rule-0-type": "gotcha",
            "rule-0-content": "Rules: Never commit .env files.",
            "rule-0-files": "",
            "rule-0-heading": "Rules",
            # rule 1 left out
            "rule-1-type": "preference",
            "rule-1-content": "Rules: Always use uv.",
            "rule-2-include": "1",
            "rule-2-type": "workflow_recipe",
            "rule-2-content": "Release steps\n1. Bump version in pyproject.toml\n2. Tag the commit",
            "rule-2-files": "pyproject.toml",
            "rule-2-heading": "Release steps",
        },
    )
    assert response.status_code == 302 and response["Location"] == f"{base}/memories/?source=user_taught"
    saved = {m.type: m for m in Memory.objects.all()}
    assert set(saved) == {"gotcha", "workflow_recipe"}
    assert saved["gotcha"].tags == ["imported", "claude-md"] and saved["gotcha"].user_verified
    assert saved["workflow_recipe"].payload["task_pattern"] == "Release steps"
    assert [s["description"] for s in saved["workflow_recipe"].payload["steps"]] == [
        "Bump version in pyproject.toml",
        "Tag the commit",
    ]


def test_the_teach_pages_two_forms_give_their_fields_distinct_ids(alice, signed_in, base):
    """Both forms had `id_scope_0..2`: the import card's "Personal" label checked the teach
    form's radio, and an import meant to be personal went out to the whole project."""
    page = signed_in(alice).get(f"{base}/teach/").content.decode()
    ids = re.findall(r'\sid="([^"]+)"', page)
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
    assert 'name="scope" value="personal"' in page and 'name="import-scope" value="personal"' in page


def test_an_import_meant_to_be_personal_stays_personal_from_preview_to_save(alice, signed_in, base):
    client = signed_in(alice)
    preview = client.post(
        f"{base}/teach/import/",
        {
            "action": "preview",
            "import-source_name": "CLAUDE.md",
            "import-text": RULES,
            "import-scope": "personal",
        },
    ).content.decode()
    shown = re.search(r'data-testid="import-scope">(.*?)</p>', preview, re.S)
    assert shown is not None and "Personal — only you" in unescape(shown.group(1))
    hidden = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', preview))
    assert hidden["import-scope"] == "personal"
    body = {
        **{name: value for name, value in hidden.items() if name != "csrfmiddlewaretoken"},
        "rule-0-include": "1",
        "rule-0-type": "gotcha",
        "rule-0-content": "Never commit .env files.",
    }
    assert client.post(f"{base}/teach/import/", body).status_code == 302
    memory = Memory.objects.get()
    assert (memory.scope, memory.owner) == ("personal", alice.user)


def test_an_import_saved_without_a_scope_is_refused_rather_than_shared(alice, signed_in, base):
    body = {
        "action": "save",
        "import-source_name": "CLAUDE.md",
        "rule_count": "1",
        "rule-0-include": "1",
        "rule-0-type": "gotcha",
        "rule-0-content": "Never commit .env files.",
    }
    page = signed_in(alice).post(f"{base}/teach/import/", body, follow=True).content.decode()
    assert "Choose who sees the imported memories." in page and not Memory.objects.exists()


def test_import_accepts_an_uploaded_file(alice, signed_in, base):
    upload = SimpleUploadedFile(".cursorrules", RULES.encode(), content_type="text/plain")
    response = signed_in(alice).post(
        f"{base}/teach/import/",
        {
            "action": "preview",
            "import-source_name": ".cursorrules",
            "import-upload": upload,
            "import-scope": "project",
        },
    )
    assert response.status_code == 200 and "Never commit .env files." in response.content.decode()


def test_an_uploaded_file_with_a_byte_order_mark_reads_its_first_heading(alice, signed_in, base):
    """The BOM stayed in front of "# Rules", which was then no heading: its rules lost it."""
    upload = SimpleUploadedFile("CLAUDE.md", "\ufeff".encode() + RULES.encode(), content_type="text/plain")
    page = (
        signed_in(alice)
        .post(
            f"{base}/teach/import/",
            {
                "action": "preview",
                "import-source_name": "CLAUDE.md",
                "import-upload": upload,
                "import-scope": "project",
            },
        )
        .content.decode()
    )
    assert '<input type="hidden" name="rule-0-heading" value="Rules">' in page and "\ufeff" not in page


def test_import_refuses_nothing_and_a_bad_rule_saves_nothing(alice, signed_in, base):
    client = signed_in(alice)
    empty = client.post(
        f"{base}/teach/import/",
        {
            "action": "preview",
            "import-source_name": "AGENTS.md",
            "import-text": " ",
            "import-scope": "project",
        },
    )
    assert empty.status_code == 422 and "Paste the file" in empty.content.decode()
    response = client.post(
        f"{base}/teach/import/",
        {
            "action": "save",
            "import-source_name": "AGENTS.md",
            "import-scope": "project",
            "rule_count": "2",
            "rule-0-include": "1",
            "rule-0-type": "gotcha",
            "rule-0-content": "Fine rule.",
            "rule-1-include": "1",
            "rule-1-type": "gotcha",
            "rule-1-content": "",
        },
        follow=True,
    )
    assert "not be valid" in response.content.decode() and not Memory.objects.exists()
    crowded = {
        "action": "save",
        "import-source_name": "AGENTS.md",
        "import-scope": "project",
        "rule_count": "1",
        "rule-0-include": "1",
        "rule-0-type": "gotcha",
        "rule-0-content": "Fine rule.",
        "rule-0-files": ",".join(f"f{i}.py" for i in range(101)),
    }
    response = client.post(f"{base}/teach/import/", crowded, follow=True)
    assert "At most 100 entries" in response.content.decode() and not Memory.objects.exists()
    response = client.post(
        f"{base}/teach/import/",
        {**crowded, "rule-0-files": "", "rule-0-content": "Fine\x00rule."},
        follow=True,
    )
    assert response.status_code == 200 and "NUL" in response.content.decode() and not Memory.objects.exists()


def test_ask_answers_with_cited_memories(alice, signed_in, base):
    memory = make_memory(
        alice,
        content="verify_jwt rejects tokens whose clock skew exceeds 30 s.",
        citation_text="JWT skew limit",
    )
    page = signed_in(alice).get(f"{base}/ask/", {"q": "what does verify_jwt reject?"}).content.decode()
    assert f"[Memory #{str(memory.id)[:8]}: JWT skew limit]" in page
    assert f'href="{base}/memories/{memory.id}/"' in page
    make_memory(
        alice, content="Invoices are numbered per tenant and never reused.", citation_text="Invoice numbers"
    )
    page = signed_in(alice).get(f"{base}/ask/", {"q": "what does verify_jwt reject?"}).content.decode()
    assert "Invoice numbers" not in page  # search fills its limit; unrelated memories are not answers
    nothing = signed_in(alice).get(f"{base}/ask/", {"q": "zebra quaternion"}).content.decode()
    assert "Nothing remembered about that" in nothing and "JWT skew limit" not in nothing


def test_a_shared_word_is_not_an_answer_in_ask_or_in_search(alice, signed_in, base, settings):
    """With the local model, as the product runs: a memory sharing only "setup" with the question
    is no answer, and a search about something never remembered shows nothing."""
    settings.EMBEDDING_PROVIDER = "local"
    fixtures = make_memory(alice, content="We prefer pytest fixtures for test setup over setUp methods.")
    jwt = make_memory(alice, content="verify_jwt rejects tokens whose clock skew exceeds 30 s.")
    client = signed_in(alice)
    page = client.get(f"{base}/ask/", {"q": "what is our kubernetes helm setup"}).content.decode()
    assert "Nothing remembered about that" in page and str(fixtures.id)[:8] not in page
    found = client.get(f"{base}/memories/", {"q": "kubernetes helm chart"}).content.decode()
    assert str(fixtures.id) not in found and str(jwt.id) not in found
    answer = client.get(f"{base}/ask/", {"q": "how do we set up tests?"}).content.decode()
    assert str(fixtures.id)[:8] in answer


def test_ask_without_a_question_shows_the_form(alice, signed_in, base):
    page = signed_in(alice).get(f"{base}/ask/").content.decode()
    assert "Ask what this project" in page and 'data-testid="answer"' not in page


def test_connect_shows_the_project_id_and_how_to_send_events(alice, bob, signed_in, base):
    page = signed_in(bob).get(f"{base}/connect/").content.decode()
    assert str(alice.project.id) in page and "/api/v1/sessions/$SESSION_ID/events" in page
    assert "/o/acme/api-keys/" in page and '"token_budget": 1200' in page


def test_memory_text_shows_backticked_names_as_code_and_stays_escaped(alice, signed_in, base):
    memory = make_memory(alice, content="Totals live in `shop/services.py`, not <b>models</b>.")
    page = signed_in(alice).get(f"{base}/memories/{memory.id}/").content.decode()
    assert "<code>shop/services.py</code>" in page and "&lt;b&gt;models&lt;/b&gt;" in page


def test_teaching_what_the_project_already_remembers_points_to_it_instead(alice, signed_in, base):
    body = {"type": "gotcha", "content": "Refunds are issued in cents.", "scope": "project"}
    client = signed_in(alice)
    assert client.post(f"{base}/teach/", body).status_code == 302
    again = client.post(f"{base}/teach/", {**body, "content": " Refunds are issued in cents. "})
    memory = Memory.objects.get()
    assert again.status_code == 422 and f"{base}/memories/{memory.id}/" in again.content.decode()


def test_a_relation_to_a_memory_the_reader_cannot_see_is_named_not_shown(alice, person_with_role, signed_in):
    teammate = person_with_role(Role.MEMBER)
    private = make_memory(teammate, content="My own shortcut: skip the staging check.", scope="personal")
    shared = make_memory(teammate, content="Staging deploys need the check.", scope="project")
    linked = make_memory(
        teammate,
        content="Deploys go through staging first.",
        relations=[
            {"relation_type": "derived_from", "target_memory_id": str(private.id)},
            {"relation_type": "required_with", "target_memory_id": str(shared.id)},
        ],
    )
    url = f"/o/{teammate.org.slug}/p/{teammate.project.slug}/memories/{linked.id}/"
    page = signed_in(alice).get(url).content.decode()
    assert shared.citation_text in page and private.citation_text not in page and str(private.id) not in page
    assert "a memory you cannot see" in page
    own_view = signed_in(teammate).get(url).content.decode()
    assert private.citation_text in own_view


def test_a_deleted_memorys_page_says_so_when_it_refreshes_live(alice, signed_in, base):
    """The live refresh of a deleted memory's page got a 404, which htmx does not swap: the memory
    stayed on screen as if it still existed."""
    memory = make_memory(alice, content="Totals live in shop/services.py.")
    url = f"{base}/memories/{memory.id}/"
    Memory.objects.filter(id=memory.id).delete()
    client = signed_in(alice)
    live = client.get(url, HTTP_HX_REQUEST="true")
    assert live.status_code == 200 and 'id="memory-live"' in live.content.decode()
    assert "no longer exists" in live.content.decode()
    assert client.get(url).status_code == 404  # (opened directly, it is a 404 page)


def test_an_import_of_more_rules_than_one_save_takes_says_so_and_a_full_preview_saves(alice, signed_in, base):
    """A full preview (200 rules, five fields each) was refused on save by Django's 1,000-field
    limit, losing the review; the rules past 200 were dropped without a word."""
    client = signed_in(alice)
    text = "\n".join(f"- Always do thing number {i} carefully." for i in range(230))
    preview = client.post(
        f"{base}/teach/import/",
        {
            "action": "preview",
            "import-source_name": "CLAUDE.md",
            "import-text": text,
            "import-scope": "project",
        },
    ).content.decode()
    assert 'data-testid="import-left-out"' in preview and "30 more were left out" in preview
    body = {
        "action": "save",
        "import-source_name": "CLAUDE.md",
        "import-scope": "project",
        "rule_count": "200",
    }
    for i in range(200):
        body |= {
            f"rule-{i}-include": "1", f"rule-{i}-type": "preference", f"rule-{i}-heading": "",
            f"rule-{i}-content": f"Always do thing number {i} carefully.", f"rule-{i}-files": "",
        }  # fmt: skip
    response = client.post(f"{base}/teach/import/", body)
    assert response.status_code == 302, response.status_code
    assert Memory.objects.count() == 200


def test_importing_a_file_twice_stores_its_rules_once(alice, signed_in, base):
    """Teach refused what the project already remembered word for word; import stored it again,
    and a rule written twice in one file twice."""
    body = {"action": "save", "import-source_name": "CLAUDE.md", "import-scope": "project", "rule_count": "2"}
    for i in range(2):
        body |= {
            f"rule-{i}-include": "1", f"rule-{i}-type": "gotcha", f"rule-{i}-heading": "",
            f"rule-{i}-content": "Never commit .env files.", f"rule-{i}-files": "",
        }  # fmt: skip
    client = signed_in(alice)
    assert client.post(f"{base}/teach/import/", body).status_code == 302
    assert Memory.objects.count() == 1
    again = client.post(f"{base}/teach/import/", body, follow=True).content.decode()
    assert Memory.objects.count() == 1 and "Imported 0 memories" in again and "already remembered" in again
