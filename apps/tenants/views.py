"""Dashboard pages for tenancy: home, projects, members and invitations, API keys."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from apps.tenants import selectors, services
from apps.tenants.dashboard import _principal, org_page
from apps.tenants.forms import ApiKeyForm, InvitationForm, ProjectForm, RoleForm
from apps.tenants.ratelimit.usage import usage_for
from apps.tenants.roles import PERMISSION_LABELS, ROLE_ORDER, ROLE_PERMISSIONS, Perm
from memorysaas.kernel.errors import ApiError, NotFound


def project_url(project) -> str:
    return reverse("project_home", args=[project.organization.slug, project.slug])


T = TypeVar("T")


def _or_404(selector: Callable[..., T], **kwargs: Any) -> T:
    """What `selector` finds, or the 404 page for an id that is unknown or another organization's."""
    try:
        return selector(**kwargs)
    except NotFound as exc:
        raise Http404(exc.message) from None


def home(request):
    if not request.user.is_authenticated:
        return redirect("account_login")
    principal = _principal(request)
    projects = list(selectors.projects_for(principal=principal)[:50])
    personal = [p for p in projects if p.organization.is_personal]
    if len(projects) == 1:
        return redirect(project_url(projects[0]))
    return render(
        request,
        "tenants/home.html",
        {
            "projects": projects,
            "personal": personal,
            "orgs": selectors.organizations_for(principal=principal),
        },
    )


@org_page()
def org_home(request, org):
    projects = selectors.projects_for(principal=request.principal, organization=org)
    return render(request, "tenants/org_home.html", {"org": org, "projects": projects})


@org_page(Perm.ADMIN)
@require_http_methods(["GET", "POST"])
def project_new(request, org):
    form = ProjectForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        project = services.project_create(organization=org, actor=request.principal, **form.cleaned_data)
        messages.success(request, f"Created {project.name}.")
        return redirect(project_url(project))
    return render(request, "tenants/project_new.html", {"org": org, "form": form})


def _members_context(request, org, **extra):
    principal = request.principal
    return {
        "org": org,
        "members": selectors.members_for(organization=org),
        "invitations": selectors.invitations_pending(organization=org),
        "can_manage": principal.has(org.id, Perm.MEMBERS_MANAGE),
        "invite_form": extra.pop("invite_form", None) or InvitationForm(),
        "roles": ROLE_ORDER,
        "role_matrix": [
            (perm, label, [perm in ROLE_PERMISSIONS[r] for r in ROLE_ORDER])
            for perm, label in PERMISSION_LABELS.items()
        ],
        **extra,
    }


@org_page()
def members(request, org):
    return render(request, "tenants/members.html", _members_context(request, org))


@org_page(Perm.MEMBERS_MANAGE)
@require_POST
def invite(request, org):
    form = InvitationForm(request.POST)
    if form.is_valid():
        try:
            invitation, _token = services.invitation_create(
                organization=org,
                actor=request.principal,
                email=form.cleaned_data["email"],
                role=form.cleaned_data["role"],
            )
            messages.success(request, f"Invitation sent to {invitation.email}.")
            return redirect("members", org.slug)
        except ApiError as exc:
            form.add_error(None, exc.message)
    return render(
        request, "tenants/members.html", _members_context(request, org, invite_form=form), status=422
    )


@org_page(Perm.MEMBERS_MANAGE)
@require_POST
def invitation_revoke(request, org, invitation_id):
    invitation = _or_404(selectors.invitation_get, organization=org, invitation_id=invitation_id)
    services.invitation_revoke(invitation=invitation, actor=request.principal)
    messages.info(request, f"Invitation to {invitation.email} revoked.")
    return redirect("members", org.slug)


@org_page(Perm.MEMBERS_MANAGE)
@require_POST
def member_role(request, org, membership_id):
    membership = _or_404(selectors.membership_get, organization=org, membership_id=membership_id)
    form = RoleForm(request.POST)
    if form.is_valid():
        try:
            services.membership_change_role(
                membership=membership, actor=request.principal, role=form.cleaned_data["role"]
            )
            messages.success(request, f"{membership.user.email} is now {membership.role}.")
        except ApiError as exc:
            messages.error(request, exc.message)
    return redirect("members", org.slug)


