"""Index jobs in the background (django-q2); thin over services.

A job's task may run more than once (memorysaas.kernel.queue): while one runs it holds the job's lock,
so a second delivery leaves it alone, and a job already done or failed is skipped. The sweep
below queues again a job whose task was lost (still queued, or running with nobody holding it)."""

from __future__ import annotations

import logging
import os
import shutil
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from apps.graph import services
from apps.graph.models import IndexJob, IndexStatus
from apps.graph.summaries import module_summaries_write
from apps.tenants.models import Project
from memorysaas.kernel.locks import held_while_running, is_held
from memorysaas.kernel.queue import enqueue, retry_on_database_error

logger = logging.getLogger(__name__)


def _job_lock(job_id: int) -> str:
    return f"graph-job:{job_id}"


@retry_on_database_error
def index_job_task(job_id: int) -> str:
    with held_while_running(_job_lock(job_id)) as alone:
        if not alone:
            return "running elsewhere"
        return _run(job_id)


def _run(job_id: int) -> str:
    job = IndexJob.objects.select_related("project").filter(id=job_id).first()
    if job is None or job.status not in ("queued", "running"):
        return "skipped"
    project = job.project
    if job.kind == "full" and not os.path.isdir(job.source_dir):
        # Never index an empty tree: that would wipe the project's graph.
        _fail(job, "The uploaded archive is no longer on the server; upload it again.")
        return IndexStatus.FAILED
    try:
        if job.kind == "full":
            result = services.job_run(
                job, lambda progress: services.index_directory(project, job.source_dir, progress=progress)
            )
            if result.status == IndexStatus.DONE:
                enqueue(module_summaries_task, str(project.id), lane="bulk")
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
        if job.source_dir and IndexJob.objects.filter(id=job.id, status__in=["done", "failed"]).exists():
            shutil.rmtree(job.source_dir, ignore_errors=True)  # (kept for a retry while unfinished)
    return result.status


def _fail(job: IndexJob, error: str) -> None:
    IndexJob.objects.filter(id=job.id).update(
        status=IndexStatus.FAILED, error=error, finished_at=timezone.now()
    )


@retry_on_database_error
def module_summaries_task(project_id: str) -> dict[str, int]:
    project = Project.objects.filter(id=project_id).first()
    if project is None:
        return {}
    return module_summaries_write(project=project)


@retry_on_database_error
def index_stranded_task() -> dict[str, int]:
    """Queue again each index job whose task was lost: queued or running for longer than
    STRANDED_WORK_AFTER_SECONDS with no worker holding it. Only a project's latest job: an
    older one would undo what a later one indexed, so it is marked failed instead."""
    cutoff = timezone.now() - timedelta(seconds=settings.STRANDED_WORK_AFTER_SECONDS)
    queued = superseded = 0
    stranded = IndexJob.objects.filter(status__in=["queued", "running"], created_at__lt=cutoff)
    for job in stranded.order_by("created_at"):
        if is_held(_job_lock(job.id)):
            continue
        if IndexJob.objects.filter(project_id=job.project_id, created_at__gt=job.created_at).exists():
            _fail(job, "Its worker stopped before it finished, and a later index job replaced it.")
            if job.source_dir:
                shutil.rmtree(job.source_dir, ignore_errors=True)
            superseded += 1
            continue
        logger.warning("Index job %s was left %s; queued again", job.id, job.status)
        enqueue(index_job_task, job.id)
        queued += 1
    return {"queued": queued, "superseded": superseded}
