from django.urls import path

from apps.webhooks import views

ORG = "o/<slug:org_slug>/webhooks/"
W = f"{ORG}<uuid:webhook_id>/"

urlpatterns = [
    path(ORG, views.webhooks, name="webhooks"),
    path(W, views.webhook_detail, name="webhook_detail"),
    path(f"{W}delete/", views.webhook_delete, name="webhook_delete"),
    path(f"{W}deliveries/<uuid:delivery_id>/redeliver/", views.webhook_redeliver, name="webhook_redeliver"),
]
