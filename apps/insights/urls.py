from django.urls import path

from apps.insights import lifecycle_views, views

P = "o/<slug:org_slug>/p/<slug:project_slug>/"

urlpatterns = [
    path(f"{P}insights/", views.insights, name="insights"),
    path(f"{P}insights/weekly/", views.weekly_history, name="weekly_history"),
    path(f"{P}insights/weekly/email/", views.weekly_opt_out, name="weekly_opt_out"),
    path(f"{P}lifecycle/", lifecycle_views.lifecycle_page, name="lifecycle"),
    path(f"{P}lifecycle/prune/", lifecycle_views.lifecycle_prune, name="lifecycle_prune"),
    path(f"{P}lifecycle/reindex/", lifecycle_views.lifecycle_reindex, name="lifecycle_reindex"),
]
