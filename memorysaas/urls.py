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
    path("", include("apps.review.urls")),
    path("", include("apps.governance.urls")),
    path("", include("apps.insights.urls")),
    path("", include("apps.webhooks.urls")),
    path("", include("apps.tenants.urls")),
]

handler500 = "memorysaas.errorpages.server_error"
