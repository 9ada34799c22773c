"""Every API error is the JSON envelope with the right 4xx status, and nothing is stored."""

import io
import json
import re

import pytest
from django.test import Client, override_settings

from apps.memories.models import Memory
from apps.tenants.models import Project


def assert_envelope(response, status: int, code: str | None = None):
    assert response.status_code == status, response.content
    assert response["Content-Type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == {"code", "message", "details"}
    assert error["message"]
    if code:
        assert error["code"] == code
    return error


def test_malformed_json_is_a_400(alice, api_client):
    before = Project.objects.count()
    response = api_client(alice.key).post("projects", '{"name": ', content_type="application/json")
    assert_envelope(response, 400, "malformed_json")
    assert Project.objects.count() == before


def test_unauthenticated_is_a_401(db, api_client):
    assert_envelope(api_client().get("projects"), 401, "unauthenticated")


def test_unknown_api_route_is_a_json_404(alice, api_client):
    assert_envelope(api_client(alice.key).get("no/such/route"), 404, "not_found")
    assert_envelope(api_client().get("/api/v2/anything"), 404, "not_found")


def test_wrong_method_is_a_405_with_allow(alice, api_client):
    response = api_client(alice.key).put("projects", {"name": "x"})
    error = assert_envelope(response, 405, "method_not_allowed")
    assert "POST" in error["details"]["allowed"]


@override_settings(MAX_REQUEST_BYTES=1000)
def test_an_oversized_body_is_a_413_and_stores_nothing(alice, api_client):
    before = Project.objects.count()
    response = api_client(alice.key).post("projects", {"name": "x", "description": "y" * 2000})
    assert_envelope(response, 413, "payload_too_large")
    assert Project.objects.count() == before


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/xml"]
)
def test_a_wrong_content_type_is_a_415(content_type, alice, api_client):
    before = Project.objects.count()
    response = api_client(alice.key).post("projects", '{"name": "x"}', content_type=content_type)
    assert_envelope(response, 415, "unsupported_media_type")
    assert Project.objects.count() == before


def test_unknown_fields_are_a_422(alice, api_client):
    error = assert_envelope(api_client(alice.key).post("projects", {"name": "x", "colour": "red"}), 422)
    assert error["details"][0]["loc"][-1] == "colour"


def test_ill_typed_fields_are_a_422(alice, api_client):
    assert_envelope(api_client(alice.key).post("projects", {"name": ["not", "a", "string"]}), 422)
    assert_envelope(api_client(alice.key).post("projects", {"name": "x", "methodology": "waterfall"}), 422)


def test_an_ill_typed_path_parameter_is_a_422(alice, api_client):
    assert_envelope(api_client(alice.key).get("projects/not-a-uuid"), 422)


def test_a_member_without_permission_gets_a_403(bob, api_client):
    assert_envelope(api_client(bob.key).post("projects", {"name": "Nope"}), 403, "forbidden")


def test_health_needs_no_credentials_and_reports_each_part(db, api_client):
    body = api_client().get("health").json()
    assert set(body["checks"]) == {"database", "pgvector", "queue", "channel_layer"}
    assert body["checks"]["database"]["ok"] and body["checks"]["pgvector"]["ok"]
    assert body["checks"]["channel_layer"]["ok"]


def test_the_openapi_schema_and_docs_are_served(db, api_client):
    schema = api_client().get("openapi.json")
    assert schema.status_code == 200
    assert "/api/v1/projects" in schema.json()["paths"]
    docs = api_client().get("docs")
    assert docs.status_code == 200
    page = docs.content.decode()
    assert "cdn.jsdelivr.net" not in page and "swagger-ui-bundle.js" in page  # works offline
    script = re.search(r'src="([^"]*swagger-ui-bundle\.js)"', page).group(1)
    assert Client().get(script).status_code == 200


