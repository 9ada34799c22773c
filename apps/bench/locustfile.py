"""The agents of `manage.py bench_load`, for locust (run by that command as `locust --headless`).

Each simulated agent is one Claude Code session with a key of its own: SessionStart when it
starts, then every second a batch of hook deliveries (PostToolUse of Read, Grep, Edit and Bash in
turn, results included, as `bench_hooks` sends them), and every 10 s a search and a context call
(five seconds apart), SessionEnd when the run stops. No Django here: locust's gevent patches the
process, so this module reads what the command prepared from BENCH_PLAN (a JSON file): the hosts
(agents are spread over them in turn, as a load balancer would), the project, the keys, prompts.
"""

from __future__ import annotations

import itertools
import json
import os
import uuid
from pathlib import Path
from typing import Any

from locust import FastHttpUser, constant_pacing, task

PLAN = json.loads(Path(os.environ["BENCH_PLAN"]).read_text()) if os.environ.get("BENCH_PLAN") else {}
HOOKS = "/api/v1/hooks/claude-code"
CWD = "/home/bench/shop"
_numbers = itertools.count()


def tool_delivery(session_id: str, n: int) -> dict[str, Any]:
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
        **delivery(session_id, "PostToolUse"),
        "tool_name": tool,
        "tool_input": args,
        "tool_response": response,
        "tool_use_id": f"toolu_{session_id}_{n}",
    }


def delivery(session_id: str, event: str, **fields: Any) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "transcript_path": f"/home/bench/.claude/{session_id}.jsonl",
        "cwd": CWD,
        "permission_mode": "default",
        "hook_event_name": event,
        **fields,
    }


class Agent(FastHttpUser):
    wait_time = constant_pacing(1)
    host = PLAN.get("hosts", ["http://127.0.0.1:8000"])[0]

    def on_start(self) -> None:
        number = next(_numbers)
        hosts, keys = PLAN["hosts"], PLAN["keys"]
        self.base = hosts[number % len(hosts)]
        self.headers = {"Authorization": f"Bearer {keys[number % len(keys)]}"}
        self.project = PLAN["project_id"]
        self.prompts = PLAN["prompts"]
        self.session_id = f"load-{uuid.uuid4()}"
        self.tick = number % 10  # agents' searches spread over the 10 s
        self.sent = 0
        self._post(HOOKS, delivery(self.session_id, "SessionStart", source="startup"), "hook SessionStart")

    def on_stop(self) -> None:
        self._post(HOOKS, delivery(self.session_id, "SessionEnd", reason="other"), "hook SessionEnd")

    def _post(self, path: str, body: dict[str, Any], name: str) -> None:
        query = f"?project={self.project}" if path == HOOKS else ""
        with self.client.post(
            f"{self.base}{path}{query}", json=body, headers=self.headers, name=name, catch_response=True
        ) as response:
            if response.status_code != 200:
                response.failure(f"status {response.status_code}")
            elif not isinstance(response.json(), dict):
                response.failure("not a JSON object")

    @task
    def second(self) -> None:
        for _ in range(PLAN.get("batch", 1)):
            self._post(HOOKS, tool_delivery(self.session_id, self.sent), "hook PostToolUse")
            self.sent += 1
        self.tick += 1
        prompt = self.prompts[self.tick % len(self.prompts)]
        if self.tick % 10 == 0:
            self._post(f"/api/v1/projects/{self.project}/search", {"query": prompt, "limit": 10}, "search")
        elif self.tick % 10 == 5:
            self._post(f"/api/v1/projects/{self.project}/context", {"task": prompt}, "context")
