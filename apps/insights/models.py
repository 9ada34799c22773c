"""The insights app's records: the A/B experiment and what the background jobs roll up.

- `ExperimentPeriod`: one row per setting of a project's A/B test (on/off, the control and
  passive percentages). Changing the setting ends the open period and starts a new one, so a
  comparison never mixes sessions assigned under two splits. Who changed it and why is kept.
- `SessionMetrics`: one row per finalized session, the per-session figures computed from what
  the observer stored (its final scratchpad, its memories, the feedback given in it). Written
  once (the rollup inserts with ON CONFLICT DO NOTHING), so rerunning the rollup changes nothing.
- `DailyRollup`: per project, experiment period, day and A/B group, the count, sum and sum of
  squares of each metric; every comparison (a period, a date window, an organization) is a sum
  of these rows, and a mean and a variance follow from them exactly.
- `RetrievalDay`: per project and day, how many retrievals ran the neighbourhood boost and in how
  many it changed the top 8 (counted in Redis on the search path, folded in by the rollup).
- `PhaseWeightProposal` / `ThresholdAdjustment`: what the learning and telemetry jobs propose or
  decide, each with its before and after and who applied or reverted it.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q

from apps.tenants.models import ProjectScopedQuerySet


class Group(models.TextChoices):
    CONTROL = "control", "Control (no memory)"
    PASSIVE = "passive", "Passive (session-start memory only)"
    FULL = "full", "Full memory"


class ExperimentPeriod(models.Model):
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    enabled = models.BooleanField(default=True)
    control_pct = models.PositiveSmallIntegerField(default=5)
    passive_pct = models.PositiveSmallIntegerField(default=10)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    changed_by_label = models.CharField(max_length=120, blank=True)
    reason = models.CharField(max_length=500, blank=True)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["project"], condition=Q(ended_at__isnull=True), name="insights_one_open_period"
            ),
            models.CheckConstraint(
                condition=Q(control_pct__lte=100 - F("passive_pct")), name="insights_split_within_100"
            ),
        ]

    def __str__(self) -> str:
        return f"experiment {self.project_id} from {self.started_at:%Y-%m-%d}"

    @property
    def full_pct(self) -> int:
        return 100 - self.control_pct - self.passive_pct if self.enabled else 100


class SessionMetrics(models.Model):
    session_id = models.UUIDField(primary_key=True)
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    period = models.ForeignKey(ExperimentPeriod, on_delete=models.SET_NULL, null=True, related_name="+")
    group = models.CharField(max_length=8, choices=Group.choices)
    day = models.DateField()
    phase = models.CharField(max_length=12, blank=True)
    finalized_at = models.DateTimeField()
    tool_calls = models.PositiveIntegerField(default=0)
    rereads = models.PositiveIntegerField(default=0)
    qa_first_pass = models.BooleanField(null=True)
    dead_end_reentry = models.BooleanField(default=False)
    tokens = models.BigIntegerField(null=True)
    steps_over_plan = models.IntegerField(null=True)
    injected = models.PositiveIntegerField(default=0)
    used = models.PositiveIntegerField(default=0)
    corrected = models.PositiveIntegerField(default=0)
    injected_types = models.JSONField(default=dict, blank=True)  # memory type -> count (phase learning)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        indexes = [models.Index(fields=["project", "period", "day", "group"], name="insights_sm_key")]

    def __str__(self) -> str:
        return f"metrics of {self.session_id}"


class DailyRollup(models.Model):
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    period = models.ForeignKey(ExperimentPeriod, on_delete=models.CASCADE, null=True, related_name="+")
    day = models.DateField()
    group = models.CharField(max_length=8, choices=Group.choices)
    sessions = models.PositiveIntegerField(default=0)
    # metric key -> [n, sum, sum of squares] over the sessions where the metric has a value
    sums = models.JSONField(default=dict)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        ordering = ["day"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "period", "day", "group"],
                name="insights_rollup_unique",
                nulls_distinct=False,
            )
        ]

    def __str__(self) -> str:
        return f"{self.project_id} {self.day} {self.group}"


class RetrievalDay(models.Model):
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    boosted = models.PositiveIntegerField(default=0)
    changed_top = models.PositiveIntegerField(default=0)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "day"], name="insights_retrieval_day")]

    def __str__(self) -> str:
        return f"{self.project_id} {self.day}: {self.changed_top}/{self.boosted}"


class RollupCursor(models.Model):
    """How far the rollup has read: sessions finalized at or after `finalized_after` minus a
    margin are looked at again and skipped when already rolled up (a finalize that committed late
    with an earlier timestamp is not lost)."""

    name = models.CharField(max_length=40, primary_key=True)
    finalized_after = models.DateTimeField(null=True)
    runs = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.name} at {self.finalized_after}"


class ProposalStatus(models.TextChoices):
    PROPOSED = "proposed"
    APPLIED = "applied"
    DISMISSED = "dismissed"
    REVERTED = "reverted"


class PhaseWeightProposal(models.Model):
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    sessions = models.PositiveIntegerField()
    # phase -> memory type -> {"before", "proposed", "lift", "n_with", "n_without"}
    report = models.JSONField(default=dict)
    status = models.CharField(max_length=10, choices=ProposalStatus.choices, default=ProposalStatus.PROPOSED)
    created_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_by_label = models.CharField(max_length=120, blank=True)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"phase weights for {self.project_id} ({self.status})"


class ProjectPhaseWeights(models.Model):
    """The phase weights a steward applied to a project (over the defaults), and from which
    proposal; retrieval reads them through the memories app's registry."""

    project = models.OneToOneField(
        "tenants.Project", on_delete=models.CASCADE, primary_key=True, related_name="+"
    )
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    weights = models.JSONField(default=dict)  # phase -> memory type -> weight
    proposal = models.ForeignKey(PhaseWeightProposal, on_delete=models.SET_NULL, null=True, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    objects = ProjectScopedQuerySet.as_manager()

    def __str__(self) -> str:
        return f"phase weights of {self.project_id}"


class ThresholdAdjustment(models.Model):
    """A signal class whose promotions reviewers rejected too often: its promotion threshold is
    raised for the project until an admin reverts it."""

    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    signal_class = models.CharField(max_length=24)
    factor = models.FloatField()  # the class's minimum sessions and score are multiplied by this
    rejection_rate = models.FloatField()
    promoted = models.PositiveIntegerField()
    rejected = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    reverted_at = models.DateTimeField(null=True, blank=True)
    reverted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "signal_class"],
                condition=Q(reverted_at__isnull=True),
                name="insights_one_active_tightening",
            )
        ]

    def __str__(self) -> str:
        return f"{self.signal_class} ×{self.factor} in {self.project_id}"


# The dashboard's history (health snapshots, latency samples) and the weekly synthesis.
from apps.insights.history import HealthSnapshot, RetrievalSample, SynthesisOptOut, WeeklySynthesis  # noqa: E402, F401
