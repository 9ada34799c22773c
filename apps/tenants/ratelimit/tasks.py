"""The rate limits' background job (django-q2)."""

from __future__ import annotations

from apps.tenants.ratelimit.stores import current_store


def sweep_task() -> int:
    """Forget buckets that have emptied (rows of the PostgreSQL store; Redis expires its own),
    so the addresses that once failed to authenticate do not pile up."""
    return current_store().sweep()
