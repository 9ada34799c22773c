"""The dashboard's page for a request that failed on the server (the API answers in its JSON
envelope instead: middleware.ApiErrorMiddleware).

A database that cannot be reached is not a bug in the request: the page says so with a 503 and
`Retry-After`, and reloads itself. Neither page extends the site's layout, whose navigation reads
the signed-in user and the organization from the database that may be the thing that failed.
"""

from __future__ import annotations

import sys

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

from memorysaas.kernel import requestid
from memorysaas.kernel.errors import (
    DATABASE_RETRY_AFTER_SECONDS,
    DATABASE_UNAVAILABLE,
    database_unavailable_noted,
)


def server_error(request: HttpRequest) -> HttpResponse:
    """Django's handler500: called while the request's exception is being handled."""
    context = {"request_id": requestid.current.get(), "retry_after": DATABASE_RETRY_AFTER_SECONDS}
    exc = sys.exc_info()[1]
    if isinstance(exc, DATABASE_UNAVAILABLE):
        database_unavailable_noted(request, exc)
        response = HttpResponse(render_to_string("503.html", context), status=503)
        response["Retry-After"] = str(DATABASE_RETRY_AFTER_SECONDS)
        return response
    return HttpResponse(render_to_string("500.html", context), status=500)
