"""The JSON API root (/api/v1): authentication, the error envelope, and every app's router."""

from __future__ import annotations

import copy

from django.core.exceptions import ObjectDoesNotExist
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError
from django.http import Http404, HttpRequest
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, Throttled
from ninja.errors import ValidationError as NinjaValidationError
from ninja.openapi.schema import OpenAPISchema
from ninja.parser import Parser

from apps.agents.api import router as agents_router
from apps.governance.api import router as governance_router
from apps.graph.api import router as graph_router
from apps.insights.api import router as insights_router
from apps.insights.lifecycle_api import router as lifecycle_router
from apps.memories.api import router as memories_router
from apps.memories.commits_api import router as commits_router
from apps.observer.api import router as observer_router
from apps.sync.api import router as sync_router
from apps.tenants.api import router as tenants_router
from apps.tenants.auth import principal_auth
from apps.tenants.device_api import router as device_router
from apps.tenants.ratelimit.throttle import refusal_of, request_throttle
from apps.tenants.team_api import router as team_router
from apps.webhooks.api import router as webhooks_router
from memorysaas.kernel.errors import (
    DATABASE_UNAVAILABLE,
    UNREADABLE_REQUEST,
    ApiError,
    database_unavailable_response,
    envelope_for,
    error_response,
    field_errors,
    unreadable_request_response,
)
from memorysaas.kernel.openapi import JSON_VALUE, describe_request_text
from memorysaas.kernel.schemas import parse_json


class JsonOnlyParser(Parser):
    """Bodies are JSON: another content type is a 415, unparsable JSON a 400."""

    def parse_body(self, request: HttpRequest):
        content_type = request.content_type or ""
        if content_type != "application/json" and not content_type.endswith("+json"):
            raise ApiError(
                415,
                f"Send the body as application/json (got {content_type or 'no content type'}).",
                details={"expected": "application/json"},
            )
        if not request.body:
            raise ApiError(400, "The request body is empty; send a JSON object.", code="empty_body")
        return parse_json(request.body)


ERROR_OUT = {
    "title": "ErrorOut",
    "description": "The envelope of every error response.",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": {
                "code": {"type": "string", "description": "Machine-readable, e.g. `not_found`."},
                "message": {"type": "string", "description": "For a person."},
                "details": {"description": "More about the error (field errors, limits), or null."},
            },
        }
    },
}
ERROR_DESCRIPTIONS = {
    400: (
        "The body is not valid JSON (`malformed_json`) or is empty (`empty_body`), or the request"
        " has more fields or files than Django reads (`bad_request`)."
    ),
    401: "Authentication required (`unauthenticated`).",
    403: "The key or user may not do this (`forbidden`).",
    413: (
        "The body is over the size limit for this path (`payload_too_large`), or a batch holds"
        " too many items (`batch_too_large`); `details` gives the limit."
    ),
    404: (
        "Not found, or not visible to the caller (`not_found`): the object the path names, or one"
        " the query or body names (a project, an organization, a team)."
    ),
    415: "The body is not application/json (`unsupported_media_type`).",
    422: "The request is not valid (`validation_error`); `details` says where.",
    429: (
        "Over a rate limit (`rate_limited`): the key's, its organization's, its address's after"
        " failed authentications, or this client's requests waiting at once; `Retry-After` and"
        " `details` say when to try again."
    ),
    503: (
        "The database cannot be reached right now (`database_unavailable`); `Retry-After` says"
        " when to try again."
    ),
}
# The answers that say when to come back (rate limits, the admission gate, the database's absence).
_RETRY_AFTER = {
    "Retry-After": {"description": "Seconds to wait before trying again.", "schema": {"type": "integer"}}
}


def error_responses(operation: dict) -> dict[int, dict]:
    """The error responses every operation of this shape can give (its own declared ones aside)."""
    statuses = {429, 503}  # (the admission gate and the database, in front of every operation)
    if operation.get("security"):
        statuses |= {401, 403}
    parameters = operation.get("parameters", [])
    if parameters or "requestBody" in operation:
        statuses |= {404, 422}
    if any(p.get("in") == "query" for p in parameters):
        statuses.add(400)  # (over DATA_UPLOAD_MAX_NUMBER_FIELDS)
    if "requestBody" in operation:
        statuses |= {400, 413, 415}  # (413: RequestSizeLimitMiddleware, before any view)
    return {
        status: {
            "description": ERROR_DESCRIPTIONS[status],
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}},
            **({"headers": _RETRY_AFTER} if status in (429, 503) else {}),
        }
        for status in sorted(statuses)
    }


