"""An admin's lifecycle controls for one project: what it stores, what the daily prune will
retire next, and the buttons: prune now, re-index, clean up.

Prune now and re-index queue the same tasks the schedules run, on the bulk lane where the daily
prune and embeddings run (nobody waits for them; a click must not stand in front of an agent's
finalize). Clean up runs the prune at once and answers with what it did. Each writes an audit row.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from apps.insights.storage import project_storage
from apps.memories import services as memory_services
from apps.observer import windows
from apps.tenants.models import Project
from apps.tenants.principal import Principal
from apps.tenants.roles import Perm
from apps.tenants.services import audit_record, require
from memorysaas.kernel.queue import enqueue

LANE = "bulk"
# The rule name under which a cleanup reports the modules whose context-cost sums it scaled.
WINDOW = "context_cost_window"


def _next_prune(project: Project) -> dict[str, Any]:
    preview = memory_services.prune_preview(project=project)
    return {**preview, "context_cost_modules": windows.context_cost_over_window(project_id=project.id)}


def lifecycle_overview(*, project: Project) -> dict[str, Any]:
    return {"storage": project_storage(project=project), "next_prune": _next_prune(project)}


def prune_queue(*, project: Project, actor: Principal) -> dict[str, Any]:
    require(actor, project.organization_id, Perm.ADMIN)
    enqueue("apps.memories.tasks.project_prune_task", str(project.id), lane=LANE, group="memories.prune")
    enqueue("apps.observer.tasks.context_cost_window_task", str(project.id), lane=LANE)
    audit_record(actor=actor, action="project.prune_queued", target=project)
    return {"queued": "prune", "lane": LANE}


def reindex_queue(*, project: Project, actor: Principal) -> dict[str, Any]:
    """Rebuild the memories' keyword index and out-of-date embeddings, and the graph's module
    summaries. The code graph itself is rebuilt only from the repository (a new upload): the
    server keeps no copy of the source after indexing it."""
    require(actor, project.organization_id, Perm.ADMIN)
    enqueue("apps.memories.tasks.project_reindex_task", str(project.id), lane=LANE, group="memories.reindex")
    enqueue("apps.graph.tasks.module_summaries_task", str(project.id), lane=LANE)
    audit_record(actor=actor, action="project.reindex_queued", target=project)
    return {"queued": "reindex", "lane": LANE}


def cleanup_run(*, project: Project, actor: Principal, dry_run: bool) -> dict[str, Any]:
    """The prune, now, for this project; with `dry_run`, what it would do (the preview)."""
    require(actor, project.organization_id, Perm.ADMIN)
    if dry_run:
        preview = _next_prune(project)
        rules = {r["rule"]: r["count"] for r in preview["rules"]} | {WINDOW: preview["context_cost_modules"]}
        return {
            "dry_run": True,
            "deprecated": preview["retire"],
            "deleted": preview["delete"],
            "rules": rules,
        }
    with transaction.atomic():
        report = memory_services.memories_decay_and_prune(project=project)
        rules = report["rules"] | {WINDOW: windows.context_cost_window(project_id=project.id)}
        audit_record(actor=actor, action="project.cleanup", target=project, metadata=rules)
    return {
        "dry_run": False,
        "deprecated": report["deprecated"],
        "deleted": report["deleted"],
        "rules": rules,
    }
