"""Many agents at once against a whole deployment, driven by locust (docs/scaling.md).

Makes a bench organization (its limits lifted: what is measured is the service, not how soon a
key is throttled) whose project holds --memories memories, one key per agent, then starts a
layout of processes on the configured database (`--topology make-run`: one daphne and one
worker cluster, no Redis; `scaled`: two of each sharing Redis) or measures the servers at --url,
and runs `locust --headless` with --users agents (apps/bench/locustfile.py: each sends a hook
delivery batch every second, a search and a context call every 10 s) for --duration seconds.

Meanwhile it scrapes the first server's /metrics every --sample-every seconds: queue depth and
oldest task age per lane, the embedding backlog, the load average. Prints, per endpoint,
requests, failures, throughput and p50/p95/p99 (locust's), then the samples, each process's CPU
use and resident memory at the end; with --json the last line is one JSON object.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError
from django.test.utils import override_settings
from prometheus_client.parser import text_string_to_metric_families

from apps.bench import topology
from apps.bench.synthetic import Corpus
from apps.memories.drafts import MemoryDraft
from apps.memories.services import memories_create_batch
from apps.tenants.models import Organization, Project
from apps.tenants.principal import SYSTEM
from apps.tenants.services import api_key_create, organization_limits_lift

LOCUSTFILE = Path(__file__).resolve().parents[2] / "locustfile.py"
SAMPLED = (
    "memorysaas_queue_depth",
    "memorysaas_queue_oldest_task_age_seconds",
    "memorysaas_embedding_backlog",
)


class Command(BaseCommand):
    help = "Agents at load (locust, headless): throughput, p50/p95/p99 per endpoint, errors, queue depths."

    def add_arguments(self, parser):
        parser.add_argument("--users", type=int, default=20, help="Simulated agents.")
        parser.add_argument("--duration", type=int, default=30, help="Seconds of load.")
        parser.add_argument("--spawn-rate", type=float, default=20.0, help="Agents started per second.")
        parser.add_argument("--batch", type=int, default=1, help="Hook deliveries per agent per second.")
        parser.add_argument("--topology", choices=topology.LAYOUTS, default="make-run")
        parser.add_argument("--url", action="append", help="Measure these servers instead (repeatable).")
        parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/0")
        parser.add_argument("--memories", type=int, default=120, help="Memories in the bench project.")
        parser.add_argument("--sample-every", type=float, default=5.0, help="Seconds between samples.")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--json", action="store_true", help="End with one JSON line.")
        parser.add_argument("--keep", action="store_true", help="Keep the bench organization.")

    def handle(self, *args, **opts):
        self.say = self.stdout.write
        logging.getLogger("httpx").setLevel(logging.WARNING)
        started = time.perf_counter()
        with override_settings(EMBEDDING_MODE="sync"):
            org, project, keys, prompts = self._bench(opts)
        self.say(
            f"made the bench project ({opts['memories']} memories) in {time.perf_counter() - started:.1f}s"
        )
        layout = None
        try:
            if opts["url"]:
                urls = opts["url"]
            else:
                layout = topology.start(opts["topology"], redis_url=opts["redis_url"], env={})
                urls = layout.urls
                self.say(f"{opts['topology']}: {', '.join(urls)} (+{len(layout.workers)} worker cluster(s))")
            self._warm(urls, project, keys[0], prompts[0])
            result = self._run(urls, project, keys, prompts, opts, layout)
        finally:
            if layout is not None:
                layout.stop()
            if not opts["keep"]:
                org.delete()
        self._show(result)
        if opts["json"]:
            self.stdout.write(json.dumps(result, sort_keys=True, default=str))

    # ------------------------------------------------------------ setup

    def _bench(self, opts) -> tuple[Organization, Project, list[str], list[str]]:
        corpus = Corpus(opts["seed"])
        suffix = uuid.uuid4().hex[:6]
        org = Organization.objects.create(name=f"load bench {suffix}", slug=f"load-bench-{suffix}")
        organization_limits_lift(organization=org)
        project = Project.objects.create(organization=org, name="load bench", slug=f"load-bench-{suffix}")
        memories = corpus.memories(opts["memories"], corpus.bases(max(10, opts["memories"] // 3)))
        for start in range(0, len(memories), 200):
            drafts = [
                MemoryDraft(content=m.content, type=m.type, related_files=m.related_files, confidence=0.9)
                for m in memories[start : start + 200]
            ]
            memories_create_batch(project=project, actor=SYSTEM, drafts=drafts)
        keys = [
            api_key_create(
                organization=org, actor=SYSTEM, name=f"agent {n}", scopes=["observer:write", "memories:read"],
                project=project, check_permission=False,
            )[1]
            for n in range(opts["users"])
        ]  # fmt: skip
        prompts = [text for text, _ in corpus.bases(50)]
        return org, project, keys, prompts

    def _warm(self, urls: list[str], project: Project, key: str, prompt: str) -> None:
        """Until each server has its local models: a context call answered within 500 ms, three
        times in a row (the first calls wait for the models to load)."""
        for url in urls:
            quick, began = 0, time.monotonic()
            while quick < 3 and time.monotonic() - began < 300:
                t = time.perf_counter()
                try:
                    response = httpx.post(
                        f"{url}/api/v1/projects/{project.id}/context",
                        json={"task": prompt},
                        headers={"Authorization": f"Bearer {key}"},
                        timeout=120,
                    )
                except httpx.HTTPError:  # (still loading the models on a busy machine)
                    quick = 0
                    continue
                fast = response.status_code == 200 and time.perf_counter() - t < 0.5
                quick = quick + 1 if fast else 0
            self.say(f"{url} warm after {time.monotonic() - began:.1f}s")

    # ------------------------------------------------------------ the run

    def _run(self, urls, project, keys, prompts, opts, layout) -> dict[str, Any]:
        workdir = Path(tempfile.mkdtemp(prefix="bench-load-"))
        plan = workdir / "plan.json"
        plan.write_text(
            json.dumps(
                {
                    "hosts": urls,
                    "keys": keys,
                    "project_id": str(project.id),
                    "prompts": prompts,
                    "batch": opts["batch"],
                }
            )
        )
        samples: list[dict[str, Any]] = []
        stop = threading.Event()
        sampler = threading.Thread(target=self._sample, args=(urls[0], opts["sample_every"], samples, stop))
        cpu_before = layout.cpu_seconds() if layout else {}
        began = time.monotonic()
        sampler.start()
        try:
            locust = subprocess.run(
                [
                    sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--headless",
                    "--users", str(opts["users"]), "--spawn-rate", str(opts["spawn_rate"]),
                    "--run-time", f"{opts['duration']}s", "--stop-timeout", "10",
                    "--csv", str(workdir / "load"), "--only-summary", "--loglevel", "WARNING",
                    "--host", urls[0],
                ],
                env={**os.environ, "BENCH_PLAN": str(plan)},
                capture_output=True,
                text=True,
                timeout=opts["duration"] + 180,
            )  # fmt: skip
        finally:
            stop.set()
            sampler.join()
        wall = time.monotonic() - began
        stats_file = workdir / "load_stats.csv"
        if not stats_file.exists():
            raise CommandError(f"locust wrote no figures:\n{locust.stderr[-3000:]}")
        endpoints = _endpoints(stats_file)
        result: dict[str, Any] = {
            "users": opts["users"],
            "duration_s": opts["duration"],
            "topology": "url" if opts["url"] else opts["topology"],
            "servers": len(urls),
            "endpoints": endpoints,
            "requests": endpoints["Aggregated"]["requests"],
            "errors": endpoints["Aggregated"]["failures"],
            "throughput_rps": endpoints["Aggregated"]["rps"],
            "error_kinds": _failures(workdir / "load_failures.csv"),
            "samples": samples,
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
            "cpu_count": os.cpu_count(),
        }
        if layout is not None:
            used = layout.cpu_seconds()
            result["process_cpu_share"] = {
                name: round((used.get(name, 0.0) - cpu_before.get(name, 0.0)) / wall, 2) for name in used
            }
            result["process_rss_mb"] = {
                name: topology.process_tree_rss_mb(pid) for name, pid in layout.processes().items()
            }
        return result

    def _sample(self, url: str, every: float, samples: list, stop: threading.Event) -> None:
        began = time.monotonic()
        while not stop.is_set():
            sample: dict[str, Any] = {
                "t": round(time.monotonic() - began, 1),
                "load1": round(os.getloadavg()[0], 2),
            }
            with contextlib.suppress(httpx.HTTPError, ValueError):
                text = httpx.get(f"{url}/metrics", timeout=10).text
                for family in text_string_to_metric_families(text):
                    for s in family.samples:
                        if s.name in SAMPLED:
                            lane = s.labels.get("lane")
                            sample[f"{s.name.removeprefix('memorysaas_')}{'.' + lane if lane else ''}"] = (
                                s.value
                            )
            samples.append(sample)
            stop.wait(every)

    def _show(self, result: dict[str, Any]) -> None:
        self.say(
            f"{'endpoint':<22}{'requests':>9}{'fail':>6}{'req/s':>8}{'p50':>8}{'p95':>8}{'p99':>8}  (ms)"
        )
        for name, e in result["endpoints"].items():
            self.say(
                f"{name:<22}{e['requests']:>9}{e['failures']:>6}{e['rps']:>8}{e['p50']:>8}{e['p95']:>8}{e['p99']:>8}"
            )
        for key in ("throughput_rps", "requests", "errors", "error_kinds", "loadavg_end"):
            self.say(f"{key:>18}: {result[key]}")
        for key in ("process_cpu_share", "process_rss_mb"):
            if key in result:
                self.say(f"{key:>18}: {result[key]}")
        for sample in result["samples"]:
            self.say("  " + " ".join(f"{k}={v}" for k, v in sample.items()))


def _endpoints(path: Path) -> dict[str, dict[str, Any]]:
    figures = {}
    with path.open() as handle:
        for row in csv.DictReader(handle):
            figures[row["Name"]] = {
                "requests": int(row["Request Count"]),
                "failures": int(row["Failure Count"]),
                "rps": round(float(row["Requests/s"]), 1),
                "p50": _number(row["50%"]),
                "p95": _number(row["95%"]),
                "p99": _number(row["99%"]),
            }
    return figures


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _failures(path: Path) -> dict[str, int]:
    if not path.exists():
        return {}
    with path.open() as handle:
        return {
            f"{row['Name']}: {row['Error']}"[:200]: int(row["Occurrences"]) for row in csv.DictReader(handle)
        }
