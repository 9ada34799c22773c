"""Development: `make run`. Debug on, console email, relaxed email verification."""

import os

os.environ.setdefault("DEBUG", "1")
os.environ.setdefault("ACCOUNT_EMAIL_VERIFICATION", "optional")

from memorysaas.settings.base import *  # noqa: F403

WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = True
STATIC_ROOT = None  # served from the finders; collectstatic is for production
