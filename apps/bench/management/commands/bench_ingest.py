"""Benchmark the observer: HTTP ingest against a no-op endpoint, CPU per event, finalize.

- `ingest_events_per_s`: events per second through `POST /api/v1/sessions/{id}/events` in
  batches of 100, on a real daphne server started for the run, one client on one keep-alive
  connection. Beside it, `noop_requests_per_s`: the authenticated no-op `POST /api/v1/ping`
  on the same server in the same run. Target: ingest >= 0.5 x noop x 100 (`ingest_ratio` >= 0.5).
- `observe_p99_ms`: the scratchpad's CPU time per event (`Scratchpad.observe`), p99 over a
  realistic mix. Target <= 0.2 ms (the seeds' budget is 2 ms).
- `finalize_ms`: the promotion pipeline for a 2,000-event build session, no LLM, in a fresh
  project each time (median of --finalize-runs). Target <= 100 ms.
With --json the last line is one JSON object.
"""

from __future__ import annotations

import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

from django.core.management.base import BaseCommand
from django.test.utils import override_settings

from apps.observer import services
from apps.observer.api import EventIn
from apps.observer.scratchpad import Scratchpad
from apps.observer.traces import Trace
from apps.tenants import services as tenant_services
from apps.tenants.models import Organization, Project
from apps.tenants.principal import SYSTEM, Principal

FILES = [f"shop/{module}/{name}.py" for module in ("orders", "payments", "catalog", "accounts") for name in
         ("models", "views", "services", "serializers", "signals", "admin", "urls", "tasks", "forms", "utils")]  # fmt: skip


