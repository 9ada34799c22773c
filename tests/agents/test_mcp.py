"""The remote MCP server at /mcp, driven by the `mcp` SDK's own client over real Streamable HTTP
against a live daphne on the test database (what a test creates is committed, so the server
sees it: `transactional_db`).

Both protocol eras are exercised: `legacy` is the initialize handshake (2025-11-25) that Claude
Code, Codex CLI and Cursor speak today; `auto` negotiates the 2026-07-28 revision.

Tenant isolation for MCP lives here rather than in tests/test_isolation.py, whose enumeration
walks the REST API's OpenAPI schema and the dashboard's URLs: the same rule, applied to the tool
list — every tool the server lists has a probe with org A's ids, or says why it takes none.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult
from memorysaas_client import tool_specs

from apps.agents import mcp_tools
from apps.agents.mcp_server import call_in_django
from apps.graph import services as graph_services
from apps.memories.models import Memory
from apps.memories.validation import MAX_CONTENT_CHARS
from apps.tenants import services as tenant_services
from apps.tenants.principal import Principal
from apps.tenants.roles import Role
from memorysaas.kernel.errors import RateLimited
from tests import isolation
from tests.e2e.conftest import HASHING_EMBEDDINGS, daphne_of_test_database
from tests.factories import ProjectFactory
from tests.isolation import World
from tests.memories.factories import make_memory

TOOLS = {
    "list_projects",
    "search_memory",
    "get_context",
    "remember",
    "memory_feedback",
    "recipes",
    "impact",
    "dependencies",
}
MODES = ["legacy", "auto"]


@pytest.fixture(scope="module")
def mcp_url(django_db_setup, django_db_blocker):
    """A daphne serving the whole ASGI application (MCP included) on the test database."""
    with daphne_of_test_database(django_db_blocker, **HASHING_EMBEDDINGS) as url:
        yield f"{url}/mcp"


def with_client(url: str, key: str, work: Callable[[Client], Awaitable[Any]], *, mode: str = "legacy") -> Any:
    async def main() -> Any:
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http), mode=mode) as client,
        ):
            return await work(client)

    return anyio.run(main)


def call_tools(url: str, key: str, calls: list[tuple[str, dict[str, Any]]], *, mode: str = "legacy"):
    async def work(client: Client) -> list[CallToolResult]:
        return [await client.call_tool(name, arguments) for name, arguments in calls]

    return with_client(url, key, work, mode=mode)


def answer(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def error_text(result: CallToolResult) -> str:
    assert result.is_error, f"expected a tool error, got {result.content[0].text[:300]}"
    return result.content[0].text


@pytest.fixture
def acme(alice, transactional_db):
    """Org A's project with a gotcha, a workflow recipe and a small indexed code graph."""
    gotcha = make_memory(
        alice,
        content="Stripe webhooks arrive twice: make the order handler idempotent on the event id.",
        type="gotcha",
        related_files=["shop/views.py"],
    )
    recipe = make_memory(
        alice,
        content="Adding an API endpoint: schema, view, route, then a test.",
        type="workflow_recipe",
        payload={
            "task_pattern": "add an api endpoint",
            "steps": [
                {"order": 1, "description": "Write the schema", "canonical_file": "shop/schemas.py"},
                {
                    "order": 2,
                    "description": "Write the view and its route",
                    "canonical_file": "shop/views.py",
                },
            ],
        },
    )
    graph_services.index_changes(
        alice.project,
        changed={
            "shop/__init__.py": b"",
            "shop/models.py": b"class Order:\n    pass\n",
            "shop/views.py": b"from shop.models import Order\n\n\ndef show():\n    return Order()\n",
        },
    )
    return {"gotcha": gotcha, "recipe": recipe}


@pytest.mark.parametrize("mode", MODES)
def test_it_lists_every_tool_with_a_description_and_an_argument_schema(
    mcp_url, alice, transactional_db, mode
):
    async def work(client: Client):
        return client.instructions, (await client.list_tools()).tools

    instructions, tools = with_client(mcp_url, alice.key, work, mode=mode)
    assert {tool.name for tool in tools} == TOOLS
    for tool in tools:
        assert len(tool.description or "") > 60, tool.name
        assert tool.input_schema["type"] == "object"
    search = next(t for t in tools if t.name == "search_memory")
    assert search.input_schema["required"] == ["query"]
    assert search.annotations.read_only_hint is True
    assert "get_context" in (instructions or "")


