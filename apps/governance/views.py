"""Dashboard pages: a project's disputes, one dispute's thread and resolve form, opening a
dispute on a memory, the trust page, and the signed-in person's notifications."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_http_methods, require_POST

from apps.governance import selectors, services, trust
from apps.governance.models import DisputeStatus, Resolution, TrustChange
from apps.memories.selectors import memory_get
from apps.tenants.dashboard import posted_text, project_page
from apps.tenants.roles import Perm
from memorysaas.kernel.errors import ApiError, NotFound


def _dispute_in(request, project, dispute_id):
    try:
        dispute = selectors.dispute_get(principal=request.principal, dispute_id=dispute_id)
    except NotFound:
        raise Http404("No such dispute.") from None
    if dispute.project_id != project.id:
        raise Http404("No such dispute.")
    return dispute


def _detail_url(project, dispute_id) -> str:
    return reverse("dispute_detail", args=[project.organization.slug, project.slug, dispute_id])


@project_page(Perm.MEMORIES_READ)
def disputes(request, project):
    status = request.GET.get("status", DisputeStatus.OPEN)
    if status not in DisputeStatus.values and status != "all":
        status = DisputeStatus.OPEN
    items = selectors.disputes_for_project(
        principal=request.principal, project=project, status=None if status == "all" else status
    )
    return render(
        request,
        "governance/disputes.html",
        {"project": project, "disputes": items[:200], "status": status, "statuses": DisputeStatus.choices},
    )


@project_page(Perm.MEMORIES_READ)
def dispute_detail(request, project, dispute_id):
    return _detail_page(request, project, _dispute_in(request, project, dispute_id))


def _detail_page(
    request, project, dispute, *, refused: str = "", error: str = "", posted: dict | None = None
):
    """The dispute's page; after a refused comment or resolution (`refused` names the form), the
    page again with the error and what was typed, so nothing written is lost."""
    principal = request.principal
    can_resolve = principal.has(project.organization_id, Perm.MEMORIES_REVIEW) and (
        dispute.is_open or principal.has(project.organization_id, Perm.ADMIN)
    )
    return render(
        request,
        "governance/dispute_detail.html",
        {
            "project": project,
            "dispute": dispute,
            "memory": dispute.memory,
            "thread": selectors.dispute_thread(dispute=dispute),
            "can_comment": principal.has(project.organization_id, Perm.MEMORIES_WRITE),
            "can_resolve": can_resolve,
            "resolutions": Resolution.choices,
            "refused": refused,
            "error": error,
            "posted": posted or {},
        },
        status=422 if refused else 200,
    )


@project_page(Perm.MEMORIES_WRITE)
@require_http_methods(["GET", "POST"])
def dispute_new(request, project, memory_id):
    try:
        memory = memory_get(principal=request.principal, memory_id=memory_id)
    except NotFound:
        raise Http404("No such memory.") from None
    if memory.project_id != project.id:
        raise Http404("No such memory.")
    error = ""
    if request.method == "POST":
        try:
            dispute = services.dispute_open(
                memory=memory, actor=request.principal, reason=posted_text(request, "reason")
            )
            messages.success(request, "Dispute opened; the project's stewards were notified.")
            return redirect(_detail_url(project, dispute.id))
        except ApiError as exc:
            error = exc.message
    return render(
        request,
        "governance/dispute_new.html",
        {"project": project, "memory": memory, "error": error, "reason": request.POST.get("reason", "")},
        status=422 if error else 200,
    )


@project_page(Perm.MEMORIES_WRITE)
@require_POST
def dispute_comment(request, project, dispute_id):
    dispute = _dispute_in(request, project, dispute_id)
    try:
        services.dispute_comment(dispute=dispute, actor=request.principal, body=posted_text(request, "body"))
    except ApiError as exc:
        posted = {"body": request.POST.get("body", "")}
        return _detail_page(request, project, dispute, refused="comment", error=exc.message, posted=posted)
    return redirect(_detail_url(project, dispute.id))


@project_page(Perm.MEMORIES_REVIEW)
@require_POST
def dispute_resolve(request, project, dispute_id):
    dispute = _dispute_in(request, project, dispute_id)
    resolution = request.POST.get("resolution", "")
    try:
        if resolution not in Resolution.values:
            raise ApiError(422, "Choose how to resolve the dispute.")
        if not dispute.is_open and not request.principal.has(project.organization_id, Perm.ADMIN):
            raise ApiError(
                422, "This dispute was resolved meanwhile: only an admin or owner may override the outcome."
            )
        content = posted_text(request, "content").strip()
        services.dispute_resolve(
            dispute=dispute,
            actor=request.principal,
            resolution=resolution,
            note=posted_text(request, "note"),
            changes={"content": content} if resolution == Resolution.UPDATE and content else None,
        )
    except ApiError as exc:
        posted = {name: request.POST.get(name, "") for name in ("resolution", "content", "note")}
        return _detail_page(request, project, dispute, refused="resolve", error=exc.message, posted=posted)
    messages.success(request, "Dispute resolved.")
    return redirect(_detail_url(project, dispute.id))


@project_page(Perm.MEMORIES_READ)
def trust_page(request, project):
    level = trust.current_level(project)
    offer = trust.project_offer(project)
    return render(
        request,
        "governance/trust.html",
        {
            "project": project,
            "level": level,
            "level_label": trust.TrustLevel(level).label if level else "Default",
            "threshold": trust.threshold_for(project),
            "stats": trust.trust_stats(project),
            "offer": offer,
            "levels": [
                (value, label, trust.THRESHOLDS[value], trust.DESCRIPTIONS[value])
                for value, label in trust.TrustLevel.choices
            ],
            "allowed": trust.allowed_levels(level, offer),
            "can_change": request.principal.has(project.organization_id, Perm.ADMIN),
            "history": TrustChange.objects.filter(project=project)[:20],
        },
    )


@project_page(Perm.ADMIN)
@require_POST
def trust_set(request, project):
    try:
        services.trust_level_set(
            project=project,
            actor=request.principal,
            level=int(request.POST.get("level", "0") or 0),
            reason=posted_text(request, "reason"),
        )
        messages.success(request, "Trust level changed.")
    except (ApiError, ValueError) as exc:
        messages.error(request, getattr(exc, "message", "Choose one of the offered levels."))
    return redirect("trust", project.organization.slug, project.slug)


@login_required
def notifications(request):
    items = selectors.notifications_for(user=request.user)[:100]
    return render(request, "governance/notifications.html", {"notifications": items})


@login_required
def notifications_menu(request):
    """The header's notifications menu alone: pages re-fetch it when a dispute event arrives."""
    return render(
        request, "governance/_notifications_link.html", selectors.notifications_menu(user=request.user)
    )


@login_required
def notification_open(request, notification_id):
    try:
        item = selectors.notification_get(user=request.user, notification_id=notification_id)
    except NotFound:
        raise Http404("No such notification.") from None
    services.notifications_mark_read(user=request.user, ids=[item.pk])
    safe = url_has_allowed_host_and_scheme(item.url, allowed_hosts={request.get_host()})
    return redirect(item.url if item.url and safe else "notifications")


@login_required
@require_POST
def notifications_read(request):
    services.notifications_mark_read(user=request.user)
    return redirect("notifications")