class Api(NinjaAPI):
    def get_openapi_schema(
        self, *, path_prefix: str | None = None, path_params: dict | None = None
    ) -> OpenAPISchema:
        """ninja's schema, with the error envelope (`ErrorOut`) and the error responses of each
        operation: auth (401/403), an object it names (404), a body (400/413/415), validation
        (422), load and the database (429/503); and a pattern on every string a request sends."""
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        components["ErrorOut"] = copy.deepcopy(ERROR_OUT)
        components["JsonValue"] = copy.deepcopy(JSON_VALUE)
        for item in schema.get("paths", {}).values():
            for operation in item.values():
                responses = operation.setdefault("responses", {})
                for status, response in error_responses(operation).items():
                    responses.setdefault(status, response)
                describe_request_text(operation, components)
        return schema


api = Api(
    title="memorysaas API",
    version="1",
    description="Memory for AI coding agents. Authenticate with `Authorization: Bearer msk_…`.",
    urls_namespace="api",
    auth=principal_auth,
    throttle=[request_throttle],
    parser=JsonOnlyParser(),
    docs_url="/docs",
    openapi_url="/openapi.json",
)


@api.exception_handler(ApiError)
def on_api_error(request, exc: ApiError):
    return envelope_for(exc)


@api.exception_handler(NinjaValidationError)
def on_validation_error(request, exc: NinjaValidationError):
    errors = field_errors(exc.errors)
    if any(e["type"] == "json_invalid" for e in errors):
        return error_response(400, "The body is not valid JSON.", code="malformed_json", details=errors)
    return error_response(422, "The request is not valid.", details=errors)


@api.exception_handler(DjangoValidationError)
def on_django_validation_error(request, exc: DjangoValidationError):
    details = exc.message_dict if hasattr(exc, "error_dict") else exc.messages
    return error_response(422, "The request is not valid.", details=details)


@api.exception_handler(DataError)
def on_data_error(request, exc: DataError):
    # A value the database cannot hold (out-of-range number, NUL byte) that validation missed.
    return error_response(422, "A value in the request cannot be stored.", code="unstorable_value")


def on_database_unavailable(request, exc: Exception):
    return database_unavailable_response(request, exc)


for _unavailable in DATABASE_UNAVAILABLE:
    api.add_exception_handler(_unavailable, on_database_unavailable)


@api.exception_handler(AuthenticationError)
def on_authentication_error(request, exc: AuthenticationError):
    return error_response(401, "Authentication required: send 'Authorization: Bearer <api key>' or sign in.")


@api.exception_handler(Throttled)
def on_throttled(request, exc: Throttled):
    return envelope_for(refusal_of(request))


@api.exception_handler(HttpError)
def on_http_error(request, exc: HttpError):
    # ninja wraps parser failures in a generic 400; the parser's own error is more precise.
    if isinstance(exc.__cause__, ApiError):
        return envelope_for(exc.__cause__)
    return error_response(exc.status_code, exc.message)


def on_unreadable_request(request, exc: Exception):
    return unreadable_request_response(exc)


for _unreadable in UNREADABLE_REQUEST:
    api.add_exception_handler(_unreadable, on_unreadable_request)


@api.exception_handler(Http404)
def on_not_found(request, exc):
    return error_response(404, "Not found.")


@api.exception_handler(ObjectDoesNotExist)
def on_does_not_exist(request, exc):
    return error_response(404, "Not found.")


# Every app's router, mounted at the API root (each router's paths are absolute). An app whose
# module is missing is an import error here, not a silently absent part of the API.
api.add_router("", tenants_router)
api.add_router("", device_router)
api.add_router("", team_router)
api.add_router("", memories_router)
api.add_router("", commits_router)
api.add_router("", observer_router)
api.add_router("", graph_router)
api.add_router("", governance_router)
api.add_router("", sync_router)
api.add_router("", insights_router)
api.add_router("", lifecycle_router)
api.add_router("", webhooks_router)
api.add_router("", agents_router)
