from django.contrib import admin
from django.urls import include, path, re_path

from memorysaas.api import api
from memorysaas.kernel.errors import error_response


def api_not_found(request, rest: str = ""):
    return error_response(404, f"No API route matches {request.path}.")


urlpatterns = [
    path("api/v1/", api.urls),
    re_path(r"^api/(?P<rest>.*)$", api_not_found),
    path("accounts/", include("allauth.urls")),
    path("admin/", admin.site.urls),
    path("", include("apps.tenants.urls")),
]

for _app in ("review", "governance", "insights", "webhooks"):
    try:
        urlpatterns.insert(-1, path("", include(f"apps.{_app}.urls")))
    except ModuleNotFoundError as exc:  # the app has no dashboard pages yet
        if exc.name != f"apps.{_app}.urls":
            raise
