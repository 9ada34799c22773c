"""Memories: typed, scoped, versioned knowledge an agent learned about a codebase.

A memory belongs to a home project and its organization. Its scope says who else sees it:
personal (its owner only), project (the project's members and keys), team (every project of
the home project's team), org (every project of the organization). Every change made through
`services` increments `version` and keeps the previous text in `MemoryVersion`.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVectorField
from django.db import models
from django.db.models import Q
from pgvector.django import VectorField

from apps.memories.kinds import MemoryKind, Phase, RelationKind, Scope, Source
from apps.memories.propagation import Direction
from apps.memories.validation import MAX_CITATION_CHARS
from apps.tenants.models import Project, ProjectScopedQuerySet, TenantQuerySet

if TYPE_CHECKING:
    from apps.tenants.principal import Principal


class MemoryType(models.TextChoices):
    GOTCHA = "gotcha", "Gotcha"
    DECISION = "decision", "Decision"
    PREFERENCE = "preference", "Preference"
    PATTERN = "pattern", "Pattern"
    REQUIREMENT = "requirement", "Requirement"
    ERROR_PATTERN = "error_pattern", "Error pattern"
    MODULE_INSIGHT = "module_insight", "Module insight"
    PREFETCH_PATTERN = "prefetch_pattern", "Prefetch pattern"
    WORK_STATE = "work_state", "Work state"
    CAUSAL_DEPENDENCY = "causal_dependency", "Causal dependency"
    TASK_CALIBRATION = "task_calibration", "Task calibration"
    E2E_OBSERVATION = "e2e_observation", "E2E observation"
    DEAD_END = "dead_end", "Dead end"
    WORK_UNIT_OUTCOME = "work_unit_outcome", "Work unit outcome"
    WORKFLOW_RECIPE = "workflow_recipe", "Workflow recipe"
    CONTEXT_COST = "context_cost", "Context cost"


class MemorySource(models.TextChoices):
    AGENT_EXPLICIT = "agent_explicit", "Agent explicit"
    OBSERVER_INFERRED = "observer_inferred", "Observer inferred"
    QA_AUTO = "qa_auto", "QA auto"
    MCP_AUTO = "mcp_auto", "MCP auto"
    COMMIT_AUTO = "commit_auto", "Commit auto"
    USER_TAUGHT = "user_taught", "User taught"


class MemoryScope(models.TextChoices):
    PERSONAL = "personal", "Personal"
    PROJECT = "project", "Project"
    TEAM = "team", "Team"
    ORG = "org", "Organization"


class StaleReason(models.TextChoices):
    NONE = "", "Not stale"
    FILE_DELETED = "file_deleted", "A related file was deleted"
    CHANGED_SINCE_COMMIT = "changed_since_commit", "Related files changed since its commit"


class EmbeddingStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


class ChunkType(models.TextChoices):
    FUNCTION = "function", "Function"
    CLASS = "class", "Class"
    MODULE = "module", "Module"
    PROSE = "prose", "Prose"


class RelationType(models.TextChoices):
    REQUIRED_WITH = "required_with", "Required with"
    CONFLICTS_WITH = "conflicts_with", "Conflicts with"
    VALIDATES = "validates", "Validates"
    SUPERSEDES = "supersedes", "Supersedes"
    DERIVED_FROM = "derived_from", "Derived from"


assert {c.value for c in MemoryType} == {k.value for k in MemoryKind}
assert {c.value for c in MemorySource} == {k.value for k in Source}
assert {c.value for c in MemoryScope} == {k.value for k in Scope}
assert {c.value for c in RelationType} == {k.value for k in RelationKind}
PHASES = [p.value for p in Phase]


class MemoryQuerySet(ProjectScopedQuerySet):
    def visible_to(self, principal: Principal) -> MemoryQuerySet:
        """Everything the principal may read, across every project it can see."""
        projects = Project.objects.visible_to(principal)
        user_id = principal.user.pk if principal.user is not None else None
        visible = (
            Q(scope=MemoryScope.ORG, organization_id__in=list(principal.org_ids))
            | Q(scope=MemoryScope.TEAM, team_id__in=projects.filter(team__isnull=False).values("team_id"))
            | Q(scope=MemoryScope.PROJECT, project__in=projects)
        )
        if user_id is not None:
            visible |= Q(scope=MemoryScope.PERSONAL, project__in=projects, owner_id=user_id)
        return self.filter(visible)

    def applicable_in(self, project: Project, principal: Principal) -> MemoryQuerySet:
        """What an agent working in `project` may be given. The caller has checked the project."""
        user_id = principal.user.pk if principal.user is not None else None
        applies = Q(project=project, scope=MemoryScope.PROJECT) | Q(
            scope=MemoryScope.ORG, organization_id=project.organization_id
        )
        if project.team_id is not None:
            applies |= Q(scope=MemoryScope.TEAM, team_id=project.team_id)
        if user_id is not None:
            applies |= Q(project=project, scope=MemoryScope.PERSONAL, owner_id=user_id)
        return self.filter(applies)

    def active(self) -> MemoryQuerySet:
        return self.filter(deprecated=False)


class Memory(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="memories")
    # Set for team scope: the home project's team at creation.
    team = models.ForeignKey(
        "tenants.Team", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_by_key = models.ForeignKey(
        "tenants.ApiKey", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    type = models.CharField(max_length=24, choices=MemoryType.choices)
    content = models.TextField()
    source = models.CharField(
        max_length=24, choices=MemorySource.choices, default=MemorySource.AGENT_EXPLICIT
    )
    scope = models.CharField(max_length=12, choices=MemoryScope.choices, default=MemoryScope.PROJECT)
    confidence = models.FloatField(default=0.8)
    tags = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    related_files = ArrayField(models.CharField(max_length=500), default=list, blank=True)
    related_modules = ArrayField(models.CharField(max_length=300), default=list, blank=True)
    payload = models.JSONField(default=dict, blank=True)
    citation_text = models.CharField(max_length=MAX_CITATION_CHARS, blank=True)

    work_unit_ref = models.JSONField(null=True, blank=True)
    methodology = models.CharField(max_length=40, blank=True)
    session_id = models.CharField(max_length=100, blank=True)
    provenance_session_ids = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    commit_sha = models.CharField(max_length=64, blank=True)
    target_node_id = models.CharField(max_length=300, blank=True)
    impacted_node_ids = ArrayField(models.CharField(max_length=300), default=list, blank=True)

    decay_half_life_days = models.FloatField(null=True, blank=True)
    needs_review = models.BooleanField(default=False)
    user_verified = models.BooleanField(default=False)
    pinned = models.BooleanField(default=False)
    deprecated = models.BooleanField(default=False)
    deprecated_at = models.DateTimeField(null=True, blank=True)
    stale_at = models.DateTimeField(null=True, blank=True)
    # Why: a file coming back makes a memory stale for its deletion fresh again, not one whose
    # files changed since it was learned.
    # A default in the database too: the bulk paths insert rows in SQL without naming every column.
    stale_reason = models.CharField(
        max_length=24, choices=StaleReason.choices, blank=True, default="", db_default=""
    )
    disputed = models.BooleanField(default=False)

    chunk_type = models.CharField(max_length=12, choices=ChunkType.choices, blank=True)
    chunk_start_line = models.PositiveIntegerField(null=True, blank=True)
    chunk_end_line = models.PositiveIntegerField(null=True, blank=True)
    context_prefix = models.TextField(blank=True)

    # How often it was injected and when it was last used live in MemoryUsage (below).
    used_count = models.PositiveIntegerField(default=0)
    helpful_count = models.PositiveIntegerField(default=0)
    flag_count = models.PositiveIntegerField(default=0)

    secrets_redacted = models.BooleanField(default=False)
    secret_kinds = ArrayField(models.CharField(max_length=60), default=list, blank=True)

    # Untyped so that a model change (and its dimensions) needs no schema change; the HNSW
    # index is an expression index per dimension count (see migrations and `vector_index`).
    embedding = VectorField(null=True, blank=True)
    embedding_model = models.CharField(max_length=120, blank=True)
    embedding_dims = models.PositiveIntegerField(null=True, blank=True)
    embedding_status = models.CharField(
        max_length=8, choices=EmbeddingStatus.choices, default=EmbeddingStatus.PENDING
    )
    embedding_error = models.CharField(max_length=300, blank=True)
    embedded_at = models.DateTimeField(null=True, blank=True)
    # Code-aware lexemes (see codetokens): whole identifiers verbatim + english-stemmed prose.
    # PostgreSQL derives the column `tenant_terms` from it, and `tenant_files` from
    # related_files (migration 0007: the same values, each tagged with the organization,
    # GIN-indexed, for finding candidates); neither is mapped here.
    search_vector = SearchVectorField(null=True, blank=True)

    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = MemoryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["project", "type"], name="memory_project_type"),
            models.Index(fields=["project", "-created_at"], name="memory_project_recent"),
            models.Index(fields=["organization", "scope"], name="memory_org_scope"),
            models.Index(fields=["team", "scope"], name="memory_team_scope"),
            models.Index(fields=["project"], condition=Q(needs_review=True), name="memory_needs_review"),
            models.Index(fields=["deprecated", "deprecated_at"], name="memory_deprecated"),
            # No pending list (fastupdate): searches read these on every query, and a pending
            # list of recent inserts is scanned linearly until a vacuum merges it.
            GinIndex(fields=["related_files"], name="memory_related_files", fastupdate=False),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(confidence__gte=0) & Q(confidence__lte=1), name="memory_confidence_0_1"
            ),
            models.CheckConstraint(
                condition=~Q(scope=MemoryScope.TEAM) | Q(team__isnull=False),
                name="memory_team_scope_has_team",
            ),
            models.CheckConstraint(
                condition=~Q(scope=MemoryScope.PERSONAL) | Q(owner__isnull=False),
                name="memory_personal_scope_has_owner",
            ),
            models.CheckConstraint(condition=Q(version__gte=1), name="memory_version_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.type}:{str(self.id)[:8]}"

    @property
    def short_id(self) -> str:
        return str(self.id)[:8]

    @property
    def is_stale(self) -> bool:
        return self.stale_at is not None

    @property
    def usage(self) -> MemoryUsage:
        """Its usage bookkeeping (a blank one when it has none yet); select_related("usage_row")
        loads it with the memory."""
        try:
            return self.usage_row
        except MemoryUsage.DoesNotExist:
            return MemoryUsage(memory_id=self.pk)

    @property
    def access_count(self) -> int:
        return self.usage.access_count

    @property
    def uncorrected_access_count(self) -> int:
        return self.usage.uncorrected_access_count

    @property
    def last_accessed_at(self):
        """When it was last injected or reinforced (None: never since it was created)."""
        return self.usage.last_accessed_at


# A memories_memory row's last use as SQL, for statements over that table (search paths, the
# daily job): a subquery on its usage row, NULL when it has none yet.
LAST_ACCESSED_SQL = (
    "(SELECT u.last_accessed_at FROM memories_memoryusage u WHERE u.memory_id = memories_memory.id)"
)

# memories_memory rows holding any of some lexemes, as SQL taking two parameters: the
# organization whose memories are searched and the lexemes (text[]). It reads the GIN index over
# `tenant_terms` (migration 0007), so only that organization's postings are walked; the caller's
# tenant filter still decides what is visible.
TENANT_MATCH = "tenant_terms @@ memories_tenant_any(%s::uuid, %s::text[])"
# ... and naming any of some files: the organization, then the paths (through `tenant_files`).
TENANT_FILES = "tenant_files && memories_tenant_paths(%s::uuid, %s::varchar[])"


class MemoryUsage(models.Model):
    """A memory's usage bookkeeping, apart from the memory row: every /context call updates it
    for each memory injected. On the memory row (~2.8 KB with its vector inline) such an update
    is rarely HOT, so each one re-inserted the row into the HNSW, GIN and B-tree indexes (~20 ms
    for 20 memories on a 20K project); this narrow row has only its primary key to keep."""

    memory = models.OneToOneField(
        Memory, on_delete=models.CASCADE, primary_key=True, related_name="usage_row"
    )
    access_count = models.PositiveIntegerField(default=0)
    # Injections since the last correction or flag: 5 raise confidence, 10 clear needs_review.
    uncorrected_access_count = models.PositiveIntegerField(default=0)
    # The decay clock: last injected or reinforced (the memory's created_at before either).
    last_accessed_at = models.DateTimeField(null=True, blank=True)
    # The last access that counted toward those rewards: one outside a session counts only an
    # hour after it (services.UNPACED_ACCESS_GAP).
    last_counted_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.memory_id} used {self.access_count}×"


class MemoryRelation(models.Model):
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="relations")
    target_memory = models.ForeignKey(
        Memory, on_delete=models.CASCADE, null=True, blank=True, related_name="incoming_relations"
    )
    target_file_path = models.CharField(max_length=500, blank=True)
    relation_type = models.CharField(max_length=20, choices=RelationType.choices)
    confidence = models.FloatField(default=1.0)
    auto_extracted = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(target_memory__isnull=False) | ~Q(target_file_path=""),
                name="relation_has_target",
            ),
            models.UniqueConstraint(
                fields=["memory", "target_memory", "relation_type"],
                condition=Q(target_memory__isnull=False),
                name="relation_unique_memory_target",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.memory_id} {self.relation_type} {self.target_memory_id or self.target_file_path}"


class MemoryVersion(models.Model):
    """Each version of a memory as it was saved: corrections keep their history."""

    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    type = models.CharField(max_length=24, choices=MemoryType.choices)
    content = models.TextField()
    confidence = models.FloatField()
    tags = ArrayField(models.CharField(max_length=100), default=list, blank=True)
    related_files = ArrayField(models.CharField(max_length=500), default=list, blank=True)
    change = models.CharField(max_length=40)
    changed_by = models.CharField(max_length=120)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-version"]
        constraints = [models.UniqueConstraint(fields=["memory", "version"], name="memory_version_unique")]

    def __str__(self) -> str:
        return f"{self.memory_id} v{self.version}"


class FeedbackKind(models.TextChoices):
    CONFIRM = "confirm", "Confirm"
    CORRECT = "correct", "Correct"
    FLAG = "flag", "Flag as wrong"
    DISPUTE = "dispute", "Dispute"
    USED = "used", "Used"
    HELPFUL = "helpful", "Helpful"


class MemoryFeedback(models.Model):
    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="feedback")
    kind = models.CharField(max_length=12, choices=FeedbackKind.choices)
    note = models.TextField(blank=True)
    actor_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor_label = models.CharField(max_length=120)
    session_id = models.CharField(max_length=100, blank=True)
    # Its effect on related memories (propagation.py) is still to be applied, by a task queued on
    # commit; the stranded-work sweep finds it again if that task was lost.
    propagation_pending = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["memory", "kind"], name="feedback_memory_kind"),
            models.Index(
                fields=["created_at"],
                condition=Q(propagation_pending=True),
                name="feedback_propagation_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} on {self.memory_id}"


class PropagationDirection(models.TextChoices):
    LIFT = "lift", "Lifted"
    LOWER = "lower", "Lowered"


assert {c.value for c in PropagationDirection} == {d.value for d in Direction}


class ConfidencePropagation(models.Model):
    """One confidence change a memory took because someone judged a memory it is related to: who
    judged which memory how, along which relation, and the confidence before and after. At most
    one per feedback and memory, so a task that runs twice moves nothing twice."""

    organization = models.ForeignKey("tenants.Organization", on_delete=models.CASCADE, related_name="+")
    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="propagations")
    # Kept when the judged memory (and with it its feedback) is deleted: the move stays explained.
    source_memory = models.ForeignKey(
        Memory, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    feedback = models.ForeignKey(
        MemoryFeedback, on_delete=models.SET_NULL, null=True, blank=True, related_name="propagations"
    )
    feedback_kind = models.CharField(max_length=12, choices=FeedbackKind.choices)
    actor_label = models.CharField(max_length=120)  # who gave the feedback
    relation_type = models.CharField(max_length=20, choices=RelationType.choices)
    direction = models.CharField(max_length=8, choices=PropagationDirection.choices)
    confidence_before = models.FloatField()
    confidence_after = models.FloatField()
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["memory", "-created_at"], name="propagation_memory_recent"),
            models.Index(fields=["source_memory", "memory"], name="propagation_source_memory"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["feedback", "memory"],
                condition=Q(feedback__isnull=False),
                name="propagation_once_per_feedback",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.memory_id} {self.direction} {self.confidence_before}→{self.confidence_after}"


class EmbeddingCache(models.Model):
    """sha256(text:model:dims) → vector, so re-embedding unchanged text costs nothing."""

    key = models.CharField(max_length=64, primary_key=True)
    model_id = models.CharField(max_length=120)
    dims = models.PositiveIntegerField()
    vector = VectorField()
    # The text's token embeddings (late.pack), where the provider offers them and they were asked for.
    tokens = models.BinaryField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.model_id}/{self.dims}:{self.key[:12]}"


class MemoryTokens(models.Model):
    """A memory's token embeddings (late.pack) for the late-interaction rerank, kept apart from the
    memory row that every search path reads. Written with the vector, by the same model."""

    memory = models.OneToOneField(Memory, on_delete=models.CASCADE, primary_key=True, related_name="+")
    model_id = models.CharField(max_length=120)
    data = models.BinaryField()
    # The memory's vector by the precision stage's second model (precision.pack), where it runs.
    precision_model = models.CharField(max_length=120, blank=True, default="")
    precision = models.BinaryField(null=True)

    def __str__(self) -> str:
        return f"{self.model_id}:{self.memory_id}"


class TermStat(models.Model):
    """Document frequency of each keyword lexeme per project (term '' holds the memory count).

    Kept in step by the services in the same transaction as the memory write; BM25's IDF reads it.
    """

    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    term = models.CharField(max_length=200)
    df = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "term"], name="termstat_project_term")]

    def __str__(self) -> str:
        return f"{self.term}={self.df}"