@org_page()
@require_POST
def member_remove(request, org, membership_id):
    membership = _or_404(selectors.membership_get, organization=org, membership_id=membership_id)
    try:
        services.membership_remove(membership=membership, actor=request.principal)
    except ApiError as exc:
        messages.error(request, exc.message)
        return redirect("members", org.slug)
    if membership.user_id == request.user.pk:
        messages.info(request, f"You left {org.name}.")
        return redirect("home")
    messages.info(request, f"Removed {membership.user.email}.")
    return redirect("members", org.slug)


@require_http_methods(["GET", "POST"])
def invitation_accept(request, token: str):
    invitation = services.invitation_for_token(token)
    if invitation is None or not invitation.is_pending:
        raise Http404("This invitation does not exist or has expired.")
    if not request.user.is_authenticated:
        # Say what the link is for, and come back here after signing in or up.
        return render(request, "tenants/invitation.html", {"invitation": invitation, "next": request.path})
    if request.method == "POST":
        try:
            services.invitation_accept(token=token, user=request.user)
        except ApiError as exc:
            messages.error(request, exc.message)
            return redirect("home")
        messages.success(request, f"Welcome to {invitation.organization.name}.")
        return redirect("org_home", invitation.organization.slug)
    return render(request, "tenants/invitation.html", {"invitation": invitation})


def _limits(request, org) -> dict | None:
    """The organization's rate limits and their use, or None while the counters cannot be read."""
    keys = selectors.api_keys_for(principal=request.principal, organization=org).active()
    try:
        return usage_for(organization=org, api_keys=keys)
    except ApiError:
        return None


def _keys_context(request, org, **extra):
    projects = selectors.projects_for(principal=request.principal, organization=org)
    return {
        "org": org,
        "keys": selectors.api_keys_for(principal=request.principal, organization=org),
        "limits": _limits(request, org),
        "form": extra.pop("form", None) or ApiKeyForm(projects=projects),
        "form_token": uuid.uuid4().hex,  # one key per form shown: a reload of the answer makes none
        **extra,
    }


_USED_KEY_FORMS = "api_key_forms_used"


@org_page(Perm.ADMIN)
def api_keys(request, org):
    return render(request, "tenants/api_keys.html", _keys_context(request, org))


@org_page(Perm.ADMIN)
@require_POST
def api_key_create(request, org):
    projects = selectors.projects_for(principal=request.principal, organization=org)
    form = ApiKeyForm(request.POST, projects=projects)
    if not form.is_valid():
        return render(request, "tenants/api_keys.html", _keys_context(request, org, form=form), status=422)
    token = request.POST.get("form_token", "")[:64]
    used = request.session.get(_USED_KEY_FORMS, [])
    if token and token in used:  # the page with the new key was reloaded, or the form sent twice
        messages.info(
            request, "That key was already created; its secret was shown once. Create another below."
        )
        return redirect("api_keys", org.slug)
    if token:
        request.session[_USED_KEY_FORMS] = [*used[-19:], token]
    api_key, full = services.api_key_create(
        organization=org,
        actor=request.principal,
        name=form.cleaned_data["name"],
        scopes=form.cleaned_data["scopes"],
        project=form.cleaned_data["project"],
    )
    # The secret is rendered into this one response and never again.
    response = render(
        request, "tenants/api_keys.html", _keys_context(request, org, new_key=full, new_key_obj=api_key)
    )
    response["Cache-Control"] = "no-store"
    return response


@org_page(Perm.ADMIN)
@require_POST
def api_key_revoke(request, org, key_id):
    api_key = _or_404(selectors.api_key_get, principal=request.principal, organization=org, key_id=key_id)
    services.api_key_revoke(api_key=api_key, actor=request.principal)
    if request.htmx:
        return render(request, "tenants/_api_key_row.html", {"key": api_key, "org": org})
    messages.info(request, f"Revoked {api_key.display}.")
    return redirect("api_keys", org.slug)
