"""`manage.py bench_lanes [--tasks 5000] [--json] [--no-compare]`: how long a small graph index
waits behind a backlog of embedding tasks, with queue lanes and with one queue.

Each run stores `--tasks` memories and queues one embedding task per memory, starts real worker
clusters (`manage.py qcluster`, as `make run` does) once the backlog is queued, waits until they
have begun on it, then queues an incremental index of three small files and waits for it:
- `lanes`: the embeddings on the bulk lane, the index on the interactive lane, a cluster each
  (Q_INTERACTIVE_WORKERS + Q_BULK_WORKERS workers);
- `one_queue` (unless --no-compare): everything on one queue, served by one cluster with as many
  workers, as before the lanes; it gives up after --timeout seconds (then `wait_s` is null).
For each it prints `wait_s` (queued → a worker has begun the index, seen as the job leaving
`queued`, polled every 20 ms; target ≤ 2 s with lanes), `index_s` (its run), and the embedding
tasks still waiting when the index finished (`bulk_left`). The embedder is the configured one (EMBEDDING_PROVIDER). The run uses queues of
its own (a Q_PREFIX made for it), so workers already serving the database take none of its
tasks; what it stored is deleted at the end. The last line is one JSON object.
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

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from apps.bench.daphne import ROOT, database_url
from apps.graph.models import IndexJob, IndexStatus
from apps.memories.models import EmbeddingStatus, Memory
from apps.memories.validation import MemoryDraft
from apps.tenants.models import Organization, Project
from apps.tenants.principal import SYSTEM

# (What it runs: the tasks as the services queue them.)
EMBED = "apps.memories.tasks.embed_memories"
INDEX = "apps.graph.tasks.index_job_task"
BATCH = 500
STARTUP_SECONDS = 900
FILES = {
    "shop/totals.py": "from shop.money import cents\n\n\ndef total(items):\n    return cents(sum(i.price for i in items))\n",
    "shop/money.py": "def cents(value):\n    return int(round(value * 100))\n",
    "shop/refunds.py": "from shop.totals import total\n\n\ndef refund(order):\n    return -total(order.items)\n",
}


class Command(BaseCommand):
    help = "Time a small graph index queued behind thousands of embedding tasks, with and without lanes."

    def add_arguments(self, parser):
        parser.add_argument("--tasks", type=int, default=5000, help="embedding tasks queued first")
        parser.add_argument("--json", action="store_true", help="print only the JSON object")
        parser.add_argument("--no-compare", action="store_true", help="skip the one-queue run")
        parser.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for the index")

    def handle(self, *args, **options):
        if not os.environ.get("BENCH_LANES_PREFIX"):
            return self._again_with_queues_of_its_own(options)
        self.quiet = options["json"]
        logging.getLogger("django-q").setLevel(logging.WARNING)  # (a line per task queued)
        org = Organization.objects.create(name="bench", slug=f"bench-lanes-{uuid.uuid4().hex[:8]}")
        project = Project.objects.create(organization=org, name="lanes", slug="lanes")
        result = {"tasks": options["tasks"], "embedding_provider": settings.EMBEDDING_PROVIDER}
        try:
            result["lanes"] = self._run(project, options["tasks"], lanes=True, timeout=options["timeout"])
            if not options["no_compare"]:
                result["one_queue"] = self._run(
                    project, options["tasks"], lanes=False, timeout=options["timeout"]
                )
        finally:
            org.delete()
        self.stdout.write(json.dumps(result))

    def _again_with_queues_of_its_own(self, options: dict) -> None:
        """Run this command again in a child whose Q_PREFIX is new: its task packages are signed
        with the prefix, and its workers must share it while no others do."""
        prefix = f"bench-lanes-{uuid.uuid4().hex[:8]}"
        env = {**os.environ, "BENCH_LANES_PREFIX": prefix, "Q_PREFIX": prefix, "DATABASE_URL": database_url()}
        env.pop("Q_LANE", None)
        args = ["--tasks", str(options["tasks"]), "--timeout", str(options["timeout"])]
        args += ["--json"] * options["json"] + ["--no-compare"] * options["no_compare"]
        code = subprocess.call([sys.executable, "manage.py", "bench_lanes", *args], cwd=ROOT, env=env)
        if code:
            raise CommandError(f"bench_lanes exited with {code}")

    def _say(self, text: str) -> None:
        if not self.quiet:
            self.stdout.write(text)

    # ------------------------------------------------------------------ one run

    def _run(self, project: Project, count: int, *, lanes: bool, timeout: float) -> dict:
        from memorysaas.kernel.queue import enqueue, lane_cluster

        name = "lanes" if lanes else "one_queue"
        backlog_lane = "bulk" if lanes else "interactive"
        ids = self._pending_memories(project, count)
        for memory_id in ids:
            enqueue(EMBED, [str(memory_id)], lane=backlog_lane)
        self._say(f"[{name}] {count} embedding tasks queued on the {backlog_lane} lane")
        workers = _Workers(lanes)
        try:
            workers.wait_until_running()
            # (Generous: a first embedding loads the models, and traces them to ONNX the first time.)
            self._wait(
                lambda: _pending(ids) < len(ids), STARTUP_SECONDS, "the workers began on the backlog", workers
            )
            job = IndexJob.objects.create(
                project=project,
                kind="incremental",
                batch={
                    "files": [{"path": p, "content": c} for p, c in FILES.items()],
                    "deleted": [],
                    "renamed": {},
                },
            )
            queued_at = time.monotonic()
            enqueue(INDEX, job.id)
            started = self._wait(
                lambda: _started(job.id), timeout, "the index started", workers, give_up=not lanes
            )
            started_at = time.monotonic()
            if started:
                self._wait(lambda: _done(job.id), timeout, "the index finished", workers)
            finished_at = time.monotonic()
            left = _pending(ids)
        finally:
            workers.stop()
            for lane in ("interactive", "bulk"):
                _purge(lane_cluster(lane))
        if not started:
            self._say(f"[{name}] the index had not started after {timeout:.0f} s")
            return {"wait_s": None, "index_s": None, "bulk_left": left, "gave_up_after_s": timeout}
        figures = {
            "wait_s": round(started_at - queued_at, 3),
            "index_s": round(finished_at - started_at, 3),
            "bulk_left": left,
        }
        self._say(f"[{name}] {figures}")
        return figures

    def _pending_memories(self, project: Project, count: int) -> list:
        """`count` memories waiting for their embedding, and no task queued for them yet."""
        from apps.memories.services import memories_create_batch
        from memorysaas.kernel.queue import lane_cluster

        stamp = uuid.uuid4().hex[:6]
        ids = []
        for start in range(0, count, BATCH):
            drafts = [
                MemoryDraft(
                    type="gotcha", content=f"Bench lanes fact {stamp}-{n}: the ledger closes at {n % 24}h."
                )
                for n in range(start, min(count, start + BATCH))
            ]
            ids += [m.id for m in memories_create_batch(project=project, actor=SYSTEM, drafts=drafts)]
        for lane in ("interactive", "bulk"):  # (the batches' own tasks: one per memory instead)
            _purge(lane_cluster(lane))
        return ids

    def _wait(self, condition, timeout: float, what: str, workers: _Workers, *, give_up: bool = False):
        deadline = time.monotonic() + timeout
        while True:
            workers.check()
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                if give_up:
                    return None
                raise CommandError(f"{what}: not after {timeout:.0f} s\n{workers.tails()}")
            time.sleep(0.02)  # (the pause between two polls: the resolution of wait_s)


def _pending(ids: list) -> int:
    return Memory.objects.filter(id__in=ids, embedding_status=EmbeddingStatus.PENDING).count()


def _started(job_id: int) -> bool:
    """The job left `queued`: a worker has begun it (the first thing the task does)."""
    return IndexJob.objects.filter(id=job_id).exclude(status=IndexStatus.QUEUED).exists()


def _done(job_id: int) -> bool:
    return IndexJob.objects.filter(id=job_id, status__in=(IndexStatus.DONE, IndexStatus.FAILED)).exists()


def _purge(cluster: str) -> None:
    from django_q.brokers import get_broker

    get_broker(cluster).purge_queue()


class _Workers:
    """`manage.py qcluster` processes: one per lane, or one for everything with as many workers."""

    def __init__(self, lanes: bool) -> None:
        workers = settings.Q_LANE_WORKERS
        plan = (
            [("interactive", workers["interactive"]), ("bulk", workers["bulk"])]
            if lanes
            else [("interactive", workers["interactive"] + workers["bulk"])]
        )
        self.processes: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        for lane, count in plan:
            fd, log = tempfile.mkstemp(prefix=f"bench-lanes-{lane}-", suffix=".log")
            env = {
                **os.environ,
                "Q_LANE": lane,
                f"Q_{lane.upper()}_WORKERS": str(count),
                "PYTHONUNBUFFERED": "1",
            }
            self.processes[lane] = subprocess.Popen(
                [sys.executable, "manage.py", "qcluster"],
                cwd=ROOT,
                env=env,
                stdout=fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            os.close(fd)
            self.logs[lane] = Path(log)

    def check(self) -> None:
        for lane, process in self.processes.items():
            if process.poll() is not None:
                raise CommandError(f"the {lane} cluster exited:\n{self.tails()}")

    def wait_until_running(self, timeout: float = STARTUP_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        while not all(b"running." in log.read_bytes() for log in self.logs.values()):
            self.check()
            if time.monotonic() > deadline:
                raise CommandError(f"the clusters did not start in {timeout:.0f} s\n{self.tails()}")
            time.sleep(0.1)  # (the pause between two polls)

    def tails(self) -> str:
        return "\n".join(
            f"--- {lane}\n{log.read_text(errors='replace')[-2000:]}" for lane, log in self.logs.items()
        )

    def stop(self) -> None:
        for process in self.processes.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=20)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        for log in self.logs.values():
            log.unlink(missing_ok=True)
