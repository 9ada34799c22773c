"""Webhook signatures, in the manner of Stripe: HMAC-SHA256 over `<timestamp>.<body>`.

The header is `Memorysaas-Signature: t=<unix seconds>,v1=<hex digest>`. A receiver recomputes
the digest over the timestamp it was sent and the raw body, compares in constant time, and
refuses a timestamp older than its tolerance (a replayed request). No Django import: receivers
and tests use `verify` as it is.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

HEADER = "Memorysaas-Signature"
SCHEME = "v1"
DEFAULT_TOLERANCE_SECONDS = 300


def new_secret() -> str:
    return "whsec_" + secrets.token_urlsafe(32)


def digest(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signature_header(secret: str, body: bytes, *, timestamp: int | None = None) -> str:
    stamp = int(time.time()) if timestamp is None else timestamp
    return f"t={stamp},{SCHEME}={digest(secret, stamp, body)}"


def verify(
    secret: str,
    header: str,
    body: bytes,
    *,
    tolerance: int = DEFAULT_TOLERANCE_SECONDS,
    now: float | None = None,
) -> bool:
    """Whether `header` signs `body` with `secret`, made within `tolerance` seconds of `now`."""
    parts: dict[str, list[str]] = {}
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        parts.setdefault(key, []).append(value)
    try:
        stamp = int(parts["t"][0])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - stamp) > tolerance:
        return False
    expected = digest(secret, stamp, body)
    return any(hmac.compare_digest(expected, given) for given in parts.get(SCHEME, []))
