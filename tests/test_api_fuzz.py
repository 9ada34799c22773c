"""Fuzz every API operation from its OpenAPI schema with schemathesis: no input may cause a 5xx.

Path parameters are usually filled with org A's real objects (from the isolation registry) so
generated bodies reach the handlers instead of stopping at a 404; sometimes they stay random.
Every error response must be the JSON envelope.
"""

from __future__ import annotations

import json
import re

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memorysaas.api import api
from tests import isolation
from tests.conftest import ApiClient
from tests.isolation import World

isolation.load_registrations()

SCHEMA = schemathesis.openapi.from_dict(api.get_openapi_schema())
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations()]
EXAMPLES_PER_OPERATION = 25


@pytest.fixture
def world(alice, bob, charlie) -> World:
    w = World(alice=alice, bob=bob, charlie=charlie)
    for build in isolation.WORLD_BUILDERS:
        build(w)
    return w


def _body_bytes(case) -> tuple[str | None, str | bytes | None]:
    body = case.body
    if isinstance(body, schemathesis.core.NotSet) or body is None and case.media_type is None:
        return None, None
    media_type = case.media_type or "application/json"
    if media_type == "application/json":
        return media_type, json.dumps(body)
    return media_type, body if isinstance(body, (str, bytes)) else json.dumps(body)


@pytest.mark.parametrize("operation", OPERATIONS, ids=[op.label for op in OPERATIONS])
def test_no_generated_input_causes_a_server_error(operation, world):
    client = ApiClient(world.alice.key)
    fill = st.booleans()

    @given(case=operation.as_strategy(), use_real_ids=fill)
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        derandomize=True,
    )
    def check(case, use_real_ids):
        path_params = dict(case.path_parameters or {})
        if use_real_ids:
            for name in path_params:
                if name in isolation.API_PARAMS:
                    path_params[name] = isolation.API_PARAMS[name](world)
        path = re.sub(r"{([^}]+)}", lambda m: str(path_params.get(m.group(1), "x")), case.path)
        media_type, body = _body_bytes(case)
        extra = {"QUERY_STRING": _query_string(case.query)} if case.query else {}
        if body is None:
            response = client.client.generic(case.method, path, **client.headers, **extra)
        else:
            response = client.client.generic(
                case.method, path, data=body, content_type=media_type, **client.headers, **extra
            )
        assert response.status_code < 500, f"{case.method} {path} {body!r:.300} → {response.status_code}"
        if response.status_code >= 400:
            assert set(response.json()["error"]) == {"code", "message", "details"}

    check()


def _query_string(query: dict) -> str:
    from urllib.parse import urlencode

    return urlencode({k: v for k, v in query.items() if v is not None}, doseq=True)
