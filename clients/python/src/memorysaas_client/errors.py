"""What a call to the service can fail with."""

from __future__ import annotations

from typing import Any

import httpx


class MemorysaasError(Exception):
    """Every error the SDK raises."""


class Unreachable(MemorysaasError):
    """The service could not be reached (refused, timed out, no route), after the retries: the
    caller may fall back to the offline replica."""


class ApiError(MemorysaasError, httpx.HTTPStatusError):
    """The service answered with an error: its status and the API's error envelope
    (`{"error": {"code", "message", "details"}}`). Also an `httpx.HTTPStatusError`, so code that
    handles httpx's errors handles it too."""

    def __init__(self, response: httpx.Response) -> None:
        self.status = response.status_code
        self.code, self.message, self.details = _envelope(response)
        httpx.HTTPStatusError.__init__(
            self, f"{self.status} {self.code}: {self.message}", request=response.request, response=response
        )

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.message}"


def _envelope(response: httpx.Response) -> tuple[str, str, Any]:
    try:
        error = response.json()["error"]
        return str(error["code"]), str(error["message"]), error.get("details")
    except (ValueError, KeyError, TypeError):
        return "http_error", response.reason_phrase or f"HTTP {response.status_code}", None
