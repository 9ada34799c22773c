"""Replay recorded multi-session traces through the observer and compare what it promoted with
what each trace expects.

Every trace file (JSON, see apps/bench/fixtures/django_shop.py for how one is recorded)
holds sessions (open body, events, validation, completion), the memories expected back
(type + substrings, optionally tainted or of a given source) and texts that must never be
promoted. Each trace runs in a fresh project (deleted afterwards unless --keep), with background
tasks run inline. Prints expected vs promoted, then one JSON line: recall, precision and the
forbidden count over all traces.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django_q.conf import Conf

from apps.memories.models import Memory
from apps.memories.selectors import memories_of_project
from apps.observer import services
from apps.observer.api import EventIn
from apps.tenants.models import Organization, Project
from apps.tenants.principal import SYSTEM

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "traces"


def _text(memory: Memory) -> str:
    return " ".join([memory.content, json.dumps(memory.payload), " ".join(memory.related_files)]).lower()


def _matches(memory: Memory, spec: dict[str, Any]) -> bool:
    if "type" in spec and memory.type != spec["type"]:
        return False
    if "source" in spec and memory.source != spec["source"]:
        return False
    if "tainted" in spec and ("obs:tainted" in memory.tags) != spec["tainted"]:
        return False
    text = _text(memory)
    return all(part.lower() in text for part in spec.get("contains", []))


def replay(project: Project, trace: dict[str, Any]) -> float:
    """Run every session of `trace` in `project`; returns the slowest finalize in ms."""
    slowest = 0.0
    for session_spec in trace["sessions"]:
        session = services.session_open(project=project, actor=SYSTEM, data=session_spec["open"])
        events = [EventIn.model_validate(e).model_dump(exclude_none=True) for e in session_spec["events"]]
        for start in range(0, len(events), 100):
            services.events_ingest(session=session, events=events[start : start + 100])
        if session_spec.get("validation") is not None:
            v = session_spec["validation"]
            services.validation_record(
                session=session,
                actor=SYSTEM,
                passed=v["passed"],
                work_unit=v.get("work_unit", ""),
                report=v.get("report", ""),
            )
        complete = session_spec["complete"]
        began = time.perf_counter()
        services.session_complete(session=session, outcome=complete["outcome"], steps=complete.get("steps"))
        slowest = max(slowest, (time.perf_counter() - began) * 1000)
    return slowest


def trace_files(paths: list[str]) -> list[Path]:
    """The trace files named, and those in the directories named, in order, each once."""
    files: list[Path] = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found = sorted(path.glob("*.json"))
            if not found:
                raise CommandError(f"No trace files in {path}")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise CommandError(f"No such trace file or directory: {path}")
    return list(dict.fromkeys(files))


class Command(BaseCommand):
    help = "Replay observer traces and print expected vs promoted memories."

    def add_arguments(self, parser):
        parser.add_argument(
            "--traces",
            nargs="+",
            default=[str(DEFAULT_DIR)],
            help="trace JSON files, or directories of them (default: every trace in fixtures/traces)",
        )
        parser.add_argument("--keep", action="store_true", help="keep the evaluation projects")
        parser.add_argument("--json", action="store_true", help="only the final JSON line")

    def handle(self, *args, **options):
        files = trace_files(options["traces"])
        quiet = options["json"]
        Conf.SYNC = True  # finalize and synthesis run inline, in order
        found = expected = promoted = matched_promoted = forbidden_hits = 0
        per_trace = {}
        for path in files:
            trace = json.loads(path.read_text())
            org = Organization.objects.create(
                name=f"eval {trace['name']}", slug=f"eval-obs-{uuid.uuid4().hex[:10]}"
            )
            project = Project.objects.create(organization=org, name=trace["name"], slug="eval")
            try:
                slowest = replay(project, trace)
                memories = list(memories_of_project(project=project).order_by("created_at"))
                hits = []
                for spec in trace["expected"]:
                    match = next((m for m in memories if _matches(m, spec)), None)
                    hits.append((spec, match))
                bad = [
                    (spec, m) for spec in trace.get("forbidden", []) for m in memories if _matches(m, spec)
                ]
                useful = [
                    m
                    for m in memories
                    if any(m is h for _, h in hits) or any(_matches(m, s) for s in trace["expected"])
                ]
                found += sum(1 for _, m in hits if m is not None)
                expected += len(hits)
                promoted += len(memories)
                matched_promoted += len(useful)
                forbidden_hits += len(bad)
                per_trace[trace["name"]] = {
                    "expected": len(hits),
                    "found": sum(1 for _, m in hits if m),
                    "promoted": len(memories),
                }
                if not quiet:
                    self.stdout.write(
                        f"\n== {trace['name']}: {len(trace['sessions'])} sessions, slowest finalize {slowest:.0f} ms"
                    )
                    self.stdout.write("expected:")
                    for spec, match in hits:
                        mark = "ok " if match else "MISSING"
                        label = f"{spec.get('type', '*')}: {' + '.join(spec.get('contains', []))}"
                        if spec.get("tainted"):
                            label += " (tainted)"
                        self.stdout.write(f"  [{mark}] {label}")
                    self.stdout.write("promoted:")
                    for m in memories:
                        flag = " [tainted]" if "obs:tainted" in m.tags else ""
                        extra = "" if any(m is u for u in useful) else "  <- not expected"
                        self.stdout.write(
                            f"  - {m.type} ({m.source}, {m.confidence:.2f}){flag}: {m.content[:110]}{extra}"
                        )
                    for spec, m in bad:
                        self.stdout.write(f"  FORBIDDEN promoted: {spec['contains']} -> {m.content[:80]}")
            finally:
                if not options["keep"]:
                    org.delete()
        recall = found / expected if expected else 0.0
        precision = matched_promoted / promoted if promoted else 0.0
        summary = {
            "traces": len(files),
            "expected": expected,
            "found": found,
            "promoted": promoted,
            "recall": round(recall, 3),
            "precision": round(precision, 3),
            "forbidden_promoted": forbidden_hits,
            "per_trace": per_trace,
        }
        self.stdout.write(json.dumps(summary))