@pytest.mark.parametrize("mode", MODES)
def test_each_tool_answers_through_the_apis_services(mcp_url, alice, acme, mode):
    gotcha, recipe = acme["gotcha"], acme["recipe"]
    results = call_tools(
        mcp_url,
        alice.key,
        [
            ("list_projects", {}),
            ("search_memory", {"query": "stripe webhook arrives twice"}),
            ("get_context", {"task": "handle the stripe webhook for orders", "files": ["shop/views.py"]}),
            ("remember", {"content": "Orders are soft-deleted; filter on deleted_at.", "type": "decision"}),
            ("memory_feedback", {"memory_id": str(gotcha.id), "kind": "used"}),
            ("memory_feedback", {"memory_id": str(gotcha.id), "kind": "helpful"}),
            ("memory_feedback", {"memory_id": str(gotcha.id), "kind": "confirm"}),
            (
                "memory_feedback",
                {"memory_id": str(gotcha.id), "kind": "correct", "content": "Webhooks repeat."},
            ),
            ("recipes", {"task": "add an api endpoint"}),
            ("recipes", {}),
            ("impact", {"target": "shop/models.py"}),
            ("dependencies", {"file": "shop/views.py"}),
            ("search_memory", {"query": "webhook", "project": alice.project.slug}),
        ],
        mode=mode,
    )
    listed, searched, context, remembered, used, helpful, confirmed, corrected = map(answer, results[:8])
    by_task, recent, impact, dependencies, by_slug = map(answer, results[8:])

    assert listed == {
        "project_limited": False,
        "projects": [
            {
                "id": str(alice.project.id),
                "slug": "acme-api",
                "name": "Acme API",
                "organization": "acme",
                "team": None,
            }
        ],
    }
    assert searched["results"][0]["id"] == str(gotcha.id)
    assert searched["results"][0]["citation"].startswith(f"[Memory #{str(gotcha.id)[:8]}")
    assert by_slug["results"][0]["id"] == str(gotcha.id)
    assert f"[Memory #{str(gotcha.id)[:8]}" in context["text"]
    assert str(gotcha.id) in {m["id"] for m in context["memories"]}

    stored = Memory.objects.get(id=remembered["id"])
    assert (stored.project_id, stored.type, stored.source) == (alice.project.id, "decision", "agent_explicit")
    assert stored.content == "Orders are soft-deleted; filter on deleted_at."

    assert (used["feedback"], helpful["feedback"], confirmed["user_verified"]) == ("used", "helpful", True)
    assert corrected["content"] == "Webhooks repeat."
    gotcha.refresh_from_db()
    assert (gotcha.used_count, gotcha.helpful_count, gotcha.content) == (1, 1, "Webhooks repeat.")

    assert [r["id"] for r in by_task["recipes"]] == [str(recipe.id)]
    assert by_task["recipes"][0]["payload"]["steps"][0]["canonical_file"] == "shop/schemas.py"
    assert [r["id"] for r in recent["recipes"]] == [str(recipe.id)]
    assert [d["file"] for d in impact["direct"]] == ["shop/views.py"]
    assert "shop/models.py" in {d["file"] for d in dependencies["dependencies"]}


def test_a_flag_lowers_confidence_and_sends_the_memory_to_review(mcp_url, alice, acme):
    gotcha = acme["gotcha"]
    (flagged,) = call_tools(
        mcp_url,
        alice.key,
        [("memory_feedback", {"memory_id": str(gotcha.id), "kind": "flag", "note": "Stale."})],
    )
    assert answer(flagged)["needs_review"] is True
    gotcha.refresh_from_db()
    assert (gotcha.needs_review, gotcha.flag_count, gotcha.confidence) == (True, 1, pytest.approx(0.6))


