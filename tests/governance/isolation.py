"""Isolation probes for disputes, notifications and trust levels."""

from tests.isolation import api_param, api_request, api_unscoped, page_param, world_builder

api_unscoped("GET", "/api/v1/notifications", "the caller's own (test_notifications_are_per_user)")
api_unscoped("POST", "/api/v1/notifications/read", "marks the caller's own (test_notifications_are_per_user)")


@world_builder
def governance(world) -> None:
    from apps.governance import services
    from tests.memories.factories import make_memory

    memory = make_memory(world.alice, content="Acme deploys on Fridays; nobody minds.")
    dispute = services.dispute_open(
        memory=memory, actor=world.bob.principal, reason="We never deploy on Fridays."
    )
    world.objects["disputed_memory_a"] = memory
    world.objects["dispute_a"] = dispute
    world.objects["notification_a"] = world.alice.user.notifications.first()


@api_param("dispute_id")
def _dispute_id(world):
    return world.dispute_a.id


@api_param("notification_id")
def _notification_id(world):
    return world.notification_a.pk


@page_param("dispute_id")
def _page_dispute_id(world):
    return world.dispute_a.id


@page_param("notification_id")
def _page_notification_id(world):
    return world.notification_a.pk


@page_param("memory_id")
def _page_memory_id(world):
    return world.disputed_memory_a.id


@api_request("POST", "/api/v1/memories/{memory_id}/disputes")
def _open(world):
    return {"body": {"reason": "probe"}}


@api_request("POST", "/api/v1/disputes/{dispute_id}/comments")
def _comment(world):
    return {"body": {"body": "probe"}}


@api_request("POST", "/api/v1/disputes/{dispute_id}/resolve")
def _resolve(world):
    return {"body": {"resolution": "reject"}}


@api_request("PUT", "/api/v1/projects/{project_id}/trust")
def _trust(world):
    return {"body": {"level": 1}}


@api_request("POST", "/api/v1/notifications/{notification_id}/read")
def _read(world):
    return {"body": {}}
