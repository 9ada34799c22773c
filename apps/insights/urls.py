from django.urls import path

from apps.insights import manage_views, views

P = "o/<slug:org_slug>/p/<slug:project_slug>/"

urlpatterns = [
    path(f"{P}insights/", views.insights, name="insights"),
    path(f"{P}insights/experiment/", manage_views.experiment, name="insights_experiment"),
    path(f"{P}insights/phase-weights/", manage_views.phase_weights, name="insights_phase_weights"),
    path(
        f"{P}insights/phase-weights/<int:proposal_id>/apply/",
        manage_views.phase_weights_apply,
        name="insights_phase_weights_apply",
    ),
    path(f"{P}insights/telemetry/", manage_views.telemetry_page, name="insights_telemetry"),
    path(
        f"{P}insights/thresholds/<int:adjustment_id>/revert/",
        manage_views.threshold_revert,
        name="insights_threshold_revert",
    ),
    path(f"{P}insights/weekly/", views.weekly_history, name="weekly_history"),
    path(f"{P}insights/weekly/email/", views.weekly_opt_out, name="weekly_opt_out"),
]
