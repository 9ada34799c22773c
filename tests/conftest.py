"""Shared fixtures: alice (owner, org A), bob (member, org A), charlie (owner, org B).

Each person has a verified email, a session-capable password and an API key with every scope
their role allows. `api_client(key)` talks JSON to /api/v1 with that key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from allauth.account.models import EmailAddress
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.transaction import Atomic
from django.test import Client

from apps.tenants import services
from apps.tenants.models import ApiKey, Organization, Project, User
from apps.tenants.principal import Principal
from apps.tenants.roles import API_KEY_SCOPES, Role, permissions_for_role
from tests.factories import MembershipFactory, OrganizationFactory, ProjectFactory, UserFactory

PASSWORD = "correct-horse-battery-staple"


@dataclass
class Person:
    user: User
    org: Organization
    project: Project
    role: Role
    key: str
    api_key: ApiKey
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def principal(self) -> Principal:
        return Principal.for_user(self.user)


class ApiClient:
    """JSON over the Django test client, authenticated with an API key or a session."""

    def __init__(self, key: str | None = None, client: Client | None = None) -> None:
        self.client = client or Client()
        self.headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"} if key else {}

    def request(self, method: str, path: str, body: Any = None, **extra):
        if not path.startswith("/"):
            path = f"/api/v1/{path}"
        kwargs = {**self.headers, **extra}
        method = method.lower()
        if method == "get":
            return self.client.get(path, body or {}, **kwargs)
        if body is not None and "content_type" not in kwargs:
            kwargs["content_type"] = "application/json"
            body = json.dumps(body)
        return getattr(self.client, method)(path, body if body is not None else "", **kwargs)

    def get(self, path: str, params: dict | None = None, **extra):
        return self.request("GET", path, params, **extra)

    def post(self, path: str, body: Any = None, **extra):
        return self.request("POST", path, body, **extra)

    def patch(self, path: str, body: Any = None, **extra):
        return self.request("PATCH", path, body, **extra)

    def put(self, path: str, body: Any = None, **extra):
        return self.request("PUT", path, body, **extra)

    def delete(self, path: str, body: Any = None, **extra):
        return self.request("DELETE", path, body, **extra)


@pytest.fixture(autouse=True)
def _commit_hooks_run_like_production(request, monkeypatch):
    """In a `db` test everything runs inside the test's own transaction, so Django would never
    fire `transaction.on_commit` hooks (queued tasks, live-update publishes). Here a hook runs
    when the application's outermost atomic block closes — as it would on commit in production
    — and at once when registered outside any application block."""
    if "db" not in request.fixturenames:
        yield
        return
    request.getfixturevalue("db")
    connection = connections[DEFAULT_DB_ALIAS]
    baseline = len(connection.atomic_blocks)
    original_exit = Atomic.__exit__
    original_on_commit = BaseDatabaseWrapper.on_commit

    def run_pending(conn) -> None:
        while conn.run_on_commit and len(conn.atomic_blocks) == baseline:
            _, func, robust = conn.run_on_commit.pop(0)
            try:
                func()
            except Exception:
                if not robust:
                    raise

    def exit_(self, exc_type, exc_value, traceback):
        result = original_exit(self, exc_type, exc_value, traceback)
        conn = connections[self.using or DEFAULT_DB_ALIAS]
        if exc_type is None and len(conn.atomic_blocks) == baseline:
            run_pending(conn)
        return result

    def on_commit(self, func, robust=False):
        if self.alias == DEFAULT_DB_ALIAS and self.in_atomic_block and len(self.atomic_blocks) == baseline:
            func()
            return
        original_on_commit(self, func, robust)

    monkeypatch.setattr(Atomic, "__exit__", exit_)
    monkeypatch.setattr(BaseDatabaseWrapper, "on_commit", on_commit)
    yield


def make_person(*, email: str, org: Organization, project: Project, role: Role) -> Person:
    user = UserFactory(email=email, name=email.split("@")[0].title())
    user.set_password(PASSWORD)
    user.save()
    EmailAddress.objects.create(user=user, email=email, verified=True, primary=True)
    MembershipFactory(organization=org, user=user, role=role)
    scopes = [s for s in API_KEY_SCOPES if s in permissions_for_role(role)]
    api_key, full = services.api_key_create(
        organization=org,
        actor=Principal(user=user, roles={org.id: role}),
        name=f"{email} key",
        scopes=scopes,
        check_permission=False,
    )
    return Person(user=user, org=org, project=project, role=role, key=full, api_key=api_key)


@pytest.fixture
def org_a(db) -> Organization:
    return OrganizationFactory(name="Acme", slug="acme")


@pytest.fixture
def org_b(db) -> Organization:
    return OrganizationFactory(name="Borg", slug="borg")


@pytest.fixture
def project_a(org_a) -> Project:
    return ProjectFactory(organization=org_a, name="Acme API", slug="acme-api")


@pytest.fixture
def project_b(org_b) -> Project:
    return ProjectFactory(organization=org_b, name="Borg Core", slug="borg-core")


@pytest.fixture
def alice(org_a, project_a) -> Person:
    return make_person(email="alice@acme.test", org=org_a, project=project_a, role=Role.OWNER)


@pytest.fixture
def bob(org_a, project_a) -> Person:
    return make_person(email="bob@acme.test", org=org_a, project=project_a, role=Role.MEMBER)


@pytest.fixture
def charlie(org_b, project_b) -> Person:
    return make_person(email="charlie@borg.test", org=org_b, project=project_b, role=Role.OWNER)


@pytest.fixture
def person_with_role(org_a, project_a):
    """Make a member of org A with any role: `person_with_role(Role.VIEWER)`."""

    def make(role: Role) -> Person:
        return make_person(email=f"{role}@acme.test", org=org_a, project=project_a, role=role)

    return make


@pytest.fixture
def api_client():
    def make(key: str | None = None) -> ApiClient:
        return ApiClient(key)

    return make


@pytest.fixture
def session_client():
    """An API/dashboard client signed in as `person`, with CSRF checks enforced."""

    def make(person: Person, *, enforce_csrf: bool = True) -> ApiClient:
        client = Client(enforce_csrf_checks=enforce_csrf)
        client.force_login(person.user, backend="django.contrib.auth.backends.ModelBackend")
        return ApiClient(client=client)

    return make


def csrf_token_for(client: Client) -> str:
    """Load a page so the CSRF cookie is set, and return the token to echo back."""
    client.get("/accounts/email/")
    return client.cookies["csrftoken"].value
