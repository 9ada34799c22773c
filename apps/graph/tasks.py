"""Index jobs in the background (django-q2); thin over services."""

from __future__ import annotations

import shutil

from apps.graph import services
from apps.graph.models import IndexJob, IndexStatus
from apps.graph.summaries import module_summaries_write
from apps.tenants.models import Project
from memorysaas.queue import enqueue


def index_job_task(job_id: int) -> str:
    job = IndexJob.objects.select_related("project").filter(id=job_id).first()
    if job is None or job.status not in ("queued", "running"):
        return "skipped"
    project = job.project
    try:
        if job.kind == "full":
            result = services.job_run(
                job, lambda progress: services.index_directory(project, job.source_dir, progress=progress)
            )
            if result.status == IndexStatus.DONE:
                enqueue(module_summaries_task, str(project.id))
        else:
            batch = job.batch or {}
            changed = {f["path"]: f["content"].encode("utf-8") for f in batch.get("files", [])}
            result = services.job_run(
                job,
                lambda progress: services.index_changes(
                    project,
                    changed=changed,
                    deleted=batch.get("deleted", []),
                    renamed=batch.get("renamed", {}),
                ),
            )
    finally:
        if job.source_dir:
            shutil.rmtree(job.source_dir, ignore_errors=True)
    return result.status


def module_summaries_task(project_id: str) -> dict[str, int]:
    project = Project.objects.filter(id=project_id).first()
    if project is None:
        return {}
    return module_summaries_write(project=project)
