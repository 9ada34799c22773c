"""A recorded Claude Code session replayed over HTTP against a live daphne, as Claude Code's HTTP
hooks deliver it: three sessions on similar tasks teach the project, and a fourth is told what
they learned, at SessionStart and with its first prompt.

The server runs the test settings (background tasks inline: SessionEnd's finalize has run by the
time its answer arrives) with the hashing embedder; the sessions' A/B groups are the real ones.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest
from django.conf import settings

from apps.memories.models import Memory
from apps.observer.models import Session
from tests.agents.recorded import deliveries, events_of
from tests.e2e.conftest import HASHING_EMBEDDINGS, daphne_of_test_database

pytestmark = pytest.mark.django_db(transaction=True)

TASKS = [
    "Orders placed with a discount code never get their confirmation email. Fix the orders signal.",
    "Gift-card orders get no confirmation email either; the orders signal must send it for them too.",
    "Orders paid in two instalments miss the confirmation email. Find out why in the orders signal.",
    "Why does an order placed with a coupon get no confirmation email? Check the orders signals.",
]


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker):
    with daphne_of_test_database(django_db_blocker, **HASHING_EMBEDDINGS) as url:
        yield url


@pytest.fixture
def claude(server, alice):
    """Posts one delivery as Claude Code's HTTP hook does; every answer must be a 2xx JSON object."""
    client = httpx.Client(
        base_url=server,
        timeout=120,
        headers={"Authorization": f"Bearer {alice.key}", "Content-Type": "application/json"},
    )

    def send(payload):
        response = client.post(f"/api/v1/hooks/claude-code?project={alice.project.id}", json=payload)
        assert response.status_code == 200, response.text
        answer = response.json()
        assert isinstance(answer, dict) and "decision" not in answer
        return answer

    yield send
    client.close()


def context_of(answer) -> str:
    return answer.get("hookSpecificOutput", {}).get("additionalContext", "")


def recording(session_id: str, n: int) -> list[dict]:
    found = deliveries(session_id, n=n)
    events_of(found, "UserPromptSubmit")[0]["prompt"] = TASKS[(n - 1) % len(TASKS)]
    return found


def test_three_sessions_teach_the_project_and_a_fourth_is_told(claude, alice):
    for payload in recording("cc-replay-1", 1):
        claude(payload)
    # The second session arrives as HTTP hooks can: each delivery twice, a PostToolUse before its
    # PreToolUse, SessionStart after the first prompt.
    second = recording("cc-replay-2", 2)
    body, end = second[:-1], second[-1]
    body[0], body[1] = body[1], body[0]
    pre = next(i for i, d in enumerate(body) if d["hook_event_name"] == "PreToolUse")
    body[pre], body[pre + 1] = body[pre + 1], body[pre]
    for payload in body:
        claude(payload)
        claude(payload)
    claude(end)
    first, second_ = (
        Session.objects.get(external_id="cc-replay-1"),
        Session.objects.get(external_id="cc-replay-2"),
    )
    assert (first.event_count, first.steps, first.edited_files) == (
        second_.event_count,
        second_.steps,
        second_.edited_files,
    )
    for payload in recording("cc-replay-3", 3):
        claude(payload)

    third = Session.objects.get(external_id="cc-replay-3")
    assert (third.status, third.outcome, third.report["validated"]) == ("completed", "success", True)
    promoted = {
        str(i)
        for s in Session.objects.filter(external_id__startswith="cc-replay-")
        for i in s.promoted_memory_ids
    }
    learned = Memory.objects.filter(id__in=third.promoted_memory_ids)
    assert {"causal_dependency", "prefetch_pattern"} <= {
        m.type for m in learned
    }  # (three sessions' evidence)

    # The fourth session. One in ten sessions is in the A/B control group and is told nothing:
    # then that is checked, and the next one is the fourth.
    for attempt in range(20):
        fourth = recording(f"cc-replay-4-{attempt}", 4)
        start, prompt = fourth[0], events_of(fourth, "UserPromptSubmit")[0]
        at_start = claude(start)
        if Session.objects.get(external_id=f"cc-replay-4-{attempt}").ab_group != "control":
            break
        assert at_start == {} and claude(prompt) == {}
    told = context_of(at_start)
    assert "Known gotchas" in told and "SECRET_KEY" in told  # the error pattern sessions 2 and 3 hit
    assert any(f"[Memory #{i[:8]}]" in told for i in promoted)
    told = context_of(claude(prompt))
    assert "shop/orders/signals.py" in told
    assert any(f"[Memory #{i[:8]}]" in told for i in promoted)


def test_a_session_delivered_again_after_it_ended_is_unchanged(claude):
    payloads = recording("cc-replay-again", 1)
    for payload in payloads:
        claude(payload)
    session = Session.objects.get(external_id="cc-replay-again")
    before = (session.event_count, session.status, session.finalized_at, list(session.promoted_memory_ids))
    random.Random(3).shuffle(payloads)
    for payload in payloads:
        claude(payload)
    session.refresh_from_db()
    assert (
        session.event_count,
        session.status,
        session.finalized_at,
        list(session.promoted_memory_ids),
    ) == before
    assert Session.objects.filter(external_id="cc-replay-again").count() == 1


def documented_hooks() -> dict:
    """The settings block docs/agents/claude-code.md tells people to paste."""
    text = (Path(settings.BASE_DIR) / "docs" / "agents" / "claude-code.md").read_text()
    return json.loads(re.search(r"```json\n(.*?)```", text, re.DOTALL).group(1))["hooks"]


def as_pasted(value: str, server: str, project_id) -> str:
    return value.replace("http://127.0.0.1:8000", server).replace("PROJECT_ID", str(project_id))


def test_the_documented_settings_block_works_as_pasted(server, alice, charlie):
    hooks = documented_hooks()
    payloads = {d["hook_event_name"]: d for d in recording("cc-pasted", 9)}
    assert set(hooks) == set(payloads)
    assert shutil.which("curl"), "the SessionStart hook runs curl"
    (start,) = hooks["SessionStart"][0]["hooks"]
    command = as_pasted(start["command"], server, alice.project.id)

    def run(key: str) -> subprocess.CompletedProcess:
        env = {"PATH": os.environ["PATH"], "MEMORYSAAS_KEY": key}
        return subprocess.run(["bash", "-c", command], input=json.dumps(payloads["SessionStart"]), env=env,
                              capture_output=True, text=True, timeout=30, check=False)  # fmt: skip

    refused = run(charlie.key)  # (another organization's key: a 404, which must not become output)
    assert (refused.returncode, refused.stdout) == (0, "")
    ran = run(alice.key)
    assert ran.returncode == 0 and json.loads(ran.stdout or "{}") is not None
    assert Session.objects.filter(external_id="cc-pasted", project=alice.project).exists()
    for event, groups in hooks.items():
        if event == "SessionStart":
            continue
        (hook,) = groups[0]["hooks"]
        assert (
            hook["type"] == "http" and hook["allowedEnvVars"] == ["MEMORYSAAS_KEY"] and hook["timeout"] <= 10
        )
        # As Claude Code sends it: the listed variables interpolated into the headers.
        headers = {
            name: value.replace("$MEMORYSAAS_KEY", alice.key) for name, value in hook["headers"].items()
        }
        response = httpx.post(
            as_pasted(hook["url"], server, alice.project.id),
            json=payloads[event],
            headers=headers,
            timeout=60,
        )
        assert response.status_code == 200 and isinstance(response.json(), dict), (event, response.text)
    assert Session.objects.get(external_id="cc-pasted").status == "completed"
