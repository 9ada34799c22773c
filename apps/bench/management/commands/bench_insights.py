"""How long the A/B rollups take at size, and how fast the insights API answers.

A benchmark, not a simulation: it writes its population in bulk, straight into the tables (the
sessions as the observer leaves them once finalized, their event log and the project's
file-access table), because feeding a million events through the API would
measure the observer, not the rollup. The tests feed their populations through the real API.

1. --sessions finalized sessions over the last 90 days (A/B groups by the real assigner, full
   memory with fewer tool calls), with --events events between them in the event log;
2. rollup_s: the whole population rolled up from nothing;
3. incremental_rollup_ms: 100 more sessions finalized, then the next run (target ≤ 1 % of the
   full run);
4. insights_api_p95_ms: GET /api/v1/projects/{id}/insights (its default window, the last 30
   days) through Django's request handler in this process, --requests times (target ≤ 100 ms);
   insights_api_90d_p95_ms: the same for the whole 90 days.

With --json the last line is one JSON object. The bench organization is deleted unless --keep.
"""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import timedelta

import numpy as np
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from apps.insights import ab, rollups
from apps.insights.models import DailyRollup, ExperimentPeriod, RollupCursor, SessionMetrics
from apps.observer.models import EventBatch, PatternStat, Session
from apps.tenants.models import Organization, Project
from apps.tenants.principal import SYSTEM
from apps.tenants.services import api_key_create

DAYS = 90
FILES = 400
EVENTS_PER_BATCH = 100
INCREMENT = 100


