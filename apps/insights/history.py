"""Models behind the dashboard's charts and the weekly synthesis (imported by models.py):

- HealthSnapshot: a project's memory health once a day (the hourly job rewrites today's row),
  so the page can draw it over time; with the day's retrieval latency percentiles.
- RetrievalSample: one search's total time, as memorysaas.kernel.latency batches them; folded
  into the day's snapshot and kept RETRIEVAL_SAMPLE_DAYS days.
- WeeklySynthesis: a project's week in a few paragraphs, and the facts it was written from.
- SynthesisOptOut: a person who does not want the weekly synthesis by email in an organization.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.tenants.models import ProjectScopedQuerySet, TenantQuerySet


class HealthSnapshot(models.Model):
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    total = models.PositiveIntegerField(default=0)
    ready = models.PositiveIntegerField(default=0)
    needs_review = models.PositiveIntegerField(default=0)
    disputed = models.PositiveIntegerField(default=0)
    stale = models.PositiveIntegerField(default=0)
    deprecated = models.PositiveIntegerField(default=0)
    review_oldest_days = models.FloatField(null=True, blank=True)
    review_median_days = models.FloatField(null=True, blank=True)
    search_count = models.PositiveIntegerField(default=0)
    search_p50_ms = models.FloatField(null=True, blank=True)
    search_p95_ms = models.FloatField(null=True, blank=True)
    search_p99_ms = models.FloatField(null=True, blank=True)
    taken_at = models.DateTimeField(auto_now=True)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        ordering = ["project", "day"]
        constraints = [models.UniqueConstraint(fields=["project", "day"], name="health_snapshot_day")]

    def __str__(self) -> str:
        return f"health of {self.project_id} on {self.day}"


class RetrievalSample(models.Model):
    # No database constraint: samples are buffered and written later, perhaps after their
    # project was deleted (or, in tests, rolled back); such orphans are never read and age out.
    project = models.ForeignKey(
        "tenants.Project", on_delete=models.CASCADE, related_name="+", db_constraint=False
    )
    kind = models.CharField(max_length=12, default="search")
    ms = models.FloatField()
    at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["project", "at"], name="retrieval_sample_project_at")]

    def __str__(self) -> str:
        return f"{self.kind} {self.ms:.1f} ms"


class WeeklySynthesis(models.Model):
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    week_start = models.DateField()  # a Monday; the week it covers ends the Sunday after
    text = models.TextField()
    facts = models.JSONField(default=dict)
    used_llm = models.BooleanField(default=False)
    emailed_to = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-week_start"]
        constraints = [
            models.UniqueConstraint(fields=["project", "week_start"], name="weekly_synthesis_week")
        ]

    def __str__(self) -> str:
        return f"week of {self.week_start} in {self.project_id}"


class SynthesisOptOut(models.Model):
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "user"], name="synthesis_opt_out_once")
        ]

    def __str__(self) -> str:
        return f"{self.user_id} opted out in {self.organization_id}"
