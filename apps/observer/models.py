"""The observer's records.

- `Session`: one agent session: its type, methodology, work unit, A/B group, status, and the
  checkpoint of its scratchpad (`scratchpad` as of `checkpoint_events` events).
  `scratchpad_version` counts the writes that changed the scratchpad (a batch, a validation, an
  injection), and each of them draws a new random `scratchpad_stamp`: a process's cached copy is
  current only while its stamp matches. A count can come round again (a commit that a crash or a
  failover took back after it was acknowledged, then another write), a stamp cannot.
  `finalize_queued_at` and `finalize_attempts` say when and how often its finalize was queued,
  so one that failed or was lost is queued again (services.sessions_finalize_stalled).
- `EventBatch`: the append-only event log: each accepted batch is one row holding only the
  events not seen before (idempotent by `seq`). Replaying the batches after the checkpoint
  rebuilds the scratchpad exactly, so a restarted web or worker process loses nothing.
- `PatternStat`: the cross-session frequency tables, one row per (kind, key): file nodes
  (`file_access`), co-access edges with their weight and direction (`co_access`, plus
  `co_change` from git history), error fingerprints with how they were resolved
  (`error_retry`), and every other signal class. Updated once per session end.
- `ModuleStat`: sessions per module, which drive threshold synthesis at 5/10/20/50/100.
- `SynthesisLog`: each synthesis run, so a threshold never fires twice.
"""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

from apps.tenants.models import ProjectScopedQuerySet


class SessionType(models.TextChoices):
    BUILD = "build"
    INSIGHTS = "insights"
    ROADMAP = "roadmap"
    TERMINAL = "terminal"
    CHANGELOG = "changelog"
    SPEC_CREATION = "spec_creation"
    PR_REVIEW = "pr_review"


class SessionStatus(models.TextChoices):
    OPEN = "open"
    FINALIZING = "finalizing"
    COMPLETED = "completed"


class Outcome(models.TextChoices):
    SUCCESS = "success"
    FAILURE = "failure"
    ABANDONED = "abandoned"


class Session(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(
        "tenants.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    api_key = models.ForeignKey(
        "tenants.ApiKey", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    session_type = models.CharField(max_length=16, choices=SessionType.choices, default=SessionType.BUILD)
    methodology = models.CharField(max_length=40, default="native")
    phase = models.CharField(max_length=60, blank=True)
    universal_phase = models.CharField(max_length=12, default="explore")
    work_unit = models.JSONField(default=dict, blank=True)
    work_unit_key = models.CharField(max_length=300, blank=True, db_index=True)
    parallel_group = models.CharField(max_length=300, blank=True)
    # The client named the group (sessions sharing it ran in parallel, whenever they ran); else it
    # is the work unit's parent and only sessions overlapping in time count as parallel.
    parallel_declared = models.BooleanField(default=False)
    task = models.TextField(blank=True)
    client = models.CharField(max_length=100, blank=True)
    # The agent's own id for the session (Claude Code's `session_id`), when the agent names it
    # rather than opening the session through the API: its deliveries find the session by it.
    external_id = models.CharField(max_length=200, blank=True)
    # The repository's root on the agent's machine: the absolute paths its tools send are stored
    # relative to it (drafts.from_root).
    root = models.CharField(max_length=500, blank=True)
    ab_group = models.CharField(max_length=10, default="memory")
    status = models.CharField(max_length=12, choices=SessionStatus.choices, default=SessionStatus.OPEN)
    outcome = models.CharField(max_length=10, choices=Outcome.choices, blank=True)
    steps = models.PositiveIntegerField(null=True, blank=True)
    event_count = models.PositiveIntegerField(default=0)
    last_step = models.PositiveIntegerField(default=0)
    edited_files = ArrayField(models.CharField(max_length=500), default=list, blank=True)
    scratchpad = models.JSONField(default=dict, blank=True)
    checkpoint_events = models.PositiveIntegerField(default=0)
    checkpoint_batch = models.BigIntegerField(default=0)
    scratchpad_version = models.PositiveIntegerField(default=0)
    scratchpad_stamp = models.UUIDField(null=True, editable=False)
    injected_memory_ids = ArrayField(models.UUIDField(), default=list, blank=True)
    promoted_memory_ids = ArrayField(models.UUIDField(), default=list, blank=True)
    reinforced_memory_ids = ArrayField(models.UUIDField(), default=list, blank=True)
    report = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    finalized_at = models.DateTimeField(null=True, blank=True)
    finalize_queued_at = models.DateTimeField(null=True, blank=True)
    finalize_attempts = models.PositiveSmallIntegerField(default=0)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-started_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "external_id"],
                condition=~Q(external_id=""),
                name="obs_session_external_unique",
            ),
        ]
        indexes = [
            models.Index(fields=["project", "-started_at"], name="obs_session_project_recent"),
            models.Index(fields=["project", "parallel_group"], name="obs_session_parallel"),
        ]

    def __str__(self) -> str:
        return f"{self.session_type} session {self.id}"


class EventBatch(models.Model):
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="batches")
    first_seq = models.BigIntegerField()
    last_seq = models.BigIntegerField()
    count = models.PositiveIntegerField()
    events = models.JSONField()
    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["session", "id"], name="obs_batch_session")]

    def __str__(self) -> str:
        return f"events {self.first_seq}-{self.last_seq} of {self.session_id}"


class PatternStat(models.Model):
    # Every session end upserts hundreds of rows here, so each index costs: the project's rows are
    # found through the unique (project, kind, key) index, and only promoted rows are indexed by
    # their memory (what a memory's deletion looks up).
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+", db_index=False)
    kind = models.CharField(max_length=24)
    key = models.CharField(max_length=700)
    module = models.CharField(max_length=300, blank=True)
    session_count = models.PositiveIntegerField(default=0)
    # Kind-specific sums: occurrences, tokens, actual/planned steps, sessions where A came first.
    total = models.FloatField(default=0)
    total2 = models.FloatField(default=0)
    directional = models.PositiveIntegerField(default=0)
    task_types = ArrayField(models.CharField(max_length=20), default=list, blank=True)
    sessions = ArrayField(models.CharField(max_length=40), default=list, blank=True)
    data = models.JSONField(default=dict, blank=True)
    first_seen = models.DateTimeField(auto_now_add=True)
    last_seen = models.DateTimeField(auto_now=True)
    promoted_memory = models.ForeignKey(
        "memories.Memory", on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "kind", "key"], name="obs_pattern_unique"),
        ]
        indexes = [
            models.Index(fields=["project", "kind", "module"], name="obs_pattern_module"),
            models.Index(
                fields=["promoted_memory"],
                condition=Q(promoted_memory__isnull=False),
                name="obs_pattern_promoted",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.key} ({self.session_count} sessions)"


class ModuleStat(models.Model):
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    module = models.CharField(max_length=300)
    session_count = models.PositiveIntegerField(default=0)
    success_count = models.PositiveIntegerField(default=0)
    last_seen = models.DateTimeField(auto_now=True)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "module"], name="obs_module_unique")]

    def __str__(self) -> str:
        return f"{self.module} ({self.session_count} sessions)"


class SynthesisLog(models.Model):
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    module = models.CharField(max_length=300)
    trigger = models.CharField(max_length=20)  # "5", "10", … or "weekly"
    used_llm = models.BooleanField(default=False)
    memories_created = models.PositiveIntegerField(default=0)
    memories_reinforced = models.PositiveIntegerField(default=0)
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(fields=["project", "module", "trigger"], name="obs_synthesis_once"),
        ]

    def __str__(self) -> str:
        return f"synthesis {self.module} at {self.trigger}"
