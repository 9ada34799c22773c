"""Request-level middleware: the request id, latency metrics and access log line; the body-size
ceiling; the JSON error envelope for /api/."""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.http import HttpRequest, HttpResponse

from memorysaas.kernel import metrics, requestid
from memorysaas.kernel.errors import (
    DATABASE_UNAVAILABLE,
    UNREADABLE_REQUEST,
    database_unavailable_response,
    error_response,
    unreadable_request_response,
)

logger = logging.getLogger(__name__)
access_logger = logging.getLogger("memorysaas.access")

API_PREFIX = "/api/"
_UPLOAD_PATH_SUFFIXES = ("/graph/index",)


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith(API_PREFIX)


def body_limit_for(request: HttpRequest) -> int:
    if request.path.endswith(_UPLOAD_PATH_SUFFIXES) and request.content_type != "application/json":
        return settings.MAX_UPLOAD_BYTES
    return settings.MAX_REQUEST_BYTES


def route_of(request: HttpRequest) -> str:
    """The URL pattern that answered (`api/v1/projects/<project_id>/search`), never the raw
    path: a path per project would be a metric series per project."""
    match = getattr(request, "resolver_match", None)
    return match.route if match is not None and match.route else "unmatched"


class RequestContextMiddleware:
    """Outermost: gives the request its id (X-Request-ID, accepted or made), returns it on the
    response, and records how long the request took by route, method and status, with one
    access log line when ACCESS_LOG is on."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = requestid.from_header(request.META.get(requestid.META_KEY))
        request.request_id = request_id  # type: ignore[attr-defined]
        token = requestid.current.set(request_id)
        started = time.perf_counter()
        try:
            response = self.get_response(request)
            elapsed = time.perf_counter() - started
            route = route_of(request)
            metrics.request_duration.labels(route, request.method, str(response.status_code)).observe(elapsed)
            response[requestid.HEADER] = request_id
            if settings.ACCESS_LOG:
                access_logger.info(
                    "%s %s %s",
                    request.method,
                    request.path,
                    response.status_code,
                    extra={
                        "method": request.method,
                        "path": request.path,
                        "route": route,
                        "status": response.status_code,
                        "duration_ms": round(elapsed * 1000, 2),
                    },
                )
            return response
        finally:
            requestid.current.reset(token)


class SynchronousChainMiddleware:
    """Innermost, and synchronous only, so that Django runs the whole chain above it on the
    request's one thread. Under ASGI, Django otherwise runs each async-capable middleware on the
    event loop, and that middleware's every process_request and process_response hops to a
    thread and back: about ten hops a request, most of an authenticated no-op's time."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)


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
        # The id finds the logged traceback (every line of the request carries it).
        return error_response(
            500,
            "An internal error occurred; it has been logged.",
            details={"request_id": requestid.current.get()},
        )
