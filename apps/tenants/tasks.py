"""Background tasks of the tenants app (django-q2). Thin: the work is in gdpr.py.

Each may run more than once (memorysaas.kernel.queue): while an export is built its builder holds the
export's lock, so a second delivery leaves it alone, and a built export is not built again; a
due deletion is gone once done. The sweep queues again an export whose task was lost."""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from apps.tenants import gdpr
from apps.tenants.models import DataExport, ExportStatus
from memorysaas.kernel.locks import held_while_running, is_held
from memorysaas.kernel.queue import enqueue, retry_on_database_error

logger = logging.getLogger(__name__)


def _export_lock(export_id: str) -> str:
    return f"export:{export_id}"


@retry_on_database_error
def export_build_task(export_id: str) -> str:
    with held_while_running(_export_lock(export_id)) as alone:
        if not alone:
            return "running elsewhere"
        export = gdpr.export_build(export_id)
    return export.status if export is not None else "missing"


@retry_on_database_error
def exports_stranded_task() -> dict[str, int]:
    """Queue again each export still pending STRANDED_WORK_AFTER_SECONDS after it was asked for
    that nobody is building."""
    cutoff = timezone.now() - timedelta(seconds=settings.STRANDED_WORK_AFTER_SECONDS)
    queued = 0
    for export_id in DataExport.objects.filter(
        status=ExportStatus.PENDING, created_at__lt=cutoff
    ).values_list("id", flat=True):
        if is_held(_export_lock(str(export_id))):
            continue
        logger.warning("Export %s was never built; queued again", export_id)
        enqueue(export_build_task, str(export_id))
        queued += 1
    return {"queued": queued}


@retry_on_database_error
def deletions_process_due_task() -> dict[str, int]:
    return gdpr.deletions_process_due()