@pytest.mark.parametrize("mode", MODES)
def test_a_wrong_or_missing_key_is_refused_before_any_mcp_handling(mcp_url, alice, transactional_db, mode):
    statuses: list[int] = []

    async def record(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    async def connect() -> None:
        headers = {"Authorization": f"Bearer {alice.key}x"}
        async with (
            httpx2.AsyncClient(headers=headers, event_hooks={"response": [record]}) as http,
            Client(streamable_http_client(mcp_url, http_client=http), mode=mode),
        ):
            raise AssertionError("connected with a wrong key")

    with pytest.raises(BaseExceptionGroup) as refused:
        anyio.run(connect)
    assert refused.group_contains(MCPError)
    assert statuses and set(statuses) == {401}

    handshake = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    for headers in ({}, {"Authorization": "Basic YWxpY2U6cHc="}, {"Authorization": "Bearer msk_nope_nope"}):
        response = httpx.post(mcp_url, json=handshake, headers=headers, timeout=30)
        assert response.status_code == 401, headers
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
        assert response.json()["error"]["code"] in {
            "unauthenticated",
            "invalid_authorization_header",
            "invalid_api_key",
        }


def test_a_get_is_answered_405_not_held_open(mcp_url, alice, transactional_db):
    response = httpx.get(mcp_url, headers={"Authorization": f"Bearer {alice.key}"}, timeout=30)
    assert response.status_code == 405
    assert "POST" in response.headers["Allow"]


def test_bad_arguments_are_tool_errors_that_say_what_is_wrong(mcp_url, alice, acme):
    gotcha = acme["gotcha"]
    bad = [
        (("search_memory", {"query": ""}), "query"),
        (("search_memory", {"query": "x", "limit": 500}), "limit"),
        (("search_memory", {"query": "x", "types": ["nonsense"]}), "Unknown memory type"),
        (("search_memory", {"query": "x", "project": "no-such-project"}), "No such project"),
        (("search_memory", {"query": "x", "files": ["a\x00.py"]}), "files[0] contains a NUL"),
        (("get_context", {}), "Send a task, files, or both"),
        (("remember", {"content": "x", "type": "rumour"}), "type"),
        (("remember", {"content": "x", "type": "dead_end", "payload": {"approach_tried": 3}}), "payload"),
        (("memory_feedback", {"memory_id": "not-an-id", "kind": "used"}), "not a memory id"),
        (("memory_feedback", {"memory_id": str(gotcha.id), "kind": "dispute"}), "kind"),
        (("memory_feedback", {"memory_id": str(gotcha.id), "kind": "correct"}), "corrected text"),
        (("impact", {"target": "shop/models.py", "depth": 0}), "depth"),
        (("impact", {"target": "shop/nowhere.py"}), "No file or symbol"),
        (("dependencies", {"file": "shop/nowhere.py"}), "No file"),
        (("no_such_tool", {}), "no_such_tool"),
    ]
    results = call_tools(mcp_url, alice.key, [c for c, _ in bad] + [("list_projects", {})])
    for ((name, arguments), expected), result in zip(bad, results, strict=False):
        assert expected in error_text(result), (name, arguments, result.content[0].text)
    assert answer(results[-1])["projects"], "the server kept answering after the errors"


def test_scopes_and_roles_are_the_apis(mcp_url, alice, person_with_role, acme):
    viewer = person_with_role(Role.VIEWER)
    _, read_only_key = tenant_services.api_key_create(
        organization=alice.org, actor=alice.principal, name="read only", scopes=["memories:read"]
    )
    remember = ("remember", {"content": "A viewer cannot write.", "type": "gotcha"})
    feedback = ("memory_feedback", {"memory_id": str(acme["gotcha"].id), "kind": "used"})
    for key in (viewer.key, read_only_key):
        wrote, fed, searched = call_tools(
            mcp_url, key, [remember, feedback, ("search_memory", {"query": "x"})]
        )
        assert "memories:write" in error_text(wrote)
        assert "memories:write" in error_text(fed)
        assert not searched.is_error
    assert not Memory.objects.filter(content="A viewer cannot write.").exists()


def test_a_project_limited_key_needs_no_project_and_reaches_no_other(mcp_url, alice, acme):
    other = ProjectFactory(organization=alice.org, name="Acme Web", slug="acme-web")
    _, limited = tenant_services.api_key_create(
        organization=alice.org,
        actor=alice.principal,
        name="web only",
        scopes=["memories:read", "memories:write"],
        project=other,
    )
    listed, remembered, elsewhere, org_wide = (
        *call_tools(
            mcp_url,
            limited,
            [
                ("list_projects", {}),
                ("remember", {"content": "Web uses htmx.", "type": "decision"}),
                ("search_memory", {"query": "stripe", "project": str(alice.project.id)}),
            ],
        ),
        *call_tools(mcp_url, alice.key, [("search_memory", {"query": "stripe"})]),
    )
    assert [p["slug"] for p in answer(listed)["projects"]] == ["acme-web"]
    assert answer(listed)["project_limited"] is True
    assert Memory.objects.get(id=answer(remembered)["id"]).project_id == other.id
    assert "No such project" in error_text(elsewhere)
    # An organization-wide key that now sees two projects must say which.
    assert "list_projects" in error_text(org_wide)


# ---------------------------------------------------------------- tenant isolation

# For each tool, arguments naming org A's objects: charlie (org B) must get "not found".
MCP_PROBES: dict[str, Callable[[World], dict[str, Any]]] = {
    "search_memory": lambda w: {"project": str(w.alice.project.id), "query": "secret sauce"},
    "get_context": lambda w: {"project": str(w.alice.project.id), "task": "retry twice"},
    "remember": lambda w: {"project": str(w.alice.project.id), "content": "probe", "type": "gotcha"},
    "memory_feedback": lambda w: {"memory_id": str(w.memory_a.id), "kind": "used"},
    "recipes": lambda w: {"project": str(w.alice.project.id)},
    "impact": lambda w: {"project": str(w.alice.project.id), "target": "a.py"},
    "dependencies": lambda w: {"project": str(w.alice.project.id), "file": "a.py"},
}
MCP_UNSCOPED = {"list_projects": "takes no ids; lists only the caller's (test_list_projects_leaks_nothing)"}


@pytest.fixture
def world(alice, bob, charlie, transactional_db) -> World:
    isolation.load_registrations()
    built = World(alice=alice, bob=bob, charlie=charlie)
    for build in isolation.WORLD_BUILDERS:
        build(built)
    return built


def test_every_mcp_tool_has_an_isolation_probe(mcp_url, alice, transactional_db):
    async def work(client: Client):
        return {tool.name for tool in (await client.list_tools()).tools}

    listed = with_client(mcp_url, alice.key, work)
    assert listed - set(MCP_PROBES) - set(MCP_UNSCOPED) == set()


def test_charlie_gets_not_found_from_every_mcp_tool_on_org_a(mcp_url, world):
    probes = [(name, build(world)) for name, build in sorted(MCP_PROBES.items())]
    by_slug = [
        (name, {**args, "project": world.alice.project.slug}) for name, args in probes if "project" in args
    ]
    as_charlie = call_tools(mcp_url, world.charlie.key, probes + by_slug)
    leaks = [
        f"{name} {args}: {result.content[0].text[:200]}"
        for (name, args), result in zip(probes + by_slug, as_charlie, strict=True)
        if not (result.is_error and "No such" in result.content[0].text)
    ]
    assert leaks == [], "MCP tools that did not answer 'not found' to org B:\n" + "\n".join(leaks)
    # The probes are real: the same calls from org A's owner are answered.
    as_alice = call_tools(mcp_url, world.alice.key, probes)
    wrong = [name for (name, _), result in zip(probes, as_alice, strict=True) if result.is_error]
    assert wrong == [], f"probes that fail for alice too: {wrong}"
    assert not Memory.objects.filter(project=world.charlie.project, content="probe").exists()


def test_list_projects_leaks_nothing(mcp_url, world):
    (listed,) = call_tools(mcp_url, world.charlie.key, [("list_projects", {})])
    assert [p["id"] for p in answer(listed)["projects"]] == [str(world.charlie.project.id)]


def test_a_demoted_person_s_key_narrows_at_once(mcp_url, alice, bob, acme):
    """A key acts with its maker's current role, over MCP as over REST."""
    remember = ("remember", {"content": "Bob was here.", "type": "gotcha"})
    (before,) = call_tools(mcp_url, bob.key, [remember])
    assert not before.is_error
    bob_membership = bob.user.memberships.get(organization=alice.org)
    bob_membership.role = Role.VIEWER
    bob_membership.save(update_fields=["role"])
    (after,) = call_tools(mcp_url, bob.key, [remember])
    assert "memories:write" in error_text(after)
    assert Principal.for_api_key(bob.api_key).permissions_in(alice.org.id) == {"memories:read"}


def test_tool_calls_are_charged_to_the_keys_rate_limit_like_rest_requests(settings, alice, transactional_db):
    """In process, because the live server runs the test settings, where limits are off: the
    bridge every tool call goes through charges the key as the REST API charges a request."""
    settings.RATE_LIMIT_ENABLED = True
    settings.RATE_LIMIT_STORE = "postgres"
    settings.RATE_LIMIT_KEY_BURST = 7
    settings.RATE_LIMIT_KEY_PER_MINUTE = 1
    settings.RATE_LIMIT_WEIGHTS = {**settings.RATE_LIMIT_WEIGHTS, "search": 5}
    principal = Principal.for_api_key(alice.api_key)
    search = {"project": None, "query": "retry", "files": [], "types": [], "phase": None, "limit": 3}
    call_in_django(mcp_tools.list_projects, principal, {})  # 1 of 7
    call_in_django(mcp_tools.search_memory, principal, search)  # 6 of 7
    call_in_django(mcp_tools.list_projects, principal, {})  # 7 of 7
    with pytest.raises(RateLimited) as refused:
        call_in_django(mcp_tools.list_projects, principal, {})
    assert refused.value.details["scope"] == "api_key"
    assert "Try again in" in refused.value.message


def test_a_memorys_content_is_limited_alike_by_the_tools_and_the_api():
    assert tool_specs.MAX_CONTENT_CHARS == MAX_CONTENT_CHARS
