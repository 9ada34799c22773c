"""Charging requests to their buckets, and the 429 when one is empty.

- `RequestThrottle`: ninja runs it after authentication on every API operation; it charges the
  request's weight to its key's (or person's) bucket and then to its organization's.
- `refuse_if_locked_out` / `record_failed_auth`: the API's authentication asks the first before
  it looks at a presented key and calls the second when the key fails, so an address that keeps
  presenting bad keys is answered 429 without its guesses being checked. Counted by address
  only: nobody can use up a person's or a key's budget by failing in their name.

With RATE_LIMIT_ENABLED off nothing is charged. When Redis cannot be reached a request goes
unlimited (and a warning is logged): the limits protect the service, they must not take it down.
"""

from __future__ import annotations

import logging

import redis
from django.conf import settings
from django.http import HttpRequest
from ninja.throttling import BaseThrottle

from apps.tenants.models import Organization
from apps.tenants.principal import Principal
from apps.tenants.ratelimit import buckets, policy
from apps.tenants.ratelimit.buckets import Decision
from apps.tenants.ratelimit.policy import Bucket, Scope
from apps.tenants.ratelimit.stores import current_store
from memorysaas.kernel.errors import RateLimited

logger = logging.getLogger(__name__)

_OVER = {
    Scope.API_KEY: "This API key is over its rate limit",
    Scope.USER: "You are over your rate limit",
    Scope.ORGANIZATION: "This organization is over its rate limit",
}


def take(bucket: Bucket, weight: int) -> Decision:
    limit = bucket.limit
    try:
        taken = current_store().take(bucket.key, cost=limit.cost(weight), capacity=limit.capacity)
    except redis.RedisError as error:
        logger.warning("Rate-limit store unreachable; %s goes unlimited: %s", bucket.scope, error)
        return Decision(allowed=True, limit=limit, used=0.0, retry_after=0.0)
    return buckets.after_take(limit=limit, weight=weight, allowed=taken.allowed, tat=taken.tat, now=taken.now)


def refusal(bucket: Bucket, decision: Decision, *, weight: int) -> RateLimited:
    limit = decision.limit
    wait = decision.retry_after_seconds
    if bucket.scope == Scope.CLIENT_IP:
        message = f"Too many failed authentications from your address; try again in {wait} s."
    else:
        message = (
            f"{_OVER[bucket.scope]} ({limit.per_minute} requests a minute, bursts"
            f" of {limit.burst}; this request counts {weight}). Try again in {wait} s."
        )
    details = {
        "scope": bucket.scope,
        "limit_per_minute": limit.per_minute,
        "burst": limit.burst,
        "weight": weight,
        "retry_after_seconds": wait,
    }
    return RateLimited(message, retry_after=wait, details=details)


def charge_buckets(charged: list[Bucket], *, weight: int) -> RateLimited | None:
    """Take `weight` from each bucket in turn; the refusal of the first that cannot give it (the
    buckets before it keep what they gave), or None."""
    for bucket in charged:
        decision = take(bucket, weight)
        if not decision.allowed:
            return refusal(bucket, decision, weight=weight)
    return None


def charge(principal: Principal, *, weight: int) -> RateLimited | None:
    return charge_buckets(policy.buckets_for(principal), weight=weight)


def charge_export(user, organization: Organization | None = None) -> RateLimited | None:
    """An export asked for from the dashboard: the person's bucket, and the organization's when
    it is the organization's export."""
    if not settings.RATE_LIMIT_ENABLED:
        return None
    charged = [policy.user_bucket(user)]
    if organization is not None:
        charged.append(policy.org_bucket(organization.id, policy.limits_of(organization)))
    return charge_buckets(charged, weight=policy.operation_weight("export"))


class RequestThrottle(BaseThrottle):
    """ninja's throttle hook. A refusal is kept on the request for the API's 429 handler: ninja
    shares one throttle between threads, so nothing about a request may live on it."""

    def allow_request(self, request: HttpRequest) -> bool:
        principal = getattr(request, "auth", None)
        if not settings.RATE_LIMIT_ENABLED or not isinstance(principal, Principal):
            return True
        refused = charge(principal, weight=policy.weight_of(request))
        if refused is None:
            return True
        request.rate_limit_refusal = refused  # type: ignore[attr-defined]
        return False


request_throttle = RequestThrottle()


def refusal_of(request: HttpRequest) -> RateLimited:
    """The 429 for a request RequestThrottle refused."""
    return request.rate_limit_refusal  # type: ignore[attr-defined]


def refuse_if_locked_out(request: HttpRequest) -> None:
    """Raise the 429 when the request's address has no failed-authentication budget left."""
    if not settings.RATE_LIMIT_ENABLED:
        return
    bucket = policy.failed_auth_bucket(request)
    try:
        now, found = current_store().read([bucket.key])
    except redis.RedisError as error:
        logger.warning("Rate-limit store unreachable; failed-auth lockout skipped: %s", error)
        return
    decision = buckets.peek(limit=bucket.limit, tat=found.get(bucket.key), now=now)
    if not decision.allowed:
        raise refusal(bucket, decision, weight=1)


def record_failed_auth(request: HttpRequest) -> None:
    if settings.RATE_LIMIT_ENABLED:
        take(policy.failed_auth_bucket(request), 1)
