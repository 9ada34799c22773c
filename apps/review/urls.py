from django.urls import path

from apps.review import conflicts, views

P = "o/<slug:org_slug>/p/<slug:project_slug>/"
M = f"{P}memories/<uuid:memory_id>/"

urlpatterns = [
    path(P, views.health_dashboard, name="project_home"),
    path(f"{P}memories/", views.memory_browser, name="memory_browser"),
    path(M, views.memory_detail, name="memory_detail"),
    path(f"{M}confirm/", views.memory_confirm, name="memory_confirm"),
    path(f"{M}flag/", views.memory_flag, name="memory_flag"),
    path(f"{M}correct/", views.memory_correct, name="memory_correct"),
    path(f"{M}pin/", views.memory_pin, name="memory_pin"),
    path(f"{M}delete/", views.memory_delete, name="memory_delete"),
    path(f"{M}reject/", views.memory_reject, name="memory_reject"),
    path(f"{M}restore/", views.memory_restore, name="memory_restore"),
    path(f"{M}retry-embedding/", views.memory_embed_retry, name="memory_embed_retry"),
    path(f"{P}sessions/", views.sessions, name="sessions"),
    path(f"{P}sessions/<uuid:session_id>/", views.session_review, name="session_review"),
    path(
        f"{P}sessions/<uuid:session_id>/confirm-all/", views.session_confirm_all, name="session_confirm_all"
    ),
    path(f"{P}modules/", views.module_map, name="module_map"),
    path(f"{P}recipes/", views.recipes, name="recipes"),
    path(f"{P}recipes/new/", views.recipe_new, name="recipe_new"),
    path(f"{P}recipes/<uuid:recipe_id>/", views.recipe_detail, name="recipe_detail"),
    path(f"{P}recipes/<uuid:recipe_id>/edit/", views.recipe_edit, name="recipe_edit"),
    path(f"{P}teach/", views.teach, name="teach"),
    path(f"{P}teach/import/", views.teach_import, name="teach_import"),
    path(f"{P}ask/", views.ask, name="ask"),
    path(f"{P}connect/", views.connect, name="connect"),
    path(f"{P}conflicts/", conflicts.conflicts, name="sync_conflicts"),
    path(f"{P}conflicts/<uuid:conflict_id>/", conflicts.conflict_detail, name="sync_conflict"),
    path(
        f"{P}conflicts/<uuid:conflict_id>/resolve/", conflicts.conflict_resolve, name="sync_conflict_resolve"
    ),
]
