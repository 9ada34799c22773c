from django.urls import path

from apps.governance import views

P = "o/<slug:org_slug>/p/<slug:project_slug>/"

urlpatterns = [
    path(f"{P}disputes/", views.disputes, name="disputes"),
    path(f"{P}disputes/<uuid:dispute_id>/", views.dispute_detail, name="dispute_detail"),
    path(f"{P}disputes/<uuid:dispute_id>/comment/", views.dispute_comment, name="dispute_comment"),
    path(f"{P}disputes/<uuid:dispute_id>/resolve/", views.dispute_resolve, name="dispute_resolve"),
    path(f"{P}memories/<uuid:memory_id>/dispute/", views.dispute_new, name="dispute_new"),
    path(f"{P}trust/", views.trust_page, name="trust"),
    path(f"{P}trust/set/", views.trust_set, name="trust_set"),
    path("notifications/", views.notifications, name="notifications"),
    path("notifications/read/", views.notifications_read, name="notifications_read"),
    path("notifications/menu/", views.notifications_menu, name="notifications_menu"),
    path("notifications/<int:notification_id>/", views.notification_open, name="notification_open"),
]
