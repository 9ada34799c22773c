"""One client floods search; does everyone else still get served?

Starts its own daphne on the configured database (or measures the server at --url, which must
serve that same database), makes two bench organizations with --memories memories each, then
drives the server over HTTP with httpx:

1. quiet: tenant two searches every --interval s for --quiet s → quiet_p95_ms;
2. flood: tenant one keeps --concurrency searches in flight for --duration s while tenant two
   goes on searching every --interval s → flood_p95_ms (tenant two's), ratio (flood / quiet),
   count_5xx (either tenant's), and what tenant one got (statuses, searches per second);
3. recovery: tenant one hangs up all its requests at once; recovery_s is how long until tenant
   two's `/api/v1/me` and a search both answer 200, the search within max(3 × quiet p95, 100 ms)
   (or --normal-ms).

Targets: ratio ≤ 3 and flood p95 < 1 s, no 5xx, recovery < 5 s. A request the client gave up on
(--timeout) counts as failed (`timeouts`). With --json the last line is one JSON object. Bench
organizations are deleted unless --keep.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.test.utils import override_settings

from apps.bench.daphne import Server
from apps.bench.synthetic import Corpus
from apps.memories.services import memories_create_batch
from apps.memories.validation import MemoryDraft
from apps.tenants.models import Organization, Project
from apps.tenants.principal import SYSTEM
from apps.tenants.services import api_key_create

ROOT = Path(settings.BASE_DIR)
RECOVERY_FLOOR_MS = 100.0  # a search "answers normally" within max(3 × quiet p95, this)


def _p95(values: list[float]) -> float | None:
    return round(float(np.percentile(values, 95)), 1) if values else None


@dataclass
class Tenant:
    org: Organization
    project: Project
    key: str
    queries: list[tuple[str, list[str]]]

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@dataclass
class Tally:
    """What one side of the measurement saw."""

    latencies_ms: list[float] = field(default_factory=list)
    statuses: collections.Counter = field(default_factory=collections.Counter)
    errors: collections.Counter = field(default_factory=collections.Counter)

    def count_5xx(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)


class Command(BaseCommand):
    help = "Flood search from one tenant; report another tenant's latency, 5xx and recovery."

    def add_arguments(self, parser):
        parser.add_argument("--url", help="Measure this server (serving the configured database).")
        parser.add_argument("--duration", type=float, default=15.0, help="Seconds of flood.")
        parser.add_argument("--concurrency", type=int, default=32, help="Flood requests in flight.")
        parser.add_argument("--interval", type=float, default=0.5, help="Tenant two's search cadence (s).")
        parser.add_argument("--quiet", type=float, default=10.0, help="Seconds of quiet measurement.")
        parser.add_argument("--memories", type=int, default=300, help="Memories per tenant.")
        parser.add_argument("--timeout", type=float, default=60.0, help="Client timeout per request (s).")
        parser.add_argument("--recovery-timeout", type=float, default=120.0)
        parser.add_argument(
            "--normal-ms",
            type=float,
            default=None,
            help="A search this fast counts as normal again (default: max(3 × quiet p95, 100 ms)).",
        )
        parser.add_argument(
            "--provider",
            default=None,
            help="EMBEDDING_PROVIDER for the data and the server (default: the configured one).",
        )
        parser.add_argument(
            "--server-settings",
            default=os.environ.get("DJANGO_SETTINGS_MODULE", "memorysaas.settings.local"),
            help="DJANGO_SETTINGS_MODULE of the daphne this command starts.",
        )
        parser.add_argument(
            "--rate-limits", action="store_true", help="Leave the started server's rate limits on."
        )
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--json", action="store_true", help="End with one JSON line.")
        parser.add_argument("--keep", action="store_true", help="Keep the bench organizations.")

    def handle(self, *args, **opts):
        self.say = self.stdout.write
        logging.getLogger("httpx").setLevel(logging.WARNING)  # (a line per request otherwise)
        provider = opts["provider"] or settings.EMBEDDING_PROVIDER
        rng = random.Random(opts["seed"])
        started = time.perf_counter()
        with override_settings(EMBEDDING_PROVIDER=provider, EMBEDDING_MODE="sync"):
            tenants = [self._tenant(n, opts["memories"], Corpus(opts["seed"] + n)) for n in (1, 2)]
        self.say(f"made 2 tenants × {opts['memories']} memories in {time.perf_counter() - started:.1f}s")
        server = None
        try:
            url = opts["url"]
            if not url:
                server = Server(
                    settings_module=opts["server_settings"],
                    # Search's parallel paths on, as production runs. What is measured is how the
                    # server shares itself out, not the rate limits (which would turn most of the
                    # flood away with 429s).
                    env={
                        "SEARCH_CONCURRENT": "1",
                        "EMBEDDING_PROVIDER": provider,
                        **({} if opts["rate_limits"] else {"RATE_LIMIT_ENABLED": "0"}),
                    },
                    name="bench-flood",
                )
                server.wait_until_serving()
                url = server.url
                self.say(f"daphne on {url}")
            result = asyncio.run(self._measure(url, tenants, rng, opts))
            if server is not None and server.process.poll() is not None:
                raise CommandError(f"daphne died during the run:\n{server.tail()}")
        finally:
            if server is not None:
                server.stop()
            if not opts["keep"]:
                for tenant in tenants:
                    tenant.org.delete()
        result.update(
            concurrency=opts["concurrency"],
            duration_s=opts["duration"],
            memories=opts["memories"],
            provider=provider,
        )
        for key, value in result.items():
            self.say(f"{key:>24}: {value}")
        if opts["json"]:
            self.stdout.write(json.dumps(result, sort_keys=True, default=str))

    # ------------------------------------------------------------ setup

    def _tenant(self, n: int, count: int, corpus: Corpus) -> Tenant:
        suffix = uuid.uuid4().hex[:6]
        org = Organization.objects.create(name=f"flood {suffix} {n}", slug=f"flood-{suffix}-{n}")
        project = Project.objects.create(organization=org, name=f"flood {n}", slug=f"flood-{suffix}-p{n}")
        bases = corpus.bases(max(10, count // 3))
        memories = corpus.memories(count, bases)
        for start in range(0, len(memories), 200):
            drafts = [
                MemoryDraft(content=m.content, type=m.type, related_files=m.related_files)
                for m in memories[start : start + 200]
            ]
            memories_create_batch(project=project, actor=SYSTEM, drafts=drafts)
        _, key = api_key_create(
            organization=org, actor=SYSTEM, name="flood", scopes=["memories:read"], check_permission=False
        )
        return Tenant(org=org, project=project, key=key, queries=corpus.queries(200, bases))

    # ------------------------------------------------------------ measuring

    async def _measure(self, url: str, tenants: list[Tenant], rng: random.Random, opts) -> dict:
        flooder, other = tenants
        timeout = httpx.Timeout(opts["timeout"])
        flood_limits = httpx.Limits(
            max_connections=opts["concurrency"], max_keepalive_connections=opts["concurrency"]
        )
        async with httpx.AsyncClient(base_url=url, timeout=timeout) as client:
            await self._warm(client, tenants, rng)
            quiet = Tally()
            await self._tick(client, other, rng, quiet, opts["quiet"], opts["interval"])
            quiet_p95 = _p95(quiet.latencies_ms)
            self.say(f"quiet: {len(quiet.latencies_ms)} searches, p95 {quiet_p95} ms")

            flood, during = Tally(), Tally()
            flood_client = httpx.AsyncClient(base_url=url, timeout=timeout, limits=flood_limits)
            flood_started = time.monotonic()
            floods = [
                asyncio.create_task(self._flood(flood_client, flooder, random.Random(rng.random()), flood))
                for _ in range(opts["concurrency"])
            ]
            await self._tick(client, other, rng, during, opts["duration"], opts["interval"])
            flood_seconds = time.monotonic() - flood_started
            # Tenant one hangs up: every request it has in flight is abandoned at once.
            for task in floods:
                task.cancel()
            await asyncio.gather(*floods, return_exceptions=True)
            await flood_client.aclose()
            stopped = time.monotonic()
            threshold = opts["normal_ms"] or max(3 * (quiet_p95 or 0.0), RECOVERY_FLOOR_MS)
            recovery = await self._recover(client, other, rng, threshold, opts["recovery_timeout"])
            recovery_s = round(recovery - stopped, 2) if recovery is not None else None
        flood_p95 = _p95(during.latencies_ms)
        return {
            "quiet_p95_ms": quiet_p95,
            "flood_p95_ms": flood_p95,
            "ratio": round(flood_p95 / quiet_p95, 2) if flood_p95 and quiet_p95 else None,
            "count_5xx": quiet.count_5xx() + during.count_5xx() + flood.count_5xx(),
            "recovery_s": recovery_s,
            "other_searches": len(during.latencies_ms),
            "other_statuses": dict(during.statuses),
            "other_errors": dict(during.errors),
            "flood_statuses": dict(flood.statuses),
            "flood_errors": dict(flood.errors),
            "flood_searches_per_s": round(sum(flood.statuses.values()) / flood_seconds, 1),
            "flood_p50_ms": round(float(np.percentile(flood.latencies_ms, 50)), 1)
            if flood.latencies_ms
            else None,
        }

    async def _search(
        self, client: httpx.AsyncClient, tenant: Tenant, rng: random.Random, tally: Tally
    ) -> bool:
        """One search; False if it got no answer at all."""
        query, files = rng.choice(tenant.queries)
        body = {"query": f"{query} {rng.randrange(10_000)}", "files": files, "limit": 8}
        started = time.perf_counter()
        try:
            response = await client.post(
                f"/api/v1/projects/{tenant.project.id}/search", json=body, headers=tenant.headers()
            )
        except httpx.TimeoutException:
            tally.errors["timeout"] += 1
            tally.latencies_ms.append((time.perf_counter() - started) * 1000)
            return False
        except httpx.HTTPError as error:
            tally.errors[type(error).__name__] += 1
            return False
        tally.statuses[response.status_code] += 1
        tally.latencies_ms.append((time.perf_counter() - started) * 1000)  # (an error's wait too)
        return True

    async def _warm(self, client: httpx.AsyncClient, tenants: list[Tenant], rng: random.Random) -> None:
        """A few searches each, one at a time: the first of a process load what it loads."""
        for tenant in tenants:
            for _ in range(5):
                await self._search(client, tenant, rng, Tally())

    async def _tick(self, client, tenant: Tenant, rng, tally: Tally, seconds: float, interval: float) -> None:
        """A search every `interval` seconds for `seconds`, each on its own: a slow answer does
        not hold back the next one. Waits for all of them."""
        started = time.monotonic()
        pending = []
        n = 0
        while (next_at := started + n * interval) < started + seconds:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            pending.append(asyncio.create_task(self._search(client, tenant, rng, tally)))
            n += 1
        await asyncio.gather(*pending)

    async def _flood(self, client, tenant: Tenant, rng, tally: Tally) -> None:
        while True:
            if not await self._search(client, tenant, rng, tally):
                await asyncio.sleep(0.05)  # (a refused connection would otherwise spin)

    async def _recover(
        self, client, tenant: Tenant, rng, threshold_ms: float, timeout: float
    ) -> float | None:
        """When tenant two's /me and a search both answer normally again (monotonic time)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            probe = Tally()
            with contextlib.suppress(httpx.HTTPError):
                me = await client.get("/api/v1/me", headers=tenant.headers(), timeout=5)
                if me.status_code == 200:
                    await self._search(client, tenant, rng, probe)
                    if probe.statuses[200] and probe.latencies_ms[0] <= threshold_ms:
                        return time.monotonic()
            await asyncio.sleep(0.1)
        return None
