"""`manage.py index_repo PATH --project ID`: index a local checkout into a project's graph."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand, CommandError

from apps.graph import services
from apps.graph.models import IndexJob, IndexStatus
from apps.graph.summaries import module_summaries_write
from apps.tenants.models import Project


class Command(BaseCommand):
    help = "Index a repository directory into a project's knowledge graph (replaces the graph)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("path")
        parser.add_argument("--project", required=True, help="project id")
        parser.add_argument("--include", action="append", default=[], help="only these subdirectories")
        parser.add_argument(
            "--no-summaries", dest="summaries", action="store_false", help="skip the module_insight summaries"
        )

    def handle(self, *args, path: str, project: str, include: list[str], **options) -> None:
        found = Project.objects.filter(id=project).first() if _is_uuid(project) else None
        if found is None:
            raise CommandError(f"No project {project}.")
        job = IndexJob.objects.create(project=found, kind="full", status=IndexStatus.RUNNING)
        started = time.perf_counter()
        job = services.job_run(
            job, lambda progress: services.index_directory(found, path, include=include, progress=progress)
        )
        if job.status != IndexStatus.DONE:
            raise CommandError(f"Indexing failed: {job.error}")
        summaries = module_summaries_write(project=found) if options["summaries"] else {}
        self.stdout.write(
            f"indexed {job.files} files: {job.nodes} nodes, {job.edges} edges, {job.skipped} skipped "
            f"in {time.perf_counter() - started:.1f}s"
            + (f"; module summaries {summaries}" if summaries else "")
        )


def _is_uuid(value: str) -> bool:
    import uuid

    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