def test_the_openapi_schema_documents_the_error_envelope_on_every_operation(alice, api_client):
    """Only success responses were documented: no 4xx, and no schema for the envelope."""
    schema = api_client().get("openapi.json").json()
    error_out = schema["components"]["schemas"]["ErrorOut"]
    error = assert_envelope(api_client(alice.key).get(f"memories/{alice.project.id}"), 404)
    assert error_out["required"] == ["error"]
    assert set(error_out["properties"]["error"]["required"]) == set(error)
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
    create = schema["paths"]["/api/v1/projects/{project_id}/memories"]["post"]["responses"]
    assert {"400", "401", "403", "404", "413", "415", "422"} <= set(create)
    assert all(create[status]["content"] == ref for status in ("401", "403", "404", "422"))
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if operation.get("security"):  # (public operations: health, the device login's two steps)
                assert {"401", "403"} <= set(operation["responses"]), (method, path)
    assert not {"401", "403"} & set(schema["paths"]["/api/v1/health"]["get"]["responses"])
    assert "400" in schema["paths"]["/api/v1/projects/{project_id}/memories"]["get"]["responses"]  # ?a0…a1200


def test_a_slug_asked_for_and_taken_is_a_409_and_a_name_taken_gets_the_next_slug(alice, api_client):
    client = api_client(alice.key)
    first = client.post("projects", {"name": "Billing", "slug": "billing"})
    assert first.status_code == 201, first.content
    assert_envelope(client.post("projects", {"name": "Billing 2", "slug": "billing"}), 409, "slug_taken")
    assert client.post("projects", {"name": "Billing"}).json()["slug"] == "billing-2"
    assert_envelope(client.post("projects", {"name": "x", "slug": "-billing--"}), 422)
    assert Project.objects.filter(organization=alice.org, slug__startswith="billing").count() == 2


def test_a_multipart_body_without_a_boundary_is_a_400_envelope(alice, api_client):
    client = api_client(alice.key)
    response = client.client.post(
        f"/api/v1/projects/{alice.project.id}/graph/index",
        b"--x\r\n",
        content_type="multipart/form-data",
        **client.headers,
    )
    assert_envelope(response, 400)


def test_an_integer_too_long_to_convert_is_a_400_on_every_json_body(alice, api_client):
    """Python refuses to convert integers of over 4,300 digits; the graph batch parses its own
    body and answered 500."""
    client = api_client(alice.key)
    digits = "1" * 4301
    for path in (f"projects/{alice.project.id}/graph/index", f"projects/{alice.project.id}/memories"):
        assert_envelope(client.post(path, digits, content_type="application/json"), 400, "malformed_json")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(alice, api_client, constant):
    """Python's parser takes them; JSON has no such values, and a sync push holding one was
    refused whole as a value that cannot be stored."""
    client = api_client(alice.key)
    before = Memory.objects.count()
    create = f'{{"type": "gotcha", "content": "x", "confidence": {constant}}}'
    push = f'{{"project_id": "{alice.project.id}", "changes": [{{"op": "create", "ref": "r", "memory": '
    push += f'{{"type": "gotcha", "content": "y", "confidence": {constant}}}}}]}}'
    for path, body in ((f"projects/{alice.project.id}/memories", create), ("sync/push", push)):
        error = assert_envelope(
            client.post(path, body, content_type="application/json"), 400, "malformed_json"
        )
        assert constant.lstrip("-") in error["message"]
    assert Memory.objects.count() == before


def test_a_number_beyond_a_floats_range_and_a_body_not_in_utf8_are_malformed(alice, api_client):
    client = api_client(alice.key)
    path = f"projects/{alice.project.id}/memories"
    body = '{"type": "gotcha", "content": "x", "payload": {"n": 1e400}}'
    assert_envelope(client.post(path, body, content_type="application/json"), 400, "malformed_json")
    utf16 = json.dumps({"type": "gotcha", "content": "x"}).encode("utf-16-le")
    assert_envelope(client.post(path, utf16, content_type="application/json"), 400, "malformed_json")


