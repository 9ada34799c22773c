"""Webhook endpoints, and the delivery of organization events to them.

An event (memorysaas.kernel.events) becomes one delivery per active endpoint that asked for its
type, written in the emitter's transaction and sent by a background task after it commits. A
failed attempt (no answer, or a status outside 2xx) is tried again after 30 s, then 1, 2, 4 …
minutes (WEBHOOKS_RETRY_BASE_SECONDS doubling), up to WEBHOOKS_MAX_ATTEMPTS attempts; every
attempt is logged with its status and response time. An admin can send any delivery again.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import httpx
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.utils import timezone

from apps.tenants.models import Organization
from apps.tenants.principal import Principal
from apps.tenants.services import audit_record
from apps.webhooks import signing
from apps.webhooks.models import DeliveryStatus, WebhookAttempt, WebhookDelivery, WebhookEndpoint
from apps.webhooks.ssrf import UnsafeUrl, check_url
from memorysaas.kernel.errors import Invalid
from memorysaas.kernel.events import EVENT_TYPES
from memorysaas.kernel.queue import enqueue

logger = logging.getLogger(__name__)

USER_AGENT = "memorysaas-webhooks/1"


# ---------------------------------------------------------------- endpoints


def _checked_url(url: str) -> str:
    url = (url or "").strip()
    if len(url) > 500:
        raise Invalid("The URL is longer than 500 characters.", details={"field": "url"})
    try:
        check_url(url, allow_private=settings.WEBHOOKS_ALLOW_PRIVATE_URLS)
    except UnsafeUrl as exc:
        raise Invalid(str(exc), code="unsafe_url", details={"field": "url"}) from None
    return url


def _checked_types(event_types: list[str]) -> list[str]:
    chosen = list(dict.fromkeys(event_types))
    unknown = [t for t in chosen if t not in EVENT_TYPES]
    if unknown or not chosen:
        raise Invalid(
            f"Choose one or more event types from {list(EVENT_TYPES)}"
            + (f"; unknown: {unknown}." if unknown else "."),
            details={"field": "event_types", "allowed": list(EVENT_TYPES)},
        )
    return chosen


@transaction.atomic
def endpoint_create(
    *, organization: Organization, actor: Principal, url: str, event_types: list[str], description: str = ""
) -> WebhookEndpoint:
    endpoint = WebhookEndpoint.objects.create(
        organization=organization,
        url=_checked_url(url),
        secret=signing.new_secret(),
        event_types=_checked_types(event_types),
        description=description.strip()[:200],
        created_by_label=actor.label[:120],
    )
    audit_record(actor=actor, action="webhook.created", target=endpoint, metadata={"url": endpoint.url})
    return endpoint


@transaction.atomic
def endpoint_update(
    *,
    endpoint: WebhookEndpoint,
    actor: Principal,
    url: str | None = None,
    event_types: list[str] | None = None,
    description: str | None = None,
    active: bool | None = None,
    rotate_secret: bool = False,
) -> WebhookEndpoint:
    if url is not None:
        endpoint.url = _checked_url(url)
    if event_types is not None:
        endpoint.event_types = _checked_types(event_types)
    if description is not None:
        endpoint.description = description.strip()[:200]
    if active is not None:
        endpoint.active = active
    if rotate_secret:
        endpoint.secret = signing.new_secret()
    endpoint.save()
    audit_record(actor=actor, action="webhook.updated", target=endpoint, metadata={"url": endpoint.url})
    return endpoint


@transaction.atomic
def endpoint_delete(*, endpoint: WebhookEndpoint, actor: Principal) -> None:
    audit_record(actor=actor, action="webhook.deleted", target=endpoint, metadata={"url": endpoint.url})
    endpoint.delete()


# ---------------------------------------------------------------- events → deliveries


def event_body(event_id: UUID, organization_id: UUID | str, event_type: str, payload: dict[str, Any]) -> str:
    return json.dumps(
        {
            "id": str(event_id),
            "type": event_type,
            "created_at": timezone.now().isoformat(),
            "organization_id": str(organization_id),
            "data": payload,
        },
        cls=DjangoJSONEncoder,
        separators=(",", ":"),
    )


def on_event(organization_id: UUID | str, event_type: str, payload: dict[str, Any]) -> list[WebhookDelivery]:
    """The kernel event bus's subscriber: a delivery for each endpoint that wants the event."""
    endpoints = list(
        WebhookEndpoint.objects.filter(
            organization_id=organization_id, active=True, event_types__contains=[event_type]
        ).only("id")
    )
    if not endpoints:
        return []
    event_id = uuid.uuid4()
    body = event_body(event_id, organization_id, event_type, payload)
    now = timezone.now()
    deliveries = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            organization_id=organization_id,
            endpoint_id=endpoint.id,
            event_id=event_id,
            event_type=event_type,
            body=body,
            next_attempt_at=now,
        )
        for endpoint in endpoints
    )
    for delivery in deliveries:
        enqueue("apps.webhooks.tasks.deliver_task", str(delivery.id), lane="interactive")
    return deliveries


