"""The /device page: a signed-in person enters (or follows a link with) the code `memorysaas
login` shows, picks the project the device will work on, and approves or denies it."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from apps.tenants import device_flow
from apps.tenants.dashboard import _principal
from apps.tenants.models import Project
from apps.tenants.ratelimit.throttle import record_failed_auth, refuse_if_locked_out
from apps.tenants.roles import Perm
from memorysaas.kernel.errors import ApiError, NotFound, RateLimited
from memorysaas.kernel.ids import as_uuid


def _syncable_projects(principal) -> list[Project]:
    """The projects the person could put a device on: visible to them, in an organization where
    their role may sync."""
    projects = (
        Project.objects.visible_to(principal)
        .select_related("organization")
        .order_by("organization__name", "name")
    )
    return [p for p in projects if principal.has(p.organization_id, Perm.SYNC)]


@login_required
@require_http_methods(["GET"])
def device(request):
    """The code entry form; with `?user_code=`, the login waiting under that code to decide on."""
    raw = request.GET.get("user_code", "").strip()
    if not raw:
        return render(request, "tenants/device.html", {})
    # Guessing codes costs what guessing keys does: wrong ones spend the address's budget.
    try:
        refuse_if_locked_out(request)
    except RateLimited:
        return render(
            request,
            "tenants/device.html",
            {
                "error": "Too many unknown codes from this address: wait a minute, then try again.",
                "entered": raw,
            },
            status=429,
        )
    authorization = device_flow.authorization_for_user_code(raw)
    if authorization is None:
        record_failed_auth(request)
        return render(
            request,
            "tenants/device.html",
            {"error": "No login is waiting under that code (it may have expired): check it, or run"
             " `memorysaas login` again.", "entered": raw},
            status=404,
        )  # fmt: skip
    principal = _principal(request)
    return render(
        request,
        "tenants/device.html",
        {
            "authorization": authorization,
            "user_code": device_flow.display_user_code(device_flow.normalize_user_code(raw)),
            "projects": _syncable_projects(principal),
        },
    )


@login_required
@require_POST
def device_decide(request):
    authorization = device_flow.authorization_for_user_code(request.POST.get("user_code", ""))
    if authorization is None:
        raise Http404("No login is waiting under that code.")
    principal = _principal(request)
    try:
        if request.POST.get("decision") == "deny":
            device_flow.authorization_deny(authorization=authorization, actor=principal)
            messages.info(request, f"Denied the login of {authorization.device_name}.")
            return redirect(reverse("device"))
        project_id = as_uuid(request.POST.get("project", ""))
        project = Project.objects.visible_to(principal).filter(id=project_id).first() if project_id else None
        if project is None:
            raise Http404("No such project.")
        device_flow.authorization_approve(
            authorization=authorization,
            actor=principal,
            organization_id=project.organization_id,
            project_id=project.id,
        )
    except NotFound as error:
        raise Http404(error.message) from None
    except ApiError as error:
        messages.error(request, error.message)
        return redirect(f"{reverse('device')}?user_code={request.POST.get('user_code', '')}")
    messages.success(
        request,
        f"Approved {authorization.device_name} for {project.organization.name} / {project.name}: the"
        " command line finishes logging in by itself.",
    )
    return redirect(reverse("device"))
