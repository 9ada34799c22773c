"""HTTP to the service: timeouts from httpx, retries from tenacity, errors as `ApiError`.

Which failures are retried depends on whether sending the request twice is harmless. A request
that never left (the connection was refused or timed out) is retried always; a 429 or 503 was
refused before any work (a rate limit, the admission gate, the database away), so it is retried
always too, after the `Retry-After` the server gave. A request that may have reached the server
(a read timeout, a dropped connection, a 502/504 from a proxy) is retried only when it is
idempotent: reads, event batches (numbered by `seq`), sync pushes (creates carry a `ref`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from memorysaas_client import __version__
from memorysaas_client.errors import ApiError, Unreachable

REFUSED_BEFORE_WORK = frozenset({429, 503})
GATEWAY_ERRORS = frozenset({502, 504})
NEVER_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


@dataclass(frozen=True)
class Timeouts:
    """Seconds. A short connect timeout lets a command notice quickly that the service is away
    (and answer from the replica); a long read timeout lets an archive upload or a big push finish."""

    connect: float = 5.0
    read: float = 60.0

    def for_httpx(self) -> httpx.Timeout:
        return httpx.Timeout(self.read, connect=self.connect)


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 3  # in all, the first included
    initial_wait: float = 0.5
    max_wait: float = 10.0  # also the longest Retry-After honoured; a longer one ends the retries


DEFAULT_TIMEOUTS = Timeouts()
DEFAULT_RETRY = RetryPolicy()


def _retryable(error: BaseException, *, idempotent: bool) -> bool:
    if isinstance(error, NEVER_SENT):
        return True
    if isinstance(error, ApiError):
        return error.status in REFUSED_BEFORE_WORK or (idempotent and error.status in GATEWAY_ERRORS)
    return idempotent and isinstance(error, httpx.TransportError)


def _retry_after(error: BaseException | None) -> float | None:
    if not isinstance(error, ApiError):
        return None
    value = error.response.headers.get("Retry-After", "")
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None


class _WaitRetryAfter:
    """The server's `Retry-After` when it gave one, exponential backoff with jitter otherwise."""

    def __init__(self, policy: RetryPolicy) -> None:
        self.backoff = wait_exponential_jitter(
            multiplier=policy.initial_wait, max=policy.max_wait, jitter=policy.initial_wait
        )
        self.max_wait = policy.max_wait

    def __call__(self, state: RetryCallState) -> float:
        asked = _retry_after(state.outcome.exception() if state.outcome else None)
        return min(asked, self.max_wait) if asked is not None else self.backoff(state)


class Http:
    """One connection pool to one service, with an API key (or none, for the device login)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeouts: Timeouts = DEFAULT_TIMEOUTS,
        retry: RetryPolicy = DEFAULT_RETRY,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"User-Agent": f"memorysaas-client/{__version__}"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.client = httpx.Client(
            base_url=self.base_url + "/api/v1/",
            headers=headers,
            timeout=timeouts.for_httpx(),
            transport=transport,
        )
        self.retry = retry

    def close(self) -> None:
        self.client.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        idempotent: bool,
        json: Any = None,
        params: dict[str, Any] | None = None,
        files: dict[str, tuple[str, bytes, str]] | None = None,
    ) -> Any:
        """The answer's JSON (None for an empty body). `ApiError` for an error answer,
        `Unreachable` when the service cannot be reached."""
        retrying = Retrying(
            stop=stop_after_attempt(self.retry.attempts),
            wait=_WaitRetryAfter(self.retry),
            retry=retry_if_exception(lambda error: _retryable(error, idempotent=idempotent)),
            reraise=True,
        )
        try:
            response = retrying(self._send, method, path, json=json, params=params, files=files)
        except httpx.TransportError as error:
            raise Unreachable(
                f"{self.base_url} cannot be reached: {error or type(error).__name__}"
            ) from error
        return response.json() if response.content else None

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        params = kwargs.get("params")
        if params:
            kwargs["params"] = {k: v for k, v in params.items() if v is not None}
        response = self.client.request(method, path, **kwargs)
        if response.status_code >= 400:
            raise ApiError(response)
        return response
