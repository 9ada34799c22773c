"""Dashboard pages for sync conflicts: a project's offline edits that wait for a person, and one
conflict side by side — the common base, the device's version and the server's — with keep
mine, keep theirs, or an edited merge (apps/sync/conflicts.py decides)."""

from __future__ import annotations

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from apps.sync import conflicts as sync_conflicts
from apps.sync import selectors
from apps.tenants.dashboard import posted_text, project_page
from apps.tenants.roles import Perm
from memorysaas.kernel.errors import ApiError, Invalid, NotFound

_ROWS = (
    ("content", "Text"),
    ("type", "Type"),
    ("tags", "Tags"),
    ("related_files", "Files"),
    ("confidence", "Confidence"),
)


def _conflict_in(request, project, conflict_id):
    try:
        conflict = selectors.conflict_get(principal=request.principal, conflict_id=conflict_id)
    except NotFound:
        raise Http404("No such conflict.") from None
    if conflict.project_id != project.id:
        raise Http404("No such conflict.")
    return conflict


def conflict_url(project, conflict_id) -> str:
    return reverse("sync_conflict", args=[project.organization.slug, project.slug, conflict_id])


@project_page(Perm.MEMORIES_READ)
def conflicts(request, project):
    status = "resolved" if request.GET.get("status") == "resolved" else "open"
    found = selectors.conflicts_for(principal=request.principal, project=project, status=status)[:200]
    return render(
        request, "review/conflicts.html", {"project": project, "conflicts": found, "status": status}
    )


def _side_by_side(conflict) -> list[dict]:
    current = sync_conflicts.shown(conflict.memory)
    rows = []
    for name, label in _ROWS:
        mine = conflict.mine.get(name, conflict.theirs.get(name)) if conflict.kind == "edit" else None
        rows.append(
            {
                "name": name,
                "label": label,
                "base": conflict.base.get(name),
                "mine": mine,
                "theirs": current.get(name),
                "differs": name in conflict.fields,
                "is_list": name in ("tags", "related_files"),
            }
        )
    return rows


def _detail(request, project, conflict, *, error: str = "", status: int = 200, posted: dict | None = None):
    current = sync_conflicts.shown(conflict.memory)
    merge = posted or {
        "content": conflict.mine.get("content", current["content"]),
        "tags": ", ".join(conflict.mine.get("tags", current["tags"])),
    }
    return render(
        request,
        "review/conflict_detail.html",
        {
            "project": project,
            "conflict": conflict,
            "rows": _side_by_side(conflict),
            "may_resolve": sync_conflicts.may_resolve(request.principal, conflict),
            "merge": merge,
            "error": error,
        },
        status=status,
    )


@project_page(Perm.MEMORIES_READ)
def conflict_detail(request, project, conflict_id):
    return _detail(request, project, _conflict_in(request, project, conflict_id))


@project_page(Perm.MEMORIES_READ)
@require_POST
def conflict_resolve(request, project, conflict_id):
    conflict = _conflict_in(request, project, conflict_id)
    keep = request.POST.get("keep", "")
    posted = {"content": posted_text(request, "content"), "tags": posted_text(request, "tags")}
    try:
        base_version = int(request.POST.get("base_version", ""))
    except ValueError:
        base_version = 0
    try:
        merged = None
        if keep == "merge":
            tags = [t.strip() for t in posted["tags"].split(",") if t.strip()]
            content = posted["content"].strip()
            if not content:
                raise Invalid("A merge needs its text.")
            merged = {"content": content, "tags": tags}
        sync_conflicts.conflict_resolve(
            conflict=conflict, actor=request.principal, keep=keep, base_version=base_version, merged=merged
        )
    except ApiError as exc:
        conflict.memory.refresh_from_db()
        conflict.refresh_from_db()
        code = exc.status if exc.status in (403, 409, 422) else 422
        return _detail(request, project, conflict, error=exc.message, status=code, posted=posted)
    messages.success(request, "Conflict resolved: every device gets the result at its next sync.")
    return redirect(reverse("sync_conflicts", args=[project.organization.slug, project.slug]))
