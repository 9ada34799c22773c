"""Kubernetes' probes: /livez (is this process alive?) and /readyz (may it take traffic?).

Liveness touches no dependency: a database outage must take the pods out of the load balancer
(readiness), not have them restarted one after another while the database is away. Both are
answered in front of Django and its admission gate (memorysaas/asgi.py): a flood of requests
cannot make a healthy process look dead, and a probe addressed to the pod's IP is not refused by
the host check (ALLOWED_HOSTS) or redirected to HTTPS.
"""

from __future__ import annotations

import json

from asgiref.sync import sync_to_async
from django.db import connections

from memorysaas.kernel.health import readiness_report

LIVENESS_PATH = "/livez"
READINESS_PATH = "/readyz"


async def respond(send, status: int, body: bytes, content_type: bytes = b"application/json") -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", content_type), (b"cache-control", b"no-store")],
        }
    )
    await send({"type": "http.response.body", "body": body})


def off_request_thread(work):
    """`work` on a worker thread, its database connections closed after (back to the pool):
    outside Django's request cycle nobody else would close them."""

    def run():
        try:
            return work()
        finally:
            connections.close_all()

    return sync_to_async(run, thread_sensitive=False)()


async def liveness(scope, receive, send) -> None:
    """The event loop answering is what liveness asks."""
    await respond(send, 200, b'{"status": "alive"}')


async def readiness(scope, receive, send) -> None:
    report = await off_request_thread(readiness_report)
    status = 200 if report["status"] == "ready" else 503
    await respond(send, status, json.dumps(report).encode())
