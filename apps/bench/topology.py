"""The process layouts `bench_load` measures, started on the command's own database.

- `make-run`: one daphne and one django-q2 cluster, no Redis (the ORM broker, an in-process
  channel layer), as `make run` starts them.
- `scaled`: two daphne and two clusters sharing Redis (broker, channel layer, cache), as two web
  and two worker pods would; the agents are spread over the two web processes.

The processes of a layout write their metrics into one PROMETHEUS_MULTIPROC_DIR, so any web
process's /metrics adds them up (as under `make run`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field

import psutil
from django.conf import settings

from apps.bench.daphne import ROOT, Server, database_url

LAYOUTS = ("make-run", "scaled")


@dataclass
class Topology:
    servers: list[Server] = field(default_factory=list)
    workers: list[subprocess.Popen] = field(default_factory=list)
    metrics_dir: str = ""

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.servers]

    def processes(self) -> dict[str, int]:
        """Each process's name → pid (a cluster's own worker processes are its children)."""
        named = {f"web{n + 1}": server.process.pid for n, server in enumerate(self.servers)}
        named.update({f"cluster{n + 1}": worker.pid for n, worker in enumerate(self.workers)})
        return named

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time each process (with its children) has used so far."""
        used = {}
        for name, pid in self.processes().items():
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                family = [process, *process.children(recursive=True)]
                used[name] = sum(sum(p.cpu_times()[:2]) for p in family if p.is_running())
        return used

    def stop(self) -> None:
        for worker in self.workers:
            worker.terminate()
        for server in self.servers:
            server.stop()
        for worker in self.workers:
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        shutil.rmtree(self.metrics_dir, ignore_errors=True)


def start(layout: str, *, redis_url: str, env: dict[str, str]) -> Topology:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")
    count = 2 if layout == "scaled" else 1
    topology = Topology(metrics_dir=tempfile.mkdtemp(prefix="bench-load-metrics-"))
    shared = {
        **env,
        "PROMETHEUS_MULTIPROC_DIR": topology.metrics_dir,
        "REDIS_URL": redis_url if layout == "scaled" else "",
        "Q_BROKER": "redis" if layout == "scaled" else "orm",
        "LOG_LEVEL": "WARNING",
        "ACCESS_LOG": "0",
    }
    try:
        for n in range(count):
            # A cluster per queue lane, as `make run` and deploy/ start them: a lane with none
            # would run nothing (the bulk lane's embeddings).
            for lane in ("interactive", "bulk"):
                topology.workers.append(_cluster({**shared, "Q_LANE": lane}))
            topology.servers.append(
                Server(settings_module="memorysaas.settings.local", env=shared, name=f"bench-load-{n + 1}")
            )
        for server in topology.servers:
            server.wait_until_serving()
    except BaseException:
        topology.stop()
        raise
    return topology


def _cluster(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "manage.py", "qcluster"],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "memorysaas.settings.local",
            "DATABASE_URL": database_url(),
            "SECRET_KEY": settings.SECRET_KEY,
            "DEBUG": "0",
            **env,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def process_tree_rss_mb(pid: int) -> float:
    with contextlib.suppress(psutil.Error):
        process = psutil.Process(pid)
        return round(sum(p.memory_info().rss for p in [process, *process.children(recursive=True)]) / 2**20)
    return 0.0
