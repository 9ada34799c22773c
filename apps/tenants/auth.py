"""API authentication: a Bearer API key, or the dashboard's session with its CSRF token."""

from __future__ import annotations

from django.http import HttpRequest
from ninja.security import HttpBearer
from ninja.utils import check_csrf

from apps.tenants.principal import Principal
from apps.tenants.ratelimit.throttle import record_failed_auth, refuse_if_locked_out
from apps.tenants.services import api_key_authenticate
from memorysaas.kernel.errors import ApiError

_SAFE_METHODS = {"GET", "HEAD", "OPTIONS", "TRACE"}


class PrincipalAuth(HttpBearer):
    """Resolves the request's Principal once. A presented key that fails is a 401, never a
    fall-through to the session: a client that sent a key wants to act as that key. An address
    that has presented too many failing keys gets a 429 before its next key is looked at."""

    def __call__(self, request: HttpRequest) -> Principal | None:
        header = request.headers.get("Authorization")
        if header is not None:
            refuse_if_locked_out(request)
            try:
                return self._from_header(request, header)
            except ApiError:
                record_failed_auth(request)
                raise
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            if request.method not in _SAFE_METHODS and check_csrf(request) is not None:
                raise ApiError(
                    403,
                    "CSRF verification failed. Send the csrftoken cookie's value in X-CSRFToken.",
                    code="csrf_failed",
                )
            return Principal.for_user(user)
        return None

    def _from_header(self, request: HttpRequest, header: str) -> Principal:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise ApiError(401, "Use 'Authorization: Bearer <api key>'.", code="invalid_authorization_header")
        return self.authenticate(request, token.strip())

    def authenticate(self, request: HttpRequest, token: str) -> Principal:
        api_key = api_key_authenticate(token)
        if api_key is None:
            raise ApiError(401, "The API key is invalid, expired or revoked.", code="invalid_api_key")
        return Principal.for_api_key(api_key)


principal_auth = PrincipalAuth()
