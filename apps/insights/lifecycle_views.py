"""The Lifecycle page (admins): what the project stores, what the daily prune will retire next,
and the prune-now and re-index buttons."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from apps.insights import lifecycle
from apps.tenants.dashboard import project_page
from apps.tenants.roles import Perm


def _back(project):
    return redirect("lifecycle", project.organization.slug, project.slug)


@project_page(Perm.ADMIN)
@require_GET
def lifecycle_page(request, project):
    return render(
        request,
        "insights/lifecycle.html",
        {"project": project, **lifecycle.lifecycle_overview(project=project)},
    )


@project_page(Perm.ADMIN)
@require_POST
def lifecycle_prune(request, project):
    lifecycle.prune_queue(project=project, actor=request.principal)
    messages.success(request, "Prune queued: the daily rules run for this project now, in the background.")
    return _back(project)


@project_page(Perm.ADMIN)
@require_POST
def lifecycle_reindex(request, project):
    lifecycle.reindex_queue(project=project, actor=request.principal)
    messages.success(request, "Re-index queued: keyword index, out-of-date embeddings and module summaries.")
    return _back(project)
