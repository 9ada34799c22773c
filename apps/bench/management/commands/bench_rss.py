"""What `make run`'s Python processes hold in memory at rest, after each has done its work once
(docs/benchmarks/README.md, "Memory at rest").

Starts the processes `make run` starts on the configured database — daphne and a django-q2
cluster (`--cluster NAME=VALUE,…` once per cluster to start several, each with that environment: one
per queue lane, say) — warms them as a user would (--memories
memories created over the API one request at a time, embedded by whichever workers take them; a
search for a query never seen, embedded by the web process), waits `--idle` seconds, and prints each process's resident set (RSS) and its
proportional share (PSS: pages shared between processes, such as a forked worker's, counted once
across them), whether it loaded a model, and the totals. With --json the last line is one JSON
object. The bench organization is deleted unless --keep.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.bench.daphne import ROOT, Server, database_url
from apps.tenants.models import Organization, Project
from apps.tenants.principal import SYSTEM
from apps.tenants.services import api_key_create, organization_limits_lift

MB = 1024 * 1024
# A process that mapped one of these has loaded a model's runtime.
MODEL_LIBRARIES = ("onnxruntime", "libtorch")


def _assignments(text: str) -> dict[str, str]:
    pairs = [part.partition("=") for part in text.split(",") if part.strip()]
    if any(not name.strip() or not sep for name, sep, _ in pairs):
        raise CommandError(f"--cluster takes NAME=VALUE pairs separated by commas, not {text!r}")
    return {name.strip(): value for name, _, value in pairs}


def _figures(process: psutil.Process, role: str) -> dict[str, Any]:
    full = process.memory_full_info()
    maps = Path(f"/proc/{process.pid}/maps").read_text(errors="replace")
    return {
        "pid": process.pid,
        "role": role,
        "command": " ".join(process.cmdline()[1:4]),
        "rss_mb": round(full.rss / MB, 1),
        "pss_mb": round(full.pss / MB, 1),
        "models": any(library in maps for library in MODEL_LIBRARIES),
        "torch": "libtorch" in maps,
    }


class Cluster:
    """`manage.py qcluster` with extra environment, its output in a log file."""

    def __init__(self, env: dict[str, str], base_env: dict[str, str]) -> None:
        self.env = env
        log_fd, self.log = tempfile.mkstemp(prefix="bench-rss-qcluster-", suffix=".log")
        self.process = subprocess.Popen(
            [sys.executable, "manage.py", "qcluster"],
            cwd=ROOT,
            env={**base_env, **env},
            stdout=log_fd,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        os.close(log_fd)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        Path(self.log).unlink(missing_ok=True)


class Command(BaseCommand):
    help = "Resident memory of make run's processes (daphne and the workers) at rest after warm-up."

    def add_arguments(self, parser):
        parser.add_argument(
            "--cluster",
            action="append",
            default=[],
            help="Start a qcluster with these NAME=VALUE environment settings (repeatable; default: one).",
        )
        parser.add_argument("--memories", type=int, default=4, help="Memories created to warm the workers.")
        parser.add_argument("--idle", type=float, default=10.0, help="Seconds at rest before reading.")
        parser.add_argument("--timeout", type=float, default=300.0, help="Most seconds for the warm-up.")
        parser.add_argument(
            "--server-settings",
            default=os.environ.get("DJANGO_SETTINGS_MODULE", "memorysaas.settings.local"),
            help="DJANGO_SETTINGS_MODULE of the processes this command starts.",
        )
        parser.add_argument("--json", action="store_true", help="End with one JSON line.")
        parser.add_argument("--keep", action="store_true", help="Keep the bench organization.")

    def handle(self, *args, **opts):
        self.say = self.stdout.write
        logging.getLogger("httpx").setLevel(logging.WARNING)  # (a line per request otherwise)
        clusters_env = [_assignments(text) for text in opts["cluster"]] or [{}]
        org, project, key = self._tenant()
        base_env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": opts["server_settings"],
            "DATABASE_URL": database_url(),
            "SECRET_KEY": settings.SECRET_KEY,
            "DEBUG": "0",
            "PYTHONUNBUFFERED": "1",
            "RATE_LIMIT_ENABLED": "0",
            "EMBEDDING_MODE": "async",
            # A queue of its own: another cluster on the same Redis takes none of its tasks.
            "Q_CLUSTER_NAME": f"bench-rss-{uuid.uuid4().hex[:8]}",
        }
        server = clusters = None
        try:
            server = Server(
                settings_module=opts["server_settings"],
                env={
                    key: base_env[key] for key in ("EMBEDDING_MODE", "Q_CLUSTER_NAME", "RATE_LIMIT_ENABLED")
                },
                name="bench-rss",
            )
            clusters = [Cluster(env, base_env) for env in clusters_env]
            server.wait_until_serving()
            self.say(f"daphne on {server.url}, {len(clusters)} cluster(s)")
            warmed = self._warm(server.url, project, key, opts["memories"], opts["timeout"])
            self.say(f"warm: {warmed}; idle for {opts['idle']:.0f}s")
            time.sleep(opts["idle"])  # (at rest: what a quiet service holds)
            rows = self._read(server, clusters)
        finally:
            for cluster in clusters or []:
                cluster.stop()
            if server is not None:
                server.stop()
            if not opts["keep"]:
                org.delete()
        result = {
            "processes": rows,
            "total_rss_mb": round(sum(r["rss_mb"] for r in rows), 1),
            "total_pss_mb": round(sum(r["pss_mb"] for r in rows), 1),
            "with_models": sum(r["models"] for r in rows),
            "with_torch": sum(r["torch"] for r in rows),
            **warmed,
        }
        for row in rows:
            self.say(
                f"{row['pid']:>8} {row['role']:<10} rss {row['rss_mb']:>7.1f} MB  pss {row['pss_mb']:>7.1f} MB"
                f"  {'models' if row['models'] else '      '} {'torch' if row['torch'] else ''}  {row['command']}"
            )
        self.say(f"total rss {result['total_rss_mb']} MB, total pss {result['total_pss_mb']} MB")
        if opts["json"]:
            self.stdout.write(json.dumps(result, sort_keys=True))

    def _tenant(self) -> tuple[Organization, Project, str]:
        suffix = uuid.uuid4().hex[:6]
        org = Organization.objects.create(name=f"rss bench {suffix}", slug=f"rss-bench-{suffix}")
        organization_limits_lift(organization=org)
        project = Project.objects.create(organization=org, name="rss bench", slug=f"rss-bench-{suffix}")
        _, key = api_key_create(
            organization=org, actor=SYSTEM, name="rss bench", scopes=["memories:read", "memories:write"],
            project=project, check_permission=False,
        )  # fmt: skip
        return org, project, key

    def _warm(self, url: str, project: Project, key: str, count: int, timeout: float) -> dict[str, Any]:
        """Memories embedded by the workers, then a search embedded by the web process."""
        headers = {"Authorization": f"Bearer {key}"}
        started = time.monotonic()
        with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
            waiting = set()
            for n in range(count):
                created = client.post(
                    f"/api/v1/projects/{project.id}/memories",
                    json={
                        "type": "gotcha",
                        "content": f"Deploys rotate the cache key prefix {uuid.uuid4().hex[:8]}: warm it first.",
                        "related_files": [f"deploy/cache{n}.py"],
                    },
                )
                if created.status_code != 201:
                    raise CommandError(
                        f"creating a memory answered {created.status_code}: {created.text[:300]}"
                    )
                waiting.add(created.json()["id"])
            while waiting and time.monotonic() - started < timeout:
                for memory_id in list(waiting):
                    status = client.get(f"/api/v1/memories/{memory_id}").json().get("embedding_status")
                    if status == "failed":
                        raise CommandError(f"embedding memory {memory_id} failed (see the worker's log)")
                    if status == "ready":
                        waiting.discard(memory_id)
                time.sleep(0.5)  # (polling the workers' progress, as a client would)
            if waiting:
                raise CommandError(f"{len(waiting)} memories were never embedded within {timeout:.0f}s")
            embedded_s = time.monotonic() - started
            found = client.post(
                f"/api/v1/projects/{project.id}/search",
                json={"query": f"why does the cache key change {uuid.uuid4().hex[:8]}", "limit": 5},
            )
            if found.status_code != 200:
                raise CommandError(f"the search answered {found.status_code}: {found.text[:300]}")
        return {"embedded_after_s": round(embedded_s, 1), "search_hits": len(found.json()["results"])}

    def _read(self, server: Server, clusters: list[Cluster]) -> list[dict[str, Any]]:
        rows = [_figures(psutil.Process(server.process.pid), "web")]
        for n, cluster in enumerate(clusters):
            lane = ",".join(f"{k}={v}" for k, v in cluster.env.items()) or f"cluster {n + 1}"
            parent = psutil.Process(cluster.process.pid)
            for process in [parent, *parent.children(recursive=True)]:
                with contextlib.suppress(psutil.NoSuchProcess):
                    rows.append(_figures(process, lane))
        return rows
