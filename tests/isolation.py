"""The registry behind tests/test_isolation.py.

The isolation test enumerates every operation in the OpenAPI schema and every dashboard URL,
fills their parameters with org A's objects and calls them as charlie (org B): each must be a
404. To make that possible each app's `tests/<app>/isolation.py` registers:

- `@world_builder`: creates the app's objects in org A on the shared `World` (alice's side);
- `@api_param("name")` / `@page_param("name")`: the value of a path parameter, from the world;
- `@api_request("METHOD", "/api/v1/path/{param}")`: a valid query/body for an operation, so
  the probe reaches the tenant check instead of failing validation first;
- `api_query_scoped("METHOD", "/api/v1/path")`: an operation whose tenant is a query parameter
  (its `api_request` names org A's object there).

An operation with a path parameter nobody registered, or a body nobody registered, fails the
test: a new endpoint cannot ship without its probe.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORLD_BUILDERS: list[Callable[[World], None]] = []
API_PARAMS: dict[str, Callable[[World], Any]] = {}
PAGE_PARAMS: dict[str, Callable[[World], Any]] = {}
API_REQUESTS: dict[tuple[str, str], Callable[[World], dict[str, Any]]] = {}
# Operations without tenant parameters; each has a test of its own that it leaks nothing.
API_UNSCOPED: dict[tuple[str, str], str] = {}
# Operations whose tenant a query parameter names (a URL an agent is configured with): their
# `api_request` puts org A's id there, and they are probed as the path-scoped ones are.
API_QUERY_SCOPED: set[tuple[str, str]] = set()


@dataclass
class World:
    alice: Any
    bob: Any
    charlie: Any
    objects: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.objects[name]
        except KeyError:
            raise AttributeError(name) from None


def world_builder(func: Callable[[World], None]) -> Callable[[World], None]:
    WORLD_BUILDERS.append(func)
    return func


def api_param(name: str):
    def register(func):
        API_PARAMS[name] = func
        return func

    return register


def page_param(name: str):
    def register(func):
        PAGE_PARAMS[name] = func
        return func

    return register


def api_request(method: str, path: str):
    def register(func):
        API_REQUESTS[(method.upper(), path)] = func
        return func

    return register


def api_unscoped(method: str, path: str, why: str) -> None:
    API_UNSCOPED[(method.upper(), path)] = why


def api_query_scoped(method: str, path: str) -> None:
    API_QUERY_SCOPED.add((method.upper(), path))


def load_registrations() -> None:
    """Import every tests/<app>/isolation.py so its registrations run."""
    tests_dir = Path(__file__).parent
    for info in pkgutil.iter_modules([str(tests_dir)]):
        if info.ispkg and (tests_dir / info.name / "isolation.py").exists():
            importlib.import_module(f"tests.{info.name}.isolation")
