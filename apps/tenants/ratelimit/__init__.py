"""Request-rate limits: per API key (or signed-in person), per organization, and per client IP
for failed authentication.

- `buckets.py`: the arithmetic (pure): a limit is a rate per minute and a burst; each bucket
  keeps one number, the time at which it is empty again (a token bucket kept as GCRA).
- `stores.py`: where the buckets live, shared by every process: Redis (one Lua script a take)
  or PostgreSQL (one UPSERT a take); both decide and update in one atomic step.
- `policy.py`: which limits apply to whom, what an operation weighs, who the client is.
- `throttle.py`: the ninja throttle that charges each API request, and the failed-auth lockout
  the API's authentication consults before it looks at a key.
- `usage.py`: the current use of an organization's buckets, for its admins.
- `tasks.py`: the sweep that forgets emptied buckets of the PostgreSQL store.
"""
