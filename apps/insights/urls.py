from django.urls import path

from apps.insights import views

P = "o/<slug:org_slug>/p/<slug:project_slug>/"

urlpatterns = [
    path(f"{P}insights/", views.insights, name="insights"),
    path(f"{P}insights/weekly/", views.weekly_history, name="weekly_history"),
    path(f"{P}insights/weekly/email/", views.weekly_opt_out, name="weekly_opt_out"),
]
