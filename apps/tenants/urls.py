from django.urls import path

from apps.tenants import account_views, device_views, team_views, views

urlpatterns = [
    path("", views.home, name="home"),
    path("invitations/<str:token>/", views.invitation_accept, name="invitation_accept"),
    path("device/", device_views.device, name="device"),
    path("device/decide/", device_views.device_decide, name="device_decide"),
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
    path("o/<slug:org_slug>/teams/", team_views.teams_page, name="teams"),
    path("o/<slug:org_slug>/teams/new/", team_views.team_create, name="team_create"),
    path("o/<slug:org_slug>/teams/<slug:team_slug>/rename/", team_views.team_rename, name="team_rename"),
    path("o/<slug:org_slug>/teams/<slug:team_slug>/delete/", team_views.team_delete, name="team_delete"),
    path(
        "o/<slug:org_slug>/teams/<slug:team_slug>/members/",
        team_views.team_member_add,
        name="team_member_add",
    ),
    path(
        "o/<slug:org_slug>/teams/<slug:team_slug>/members/<int:user_id>/remove/",
        team_views.team_member_remove,
        name="team_member_remove",
    ),
    path(
        "o/<slug:org_slug>/teams/<slug:team_slug>/projects/",
        team_views.team_project_assign,
        name="team_project_assign",
    ),
    path(
        "o/<slug:org_slug>/teams/<slug:team_slug>/projects/<uuid:project_id>/remove/",
        team_views.team_project_remove,
        name="team_project_remove",
    ),
    path("o/<slug:org_slug>/api-keys/", views.api_keys, name="api_keys"),
    path("o/<slug:org_slug>/api-keys/new/", views.api_key_create, name="api_key_create"),
    path("o/<slug:org_slug>/api-keys/<uuid:key_id>/revoke/", views.api_key_revoke, name="api_key_revoke"),
    path("o/<slug:org_slug>/settings/", account_views.org_settings, name="org_settings"),
    path("o/<slug:org_slug>/settings/export/", account_views.org_export_create, name="org_export_create"),
    path("o/<slug:org_slug>/settings/delete/", account_views.org_delete, name="org_delete"),
    path(
        "o/<slug:org_slug>/settings/delete/cancel/", account_views.org_delete_cancel, name="org_delete_cancel"
    ),
    path("account/", account_views.profile, name="account_profile"),
    path("account/keys/", account_views.keys, name="account_keys"),
    path("account/devices/", account_views.devices, name="account_devices"),
    path(
        "account/devices/<uuid:device_id>/remove/", account_views.device_remove, name="account_device_remove"
    ),
    path("account/data/", account_views.data, name="account_data"),
    path("account/data/exports/", account_views.export_create, name="account_export_create"),
    path(
        "account/data/exports/<uuid:export_id>/download/",
        account_views.export_download,
        name="account_export_download",
    ),
    path("account/delete/", account_views.account_delete, name="account_delete"),
    path("account/delete/cancel/", account_views.account_delete_cancel, name="account_delete_cancel"),
]
