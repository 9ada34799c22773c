"""Background work for webhooks: each delivery's first attempt, manual redeliveries, and the
per-minute sweep that makes the retries whose time has come."""

from __future__ import annotations

from apps.webhooks import services
from memorysaas.kernel.queue import retry_on_database_error


@retry_on_database_error
def deliver_task(delivery_id: str) -> bool:
    attempt = services.deliver(delivery_id)
    return bool(attempt and attempt.succeeded)


@retry_on_database_error
def redeliver_task(delivery_id: str) -> bool:
    attempt = services.deliver(delivery_id, manual=True)
    return bool(attempt and attempt.succeeded)


@retry_on_database_error
def deliver_due_task() -> int:
    """Attempts made now: every pending delivery whose next attempt is due."""
    return services.deliver_due()
