"""Reads for webhooks, inside the caller's organizations."""

from __future__ import annotations

from uuid import UUID

from apps.tenants.models import Organization
from apps.tenants.principal import Principal
from apps.webhooks.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from memorysaas.kernel.errors import NotFound


def endpoints_for(*, principal: Principal, organization: Organization):
    return WebhookEndpoint.objects.visible_to(principal).filter(organization=organization)


def endpoint_get(
    *, principal: Principal, organization: Organization, endpoint_id: UUID | str
) -> WebhookEndpoint:
    endpoint = endpoints_for(principal=principal, organization=organization).filter(id=endpoint_id).first()
    if endpoint is None:
        raise NotFound("No such webhook endpoint.")
    return endpoint


def deliveries_for(*, endpoint: WebhookEndpoint, limit: int = 50) -> list[WebhookDelivery]:
    return list(endpoint.deliveries.order_by("-created_at", "-id")[:limit])


def delivery_get(*, endpoint: WebhookEndpoint, delivery_id: UUID | str) -> WebhookDelivery:
    delivery = endpoint.deliveries.filter(id=delivery_id).select_related("endpoint").first()
    if delivery is None:
        raise NotFound("No such delivery.")
    return delivery


def attempts_for(*, deliveries: list[WebhookDelivery]) -> dict[UUID, list[WebhookAttempt]]:
    out: dict[UUID, list[WebhookAttempt]] = {d.id: [] for d in deliveries}
    for attempt in WebhookAttempt.objects.filter(delivery__in=deliveries).order_by("delivery", "number"):
        out[attempt.delivery_id].append(attempt)
    return out
