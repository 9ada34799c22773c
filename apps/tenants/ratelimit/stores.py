"""Where the buckets live, shared by every web process: Redis when RATE_LIMIT_STORE is "redis"
(the default when REDIS_URL is set), PostgreSQL otherwise.

Each take is one atomic step on the server — a Lua script in Redis, one INSERT … ON CONFLICT DO
UPDATE in PostgreSQL — that reads the bucket, decides and writes it back, with the server's own
clock. Two processes taking from one bucket at once are serialised by Redis or by the row lock,
so neither can spend what the other just spent (a read, then a write from Python, could).

Neither Django's cache nor the libraries built on it give this: `cache.incr` is a read and a
write on DatabaseCache, and ninja's throttles keep a list of timestamps they read and write back.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import redis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from apps.tenants.ratelimit.buckets import SLACK_SECONDS


@dataclass(frozen=True)
class Taken:
    allowed: bool
    tat: float  # the bucket after the take (unchanged when refused)
    now: float  # the store's clock when it decided


class Store(Protocol):
    name: str

    def take(self, key: str, *, cost: float, capacity: float) -> Taken:
        """Add `cost` seconds to the bucket if it then holds at most `capacity`; atomically."""
        ...

    def read(self, keys: Sequence[str]) -> tuple[float, dict[str, float]]:
        """The store's clock and the buckets among `keys` that are not empty."""
        ...

    def sweep(self) -> int:
        """Forget buckets that have emptied (the PostgreSQL store's rows); how many."""
        ...


# The same test as buckets.fits, on the server. Numbers travel as strings: Lua would truncate
# a returned float to an integer.
_REDIS_TAKE = f"""
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local cost = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
local base = math.max(tat, now)
local allowed = 0
if base + cost - now <= capacity + {SLACK_SECONDS} then
  tat = base + cost
  allowed = 1
  redis.call('SET', KEYS[1], string.format('%.6f', tat), 'PX', math.ceil((tat - now) * 1000) + 1000)
end
return {{allowed, string.format('%.6f', tat), string.format('%.6f', now)}}
"""


class RedisStore:
    """One key a bucket, expiring once the bucket is empty again (nothing to sweep)."""

    name = "redis"

    def __init__(self, url: str, prefix: str) -> None:
        # Short timeouts: a request waits on Redis at most this long before it goes unlimited.
        self.client = redis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
        self.prefix = prefix
        self._take = self.client.register_script(_REDIS_TAKE)

    def take(self, key: str, *, cost: float, capacity: float) -> Taken:
        allowed, tat, now = self._take(keys=[self.prefix + key], args=[repr(cost), repr(capacity)])
        return Taken(allowed=bool(allowed), tat=float(tat), now=float(now))

    def read(self, keys: Sequence[str]) -> tuple[float, dict[str, float]]:
        pipe = self.client.pipeline(transaction=True)
        pipe.time()
        if keys:
            pipe.mget([self.prefix + key for key in keys])
        results = pipe.execute()
        seconds, micros = results[0]
        values = results[1] if keys else []
        found = {key: float(value) for key, value in zip(keys, values, strict=True) if value is not None}
        return seconds + micros / 1_000_000, found

    def sweep(self) -> int:
        return 0


# The bucket's new value and the decision come from the old row in one statement: every SET
# expression reads the row as it was, and ON CONFLICT holds its lock until the statement ends.
# clock_timestamp(), not now(): inside a transaction now() stands still.
SQL_TAKE = """
WITH clock AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now)
INSERT INTO tenants_ratelimitbucket AS b (key, tat, allowed, checked_at)
SELECT %(key)s, clock.now + %(cost)s, true, clock.now FROM clock
ON CONFLICT (key) DO UPDATE SET
  allowed = GREATEST(b.tat, EXCLUDED.checked_at) + %(cost)s - EXCLUDED.checked_at <= %(capacity)s,
  tat = CASE
    WHEN GREATEST(b.tat, EXCLUDED.checked_at) + %(cost)s - EXCLUDED.checked_at <= %(capacity)s
    THEN GREATEST(b.tat, EXCLUDED.checked_at) + %(cost)s
    ELSE b.tat
  END,
  checked_at = EXCLUDED.checked_at
RETURNING allowed, tat, checked_at
"""
# The clock row comes first, with or without buckets (a LEFT JOIN from it).
SQL_READ = """
WITH clock AS (SELECT extract(epoch FROM clock_timestamp())::float8 AS now)
SELECT b.key, b.tat, clock.now FROM clock
LEFT JOIN tenants_ratelimitbucket b ON b.key = ANY(%(keys)s) AND b.tat > clock.now
"""
SQL_SWEEP = "DELETE FROM tenants_ratelimitbucket WHERE tat < extract(epoch FROM clock_timestamp())"


class PostgresStore:
    """One row a bucket in an unlogged table, on the request's own database connection. A take
    runs before the view, outside any transaction, so it holds the row's lock for one statement;
    inside a long transaction it would hold up every request on that bucket until the commit."""

    name = "postgres"

    def take(self, key: str, *, cost: float, capacity: float) -> Taken:
        with connection.cursor() as cursor:
            cursor.execute(SQL_TAKE, {"key": key, "cost": cost, "capacity": capacity + SLACK_SECONDS})
            allowed, tat, now = cursor.fetchone()
        return Taken(allowed=allowed, tat=tat, now=now)

    def read(self, keys: Sequence[str]) -> tuple[float, dict[str, float]]:
        with connection.cursor() as cursor:
            cursor.execute(SQL_READ, {"keys": list(keys)})
            rows = cursor.fetchall()
        now = rows[0][2]  # (the clock row is there with or without buckets)
        return now, {key: tat for key, tat, _ in rows if key is not None}

    def sweep(self) -> int:
        with connection.cursor() as cursor:
            cursor.execute(SQL_SWEEP)
            return cursor.rowcount


@functools.cache
def _store(kind: str, redis_url: str, prefix: str) -> Store:
    if kind == "postgres":
        return PostgresStore()
    if kind == "redis":
        if not redis_url:
            raise ImproperlyConfigured('RATE_LIMIT_STORE is "redis" but REDIS_URL is not set.')
        return RedisStore(redis_url, prefix)
    raise ImproperlyConfigured(f'RATE_LIMIT_STORE must be "redis" or "postgres", got {kind!r}.')


def current_store() -> Store:
    """The store the settings name (one per process and configuration: Redis clients pool)."""
    return _store(settings.RATE_LIMIT_STORE, settings.REDIS_URL or "", settings.RATE_LIMIT_REDIS_PREFIX)
