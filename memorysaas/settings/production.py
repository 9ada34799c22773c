"""Production: refuses to start without a real SECRET_KEY; passes `check --deploy` cleanly."""

from django.core.exceptions import ImproperlyConfigured

from memorysaas.kernel.env import env_bool, env_int, env_str
from memorysaas.settings.base import *  # noqa: F403
from memorysaas.settings.base import STORAGES

SECRET_KEY = env_str("SECRET_KEY")
if len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5 or SECRET_KEY.startswith("dev-insecure"):
    raise ImproperlyConfigured(
        "SECRET_KEY must be set to a random value of at least 50 characters in production "
        "(python -c 'import secrets; print(secrets.token_urlsafe(64))')."
    )
API_KEY_HMAC_KEY = env_str("API_KEY_HMAC_KEY") or SECRET_KEY

DEBUG = False
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
SECURE_REDIRECT_EXEMPT = [r"^api/v1/health$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
X_FRAME_OPTIONS = "DENY"
STORAGES = {
    **STORAGES,
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
