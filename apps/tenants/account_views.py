"""Account settings (profile, keys, devices) and the data pages: export, delete, cancel — for a
person under /account/ and for an organization's owners under /o/<org>/settings/."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from apps.tenants import gdpr, services
from apps.tenants.dashboard import _principal, org_page
from apps.tenants.models import ApiKey, DataExport, Device, ExportFormat, ExportStatus
from apps.tenants.ratelimit.throttle import charge_export
from apps.tenants.roles import Perm
from memorysaas.kernel.errors import ApiError


class ProfileForm(forms.Form):
    name = forms.CharField(max_length=150, required=False)


class ExportForm(forms.Form):
    format = forms.ChoiceField(
        choices=ExportFormat.choices, initial=ExportFormat.JSON, widget=forms.RadioSelect
    )


class ConfirmForm(forms.Form):
    """Typing the name of what is to be deleted, as the conventional guard against a slip."""

    confirm = forms.CharField(max_length=254)

    def __init__(self, *args, expected: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.expected = expected

    def clean_confirm(self) -> str:
        value = self.cleaned_data["confirm"].strip()
        if value.lower() != self.expected.lower():
            raise forms.ValidationError(f"Type {self.expected} to confirm.")
        return value


@login_required
@require_http_methods(["GET", "POST"])
def profile(request):
    form = ProfileForm(request.POST or None, initial={"name": request.user.name})
    if request.method == "POST" and form.is_valid():
        request.user.name = form.cleaned_data["name"]
        request.user.save(update_fields=["name"])
        messages.success(request, "Profile saved.")
        return redirect("account_profile")
    return render(request, "settings/profile.html", {"form": form, "section": "profile"})


@login_required
def keys(request):
    own_keys = ApiKey.objects.filter(created_by=request.user).select_related("organization", "project")
    principal = _principal(request)
    rows = [(key, principal.has(key.organization_id, Perm.ADMIN)) for key in own_keys]
    return render(request, "settings/keys.html", {"rows": rows, "section": "keys"})


@login_required
def devices(request):
    return render(
        request,
        "settings/devices.html",
        {"devices": Device.objects.filter(user=request.user).select_related("api_key"), "section": "devices"},
    )


@login_required
def device_remove(request, device_id):
    # Look the device up before checking the method: someone else's device is a 404 either way.
    device = Device.objects.filter(user=request.user, id=device_id).select_related("api_key").first()
    if device is None:
        raise Http404("No such device.")
    if request.method != "POST":
        return HttpResponse(status=405, headers={"Allow": "POST"})
    services.device_remove(device=device, actor=_principal(request))
    messages.success(request, f"Removed {device.name}; its key no longer works.")
    return redirect("account_devices")


def _data_context(exports, *, requested_at, **extra):
    exports = list(exports)
    return {
        "export_form": ExportForm(),
        "exports": exports,
        "pending": any(e.status == ExportStatus.PENDING for e in exports),
        "grace_days": gdpr.DELETION_GRACE.days,
        "deletion_due": requested_at + gdpr.DELETION_GRACE if requested_at else None,
        **extra,
    }


@login_required
def data(request):
    exports = DataExport.objects.of_user(request.user).filter(organization__isnull=True)[:20]
    context = _data_context(
        exports,
        requested_at=request.user.deletion_requested_at,
        section="data",
        blockers=gdpr._sole_owner_blockers(request.user),
    )
    return render(request, "settings/data.html", context)


@login_required
@require_POST
def export_create(request):
    form = ExportForm(request.POST)
    refused = charge_export(request.user)
    if refused is not None:
        messages.error(request, refused.message)
    elif form.is_valid():
        gdpr.export_request(user=request.user, fmt=form.cleaned_data["format"])
        messages.success(
            request, "Your export is being prepared; it appears below and we email you when it is ready."
        )
    else:
        messages.error(request, "Choose an export format.")
    return redirect("account_data")


@login_required
def export_download(request, export_id):
    export = DataExport.objects.of_user(request.user).filter(id=export_id).first()
    if export is None:
        raise Http404("No such export.")
    if export.organization_id is not None and not gdpr.owns(request.user, export.organization_id):
        raise PermissionDenied("Only an owner of the organization can download its export.")
    if not export.is_downloadable:
        return render(request, "settings/export_gone.html", {"export": export}, status=410)
    content_type = (
        "application/json" if export.format == ExportFormat.JSON else "text/markdown; charset=utf-8"
    )
    response = HttpResponse(bytes(export.content), content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{export.filename}"'
    response["Cache-Control"] = "no-store"
    return response


@login_required
@require_POST
def account_delete(request):
    form = ConfirmForm(request.POST, expected=request.user.email)
    if not form.is_valid():
        messages.error(request, form.errors["confirm"][0])
        return redirect("account_data")
    try:
        gdpr.account_deletion_request(user=request.user)
    except ApiError as exc:
        messages.error(request, exc.message)
        return redirect("account_data")
    messages.warning(
        request,
        f"Your account will be deleted in {gdpr.DELETION_GRACE.days} days. You can cancel until then.",
    )
    return redirect("account_data")


@login_required
@require_POST
def account_delete_cancel(request):
    gdpr.account_deletion_cancel(user=request.user)
    messages.success(request, "Deletion cancelled. Your account stays.")
    return redirect("account_data")


@org_page(Perm.ORG_OWN)
def org_settings(request, org):
    exports = DataExport.objects.of_user(request.user).filter(organization=org)[:20]
    context = _data_context(exports, requested_at=org.deletion_requested_at, org=org)
    return render(request, "settings/org.html", context)


@org_page(Perm.ORG_OWN)
@require_POST
def org_export_create(request, org):
    form = ExportForm(request.POST)
    refused = charge_export(request.user, org)
    if refused is not None:
        messages.error(request, refused.message)
    elif form.is_valid():
        gdpr.export_request(user=request.user, fmt=form.cleaned_data["format"], organization=org)
        messages.success(request, f"The export of {org.name} is being prepared.")
    return redirect("org_settings", org.slug)


@org_page(Perm.ORG_OWN)
@require_POST
def org_delete(request, org):
    form = ConfirmForm(request.POST, expected=org.slug)
    if not form.is_valid():
        messages.error(request, form.errors["confirm"][0])
        return redirect("org_settings", org.slug)
    gdpr.organization_deletion_request(organization=org, user=request.user)
    messages.warning(
        request, f"{org.name} will be deleted in {gdpr.DELETION_GRACE.days} days unless an owner cancels."
    )
    return redirect("org_settings", org.slug)


@org_page(Perm.ORG_OWN)
@require_POST
def org_delete_cancel(request, org):
    gdpr.organization_deletion_cancel(organization=org, user=request.user)
    messages.success(request, f"Deletion of {org.name} cancelled.")
    return redirect("org_settings", org.slug)
