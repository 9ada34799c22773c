from django.urls import path

from apps.tenants import views

urlpatterns = [
    path("", views.home, name="home"),
    path("invitations/<str:token>/", views.invitation_accept, name="invitation_accept"),
    path("o/<slug:org_slug>/", views.org_home, name="org_home"),
    path("o/<slug:org_slug>/projects/new/", views.project_new, name="project_new"),
    path("o/<slug:org_slug>/members/", views.members, name="members"),
    path("o/<slug:org_slug>/members/invite/", views.invite, name="invite"),
    path("o/<slug:org_slug>/members/<int:membership_id>/role/", views.member_role, name="member_role"),
    path("o/<slug:org_slug>/members/<int:membership_id>/remove/", views.member_remove, name="member_remove"),
    path(
        "o/<slug:org_slug>/invitations/<uuid:invitation_id>/revoke/",
        views.invitation_revoke,
        name="invitation_revoke",
    ),
    path("o/<slug:org_slug>/api-keys/", views.api_keys, name="api_keys"),
    path("o/<slug:org_slug>/api-keys/new/", views.api_key_create, name="api_key_create"),
    path("o/<slug:org_slug>/api-keys/<uuid:key_id>/revoke/", views.api_key_revoke, name="api_key_revoke"),
    path("o/<slug:org_slug>/p/<slug:project_slug>/", views.project_home, name="project_home"),
]
