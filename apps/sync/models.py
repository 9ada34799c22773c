"""The change feed devices pull from: one row per memory that exists or existed, holding the
transaction and sequence of its latest change.

Rows are written by a database trigger on the memories table (migration 0001), so every write —
services, bulk inserts, queryset updates, cascades — lands in the feed, and no app has to
remember to announce its changes. The transaction id lets a pull return only changes whose
transactions have all finished, so a slow transaction can never be skipped by a cursor that
moved past it (see selectors.changes_since).
"""

from __future__ import annotations

import uuid

from django.db import models

from apps.tenants.models import ProjectScopedQuerySet


class MemoryChange(models.Model):
    memory_id = models.UUIDField(primary_key=True)
    # Plain ids, not foreign keys: the row outlives its memory (it is the tombstone).
    organization_id = models.UUIDField()
    project_id = models.UUIDField()
    seq = models.BigIntegerField()
    xid = models.CharField(max_length=20, editable=False)  # xid8, read as text
    scope = models.CharField(max_length=12)
    owner_id = models.BigIntegerField(null=True)
    # Ever project/team/org scope: only then may others' replicas hold it and need its delete.
    ever_shared = models.BooleanField()
    # Ever team/org scope: then replicas of other projects may hold it too.
    ever_wide = models.BooleanField(default=False)
    version = models.PositiveIntegerField()
    deleted = models.BooleanField(default=False)

    class Meta:
        managed = False  # created with its trigger in migration 0001
        db_table = "sync_memorychange"

    def __str__(self) -> str:
        return f"{self.memory_id}@{self.seq}{' (deleted)' if self.deleted else ''}"


class PushRef(models.Model):
    """A device's name for a memory it created offline: a retried push finds it here."""

    api_key = models.ForeignKey("tenants.ApiKey", on_delete=models.CASCADE, null=True, related_name="+")
    user = models.ForeignKey("tenants.User", on_delete=models.CASCADE, null=True, related_name="+")
    # A device names its memories per project: one ref in two projects is two memories.
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    ref = models.CharField(max_length=100)
    memory = models.ForeignKey("memories.Memory", on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["api_key", "user", "project", "ref"], name="pushref_unique", nulls_distinct=False
            )
        ]

    def __str__(self) -> str:
        return f"{self.ref} → {self.memory_id}"


class ConflictStatus(models.TextChoices):
    OPEN = "open", "Waiting for a person"
    RESOLVED = "resolved", "Resolved"


class ConflictResolution(models.TextChoices):
    MINE = "mine", "Kept the device's version"
    THEIRS = "theirs", "Kept the server's version"
    MERGE = "merge", "Kept an edited merge"


class ConflictKind(models.TextChoices):
    EDIT = "edit", "Both edited the same field"
    DELETE = "delete", "Deleted on the device, edited on the server"


class SyncConflict(models.Model):
    """An offline change the server could not merge, kept with both versions and their common
    base until a person decides (the dashboard, or `memorysaas resolve`). `mine` is what the
    device sent, `theirs` the server's copy when the device pushed, `base` the version both
    started from (from the memory's history; empty when the history no longer holds it)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    # The memory outlives no conflict: deleted, its conflicts have nothing left to decide.
    memory = models.ForeignKey("memories.Memory", on_delete=models.CASCADE, related_name="+")
    author = models.ForeignKey(
        "tenants.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    api_key = models.ForeignKey(
        "tenants.ApiKey", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    device_label = models.CharField(max_length=120, blank=True)
    kind = models.CharField(max_length=8, choices=ConflictKind.choices, default=ConflictKind.EDIT)
    fields = models.JSONField(default=list)
    base_version = models.PositiveIntegerField()
    base = models.JSONField(default=dict, blank=True)
    mine = models.JSONField(default=dict, blank=True)
    theirs_version = models.PositiveIntegerField()
    theirs = models.JSONField(default=dict)
    status = models.CharField(max_length=8, choices=ConflictStatus.choices, default=ConflictStatus.OPEN)
    resolution = models.CharField(max_length=8, choices=ConflictResolution.choices, blank=True)
    resolved_by = models.ForeignKey(
        "tenants.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    resolved_at = models.DateTimeField(null=True, blank=True)
    result_version = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["project", "status"], name="syncconflict_project_status")]

    def __str__(self) -> str:
        return f"conflict {self.id} on {self.memory_id} ({self.status})"