class Command(BaseCommand):
    help = "Time the A/B rollups (full and incremental) and the insights API at size."

    def add_arguments(self, parser):
        parser.add_argument("--sessions", type=int, default=10_000)
        parser.add_argument("--events", type=int, default=1_000_000)
        parser.add_argument("--requests", type=int, default=100, help="Insights API requests timed.")
        parser.add_argument("--seed", type=int, default=7)
        parser.add_argument("--json", action="store_true")
        parser.add_argument("--keep", action="store_true", help="Keep the bench organization.")

    def handle(self, *args, **options):
        if settings.RATE_LIMIT_ENABLED and options["requests"] >= settings.RATE_LIMIT_KEY_BURST:
            raise CommandError(
                f"--requests must stay under one key's burst ({settings.RATE_LIMIT_KEY_BURST}, "
                "RATE_LIMIT_KEY_BURST): the rate limiter would refuse the rest."
            )
        rng = random.Random(options["seed"])
        say = self.stderr.write if options["json"] else self.stdout.write
        suffix = uuid.uuid4().hex[:8]
        org = Organization.objects.create(name=f"bench insights {suffix}", slug=f"bench-insights-{suffix}")
        project = Project.objects.create(organization=org, name="bench", slug="bench")
        try:
            result = self._run(org, project, rng, say, options)
        finally:
            if not options["keep"]:
                say("deleting the bench organization …")
                org.delete()
        say(json.dumps(result, indent=2))
        if options["json"]:
            self.stdout.write(json.dumps(result))

    def _run(self, org, project, rng, say, options) -> dict:
        now = timezone.now()
        ExperimentPeriod.objects.create(
            organization=org,
            project=project,
            started_at=now - timedelta(days=DAYS + 1),
            changed_by_label="bench",
        )
        self._file_table(project, now)
        say(f"writing {options['sessions']} sessions and {options['events']} events …")
        t0 = time.perf_counter()
        self._sessions(org, project, rng, options["sessions"], options["events"], now, spread=True)
        write_s = time.perf_counter() - t0
        self._analyze()
        # The rollup reads every finalized session in the database: start this project's from nothing.
        SessionMetrics.objects.filter(project=project).delete()
        DailyRollup.objects.filter(project=project).delete()
        RollupCursor.objects.all().delete()

        say("full rollup …")
        t0 = time.perf_counter()
        full = rollups.rollup_run()
        rollup_s = time.perf_counter() - t0

        self._sessions(org, project, rng, INCREMENT, INCREMENT * options["events"] // max(options["sessions"], 1),
                       timezone.now(), spread=False)  # fmt: skip
        t0 = time.perf_counter()
        more = rollups.rollup_run()
        incremental_ms = (time.perf_counter() - t0) * 1000
        t0 = time.perf_counter()
        again = rollups.rollup_run()
        rerun_ms = (time.perf_counter() - t0) * 1000

        # A key per window: each window's requests then fit in one key's burst, so the rate
        # limiter still runs on every request (it is part of what a request costs) and refuses none.
        p95, report = self._api(self._key(org), project, options["requests"], days=30)
        p95_90, report = self._api(self._key(org), project, options["requests"], days=DAYS)
        calls = next(m for m in report["metrics"] if m["key"] == "tool_calls")
        return {
            "sessions": options["sessions"],
            "events": options["events"],
            "write_s": round(write_s, 1),
            "rollup_s": round(rollup_s, 2),
            "rolled_up": full.sessions,
            "incremental_sessions": more.sessions,
            "incremental_rollup_ms": round(incremental_ms, 1),
            "incremental_share": round(incremental_ms / 1000 / rollup_s, 4) if rollup_s else None,
            "rerun_sessions": again.sessions,
            "rerun_ms": round(rerun_ms, 1),
            "insights_api_p95_ms": p95,
            "insights_api_90d_p95_ms": p95_90,
            "groups": report["groups"],
            "tool_calls_effect": calls["effect"],
            "tool_calls_interval": calls["interval"],
        }

    def _file_table(self, project, now) -> None:
        """The files earlier sessions read, as the observer's frequency table holds them."""
        rows = [
            PatternStat(
                project=project, kind="file_access", key=f"src/module_{i % 40}/file_{i}.py", session_count=3
            )
            for i in range(FILES)
        ]
        PatternStat.objects.bulk_create(rows, batch_size=1000)
        PatternStat.objects.filter(project=project).update(first_seen=now - timedelta(days=DAYS + 2))

    def _sessions(self, org, project, rng, count: int, events: int, now, *, spread: bool) -> None:
        per_session = max(1, events // max(count, 1))
        for start in range(0, count, 1000):
            sessions, batches, started_at = [], [], {}
            for _ in range(min(1000, count - start)):
                sid = uuid.uuid4()
                group = ab.assign(sid, project.pk, ab.Split())
                started = now - timedelta(days=rng.uniform(0, DAYS) if spread else 0, minutes=30)
                tool_calls = max(3, round(rng.gauss(40 if group == "control" else 30, 8)))
                files = {
                    f"src/module_{i % 40}/file_{i}.py": [rng.randint(1, 3), 0, 1, 5, 0, None]
                    for i in rng.sample(range(FILES + 200), 12)
                }
                tokens = max(1000, round(rng.gauss(60_000, 12_000)))
                pad = {
                    "tool_calls": tool_calls, "files": files, "step": tool_calls, "planned_steps": tool_calls - 5,
                    "tokens": [tokens, tokens // 20, tokens // 4, tool_calls],
                    "validations": [{"passed": rng.random() < (0.6 if group == "control" else 0.7), "step": 9}],
                }  # fmt: skip
                started_at[sid] = started
                sessions.append(
                    Session(
                        id=sid,
                        organization=org,
                        project=project,
                        ab_group=group,
                        status="completed",
                        outcome="success",
                        steps=tool_calls,
                        event_count=per_session,
                        scratchpad=pad,
                        started_at=started,
                        ended_at=started + timedelta(minutes=25),
                        finalized_at=started + timedelta(minutes=26),
                    )  # fmt: skip
                )
                for first in range(0, per_session, EVENTS_PER_BATCH):
                    n = min(EVENTS_PER_BATCH, per_session - first)
                    log = [
                        {"seq": first + k + 1, "type": "tool_call", "step": first + k, "tool": "Read"}
                        for k in range(n)
                    ]
                    batches.append(
                        EventBatch(
                            session_id=sid, first_seq=first + 1, last_seq=first + n, count=n, events=log
                        )
                    )
            with transaction.atomic():
                Session.objects.bulk_create(sessions, batch_size=500)
                # started_at is set on save (auto_now_add): the simulated times go in afterwards.
                for session in sessions:
                    session.started_at = started_at[session.pk]
                Session.objects.bulk_update(sessions, ["started_at"], batch_size=1000)
                EventBatch.objects.bulk_create(batches, batch_size=500)

    def _analyze(self) -> None:
        """Fresh planner statistics for the tables just written, as autovacuum gathers them soon
        after a bulk write (without them the planner takes the file table for a few rows and
        scans a project's files where its unique index finds one)."""
        with connection.cursor() as db:
            for model in (Session, EventBatch, PatternStat):
                db.execute(f"ANALYZE {model._meta.db_table}")

    def _key(self, org) -> str:
        _, key = api_key_create(
            organization=org, actor=SYSTEM, name="bench", scopes=["memories:read"], check_permission=False
        )
        return key

    def _api(self, key: str, project, requests: int, *, days: int) -> tuple[float, dict]:
        client = Client()
        url = f"/api/v1/projects/{project.pk}/insights"
        today = timezone.localdate()
        params = {"from": (today - timedelta(days=days - 1)).isoformat(), "to": today.isoformat()}
        headers = {
            "HTTP_AUTHORIZATION": f"Bearer {key}",
            "HTTP_HOST": (settings.ALLOWED_HOSTS or ["localhost"])[0],
        }
        warm = client.get(url, params, **headers)
        if warm.status_code != 200:
            raise CommandError(f"The insights API answered {warm.status_code}: {warm.content[:300]!r}")
        report = warm.json()
        times = []
        for _ in range(requests):
            t0 = time.perf_counter()
            response = client.get(url, params, **headers)
            times.append((time.perf_counter() - t0) * 1000)
            if response.status_code != 200:
                raise CommandError(
                    f"The insights API answered {response.status_code}: {response.content[:300]!r}"
                )
        return round(float(np.percentile(times, 95)), 1), report
