"""An organization's webhook endpoints, the deliveries of its events to them, and each attempt."""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models

from apps.tenants.models import TenantQuerySet


class WebhookEndpoint(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    url = models.URLField(max_length=500)
    # The signing key, shown to admins (they paste it into the receiver); needed in clear to sign.
    secret = models.CharField(max_length=80)
    event_types = ArrayField(models.CharField(max_length=40), default=list)
    description = models.CharField(max_length=200, blank=True)
    active = models.BooleanField(default=True)
    created_by_label = models.CharField(max_length=120, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["organization", "active"], name="webhook_org_active")]

    def __str__(self) -> str:
        return f"webhook {self.url}"


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"  # not tried yet, or waiting for its next attempt
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"  # every attempt failed (or the URL was refused)


class WebhookDelivery(models.Model):
    """One event for one endpoint. `event_id` is the same for every endpoint that gets the event
    and is sent in the body, so a receiver can drop a delivery it has already seen."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    event_id = models.UUIDField()
    event_type = models.CharField(max_length=40)
    body = models.TextField()  # the exact JSON sent (and signed), kept for redelivery
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["endpoint", "-created_at"], name="webhook_delivery_endpoint"),
            models.Index(
                fields=["next_attempt_at"],
                name="webhook_delivery_due",
                condition=models.Q(status="pending"),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} → {self.endpoint_id} ({self.status})"


class WebhookAttempt(models.Model):
    """One HTTP request of a delivery: its answer's status (None: no answer) and how long it took."""

    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_log")
    number = models.PositiveSmallIntegerField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response_ms = models.FloatField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)
    succeeded = models.BooleanField(default=False)
    manual = models.BooleanField(default=False, help_text="A redelivery someone asked for.")
    at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["delivery", "number"]

    def __str__(self) -> str:
        return f"attempt {self.number} of {self.delivery_id}: {self.status_code or self.error}"
