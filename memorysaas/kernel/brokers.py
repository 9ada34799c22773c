"""A Redis broker for django-q2 that delivers every task at least once.

django-q2's own Redis broker takes a task off its list with a plain pop and never hears of it
again: a worker killed while it held tasks (its own, and those its cluster had prefetched) loses
them for good. This one hands tasks out the way the ORM broker does. Taking a task moves it, in
one atomic step (BLMOVE), from the queue into a list of tasks in flight, and stamps the moment
it was claimed; the cluster's acknowledgement (after the task ran, see `django_q.monitor`)
removes it from there. A claim older than `Q_CLUSTER["retry"]` seconds is moved back to the
front of the queue, by whichever cluster looks first (each looks every few seconds), so the task
runs again. Tasks must therefore be idempotent, which ours are.

Keys, for a cluster named N: `django_q:N:q` (the queue, as django-q2's own broker names it, so
tasks queued before a switch are still taken), `django_q:N:q:inflight` (the list) and
`django_q:N:q:claims` (a sorted set of the in-flight packages by the time they were claimed, read
from Redis' clock so that machines whose clocks differ agree).

Set through `Q_CLUSTER["broker_class"]` (memorysaas/settings/base.py).
"""

from __future__ import annotations

import time

from django_q.brokers.redis_broker import Redis
from django_q.conf import Conf, logger

# How often a cluster looks for claims past their time. Cheap: one script over the tasks in flight.
RECLAIM_EVERY = 5.0

# Stamp a claim with Redis' own time. A package in flight with no stamp (its taker died between
# the move and the stamp) is stamped by the reclaim below, so it too comes back after `retry`.
_CLAIM = """
local now = redis.call('TIME')
redis.call('ZADD', KEYS[1], 'NX', now[1] + now[2] / 1e6, ARGV[1])
return 1
"""

# Forget an acknowledged package: out of the in-flight list and the claims.
_ACK = """
redis.call('LREM', KEYS[1], 1, ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
"""

# Move every package claimed more than ARGV[1] seconds ago back to the front of the queue.
_RECLAIM = """
local t = redis.call('TIME')
local now = t[1] + t[2] / 1e6
for _, package in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
  redis.call('ZADD', KEYS[3], 'NX', now, package)
end
local expired = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[1]))
for _, package in ipairs(expired) do
  redis.call('ZREM', KEYS[3], package)
  if redis.call('LREM', KEYS[2], 1, package) > 0 then
    redis.call('LPUSH', KEYS[1], package)
  end
end
return #expired
"""


class AcknowledgedRedis(Redis):
    """django-q2's Redis broker with acknowledgement and redelivery (see the module's text)."""

    def __init__(self, list_key: str | None = None):
        super().__init__(list_key=list_key)
        self.inflight_key = f"{self.list_key}:inflight"
        self.claims_key = f"{self.list_key}:claims"
        self._scripts()
        self._reclaimed_at = 0.0

    def __setstate__(self, state):
        super().__setstate__(state)
        self.inflight_key = f"{self.list_key}:inflight"
        self.claims_key = f"{self.list_key}:claims"
        self._scripts()
        self._reclaimed_at = 0.0

    def _scripts(self) -> None:
        self._claim = self.connection.register_script(_CLAIM)
        self._ack = self.connection.register_script(_ACK)
        self._reclaim = self.connection.register_script(_RECLAIM)

    def dequeue(self):
        self.reclaim_expired()
        package = self.connection.blmove(self.list_key, self.inflight_key, 1, "LEFT", "RIGHT")
        if package is None:
            return None
        self._claim(keys=[self.claims_key], args=[package])
        # The package is its own acknowledgement id: it is unique (it carries the task's id and
        # the moment it was queued), and it is what LREM needs to take it out of flight.
        return [(package, package)]

    def acknowledge(self, task_id) -> None:
        self._ack(keys=[self.inflight_key, self.claims_key], args=[task_id])

    def fail(self, task_id) -> None:
        # A package that cannot be read (a bad signature) is dropped, as django-q2's broker would.
        self.acknowledge(task_id)

    def reclaim_expired(self, *, force: bool = False) -> int:
        """Put claims older than the retry time back on the queue; at most every RECLAIM_EVERY
        seconds unless forced. Returns how many went back."""
        now = time.monotonic()
        if not force and now - self._reclaimed_at < RECLAIM_EVERY:
            return 0
        self._reclaimed_at = now
        moved = self._reclaim(keys=[self.list_key, self.inflight_key, self.claims_key], args=[Conf.RETRY])
        if moved:
            logger.warning("%s task(s) not acknowledged within %s s were queued again", moved, Conf.RETRY)
        return moved

    def lock_size(self) -> int:
        return self.connection.llen(self.inflight_key)

    def purge_queue(self):
        self.connection.delete(self.inflight_key, self.claims_key)
        return super().purge_queue()

    def delete_queue(self):
        self.connection.delete(self.inflight_key, self.claims_key)
        return super().delete_queue()
