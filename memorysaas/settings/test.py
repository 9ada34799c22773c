"""The test suite: real PostgreSQL + pgvector, fast hashing, synchronous side effects."""

import os

os.environ.setdefault("ACCOUNT_EMAIL_VERIFICATION", "mandatory")
os.environ.setdefault("Q_PREFIX", "memorysaas-test")  # its own queues (Redis lists): tests purge them

from memorysaas.settings.base import *  # noqa: F403
from memorysaas.settings.base import Q_CLUSTER

DEBUG = False
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
EMBEDDING_MODE = "sync"
MODELS_WARM_AT_START = False  # (a test that loads a model says which, and where)
Q_CLUSTER = {**Q_CLUSTER, "sync": True}
# Tests that need Redis ask for it explicitly; the default layer stays in-process.
CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
# Most tests run inside a transaction, where search reads on one connection anyway; a live
# server's search would leave worker connections open on the test database. The tests of
# concurrent search switch it on and close those connections (tests/memories/test_search.py).
SEARCH_CONCURRENT = False
MEDIA_ROOT = BASE_DIR / ".data" / "test-media"  # noqa: F405
WHITENOISE_USE_FINDERS = True
STATIC_ROOT = None  # served from the finders; collectstatic is for production
# The suite makes thousands of requests with one key; tests/tenants/test_rate_limits.py turns
# the limits on where it tests them.
RATE_LIMIT_ENABLED = False
# Webhooks send nothing in the suite: a test that needs a delivery turns sending on for its own
# receiver on 127.0.0.1 (tests/webhooks); generated endpoints must never reach another address.
WEBHOOKS_SEND = False
