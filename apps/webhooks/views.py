"""Dashboard pages for an organization's webhooks (admins): the endpoints, each one's delivery
log with its attempts, and redelivery."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from apps.tenants.dashboard import org_page
from apps.tenants.roles import Perm
from apps.webhooks import selectors, services
from memorysaas.kernel.errors import ApiError, NotFound
from memorysaas.kernel.events import EVENT_TYPES


class EndpointForm(forms.Form):
    url = forms.URLField(label="Payload URL", max_length=500, assume_scheme="https")
    event_types = forms.MultipleChoiceField(
        label="Events", choices=[(t, t) for t in EVENT_TYPES], widget=forms.CheckboxSelectMultiple
    )
    description = forms.CharField(max_length=200, required=False)
    active = forms.BooleanField(required=False, initial=True)


def _page(request, org, form, *, status: int = 200, new_secret: str | None = None, new_endpoint=None):
    endpoints = list(selectors.endpoints_for(principal=request.principal, organization=org))
    return render(
        request,
        "webhooks/list.html",
        {
            "org": org,
            "endpoints": endpoints,
            "form": form,
            "new_secret": new_secret,
            "new_endpoint": new_endpoint,
        },
        status=status,
    )


def _save(form, call) -> str | None:
    """Run the service; a refusal (an unsafe URL) becomes the form's error. Returns None or the error."""
    try:
        call()
    except ApiError as exc:
        field = (exc.details or {}).get("field") if isinstance(exc.details, dict) else None
        form.add_error(field if field in form.fields else None, exc.message)
        return exc.message
    return None


def _endpoint(request, org, webhook_id):
    try:
        return selectors.endpoint_get(principal=request.principal, organization=org, endpoint_id=webhook_id)
    except NotFound:
        raise Http404("No such webhook.") from None


@org_page(Perm.ADMIN)
@require_http_methods(["GET", "POST"])
def webhooks(request, org):
    if request.method == "GET":
        return _page(request, org, EndpointForm(initial={"active": True}))
    form = EndpointForm(request.POST)
    if not form.is_valid():
        return _page(request, org, form, status=422)
    created = {}

    def create() -> None:
        created["endpoint"] = services.endpoint_create(
            organization=org,
            actor=request.principal,
            url=form.cleaned_data["url"],
            event_types=form.cleaned_data["event_types"],
            description=form.cleaned_data["description"],
        )

    if _save(form, create):
        return _page(request, org, form, status=422)
    endpoint = created["endpoint"]
    return _page(
        request,
        org,
        EndpointForm(initial={"active": True}),
        new_secret=endpoint.secret,
        new_endpoint=endpoint,
    )


@org_page(Perm.ADMIN)
@require_http_methods(["GET", "POST"])
def webhook_detail(request, org, webhook_id):
    endpoint = _endpoint(request, org, webhook_id)
    initial = {
        "url": endpoint.url,
        "event_types": endpoint.event_types,
        "description": endpoint.description,
        "active": endpoint.active,
    }
    form = EndpointForm(request.POST if request.method == "POST" else None, initial=initial)
    status = 200
    new_secret = None
    if request.method == "POST":
        rotate = "rotate_secret" in request.POST
        if rotate or form.is_valid():
            values = form.cleaned_data if not rotate else {}

            def update() -> None:
                services.endpoint_update(
                    endpoint=endpoint,
                    actor=request.principal,
                    url=values.get("url"),
                    event_types=values.get("event_types"),
                    description=values.get("description"),
                    active=values.get("active") if not rotate else None,
                    rotate_secret=rotate,
                )

            if _save(form, update) is None:
                if rotate:
                    new_secret = endpoint.secret
                else:
                    messages.success(request, "Webhook saved.")
                    return redirect("webhook_detail", org.slug, endpoint.id)
            else:
                status = 422
        else:
            status = 422
    deliveries = selectors.deliveries_for(endpoint=endpoint)
    attempts = selectors.attempts_for(deliveries=deliveries)
    rows = [(d, attempts[d.id]) for d in deliveries]
    return render(
        request,
        "webhooks/detail.html",
        {"org": org, "endpoint": endpoint, "form": form, "rows": rows, "new_secret": new_secret},
        status=status,
    )


@org_page(Perm.ADMIN)
@require_POST
def webhook_delete(request, org, webhook_id):
    endpoint = _endpoint(request, org, webhook_id)
    services.endpoint_delete(endpoint=endpoint, actor=request.principal)
    messages.success(request, f"Webhook to {endpoint.url} deleted.")
    return redirect("webhooks", org.slug)


@org_page(Perm.ADMIN)
@require_POST
def webhook_redeliver(request, org, webhook_id, delivery_id):
    endpoint = _endpoint(request, org, webhook_id)
    try:
        delivery = selectors.delivery_get(endpoint=endpoint, delivery_id=delivery_id)
    except NotFound:
        raise Http404("No such delivery.") from None
    services.redeliver(delivery=delivery, actor=request.principal)
    messages.success(request, f"{delivery.event_type} queued for redelivery.")
    return redirect("webhook_detail", org.slug, endpoint.id)
