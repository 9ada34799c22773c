"""`manage.py bench_graph [--json]`: index Django's own source and measure.

Prints files_per_s, total_s, nodes, edges, closure_rows, peak_rss_mb, parse_only_s and their
ratio (target ≤ 3.3). parse_only_s is tree-sitter parsing of the same files and nothing else,
in this one process, in the same run. total_s is the wall time of `index_directory` until its
transaction has committed, so nodes, edges, closure rows and chunks (with their keyword vectors)
are stored and queryable; the index parses in `parse_processes` forked processes (one per CPU
unless GRAPH_PARSE_PROCESSES says otherwise), so the ratio compares a parallel index with a
single-process parse. On a shared machine wall times move with the load, so the CPU seconds
behind them are printed too: the indexing process's and its parsing processes' (index_cpu_s)
and its database backend's (db_cpu_s, read from /proc when the server is local, else null),
with the 1-minute load average when the run began; peak_rss_mb is this process's, and
parse_process_peak_rss_mb the largest parsing process's (pages shared with this one counted
in both). Then reindex_one_file_ms after touching one file (target ≤ 200), impact_p95_ms at
depth 3 (target ≤ 5), and the import precision/recall against `ast` + importlib (target ≥ 0.97
each). The last line is one JSON object.
"""

from __future__ import annotations

import json
import os
import random
import resource
import statistics
import time
import uuid

import django
from django.core.management.base import BaseCommand
from django.db import connection

from apps.graph import importcheck, selectors, services
from apps.graph.extract import language_of, parse_only
from apps.graph.models import GraphEdge
from apps.tenants.models import Organization, Project


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(round(0.95 * len(ordered))) - 1)]


def _own_cpu() -> float:
    """CPU seconds of this process and of the children it has waited for (the parsing processes)."""
    times = os.times()
    return times.user + times.system + times.children_user + times.children_system


def _backend_cpu_reader():
    """A function returning the CPU seconds this connection's PostgreSQL backend has used, or
    None when the server's processes cannot be seen from here."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        stat = f"/proc/{cursor.fetchone()[0]}/stat"

    def read() -> float | None:
        try:
            with open(stat) as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    return read


class Command(BaseCommand):
    help = "Benchmark the knowledge graph on the installed Django package."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--json", action="store_true", help="only the JSON line")
        parser.add_argument("--queries", type=int, default=300)
        parser.add_argument("--keep", action="store_true", help="keep the benchmark project")

    def handle(self, *args, queries: int = 300, keep: bool = False, **options) -> None:
        root = os.path.dirname(os.path.dirname(django.__file__))
        org = Organization.objects.create(name="bench", slug=f"bench-graph-{uuid.uuid4().hex[:8]}")
        project = Project.objects.create(organization=org, name="django", slug="django")
        try:
            figures = self._run(project, root, queries)
        finally:
            if not keep:
                org.delete()
        if not options["json"]:
            for key, value in figures.items():
                self.stdout.write(f"{key:>24}: {value}")
        self.stdout.write(json.dumps(figures))

    def _run(self, project: Project, root: str, queries: int) -> dict:
        tree = services.read_tree(root, include=["django"])
        started = time.perf_counter()
        for path, data in tree.files.items():
            parse_only(data, language_of(path))
        parse_s = time.perf_counter() - started

        load = os.getloadavg()[0]
        backend_cpu = _backend_cpu_reader()
        db_started, cpu_started = backend_cpu(), _own_cpu()
        started = time.perf_counter()
        result = services.index_directory(project, root, include=["django"])
        total_s = time.perf_counter() - started
        index_cpu_s = _own_cpu() - cpu_started
        db_cpu_s = None if db_started is None else backend_cpu() - db_started
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        child_rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024

        rng = random.Random(7)
        files = sorted(p for p in tree.files if p.endswith(".py"))
        reindex = []
        for path in rng.sample(files, 10):
            touched = tree.files[path] + f"\n# touched {uuid.uuid4().hex}\n".encode()
            started = time.perf_counter()
            services.index_changes(project, changed={path: touched})
            reindex.append((time.perf_counter() - started) * 1000)

        targets = rng.choices(files, k=queries)
        latencies = []
        with connection.cursor():
            for target in targets:
                started = time.perf_counter()
                selectors.impact(project=project, target=target, depth=3)
                latencies.append((time.perf_counter() - started) * 1000)

        graph_edges = set(
            GraphEdge.objects.filter(
                project=project, kind="imports", source__kind="file", target__kind="file"
            ).values_list("source__path", "target__path")
        )
        reference, excluded, count = importcheck.reference_edges(root, "django")
        check = importcheck.compare(graph_edges, reference, excluded, count)
        return {
            "files": result.files,
            "files_per_s": round(result.files / total_s, 1),
            "total_s": round(total_s, 3),
            "nodes": result.nodes,
            "edges": result.edges,
            "closure_rows": result.closure_rows,
            "chunks": result.chunks,
            "skipped": result.skipped_total,
            "peak_rss_mb": round(rss_mb, 1),
            "parse_process_peak_rss_mb": round(child_rss_mb, 1),
            "parse_only_s": round(parse_s, 3),
            "parse_processes": services.parse_processes(),
            "ratio": round(total_s / parse_s, 2),
            "index_cpu_s": round(index_cpu_s, 3),
            "db_cpu_s": None if db_cpu_s is None else round(db_cpu_s, 2),
            "load_avg_1m": round(load, 2),
            "reindex_one_file_ms": round(statistics.median(reindex), 1),
            "reindex_one_file_max_ms": round(max(reindex), 1),
            "impact_p50_ms": round(statistics.median(latencies), 2),
            "impact_p95_ms": round(p95(latencies), 2),
            "import_precision": check.precision,
            "import_recall": check.recall,
            "import_edges_graph": check.graph_edges,
            "import_edges_reference": check.reference_edges,
            "import_files_excluded": check.files_excluded,
        }
