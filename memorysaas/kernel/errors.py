"""The error envelope every API error uses: {"error": {"code", "message", "details"}}."""

from __future__ import annotations

import logging
import math
from typing import Any

from django.conf import settings
from django.core.exceptions import BadRequest, RequestDataTooBig, SuspiciousOperation
from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, JsonResponse
from django.http.multipartparser import MultiPartParserError

from memorysaas.kernel import dbpool

logger = logging.getLogger(__name__)

STATUS_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "rate_limited",
    500: "internal_error",
    503: "database_unavailable",
}


class ApiError(Exception):
    """Raise anywhere below an API view to answer with the envelope and this status."""

    def __init__(self, status: int, message: str, *, code: str | None = None, details: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code or STATUS_CODES.get(status, "error")
        self.message = message
        self.details = details


class NotFound(ApiError):
    def __init__(self, message: str = "Not found.", **kwargs: Any) -> None:
        super().__init__(404, message, **kwargs)


class Forbidden(ApiError):
    def __init__(self, message: str = "You do not have permission to do this.", **kwargs: Any) -> None:
        super().__init__(403, message, **kwargs)


class RateLimited(ApiError):
    """429: over a rate limit. The response carries `Retry-After` (whole seconds, at least 1)."""

    def __init__(self, message: str, *, retry_after: float, details: Any = None) -> None:
        super().__init__(429, message, code="rate_limited", details=details)
        self.retry_after = max(1, math.ceil(retry_after))


class Conflict(ApiError):
    """409: the request is valid, but not with the state its objects are in now."""

    def __init__(self, message: str, **kwargs: Any) -> None:
        super().__init__(409, message, **kwargs)


class Invalid(ApiError):
    def __init__(self, message: str, *, details: Any = None, code: str = "validation_error") -> None:
        super().__init__(422, message, code=code, details=details)


def field_errors(errors: list[dict]) -> list[dict]:
    """Pydantic's errors as the envelope's details: where (`loc`), what (`msg`), and its `type`."""
    return [
        {
            "loc": [str(part) for part in error.get("loc", ())],
            "msg": error.get("msg", ""),
            "type": error.get("type", ""),
        }
        for error in errors
    ]


def error_response(
    status: int, message: str, *, code: str | None = None, details: Any = None
) -> JsonResponse:
    body = {
        "error": {"code": code or STATUS_CODES.get(status, "error"), "message": message, "details": details}
    }
    return JsonResponse(body, status=status)


def envelope_for(exc: ApiError) -> JsonResponse:
    response = error_response(exc.status, exc.message, code=exc.code, details=exc.details)
    if isinstance(exc, RateLimited):
        response["Retry-After"] = str(exc.retry_after)
    return response


# What Django's request parsing raises on a request it will not read (too many fields or files,
# a field over the memory limit, a broken multipart body).
UNREADABLE_REQUEST = (SuspiciousOperation, MultiPartParserError, BadRequest)


# The database could not be reached or dropped the connection (a restart, no pooled connection
# free within the pool's timeout): the client can retry shortly, and it is not told a bug hit it.
DATABASE_UNAVAILABLE = (OperationalError, InterfaceError)
DATABASE_RETRY_AFTER_SECONDS = 2


def database_unavailable_noted(request: HttpRequest, exc: Exception) -> None:
    """Log it, and have the pool check its idle connections (they likely died with this one)."""
    logger.warning("Database unavailable on %s %s: %s", request.method, request.path, exc)
    dbpool.sweep_soon()


def database_unavailable_response(request: HttpRequest, exc: Exception) -> JsonResponse:
    database_unavailable_noted(request, exc)
    response = error_response(503, "The database cannot be reached right now; try again in a moment.")
    response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
    return response


def unreadable_request_response(exc: Exception) -> JsonResponse:
    """An UNREADABLE_REQUEST error as the 4xx Django itself would answer, in the envelope."""
    if isinstance(exc, RequestDataTooBig):  # (a body or form field over Django's memory limit)
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return error_response(413, f"The request body is too large: {exc}", details={"limit_bytes": limit})
    return error_response(400, f"The request could not be read: {exc}")


def conflict(description: str) -> dict[str, Any]:
    """An operation's `openapi_extra` for the 409 it can answer, saying when (the schema's other
    error responses follow from an operation's shape: memorysaas.api.error_responses)."""
    envelope = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}}
    return {"responses": {409: {"description": description, "content": envelope}}}
