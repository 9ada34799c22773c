"""Who hears of a sync conflict that waits: the memory's owner, the person whose device pushed
the change, and the project's stewards, in the app and by email (governance's notifications).
Registered with apps/sync/conflicts.py from ReviewConfig.ready: sync and governance sit side by
side and do not know each other; the dashboard knows both."""

from __future__ import annotations

from apps.governance.notify import notify, project_stewards
from apps.review.conflicts import conflict_url
from apps.sync.models import SyncConflict


def notify_conflict_waiting(conflict: SyncConflict) -> None:
    conflict = SyncConflict.objects.select_related("project__organization", "memory__owner", "author").get(
        pk=conflict.pk
    )
    project, memory = conflict.project, conflict.memory
    who = conflict.author.display_name if conflict.author else conflict.device_label or "A device"
    what = "deleted" if conflict.kind == "delete" else f"edited {', '.join(conflict.fields)} of"
    notify(
        project=project,
        users=[memory.owner, conflict.author, *project_stewards(project)],
        kind="sync_conflict",
        title=f"A sync conflict waits in {project.name}",
        body=f"{who} {what} a memory offline that was changed meanwhile: “{memory.content[:120]}”. "
        "Keep one version, or write a merge.",
        url=conflict_url(project, conflict.pk),
    )
