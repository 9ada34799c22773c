import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memorysaas.settings.local")
# Django runs each ASGI request's sync code in a thread of its own, and connections are per
# thread: without a pool every request would open a new PostgreSQL connection (~10 ms).
os.environ.setdefault("DB_POOL", "1")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from memorysaas.admission import AdmissionMiddleware  # noqa: E402
from memorysaas.consumers import bearer_token  # noqa: E402
from memorysaas.routing import websocket_urlpatterns  # noqa: E402

sockets = AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
checked_origin = AllowedHostsOriginValidator(sockets)


async def websocket(scope, receive, send):
    """The Origin check guards sockets that a browser authenticates with its cookies (another
    site's page could open one); a browser cannot send an Authorization header on a websocket,
    so a client that does (an agent, a CLI, with an API key) is not held to an Origin."""
    app = sockets if bearer_token(scope) is not None else checked_origin
    return await app(scope, receive, send)


from apps.agents.mcp_asgi import is_mcp_path, mcp_app  # noqa: E402


async def http(scope, receive, send):
    """The remote MCP server (Streamable HTTP) answers under /mcp; Django everything else."""
    app = mcp_app if is_mcp_path(scope["path"]) else django_asgi_app
    return await app(scope, receive, send)


from memorysaas import metrics, probes  # noqa: E402

admitted = AdmissionMiddleware(http)
# Probes and scrapes are answered before the admission gate and Django: a flood must not make
# this process look dead or unready, nor hide the figures that show the flood.
_BESIDE_DJANGO = {
    probes.LIVENESS_PATH: probes.liveness,
    probes.READINESS_PATH: probes.readiness,
    metrics.METRICS_PATH: metrics.metrics,
}


async def http_gated(scope, receive, send):
    """Requests wait at the admission gate, holding no thread or connection, until a place is theirs."""
    app = _BESIDE_DJANGO.get(scope["path"], admitted)
    return await app(scope, receive, send)


application = ProtocolTypeRouter({"http": http_gated, "websocket": websocket})

# Multipart bodies reach Django unparsed, so a broken one is answered in the API's envelope.
from memorysaas.kernel.multipart import leave_form_bodies_to_django  # noqa: E402

leave_form_bodies_to_django()

# The first searches should not wait for the local models to load (apps/memories/embedding/precision.py).
from apps.memories.embedding.precision import warm_in_background  # noqa: E402

warm_in_background()

# What the process made at its start lives as long as it does: out of the collector's full passes.
from memorysaas.kernel.heap import freeze_long_lived  # noqa: E402

freeze_long_lived()
