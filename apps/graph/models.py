"""The knowledge graph of a project's code (docs/architecture.md, "The knowledge graph").

Nodes are files, directories, modules and the symbols in them; edges are what tree-sitter can
see (imports, calls, extends, implements, exports, contains), with a confidence and the impact
weight of their kind. The closure table holds, for every file, the files that depend on it up
to a depth cap, with the path, the edge kinds along it and the product of their weights, so an
impact query is one indexed read. A changed file's edges are marked stale at once; queries skip
stale edges and closure paths through stale files until the task has rebuilt them.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models.functions import Left

from apps.tenants.models import ProjectScopedQuerySet

# How much a change travels along each edge kind (structural kinds; `contains` carries no impact).
EDGE_WEIGHTS: dict[str, float] = {
    "imports": 0.9,
    "calls": 0.8,
    "implements": 0.7,
    "extends": 0.7,
    "exports": 0.6,
}
DEPENDENCY_KINDS = tuple(EDGE_WEIGHTS)


class NodeKind(models.TextChoices):
    FILE = "file"
    DIRECTORY = "directory"
    MODULE = "module"
    CLASS = "class"
    FUNCTION = "function"
    METHOD = "method"
    INTERFACE = "interface"


class EdgeKind(models.TextChoices):
    IMPORTS = "imports"
    CALLS = "calls"
    EXTENDS = "extends"
    IMPLEMENTS = "implements"
    EXPORTS = "exports"
    CONTAINS = "contains"


class GraphNode(models.Model):
    # Looked up by (project, key) and (project, path): those indexes lead with the project. No
    # database constraint, as on the other bulk tables (see GraphEdge): its check ran once per
    # node at commit, 0.06 s of a full index of Django's 12,000 nodes.
    project = models.ForeignKey(
        "tenants.Project", on_delete=models.CASCADE, related_name="+", db_index=False, db_constraint=False
    )
    kind = models.CharField(max_length=10, choices=NodeKind.choices)
    # file: its path; symbol: "path:Qual.name"; directory: "path/"; module: "module:name"
    key = models.CharField(max_length=700)
    path = models.CharField(max_length=500)
    name = models.CharField(max_length=300)
    language = models.CharField(max_length=12, blank=True)
    start_line = models.PositiveIntegerField(null=True)
    end_line = models.PositiveIntegerField(null=True)
    is_test = models.BooleanField(default=False)
    metadata = models.JSONField(default=dict)
    stale_at = models.DateTimeField(null=True)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["project", "key"], name="graph_node_key")]
        indexes = [
            models.Index(fields=["project", "path"], name="graph_node_path"),
            models.Index(fields=["project", "name"], name="graph_node_name"),
            models.Index(
                fields=["project"], condition=models.Q(stale_at__isnull=False), name="graph_node_stale"
            ),
        ]

    def __str__(self) -> str:
        return self.key


class GraphEdge(models.Model):
    # No database constraint on the project or the nodes (nor on the closure's and the chunks'):
    # rows arrive by the ten thousand through COPY and a foreign-key check per row costs more
    # than the row itself. Every row is written for a project the service holds, the services
    # delete them with their nodes, and Django cascades a project's deletion to them. The
    # single-column indexes Django would add are covered by the composite ones below.
    project = models.ForeignKey(
        "tenants.Project", on_delete=models.CASCADE, related_name="+", db_constraint=False
    )
    source = models.ForeignKey(
        GraphNode, on_delete=models.CASCADE, related_name="out_edges", db_constraint=False, db_index=False
    )
    target = models.ForeignKey(
        GraphNode, on_delete=models.CASCADE, related_name="in_edges", db_constraint=False, db_index=False
    )
    kind = models.CharField(max_length=10, choices=EdgeKind.choices)
    confidence = models.FloatField(default=1.0)
    weight = models.FloatField(default=0.0)
    stale_at = models.DateTimeField(null=True)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["source", "kind"], name="graph_edge_source"),
            models.Index(fields=["target", "kind"], name="graph_edge_target"),
        ]

    def __str__(self) -> str:
        return f"{self.source_id} -{self.kind}-> {self.target_id}"


class GraphClosure(models.Model):
    """`descendant` depends on `ancestor` through `path` (node ids, descendant first).

    One row per (descendant, ancestor) pair, which is the primary key: no id column and no
    separate descendant index to maintain for the tens of thousands of rows an index writes.
    The project is kept for scoping but not indexed: rows are found through their nodes, and
    leave with them (a project's deletion cascades through its nodes)."""

    pk = models.CompositePrimaryKey("descendant", "ancestor")
    project = models.ForeignKey(
        "tenants.Project", on_delete=models.DO_NOTHING, related_name="+", db_constraint=False, db_index=False
    )
    ancestor = models.ForeignKey(
        GraphNode, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    descendant = models.ForeignKey(
        GraphNode, on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    depth = models.PositiveSmallIntegerField()
    path = ArrayField(models.BigIntegerField())
    edge_kinds = ArrayField(models.CharField(max_length=10))
    weight = models.FloatField()

    class Meta:
        indexes = [models.Index(fields=["ancestor", "depth"], name="graph_closure_ancestor")]

    def __str__(self) -> str:
        return f"{self.descendant_id} → {self.ancestor_id} ({self.depth})"


class GraphFileLinks(models.Model):
    """What linking reads of one indexed file besides its definitions (those are its nodes): its
    language, imports, top-level calls and bases, as `extract.FileFacts` has them. An update that
    adds, deletes or renames files re-links the files whose imports now resolve elsewhere from
    these, without their source.

    imports: [specifier, [names], reexport, kind]; calls: [caller qualname or null, callee];
    bases: [class qualname, base, kind]. One row per (project, path), the primary key; written by
    COPY with the nodes, and, as on the other bulk tables, without a per-row constraint check."""

    pk = models.CompositePrimaryKey("project", "path")
    project = models.ForeignKey(
        "tenants.Project", on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    path = models.CharField(max_length=500)
    language = models.CharField(max_length=12)
    imports = models.JSONField(default=list)
    calls = models.JSONField(default=list)
    bases = models.JSONField(default=list)

    objects = ProjectScopedQuerySet.as_manager()

    def __str__(self) -> str:
        return self.path


class CodeChunk(models.Model):
    """A function or class (or a whole small file) with its contextual prefix (its file and name)."""

    # As GraphEdge: no per-row constraint check; (project, path) is the project's index.
    project = models.ForeignKey(
        "tenants.Project", on_delete=models.CASCADE, related_name="+", db_constraint=False, db_index=False
    )
    path = models.CharField(max_length=500)
    language = models.CharField(max_length=12)
    chunk_type = models.CharField(max_length=10)
    name = models.CharField(max_length=300)
    start_line = models.PositiveIntegerField()
    end_line = models.PositiveIntegerField()
    content = models.TextField()
    context_prefix = models.CharField(max_length=800)
    # Computed by Postgres as rows arrive (no second pass): the name and its parts weigh most,
    # then the path, then the first 3,000 characters of the code.
    search_vector = models.GeneratedField(
        expression=SearchVector("name", "name_words", weight="A", config="simple")
        + SearchVector("path_words", weight="B", config="simple")
        + SearchVector(Left("content", 3000), weight="C", config="simple"),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    name_words = models.CharField(max_length=600, default="")  # verifyJwt → "verify jwt"
    path_words = models.CharField(max_length=600, default="")

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["project", "path"], name="graph_chunk_path"),
            GinIndex(fields=["search_vector"], name="graph_chunk_search"),
        ]

    def __str__(self) -> str:
        return f"{self.path}:{self.start_line}-{self.end_line}"


class IndexStatus(models.TextChoices):
    IDLE = "idle"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class IndexJob(models.Model):
    project = models.ForeignKey("tenants.Project", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=12, default="full")  # full | incremental
    status = models.CharField(max_length=8, choices=IndexStatus.choices, default=IndexStatus.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0)
    files = models.PositiveIntegerField(default=0)
    nodes = models.PositiveIntegerField(default=0)
    edges = models.PositiveIntegerField(default=0)
    skipped = models.PositiveIntegerField(default=0)
    skipped_detail = models.JSONField(default=dict)
    error = models.CharField(max_length=500, blank=True)
    # Where the task finds its input: an extracted archive directory, or the JSON batch.
    source_dir = models.CharField(max_length=500, blank=True)
    batch = models.JSONField(null=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True)

    objects = ProjectScopedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.kind} index of {self.project_id}: {self.status}"
