"""Claude Code hook deliveries from many sessions at once: do they keep up, and what do they cost
over an authenticated no-op? (docs/agents/claude-code.md, "Figures").

Starts its own daphne on the configured database (or measures the server at --url, which must
serve that same database), makes a bench organization whose project holds --memories memories
and a key limited to it, then drives the server over HTTP with httpx from --sessions simulated
Claude Code sessions at once, each one request after another:

1. alternately, --rounds times: a block of `POST /api/v1/ping` (the no-op: authentication and the
   request path, nothing else) and a block of PostToolUse deliveries (Read, Grep, Edit, Bash with
   their results), the same number from every session → noop_p95_ms, hook_p50_ms, hook_p95_ms,
   deliveries_per_s (PostToolUse deliveries over the hook blocks' wall time);
2. --prompts UserPromptSubmit deliveries per session after its first (which also carries the start
   plan), one request at a time as people type them → context_p95_ms over the answers that
   carried context; then as many again while every session keeps delivering PostToolUse →
   context_under_load_p95_ms (and those deliveries' hook_under_prompts_p95_ms); and, between
   the two, as many `POST /projects/{id}/context` with the same prompts → context_endpoint_p95_ms
   (what packing the context costs without a hook around it);
3. SessionEnd for every session (completes it; finalize is queued, not measured).

Targets: hook p95 ≤ 2 × no-op p95, context p95 ≤ 100 ms, no errors (a non-2xx answer, a body
that is not a JSON object, no answer within --timeout). The started server's rate limits are
off unless --rate-limits: what is measured is the hooks' cost, not the limits. With --json the
last line is one JSON object. The bench organization is deleted unless --keep.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.test.utils import override_settings

from apps.bench.daphne import Server
from apps.bench.synthetic import Corpus
from apps.memories.services import memories_create_batch
from apps.memories.validation import MemoryDraft
from apps.observer.selectors import sessions_for
from apps.tenants.models import Organization, Project
from apps.tenants.principal import SYSTEM
from apps.tenants.services import api_key_create

ROOT = Path(settings.BASE_DIR)
CWD = "/home/bench/shop"
HOOKS = "/api/v1/hooks/claude-code"
WARM_MS = 500.0


def _percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 1) if values else None


@dataclass
class Tally:
    latencies_ms: list[float] = field(default_factory=list)
    errors: collections.Counter = field(default_factory=collections.Counter)
    with_context: int = 0


@dataclass
class Bench:
    org: Organization
    project: Project
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def tool_delivery(session_id: str, n: int) -> dict[str, Any]:
    """The n-th PostToolUse of a session: Read, Grep, Edit and Bash in turn, results included."""
    path = f"{CWD}/shop/module{n % 7}/part{n % 11}.py"
    kind = n % 4
    if kind == 0:
        tool, args = "Read", {"file_path": path}
        response: Any = {
            "type": "text",
            "file": {"filePath": path, "content": "import os\n" + "x = 1\n" * 150},
        }
    elif kind == 1:
        tool, args = "Grep", {"pattern": f"def handler_{n % 9}", "path": CWD}
        response = {"mode": "files_with_matches", "filenames": [path], "numFiles": 1}
    elif kind == 2:
        tool, args = "Edit", {"file_path": path, "old_string": "x = 1", "new_string": "x = 2"}
        response = {"filePath": path, "oldString": "x = 1", "newString": "x = 2"}
    else:
        tool, args = "Bash", {"command": "ruff check shop", "description": "Lint"}
        response = {"stdout": "All checks passed!", "stderr": "", "interrupted": False}
    return {
        "session_id": session_id, "transcript_path": f"/home/bench/.claude/{session_id}.jsonl", "cwd": CWD,
        "permission_mode": "default", "hook_event_name": "PostToolUse", "tool_name": tool, "tool_input": args,
        "tool_response": response, "tool_use_id": f"toolu_{session_id}_{n}", "duration_ms": 4,
    }  # fmt: skip


def delivery(session_id: str, event: str, **fields: Any) -> dict[str, Any]:
    return {"session_id": session_id, "transcript_path": f"/home/bench/.claude/{session_id}.jsonl", "cwd": CWD,
            "permission_mode": "default", "hook_event_name": event, **fields}  # fmt: skip


class Command(BaseCommand):
    help = (
        "Claude Code hook deliveries from concurrent sessions: latency against a no-op, throughput, context."
    )

    def add_arguments(self, parser):
        parser.add_argument("--url", help="Measure this server (serving the configured database).")
        parser.add_argument("--sessions", type=int, default=20, help="Simulated sessions at once.")
        parser.add_argument("--tools", type=int, default=60, help="PostToolUse deliveries per session.")
        parser.add_argument("--rounds", type=int, default=3, help="Alternating no-op and hook blocks.")
        parser.add_argument(
            "--prompts", type=int, default=5, help="UserPromptSubmit per session after its first."
        )
        parser.add_argument("--memories", type=int, default=300, help="Memories in the bench project.")
        parser.add_argument("--timeout", type=float, default=30.0, help="Client timeout per request (s).")
        parser.add_argument(
            "--provider", default=None, help="EMBEDDING_PROVIDER (default: the configured one)."
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
        parser.add_argument("--keep", action="store_true", help="Keep the bench organization.")

    def handle(self, *args, **opts):
        self.say = self.stdout.write
        logging.getLogger("httpx").setLevel(logging.WARNING)  # (a line per request otherwise)
        provider = opts["provider"] or settings.EMBEDDING_PROVIDER
        started = time.perf_counter()
        with override_settings(EMBEDDING_PROVIDER=provider, EMBEDDING_MODE="sync"):
            bench = self._bench(opts["memories"], Corpus(opts["seed"]))
        self.say(
            f"made the bench project ({opts['memories']} memories) in {time.perf_counter() - started:.1f}s"
        )
        server = None
        try:
            url = opts["url"]
            if not url:
                env = {"EMBEDDING_PROVIDER": provider}
                if not opts["rate_limits"]:
                    env["RATE_LIMIT_ENABLED"] = "0"
                server = Server(settings_module=opts["server_settings"], env=env, name="bench-hooks")
                server.wait_until_serving()
                url = server.url
                self.say(f"daphne on {url}")
            result = asyncio.run(self._measure(url, bench, opts))
            # (the A/B control group's prompts are answered with nothing, by design)
            result["control_sessions"] = (
                sessions_for(project=bench.project).filter(ab_group="control").count()
            )
            if server is not None and server.process.poll() is not None:
                raise CommandError(f"daphne died during the run:\n{server.tail()}")
        finally:
            if server is not None:
                server.stop()
            if not opts["keep"]:
                bench.org.delete()
        result.update(
            sessions=opts["sessions"], provider=provider, rate_limits=bool(opts["rate_limits"] or opts["url"])
        )
        for key, value in result.items():
            self.say(f"{key:>24}: {value}")
        if opts["json"]:
            self.stdout.write(json.dumps(result, sort_keys=True, default=str))

    def _bench(self, count: int, corpus: Corpus) -> Bench:
        suffix = uuid.uuid4().hex[:6]
        org = Organization.objects.create(name=f"hooks bench {suffix}", slug=f"hooks-bench-{suffix}")
        project = Project.objects.create(organization=org, name="hooks bench", slug=f"hooks-bench-{suffix}")
        bases = corpus.bases(max(10, count // 3))
        memories = corpus.memories(count, bases)
        for start in range(0, len(memories), 200):
            drafts = [
                MemoryDraft(content=m.content, type=m.type, related_files=m.related_files, confidence=0.9)
                for m in memories[start : start + 200]
            ]
            memories_create_batch(project=project, actor=SYSTEM, drafts=drafts)
        _, key = api_key_create(
            organization=org, actor=SYSTEM, name="claude code", scopes=["observer:write", "memories:read"],
            project=project, check_permission=False,
        )  # fmt: skip
        self.prompts = [text for text, _ in corpus.bases(50)]
        return Bench(org=org, project=project, key=key)

    async def _measure(self, url: str, bench: Bench, opts) -> dict[str, Any]:
        count = opts["sessions"]
        limits = httpx.Limits(max_connections=count + 1, max_keepalive_connections=count + 1)
        sessions = [f"bench-{uuid.uuid4()}" for _ in range(count)]
        noop, hook, prompts, loaded, busy, endpoint, setup = (Tally() for _ in range(7))
        async with httpx.AsyncClient(
            base_url=url, timeout=opts["timeout"], limits=limits, headers=bench.headers
        ) as client:
            post = self._poster(client)
            await self._warm(post, bench)
            await asyncio.gather(
                *(post(HOOKS, delivery(s, "SessionStart", source="startup"), setup) for s in sessions)
            )
            first_prompts = [
                delivery(s, "UserPromptSubmit", prompt=self.prompts[i]) for i, s in enumerate(sessions)
            ]
            await asyncio.gather(*(post(HOOKS, d, setup) for d in first_prompts))
            per_round = max(1, opts["tools"] // opts["rounds"])
            hook_seconds, sent = 0.0, 0
            for round_ in range(opts["rounds"]):
                await asyncio.gather(
                    *(self._loop(post, "/api/v1/ping", _empty, s, per_round, noop) for s in sessions)
                )
                began = time.perf_counter()
                await asyncio.gather(
                    *(
                        self._loop(post, HOOKS, tool_delivery, s, per_round, hook, round_ * per_round)
                        for s in sessions
                    )
                )
                hook_seconds += time.perf_counter() - began
                sent += per_round * count
                self.say(
                    f"round {round_ + 1}: no-op p95 {_percentile(noop.latencies_ms, 95)} ms,"
                    f" hook p95 {_percentile(hook.latencies_ms, 95)} ms"
                )
            # Prompts come one at a time (people type them; agents' tool calls are what comes at
            # once): first with nothing else running, then while every session keeps delivering.
            await self._prompts(post, sessions, opts["prompts"], prompts)
            for n in range(opts["prompts"] * count):  # the same work through /context, for comparison
                body = {"task": self.prompts[(n + 1) % len(self.prompts)]}
                await post(f"/api/v1/projects/{bench.project.id}/context", body, endpoint)
            stop = asyncio.Event()
            background = [asyncio.create_task(self._until(post, s, stop, busy)) for s in sessions]
            await self._prompts(post, sessions, opts["prompts"], loaded, offset=opts["prompts"])
            stop.set()
            await asyncio.gather(*background)
            await asyncio.gather(
                *(post(HOOKS, delivery(s, "SessionEnd", reason="other"), setup) for s in sessions)
            )
        hook_p95, noop_p95 = _percentile(hook.latencies_ms, 95), _percentile(noop.latencies_ms, 95)
        errors = (
            noop.errors
            + hook.errors
            + prompts.errors
            + loaded.errors
            + busy.errors
            + endpoint.errors
            + setup.errors
        )
        return {
            "hook_p50_ms": _percentile(hook.latencies_ms, 50),
            "hook_p95_ms": hook_p95,
            "noop_p50_ms": _percentile(noop.latencies_ms, 50),
            "noop_p95_ms": noop_p95,
            "hook_over_noop_p95": round(hook_p95 / noop_p95, 2) if hook_p95 and noop_p95 else None,
            "deliveries_per_s": round(sent / hook_seconds, 1) if hook_seconds else None,
            "context_p50_ms": _percentile(prompts.latencies_ms, 50),
            "context_p95_ms": _percentile(prompts.latencies_ms, 95),
            "context_under_load_p95_ms": _percentile(loaded.latencies_ms, 95),
            "context_endpoint_p95_ms": _percentile(endpoint.latencies_ms, 95),
            "hook_under_prompts_p95_ms": _percentile(busy.latencies_ms, 95),
            "prompts_with_context": prompts.with_context + loaded.with_context,
            "prompts": 2 * opts["prompts"] * count,
            "deliveries": sent,
            "errors": sum(errors.values()),
            "error_kinds": dict(errors),
        }

    def _poster(self, client: httpx.AsyncClient):
        async def post(path: str, body: dict[str, Any], tally: Tally) -> dict[str, Any] | None:
            started = time.perf_counter()
            try:
                response = await client.post(path, json=body)
            except httpx.HTTPError as error:
                tally.errors[type(error).__name__] += 1
                return None
            elapsed = (time.perf_counter() - started) * 1000
            if not 200 <= response.status_code < 300:
                tally.errors[f"status {response.status_code}"] += 1
                return None
            try:
                answer = response.json()
            except ValueError:
                answer = None
            if not isinstance(answer, dict):
                tally.errors["not a JSON object"] += 1
                return None
            tally.latencies_ms.append(elapsed)
            return answer

        return post

    async def _loop(
        self, post, path, make, session_id: str, count: int, tally: Tally, offset: int = 0
    ) -> None:
        for n in range(offset, offset + count):
            await post(path, make(session_id, n), tally)

    async def _warm(self, post, bench: Bench, limit_s: float = 180.0) -> None:
        """Wait for the server's local models (loaded in the background at its start; until then
        a search waits up to a second for the precision model): /context one request at a time
        until three in a row answer within WARM_MS."""
        quick, started = 0, time.monotonic()
        while quick < 3 and time.monotonic() - started < limit_s:
            tally = Tally()
            await post(f"/api/v1/projects/{bench.project.id}/context", {"task": self.prompts[0]}, tally)
            quick = quick + 1 if tally.latencies_ms and tally.latencies_ms[0] < WARM_MS else 0
        self.say(f"warm after {time.monotonic() - started:.1f}s")

    async def _prompts(
        self, post, sessions: list[str], per_session: int, tally: Tally, offset: int = 0
    ) -> None:
        """Each session's next prompts, one request at a time, round robin. An answer's time
        counts if it carried context (one of the A/B control group is answered with nothing)."""
        for n in range(per_session):
            for index, session_id in enumerate(sessions):
                answered = Tally()
                prompt = self.prompts[(index + offset + n + 1) % len(self.prompts)]
                answer = await post(HOOKS, delivery(session_id, "UserPromptSubmit", prompt=prompt), answered)
                tally.errors += answered.errors
                if answer and answer.get("hookSpecificOutput", {}).get("additionalContext"):
                    tally.with_context += 1
                    tally.latencies_ms += answered.latencies_ms

    async def _until(self, post, session_id: str, stop: asyncio.Event, tally: Tally) -> None:
        n = 1_000_000  # (tool-use ids apart from the measured blocks')
        while not stop.is_set():
            await post(HOOKS, tool_delivery(session_id, n), tally)
            n += 1


def _empty(session_id: str, n: int) -> dict[str, Any]:
    return {}
