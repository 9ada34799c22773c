"""Request-level guards: the body-size ceiling and the JSON error envelope for /api/."""

from __future__ import annotations

import logging

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from memorysaas.kernel.errors import (
    DATABASE_UNAVAILABLE,
    UNREADABLE_REQUEST,
    database_unavailable_response,
    error_response,
    unreadable_request_response,
)

logger = logging.getLogger(__name__)

API_PREFIX = "/api/"
_UPLOAD_PATH_SUFFIXES = ("/graph/index",)


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def body_limit_for(request: HttpRequest) -> int:
    if request.path.endswith(_UPLOAD_PATH_SUFFIXES) and request.content_type != "application/json":
        return settings.MAX_UPLOAD_BYTES
    return settings.MAX_REQUEST_BYTES


class RequestSizeLimitMiddleware:
    """Refuses an oversized body from its Content-Length, before anything reads it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        raw_length = request.META.get("CONTENT_LENGTH") or "0"
        try:
            length = int(raw_length)
        except ValueError:
            return error_response(400, "Content-Length must be an integer.")
        limit = body_limit_for(request)
        if length > limit:
            return error_response(
                413,
                f"The request body is {length} bytes; the limit is {limit}.",
                details={"limit_bytes": limit, "received_bytes": length},
            )
        if request.path.endswith(_UPLOAD_PATH_SUFFIXES):
            request.upload_limit_bytes = limit  # type: ignore[attr-defined]
        return self.get_response(request)


class ApiErrorMiddleware:
    """Under /api/, every error is JSON in the envelope — Django's own 404/405/500 pages included."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not _is_api(request) or response.status_code < 400:
            return response
        if response.get("Content-Type", "").startswith("application/json"):
            return response
        status = response.status_code
        if status == 405:
            allowed = response.get("Allow", "")
            converted = error_response(
                405,
                f"{request.method} is not allowed here.",
                details={"allowed": allowed.split(", ") if allowed else []},
            )
            if allowed:
                converted["Allow"] = allowed
            return converted
        messages = {
            400: "The request could not be understood.",
            403: "You do not have permission to do this.",
            404: f"No API route matches {request.path}.",
            413: "The request body is too large.",
        }
        return error_response(status, messages.get(status, "The request failed."))

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not _is_api(request):
            return None
        if isinstance(exception, DATABASE_UNAVAILABLE):
            return database_unavailable_response(request, exception)
        if isinstance(exception, UNREADABLE_REQUEST):
            logger.warning("Unreadable request on %s %s: %s", request.method, request.path, exception)
            return unreadable_request_response(exception)
        logger.exception("Unhandled error on %s %s", request.method, request.path)
        return error_response(500, "An internal error occurred; it has been logged.")
