"""Background tasks of the tenants app (django-q2). Thin: the work is in gdpr.py."""

from __future__ import annotations

from apps.tenants import gdpr


def export_build_task(export_id: str) -> str:
    export = gdpr.export_build(export_id)
    return export.status if export is not None else "missing"


def deletions_process_due_task() -> dict[str, int]:
    return gdpr.deletions_process_due()