# ---------------------------------------------------------------- sending


def retry_delay(attempts: int) -> timedelta:
    """How long after its `attempts`-th failed attempt a delivery is tried again."""
    return timedelta(seconds=settings.WEBHOOKS_RETRY_BASE_SECONDS * 2 ** max(0, attempts - 1))


def _claim(delivery_id: UUID | str, now: datetime) -> WebhookDelivery | None:
    """Take a due delivery for one attempt. The lease moves its next attempt past the request's
    timeout, so the retry sweep or a second copy of the task leaves it alone meanwhile."""
    lease = now + timedelta(seconds=2 * settings.WEBHOOKS_TIMEOUT_SECONDS + 5)
    claimed = WebhookDelivery.objects.filter(
        id=delivery_id, status=DeliveryStatus.PENDING, next_attempt_at__lte=now
    ).update(next_attempt_at=lease)
    if not claimed:
        return None
    return WebhookDelivery.objects.select_related("endpoint").get(id=delivery_id)


def _send(endpoint: WebhookEndpoint, delivery: WebhookDelivery) -> tuple[int | None, float | None, str]:
    """One POST: (status code or None, response time in ms or None, error text)."""
    if not settings.WEBHOOKS_SEND:
        return None, None, "refused: sending is switched off on this server (WEBHOOKS_SEND)"
    try:
        check_url(endpoint.url, allow_private=settings.WEBHOOKS_ALLOW_PRIVATE_URLS)
    except UnsafeUrl as exc:
        return None, None, f"refused: {exc}"[:300]
    body = delivery.body.encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        signing.HEADER: signing.signature_header(endpoint.secret, body),
        "Memorysaas-Event": delivery.event_type,
        "Memorysaas-Delivery": str(delivery.id),
    }
    started = time.perf_counter()
    try:
        with httpx.Client(timeout=settings.WEBHOOKS_TIMEOUT_SECONDS, follow_redirects=False) as client:
            response = client.post(endpoint.url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        elapsed = (time.perf_counter() - started) * 1000
        return None, round(elapsed, 1), f"{type(exc).__name__}: {exc}"[:300]
    elapsed = (time.perf_counter() - started) * 1000
    return response.status_code, round(elapsed, 1), ""


def deliver(
    delivery_id: UUID | str, *, now: datetime | None = None, manual: bool = False
) -> WebhookAttempt | None:
    """Make the delivery's next attempt if it is due, and log it. Returns the attempt, or None
    when there was nothing to do (sent already, not due, another worker has it)."""
    now = now or timezone.now()
    delivery = _claim(delivery_id, now)
    if delivery is None:
        return None
    status_code, response_ms, error = _send(delivery.endpoint, delivery)
    succeeded = status_code is not None and 200 <= status_code < 300
    number = delivery.attempts + 1
    if succeeded:
        status, next_at = DeliveryStatus.SUCCEEDED, None
    elif error.startswith("refused:") or number >= settings.WEBHOOKS_MAX_ATTEMPTS:
        status, next_at = DeliveryStatus.FAILED, None
    else:
        status, next_at = DeliveryStatus.PENDING, timezone.now() + retry_delay(number)
    with transaction.atomic():
        attempt = WebhookAttempt.objects.create(
            organization_id=delivery.organization_id,
            delivery=delivery,
            number=number,
            status_code=status_code,
            response_ms=response_ms,
            error=error if not succeeded else "",
            succeeded=succeeded,
            manual=manual,
        )
        WebhookDelivery.objects.filter(id=delivery.id).update(
            attempts=number, status=status, next_attempt_at=next_at, updated_at=timezone.now()
        )
    if not succeeded:
        logger.info("webhook delivery %s attempt %s failed: %s %s", delivery.id, number, status_code, error)
    return attempt


def due_delivery_ids(*, now: datetime | None = None, limit: int = 500) -> list[UUID]:
    return list(
        WebhookDelivery.objects.filter(
            status=DeliveryStatus.PENDING, next_attempt_at__lte=now or timezone.now()
        )
        .order_by("next_attempt_at")
        .values_list("id", flat=True)[:limit]
    )


def deliver_due(*, now: datetime | None = None) -> int:
    """Make every attempt that is due; returns how many were made (the retry schedule's task)."""
    now = now or timezone.now()
    return sum(deliver(delivery_id, now=now) is not None for delivery_id in due_delivery_ids(now=now))


@transaction.atomic
def redeliver(*, delivery: WebhookDelivery, actor: Principal) -> WebhookDelivery:
    """Send a delivery again now, whatever became of it (an admin asked from the dashboard or
    the API). The attempt it makes is logged as manual."""
    WebhookDelivery.objects.filter(id=delivery.id).update(
        status=DeliveryStatus.PENDING, next_attempt_at=timezone.now()
    )
    audit_record(
        actor=actor,
        action="webhook.redelivered",
        target=delivery.endpoint,
        metadata={"delivery": str(delivery.id)},
    )
    enqueue("apps.webhooks.tasks.redeliver_task", str(delivery.id), lane="interactive")
    delivery.refresh_from_db()
    return delivery
