"""Isolation probes for organization webhooks."""

from tests.isolation import api_param, api_request, page_param, world_builder


@world_builder
def webhooks(world) -> None:
    from apps.webhooks.models import WebhookDelivery, WebhookEndpoint

    # Written directly: a documentation address (TEST-NET-1) that the send-time check refuses,
    # so no probe can make the server call out; it subscribes to nothing the world emits.
    endpoint = WebhookEndpoint.objects.create(
        organization=world.alice.org,
        url="https://192.0.2.10/hook",
        secret="whsec_probe",
        event_types=["insights.weekly"],
    )
    delivery = WebhookDelivery.objects.create(
        organization=world.alice.org,
        endpoint=endpoint,
        event_id="00000000-0000-4000-8000-000000000001",
        event_type="insights.weekly",
        body="{}",
        status="failed",
    )
    world.objects["webhook_a"] = endpoint
    world.objects["webhook_delivery_a"] = delivery


@api_param("webhook_id")
def _webhook_id(world):
    return world.webhook_a.id


@api_param("delivery_id")
def _delivery_id(world):
    return world.webhook_delivery_a.id


@page_param("webhook_id")
def _page_webhook_id(world):
    return world.webhook_a.id


@page_param("delivery_id")
def _page_delivery_id(world):
    return world.webhook_delivery_a.id


@api_request("POST", "/api/v1/orgs/{org}/webhooks")
def _create(world):
    return {"body": {"url": "https://192.0.2.10/other", "event_types": ["dispute.opened"]}}


@api_request("PATCH", "/api/v1/orgs/{org}/webhooks/{webhook_id}")
def _update(world):
    return {"body": {"description": "probe"}}


@api_request("POST", "/api/v1/orgs/{org}/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver")
def _redeliver(world):
    return {"body": {}}
