"""The change feed devices pull from: one row per memory that exists or existed, holding the
transaction and sequence of its latest change.

Rows are written by a database trigger on the memories table (migration 0001), so every write —
services, bulk inserts, queryset updates, cascades — lands in the feed, and no app has to
remember to announce its changes. The transaction id lets a pull return only changes whose
transactions have all finished, so a slow transaction can never be skipped by a cursor that
moved past it (see selectors.changes_since).
"""

from __future__ import annotations

from django.db import models


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
