"""Tenant isolation, enumerated: every API operation and every dashboard URL, probed with org A's
objects as charlie (org B) by API key and by session, must answer 404 — not 403, not 200.

See tests/isolation.py for how each app registers its probes.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from memorysaas.api import api
from tests import isolation
from tests.conftest import ApiClient
from tests.isolation import World

isolation.load_registrations()

_PARAM = re.compile(r"{([^}]+)}")
# Dashboard routes outside any tenant (token-addressed or account-wide), each tested elsewhere.
PAGE_UNSCOPED = {
    "invitations/<str:token>/": "addressed by a secret token (test_invitation_flow)",
}


def api_operations() -> list[tuple[str, str]]:
    schema = api.get_openapi_schema()
    ops = []
    for path, methods in schema["paths"].items():
        for method in methods:
            if method.upper() in {"GET", "POST", "PUT", "PATCH", "DELETE"}:
                ops.append((method.upper(), path))
    return sorted(ops)


def _walk(patterns, prefix: str = ""):
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry


def dashboard_routes() -> list[str]:
    routes = []
    for route, _pattern in _walk(get_resolver().url_patterns):
        if route.startswith(("api/", "^api/", "accounts/", "admin/")) or "<" not in route:
            continue
        routes.append(route)
    return sorted(set(routes))


@pytest.fixture
def world(alice, bob, charlie) -> World:
    w = World(alice=alice, bob=bob, charlie=charlie)
    for build in isolation.WORLD_BUILDERS:
        build(w)
    return w


def _fill_api_path(path: str, world: World) -> str:
    return _PARAM.sub(lambda m: str(isolation.API_PARAMS[m.group(1)](world)), path)


def _fill_route(route: str, world: World) -> str:
    def value(match: re.Match) -> str:
        name = match.group(1).split(":")[-1]
        return str(isolation.PAGE_PARAMS[name](world))

    return "/" + re.sub(r"<([^>]+)>", value, route)


def _send(client: ApiClient, method: str, url: str, spec: dict[str, Any]):
    if "multipart" in spec:
        return client.client.post(url, spec["multipart"], **client.headers)
    if method == "GET":
        return client.get(url, spec.get("query"))
    query = spec.get("query")
    if query:
        from urllib.parse import urlencode

        url = f"{url}?{urlencode(query, doseq=True)}"
    return client.request(method, url, spec.get("body"))


def _request_spec(method: str, path: str, world: World) -> dict[str, Any]:
    builder = isolation.API_REQUESTS.get((method, path))
    return builder(world) if builder else {}


def test_every_api_operation_has_a_probe():
    schema = api.get_openapi_schema()
    missing = []
    for method, path in api_operations():
        if (method, path) in isolation.API_UNSCOPED:
            continue
        params = _PARAM.findall(path)
        if not params and (method, path) not in isolation.API_QUERY_SCOPED:
            missing.append(
                f"{method} {path}: no tenant path parameter; register it with api_unscoped and test it"
            )
        missing += [f"{method} {path}: path parameter {p!r}" for p in params if p not in isolation.API_PARAMS]
        operation = schema["paths"][path][method.lower()]
        needs_query = any(
            p.get("required") and p.get("in") == "query" for p in operation.get("parameters", [])
        )
        if ("requestBody" in operation or needs_query) and (method, path) not in isolation.API_REQUESTS:
            missing.append(f"{method} {path}: a valid body/query (api_request)")
    assert missing == [], "Operations without an isolation probe:\n" + "\n".join(missing)


def test_every_dashboard_route_has_a_probe():
    missing = []
    for route in dashboard_routes():
        if route in PAGE_UNSCOPED:
            continue
        for name in re.findall(r"<([^>]+)>", route):
            if name.split(":")[-1] not in isolation.PAGE_PARAMS:
                missing.append(f"{route}: {name}")
    assert missing == [], "Dashboard routes without an isolation probe:\n" + "\n".join(missing)


SCOPED_OPERATIONS = [op for op in api_operations() if op not in isolation.API_UNSCOPED]


@pytest.mark.parametrize(
    ("method", "path"), SCOPED_OPERATIONS, ids=[f"{m} {p}" for m, p in SCOPED_OPERATIONS]
)
def test_charlie_gets_404_from_every_api_operation_on_org_a(method, path, world, session_client):
    url = _fill_api_path(path, world)
    spec = _request_spec(method, path, world)
    by_key = _send(ApiClient(world.charlie.key), method, url, spec)
    assert by_key.status_code == 404, (
        f"{method} {url} as charlie's key: {by_key.status_code} {by_key.content[:300]}"
    )
    assert by_key.json()["error"]["code"] == "not_found"
    by_session = _send(session_client(world.charlie, enforce_csrf=False), method, url, spec)
    assert by_session.status_code == 404, f"{method} {url} as charlie's session: {by_session.status_code}"
    # The probe is real: the same request from org A's owner does not hit a 404.
    as_owner = _send(ApiClient(world.alice.key), method, url, spec)
    assert as_owner.status_code != 404, (
        f"{method} {url} probe is wrong: alice gets 404 {as_owner.content[:300]}"
    )


SCOPED_ROUTES = [r for r in dashboard_routes() if r not in PAGE_UNSCOPED]


@pytest.mark.parametrize("route", SCOPED_ROUTES)
def test_charlie_gets_404_from_every_dashboard_url_of_org_a(route, world):
    url = _fill_route(route, world)
    charlie = Client()
    charlie.force_login(world.charlie.user, backend="django.contrib.auth.backends.ModelBackend")
    for method in ("get", "post"):
        response = getattr(charlie, method)(url)
        assert response.status_code == 404, f"{method.upper()} {url} as charlie: {response.status_code}"
    alice = Client()
    alice.force_login(world.alice.user, backend="django.contrib.auth.backends.ModelBackend")
    assert alice.get(url).status_code in (200, 302, 405), f"GET {url} probe is wrong for alice"


def test_lists_leak_nothing(world, api_client):
    as_charlie = api_client(world.charlie.key)
    projects = {p["id"] for p in as_charlie.get("projects").json()}
    assert projects == {str(world.charlie.project.id)}
    orgs = {o["slug"] for o in as_charlie.get("orgs").json()}
    assert orgs == {world.charlie.org.slug}


def test_me_lists_only_own_orgs(world, api_client):
    body = api_client(world.charlie.key).get("me").json()
    assert [o["slug"] for o in body["organizations"]] == [world.charlie.org.slug]


def test_cannot_create_in_foreign_org(world, api_client):
    response = api_client(world.charlie.key).post(
        "projects", {"name": "x", "organization": world.alice.org.slug}
    )
    assert response.status_code == 404
