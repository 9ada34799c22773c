"""How much of its limits an organization and each of its keys are using now, for its admins."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import redis
from django.conf import settings

from apps.tenants.models import ApiKey, Organization
from apps.tenants.ratelimit import buckets, policy
from apps.tenants.ratelimit.buckets import Limit
from apps.tenants.ratelimit.stores import current_store
from memorysaas.kernel.errors import ApiError


def _limit(limit: Limit) -> dict[str, int]:
    return {"per_minute": limit.per_minute, "burst": limit.burst}


def _use(bucket: policy.Bucket, tat: float | None, now: float) -> dict[str, Any]:
    decision = buckets.peek(limit=bucket.limit, tat=tat, now=now)
    return {
        "used": round(decision.used, 2),
        "remaining": decision.remaining,
        "retry_after_seconds": decision.retry_after_seconds,
    }


def usage_for(*, organization: Organization, api_keys: Iterable[ApiKey]) -> dict[str, Any]:
    """The limits that apply to `organization` and the current use of its bucket and of each of
    `api_keys` (the caller's to choose: those it may see). Reading takes nothing."""
    limits = policy.limits_of(organization)
    org_bucket = policy.org_bucket(organization.id, limits)
    keys = list(api_keys)
    key_buckets = [policy.key_bucket(api_key, limits) for api_key in keys]
    try:
        now, found = current_store().read([org_bucket.key, *(b.key for b in key_buckets)])
    except redis.RedisError:
        raise ApiError(
            503, "The rate-limit counters cannot be read just now.", code="store_unavailable"
        ) from None
    return {
        "enabled": settings.RATE_LIMIT_ENABLED,
        "store": current_store().name,
        "custom": limits.custom,
        "weights": {name: policy.operation_weight(name) for name in settings.RATE_LIMIT_WEIGHTS},
        "failed_auth_per_address": _limit(policy.failed_auth_limit()),
        "organization": {**_limit(limits.organization), **_use(org_bucket, found.get(org_bucket.key), now)},
        "per_key": _limit(limits.per_key),
        "api_keys": [
            {
                "id": api_key.id,
                "name": api_key.name,
                "prefix": api_key.prefix,
                **_use(bucket, found.get(bucket.key), now),
            }
            for api_key, bucket in zip(keys, key_buckets, strict=True)
        ],
    }
