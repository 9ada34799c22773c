"""Decorators for dashboard views: resolve the org and project from the URL, inside the viewer's
scope, once. An outsider gets 404 (the same page as for a missing object); a member whose role
is too low gets 403. And, for the views and their templates, `posted_text` (a posted field that
reaches a service without a form) and `visible_project_ids`."""

from __future__ import annotations

from functools import wraps
from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.validators import ProhibitNullCharactersValidator
from django.http import Http404, HttpRequest

from apps.tenants.models import Organization, Project
from apps.tenants.principal import Principal
from memorysaas.kernel.errors import Invalid


def _principal(request) -> Principal:
    principal = getattr(request, "principal", None)
    if principal is None:
        principal = Principal.for_user(request.user)
        request.principal = principal
    return principal


def org_page(permission: str | None = None):
    def decorate(view):
        @login_required
        @wraps(view)
        def wrapper(request, org_slug: str, *args, **kwargs):
            principal = _principal(request)
            org = Organization.objects.visible_to(principal).filter(slug=org_slug).first()
            if org is None:
                raise Http404("No such organization.")
            if permission is not None and not principal.has(org.id, permission):
                raise PermissionDenied
            request.current_org = org
            return view(request, org, *args, **kwargs)

        return wrapper

    return decorate


def project_page(permission: str | None = None):
    def decorate(view):
        @login_required
        @wraps(view)
        def wrapper(request, org_slug: str, project_slug: str, *args, **kwargs):
            principal = _principal(request)
            project = (
                Project.objects.visible_to(principal)
                .select_related("organization", "team")
                .filter(organization__slug=org_slug, slug=project_slug)
                .first()
            )
            if project is None:
                raise Http404("No such project.")
            if permission is not None and not principal.has(project.organization_id, permission):
                raise PermissionDenied
            request.current_org = project.organization
            request.current_project = project
            return view(request, project, *args, **kwargs)

        return wrapper

    return decorate


def posted_text(request: HttpRequest, name: str) -> str:
    """A posted text field that goes to a service without a Django form, checked as a form's
    CharField would check it: PostgreSQL text cannot hold a NUL character, so one is an
    `Invalid` the view shows like any other refusal, before anything is stored."""
    value = request.POST.get(name, "")
    try:
        ProhibitNullCharactersValidator()(value)
    except ValidationError as exc:
        raise Invalid(exc.messages[0], details={"field": name}) from None
    return value


def visible_project_ids(request: HttpRequest) -> frozenset[UUID]:
    """The projects the signed-in person may open, looked up once per request: a page of
    memory cards asks for each card whether its home project may be named and linked."""
    cached = getattr(request, "visible_project_ids", None)
    if cached is None:
        ids = Project.objects.visible_to(_principal(request)).values_list("id", flat=True)
        cached = request.visible_project_ids = frozenset(ids)  # type: ignore[attr-defined]
    return cached
