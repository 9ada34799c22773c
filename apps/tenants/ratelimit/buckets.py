"""Token buckets kept as one number each (GCRA): the theoretical arrival time `tat`, the moment
at which the bucket would be empty again.

A limit of `per_minute` with a `burst` lets `burst` requests through at once, then one every
`60 / per_minute` seconds. A request of weight w costs w intervals; it passes when, after adding
its cost, the bucket holds at most `burst` intervals: max(tat, now) + cost - now <= capacity.
A refused request changes nothing. The stores run exactly this test atomically; the functions
here turn what they return into a decision.

No Django here: plain data, tested directly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Float slack in the "fits" test, so a bucket filled to exactly its burst still lets the last
# request in (epoch seconds as doubles carry about a microsecond of error).
SLACK_SECONDS = 1e-6


@dataclass(frozen=True)
class Limit:
    per_minute: int
    burst: int

    def __post_init__(self) -> None:
        if self.per_minute < 1 or self.burst < 1:
            raise ValueError(f"a limit needs per_minute >= 1 and burst >= 1, got {self}")

    @property
    def interval(self) -> float:
        """Seconds for one request's worth of budget to come back."""
        return 60.0 / self.per_minute

    @property
    def capacity(self) -> float:
        return self.burst * self.interval

    def cost(self, weight: int) -> float:
        """A weight above the burst costs the whole burst, so an operation can always run on an
        empty bucket instead of never."""
        return min(max(weight, 1), self.burst) * self.interval


@dataclass(frozen=True)
class Decision:
    allowed: bool
    limit: Limit
    # How full the bucket is now, in requests (0 = untouched, `burst` = nothing left).
    used: float
    # Seconds until this request (or, for a peek, one more request) would pass; 0 when allowed.
    retry_after: float

    @property
    def remaining(self) -> int:
        return max(0, math.floor(self.limit.burst - self.used + SLACK_SECONDS))

    @property
    def retry_after_seconds(self) -> int:
        """For the Retry-After header: whole seconds, at least 1 when refused."""
        return 0 if self.allowed else max(1, math.ceil(self.retry_after - SLACK_SECONDS))


def fits(*, tat: float, now: float, cost: float, capacity: float) -> bool:
    return max(tat, now) + cost - now <= capacity + SLACK_SECONDS


def after_take(*, limit: Limit, weight: int, allowed: bool, tat: float, now: float) -> Decision:
    """The decision a store's take came to: `tat` is the bucket's value after it (unchanged
    when refused)."""
    used = max(tat - now, 0.0) / limit.interval
    if allowed:
        return Decision(allowed=True, limit=limit, used=used, retry_after=0.0)
    wait = max(tat, now) + limit.cost(weight) - now - limit.capacity
    return Decision(allowed=False, limit=limit, used=used, retry_after=max(wait, 0.0))


def peek(*, limit: Limit, tat: float | None, now: float, weight: int = 1) -> Decision:
    """Whether a request of `weight` would pass now, without taking anything (None: an empty
    or never-used bucket)."""
    tat = now if tat is None else tat
    cost = limit.cost(weight)
    allowed = fits(tat=tat, now=now, cost=cost, capacity=limit.capacity)
    used = max(tat - now, 0.0) / limit.interval
    wait = 0.0 if allowed else max(tat, now) + cost - now - limit.capacity
    return Decision(allowed=allowed, limit=limit, used=used, retry_after=wait)
