"""The request id: taken from the caller's X-Request-ID (a proxy's or a client's) or made here,
returned on the response, and put on every log line written while the request is worked on.

A context variable carries it: Django runs a request's middleware and view in one thread with
the context the request started in, so any logger below the view sees it without being passed it.
"""

from __future__ import annotations

import logging
import re
import uuid
from contextvars import ContextVar

HEADER = "X-Request-ID"
META_KEY = "HTTP_X_REQUEST_ID"
# What we accept from outside: ids as proxies and tracers make them, nothing that could forge a
# log line or a header (no spaces, quotes or control characters), at most 128 characters.
_ACCEPTED = re.compile(r"[A-Za-z0-9._:\-]{1,128}")

current: ContextVar[str] = ContextVar("request_id", default="")


def from_header(value: str | None) -> str:
    """The caller's id when it is acceptable, else a new one."""
    if value and _ACCEPTED.fullmatch(value):
        return value
    return uuid.uuid4().hex


class RequestIdFilter(logging.Filter):
    """Adds `request_id` to every record ("" outside a request), for the formatters to show."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current.get()
        return True
