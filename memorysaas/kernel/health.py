"""What `GET /api/v1/health` checks (database, pgvector, the task queue and the channel layer),
and what readiness checks (/readyz: the database, and Redis when configured)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection


def _timed(check) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        detail = check()
        ok = True
    except Exception as exc:  # a health check reports failures, it does not raise them
        detail, ok = {"error": f"{type(exc).__name__}: {exc}"}, False
    return {"ok": ok, "ms": round((time.perf_counter() - started) * 1000, 2), **detail}


def check_database() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('server_version')")
        (version,) = cursor.fetchone()
    return {"server_version": version, "vendor": connection.vendor}


def check_pgvector() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        row = cursor.fetchone()
    if row is None:
        raise RuntimeError("the vector extension is not installed (run migrations)")
    return {"version": row[0]}


def check_redis() -> dict[str, Any]:
    client = redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    finally:
        client.close()
    return {}


def readiness_report() -> dict[str, Any]:
    """What a load balancer asks before sending traffic: can this process reach what every request
    needs (the database, and Redis when one is configured)? Cheap: one round trip each."""
    checks = {"database": _timed(check_database)}
    if settings.REDIS_URL:
        checks["redis"] = _timed(check_redis)
    return {"status": "ready" if all(c["ok"] for c in checks.values()) else "unready", "checks": checks}


def check_queue() -> dict[str, Any]:
    from django_q.brokers import get_broker

    broker = get_broker()
    broker.ping()
    return {
        "broker": "redis" if settings.Q_CLUSTER.get("redis") else "orm",
        "queued": broker.queue_size(),
        "sync": bool(settings.Q_CLUSTER.get("sync")),
    }


CHANNEL_LAYER_TIMEOUT_S = 2.0


def check_channel_layer() -> dict[str, Any]:
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer configured")

    async def round_trip() -> bool:
        channel = await layer.new_channel("health.")
        token = uuid.uuid4().hex
        await layer.send(channel, {"type": "health.ping", "token": token})
        message = await layer.receive(channel)
        return message.get("token") == token

    async def bounded() -> bool:
        # A layer that cannot reach its backend (PostgreSQL's LISTEN connection while the database
        # is down) must make the check fail, not hold the health answer until the client gives up.
        return await asyncio.wait_for(round_trip(), CHANNEL_LAYER_TIMEOUT_S)

    if not async_to_sync(bounded)():
        raise RuntimeError("the channel layer returned a different message")
    return {"backend": type(layer).__name__}


def health_report() -> dict[str, Any]:
    checks = {
        "database": _timed(check_database),
        "pgvector": _timed(check_pgvector),
        "queue": _timed(check_queue),
        "channel_layer": _timed(check_channel_layer),
    }
    return {"status": "ok" if all(c["ok"] for c in checks.values()) else "degraded", "checks": checks}
