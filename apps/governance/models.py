"""Disputes on memories (with their comment thread), in-app notifications, and each project's
trust level (docs/api/disputes-trust.md)."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from apps.tenants.models import ProjectScopedQuerySet, TenantQuerySet


class DisputeStatus(models.TextChoices):
    OPEN = "open", "Open"
    RESOLVED = "resolved", "Resolved"
    REJECTED = "rejected", "Rejected"


class Resolution(models.TextChoices):
    UPDATE = "update", "Memory updated"
    DEPRECATE = "deprecate", "Memory deprecated"
    REJECT = "reject", "Dispute rejected"


class Dispute(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="disputes")
    memory = models.ForeignKey("memories.Memory", on_delete=models.CASCADE, related_name="disputes")
    opened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    opened_by_label = models.CharField(max_length=120)
    reason = models.TextField()
    status = models.CharField(max_length=10, choices=DisputeStatus.choices, default=DisputeStatus.OPEN)
    resolution = models.CharField(max_length=10, choices=Resolution.choices, blank=True)
    resolution_note = models.TextField(blank=True)
    resolved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    resolved_by_label = models.CharField(max_length=120, blank=True)
    override = models.BooleanField(
        default=False, help_text="Resolved by an admin or owner overriding a steward."
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    resolved_at = models.DateTimeField(null=True, blank=True)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["project", "status"], name="dispute_project_status")]

    def __str__(self) -> str:
        return f"dispute {self.id} on {self.memory_id} ({self.status})"

    @property
    def is_open(self) -> bool:
        return self.status == DisputeStatus.OPEN


class EntryKind(models.TextChoices):
    COMMENT = "comment", "Comment"
    OPENED = "opened", "Opened"
    RESOLVED = "resolved", "Resolved"
    OVERRIDDEN = "overridden", "Overridden"


class DisputeComment(models.Model):
    """One entry of a dispute's thread: a person's comment, or an event (opened, resolved,
    overridden) so the whole history reads top to bottom."""

    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    dispute = models.ForeignKey(Dispute, on_delete=models.CASCADE, related_name="comments")
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    author_label = models.CharField(max_length=120)
    kind = models.CharField(max_length=10, choices=EntryKind.choices, default=EntryKind.COMMENT)
    body = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"comment {self.pk} on {self.dispute_id}"


class Notification(models.Model):
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(
        "tenants.Project", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=40)
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=300, blank=True)
    read = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "read"], name="notification_user_read")]

    def __str__(self) -> str:
        return f"{self.kind} for {self.user_id}"


class TrustLevel(models.IntegerChoices):
    CAUTIOUS = 1, "Cautious"
    STANDARD = 2, "Standard"
    CONFIDENT = 3, "Confident"
    AUTONOMOUS = 4, "Autonomous"


class ProjectTrust(models.Model):
    """A project's chosen trust level; no row means the deployment default threshold applies."""

    project = models.OneToOneField(
        "tenants.Project", on_delete=models.CASCADE, primary_key=True, related_name="trust"
    )
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    level = models.PositiveSmallIntegerField(choices=TrustLevel.choices, default=TrustLevel.CAUTIOUS)
    changed_at = models.DateTimeField(auto_now=True)

    objects = ProjectScopedQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.project_id}: level {self.level}"


class TrustChange(models.Model):
    """Every level change a person accepted, newest first: the trust page's history."""

    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    from_level = models.PositiveSmallIntegerField(null=True, blank=True, choices=TrustLevel.choices)
    to_level = models.PositiveSmallIntegerField(choices=TrustLevel.choices)
    reason = models.CharField(max_length=300, blank=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    changed_by_label = models.CharField(max_length=120)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.project_id}: {self.from_level} → {self.to_level}"