def test_too_many_query_parameters_is_a_400_envelope(alice, api_client):
    params = {f"a{n}": "1" for n in range(1200)}  # over DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000)
    error = assert_envelope(api_client(alice.key).get(f"projects/{alice.project.id}/memories", params), 400)
    assert "DATA_UPLOAD_MAX_NUMBER_FIELDS" in error["message"]


def test_too_many_upload_parts_is_a_400_and_a_field_over_the_memory_limit_a_413(alice, api_client):
    client = api_client(alice.key)
    path = f"/api/v1/projects/{alice.project.id}/graph/index"
    files = {f"f{n}": io.BytesIO(b"x") for n in range(101)}  # over DATA_UPLOAD_MAX_NUMBER_FILES (100)
    assert_envelope(client.client.post(path, files, **client.headers), 400)
    with override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1024):
        error = assert_envelope(client.client.post(path, {"note": "x" * 2048}, **client.headers), 413)
    assert error["details"] == {"limit_bytes": 1024}  # as the OpenAPI 413 text promises


def test_a_signed_in_unsafe_request_django_cannot_parse_is_a_400_not_a_500(alice, session_client):
    """The CSRF check reads the form body first: Django's parsing limits raised there."""
    client = session_client(alice)
    client.client.get("/accounts/email/")  # the CSRF cookie
    body = "&".join(f"a{n}=1" for n in range(1200))
    response = client.client.post(
        f"/api/v1/projects/{alice.project.id}/memories",
        body,
        content_type="application/x-www-form-urlencoded",
    )
    assert_envelope(response, 400)


@pytest.mark.parametrize("name", ["Billing\nService", "\x1b[31mred", "bell\x07"])
def test_a_name_with_control_characters_is_a_422_in_the_api_and_the_dashboard(alice, api_client, name):
    before = Project.objects.count()
    assert_envelope(api_client(alice.key).post("projects", {"name": name}), 422)
    key = {"name": name, "scopes": ["memories:read"]}
    assert_envelope(api_client(alice.key).post(f"orgs/{alice.org.slug}/api-keys", key), 422)
    client = Client()
    client.force_login(alice.user, backend="django.contrib.auth.backends.ModelBackend")
    page = client.post(f"/o/{alice.org.slug}/projects/new/", {"name": name, "methodology": "native"})
    assert page.status_code in (200, 422) and "control characters" in page.content.decode()
    assert Project.objects.count() == before


def test_the_operations_that_can_conflict_document_their_409(api_client):
    """A 409 an operation raises (a taken slug, a second open dispute, a closed session) was
    missing from the schema, which lists only what follows from an operation's shape."""
    schema = api_client().get("openapi.json").json()
    ref = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
    conflicting = {
        ("/api/v1/projects", "post"): "slug_taken",
        ("/api/v1/memories/{memory_id}/disputes", "post"): "conflict",
        ("/api/v1/sessions/{session_id}/events", "post"): "session_closed",
        ("/api/v1/sessions/{session_id}/validation", "post"): "session_closed",
        ("/api/v1/sessions/{session_id}/step-injection", "post"): "session_closed",
        # (a valid request the state of its objects refuses: a scope the project cannot have, a
        # change that does not fit the memory as it is, a trust level not on offer)
        ("/api/v1/projects/{project_id}/memories", "post"): "conflict",
        ("/api/v1/memories/{memory_id}", "patch"): "conflict",
        ("/api/v1/memories/{memory_id}/feedback", "post"): "conflict",
        ("/api/v1/disputes/{dispute_id}/resolve", "post"): "conflict",
        ("/api/v1/projects/{project_id}/trust", "put"): "conflict",
    }
    for (path, method), code in conflicting.items():
        response = schema["paths"][path][method]["responses"]["409"]
        assert response["content"] == ref and f"`{code}`" in response["description"], path
    assert "409" not in schema["paths"]["/api/v1/projects/{project_id}/memories"]["get"]["responses"]
