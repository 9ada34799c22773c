"""The lifecycle endpoints (admins): storage and the next prune's preview, prune now, re-index,
clean up."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from ninja import Field, Router, Status

from apps.insights import lifecycle
from apps.tenants.roles import Perm
from apps.tenants.selectors import project_get
from memorysaas.kernel.schemas import InputSchema, OutputSchema

router = Router(tags=["lifecycle"])


class StoragePartOut(OutputSchema):
    name: str
    label: str
    rows: int
    bytes: int


class StorageOut(OutputSchema):
    parts: list[StoragePartOut]
    total_bytes: int


class PreviewMemoryOut(OutputSchema):
    id: UUID
    type: str
    content: str
    confidence: float
    last_used_at: datetime


class PreviewRuleOut(OutputSchema):
    rule: str
    action: str = Field(description="`retire` (deprecated, restorable) or `delete`.")
    description: str
    count: int
    memories: list[PreviewMemoryOut] = Field(description="The first 50, the oldest first.")


class PreviewOut(OutputSchema):
    as_of: datetime
    retire: int
    delete: int
    rules: list[PreviewRuleOut]
    context_cost_modules: int = Field(
        description="Modules whose context-cost figures the pass will scale to the last 30 sessions' worth."
    )


class LifecycleOut(OutputSchema):
    storage: StorageOut
    next_prune: PreviewOut


class QueuedOut(OutputSchema):
    queued: str
    lane: str


class CleanupIn(InputSchema):
    dry_run: bool = Field(False, description="Say what it would do, and change nothing.")


class CleanupOut(OutputSchema):
    dry_run: bool
    deprecated: int
    deleted: int
    rules: dict[str, int]


def _project(request, project_id: UUID):
    return project_get(principal=request.auth, project_id=project_id, permission=Perm.ADMIN)


@router.get("/projects/{project_id}/lifecycle", response=LifecycleOut)
def lifecycle_get(request, project_id: UUID):
    """What the project stores (memories, vectors, graph, events: rows and bytes) and what the
    daily prune would retire and delete in it next, rule by rule. Admins."""
    return lifecycle.lifecycle_overview(project=_project(request, project_id))


@router.post("/projects/{project_id}/lifecycle/prune", response={202: QueuedOut})
def lifecycle_prune(request, project_id: UUID):
    """Queue the daily prune's rules for this project now (the bulk lane). Admins."""
    project = _project(request, project_id)
    return Status(202, lifecycle.prune_queue(project=project, actor=request.auth))


@router.post("/projects/{project_id}/lifecycle/reindex", response={202: QueuedOut})
def lifecycle_reindex(request, project_id: UUID):
    """Queue a rebuild of the memories' keyword index, their out-of-date embeddings and the
    graph's module summaries (the bulk lane). Admins."""
    project = _project(request, project_id)
    return Status(202, lifecycle.reindex_queue(project=project, actor=request.auth))


@router.post("/projects/{project_id}/lifecycle/cleanup", response=CleanupOut)
def lifecycle_cleanup(request, project_id: UUID, body: CleanupIn):
    """Run the prune for this project now and say what it retired and deleted, per rule; with
    `dry_run`, only what it would. The body is a JSON object: `{}` for a real run. Admins."""
    project = _project(request, project_id)
    return lifecycle.cleanup_run(project=project, actor=request.auth, dry_run=body.dry_run)
