"""Background jobs behind the dashboard's charts and the weekly synthesis (django-q2 schedules
registered in apps.py)."""

from __future__ import annotations

from apps.insights import snapshots, weekly
from memorysaas.kernel.queue import retry_on_database_error


@retry_on_database_error
def health_snapshots_task() -> int:
    """Projects whose snapshot was written."""
    return snapshots.snapshot_all()


@retry_on_database_error
def weekly_synthesis_task() -> int:
    """Projects whose last week was written up (a week already written is left alone)."""
    return weekly.synthesize_all()