def realistic_trace(n_events: int, seed: int = 7) -> Trace:
    """About `n_events` events: reads, edits, greps, globs, test runs with errors, reasoning
    with the odd self-correction, tokens per step."""
    rng = random.Random(seed)
    trace = Trace(tokens=2500, seconds_per_step=4)
    trace.plan(60)
    while len(trace.events) < n_events:
        roll = rng.random()
        path = rng.choice(FILES)
        if roll < 0.40:
            trace.read(path, "from shop.orders.models import Order\nimport json\n")
        elif roll < 0.55:
            trace.edit(path)
        elif roll < 0.65:
            trace.grep(rng.choice(["Order", "refund", "def save", "signal", "TODO"]), path)
        elif roll < 0.70:
            trace.glob("shop/**/*.py", rng.sample(FILES, 8))
        elif roll < 0.80:
            failed = rng.random() < 0.3
            trace.bash(
                "pytest tests/orders -q", "AssertionError: 3 != 4" if failed else "12 passed", error=failed
            )
        elif roll < 0.97:
            trace.think(rng.choice([
                "Now I will update the serializer to include the discount.",
                "Let me check how refunds are created before changing the service.",
                "Actually, totals are computed in services.py not in models.py.",
                "The test expects cents, so I convert before comparing.",
            ]))  # fmt: skip
        else:
            trace.note(
                "gotcha",
                f"Fact {len(trace.events)}: {rng.choice(['cents', 'signals', 'admin'])} matter",
                [path],
            )
    trace.events = trace.events[:n_events]
    return trace


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Command(BaseCommand):
    help = "Benchmark observer ingest, CPU per event and finalize."

    def add_arguments(self, parser):
        parser.add_argument("--batches", type=int, default=200)
        parser.add_argument("--noop", type=int, default=400)
        parser.add_argument("--finalize-runs", type=int, default=5)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args, **options):
        org = Organization.objects.create(name="bench ingest", slug=f"bench-obs-{uuid.uuid4().hex[:10]}")
        try:
            figures = self._run(org, options)
        finally:
            org.delete()
        if not options["json"]:
            for key, value in figures.items():
                self.stdout.write(f"{key:>24}: {value}")
        self.stdout.write(json.dumps(figures))

    def _run(self, org: Organization, options) -> dict[str, Any]:
        figures: dict[str, Any] = {}
        figures.update(self._observe_cpu())
        figures.update(self._finalize(org, options["finalize_runs"]))
        figures.update(self._http(org, options["batches"], options["noop"]))
        return figures

    # ------------------------------------------------------------ CPU per event

    def _observe_cpu(self) -> dict[str, Any]:
        events = [
            EventIn.model_validate(e).model_dump(exclude_none=True) for e in realistic_trace(20_000).events
        ]
        pad = Scratchpad()
        timings = []
        clock = time.perf_counter_ns
        for event in events:
            pad.accept(event["seq"])
            began = clock()
            pad.observe(event)
            timings.append(clock() - began)
        timings.sort()
        p99 = timings[int(len(timings) * 0.99)] / 1e6
        return {
            "observe_events": len(events),
            "observe_p50_ms": round(timings[len(timings) // 2] / 1e6, 4),
            "observe_p99_ms": round(p99, 4),
            "observe_target_ms": 0.2,
            "observe_met": p99 <= 0.2,
        }

    # ------------------------------------------------------------ finalize

    def _finalize(self, org: Organization, runs: int) -> dict[str, Any]:
        from apps.memories.embedding.providers import embed_cached, get_provider

        embed_cached([f"warm up {uuid.uuid4()}"], get_provider())  # load the model outside the timing
        events = [
            EventIn.model_validate(e).model_dump(exclude_none=True) for e in realistic_trace(2000).events
        ]
        timings, created = [], []
        with override_settings(OPENAI_API_KEY="", EMBEDDING_MODE="async"):
            for run in range(runs + 1):
                project = Project.objects.create(
                    organization=org, name=f"finalize {run}", slug=f"finalize-{run}"
                )
                session = services.session_open(project=project, actor=SYSTEM, data={"task": "add discounts"})
                for start in range(0, len(events), 100):
                    services.events_ingest(session=session, events=events[start : start + 100])
                services.validation_record(
                    session=session, actor=SYSTEM, passed=True, work_unit="", report=""
                )
                session.refresh_from_db()
                session.status = "finalizing"
                session.outcome = "success"
                session.save(update_fields=["status", "outcome"])
                began = time.perf_counter()
                result = services.session_finalize(session.id)
                elapsed = (time.perf_counter() - began) * 1000
                if run:  # the first run warms caches and connections
                    timings.append(elapsed)
                    created.append(len(result.created) + len(result.reinforced))
        median = statistics.median(timings)
        return {
            "finalize_events": len(events),
            "finalize_ms": round(median, 1),
            "finalize_max_ms": round(max(timings), 1),
            "finalize_memories": created[0] if created else 0,
            "finalize_target_ms": 100,
            "finalize_met": median <= 100,
        }

    # ------------------------------------------------------------ HTTP

    def _http(self, org: Organization, batches: int, noop: int) -> dict[str, Any]:
        import httpx

        project = Project.objects.create(organization=org, name="ingest", slug="ingest")
        tenant_services.organization_limits_lift(organization=org)
        _, key = tenant_services.api_key_create(
            organization=org, actor=Principal(), name="bench", scopes=["observer:write", "memories:read"],
            check_permission=False,
        )  # fmt: skip
        port = _free_port()
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "memorysaas.settings.local"),
        }
        server = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "memorysaas.asgi:application"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}/api/v1"
        headers = {"Authorization": f"Bearer {key}"}
        try:
            with httpx.Client(headers=headers, timeout=30) as client:
                deadline = time.monotonic() + 60
                while True:
                    try:
                        if client.post(f"{base}/ping").status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    if time.monotonic() > deadline:
                        raise RuntimeError("daphne did not start")
                    time.sleep(0.2)
                session = client.post(f"{base}/projects/{project.id}/sessions", json={"task": "bench"}).json()
                events = realistic_trace(batches * 100, seed=11).events
                bodies = [json.dumps({"events": events[i : i + 100]}) for i in range(0, len(events), 100)]
                for _ in range(20):  # warm up both paths
                    client.post(f"{base}/ping")
                began = time.perf_counter()
                for _ in range(noop):
                    client.post(f"{base}/ping")
                noop_rps = noop / (time.perf_counter() - began)
                url = f"{base}/sessions/{session['id']}/events"
                began = time.perf_counter()
                for body in bodies:
                    response = client.post(url, content=body, headers={"Content-Type": "application/json"})
                    if response.status_code != 200:
                        raise RuntimeError(f"ingest failed: {response.status_code} {response.text[:200]}")
                ingest_s = time.perf_counter() - began
        finally:
            server.terminate()
            server.wait(timeout=20)
        events_per_s = len(events) / ingest_s
        target = 0.5 * noop_rps * 100
        return {
            "server": "daphne, 1 process, 1 keep-alive client",
            "noop_requests_per_s": round(noop_rps, 1),
            "ingest_batches": len(bodies),
            "ingest_events_per_s": round(events_per_s),
            "ingest_batch_ms": round(ingest_s / len(bodies) * 1000, 2),
            "ingest_target_events_per_s": round(target),
            "ingest_ratio": round(events_per_s / (noop_rps * 100), 3),
            "ingest_met": events_per_s >= target,
        }
