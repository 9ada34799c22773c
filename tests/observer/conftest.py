"""Driving the observer through its HTTP API, as an agent client would."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from apps.observer.traces import Trace


@dataclass
class Agent:
    client: Any
    project_id: str

    def open(self, **body: Any) -> dict[str, Any]:
        response = self.client.post(f"projects/{self.project_id}/sessions", {"session_type": "build", **body})
        assert response.status_code == 201, response.content
        return response.json()

    def send(self, session_id: str, events: list[dict[str, Any]], expect: int = 200):
        response = self.client.post(f"sessions/{session_id}/events", {"events": events})
        assert response.status_code == expect, response.content
        return response.json()

    def validate(self, session_id: str, passed: bool = True, work_unit: str = "", report: str = ""):
        body = {"passed": passed, "work_unit": work_unit, "report": report}
        response = self.client.post(f"sessions/{session_id}/validation", body)
        assert response.status_code == 200, response.content
        return response.json()

    def complete(self, session_id: str, outcome: str = "success", steps: int | None = None):
        response = self.client.post(f"sessions/{session_id}/complete", {"outcome": outcome, "steps": steps})
        assert response.status_code in (200, 202), response.content
        return response.json()

    def run(self, trace: Trace, *, passed: bool | None = True, outcome: str = "success", **open_body: Any):
        """A whole session: open, send the trace, validate (unless None), complete."""
        session = self.open(**open_body)
        self.send(session["id"], trace.events)
        if passed is not None:
            self.validate(session["id"], passed)
        return self.complete(session["id"], outcome)


@pytest.fixture
def agent(alice, api_client, monkeypatch) -> Agent:
    """Alice's agent. Its sessions all land in the memory group (the 10% control group is
    random by session id; test_the_control_group_gets_no_memory covers it)."""
    from apps.observer import services

    monkeypatch.setattr(services, "ab_group", lambda session_id, project=None: "full")
    return Agent(api_client(alice.key), str(alice.project.id))


from tests.memories.conftest import fake_openai  # noqa: E402, F401  (the fake OpenAI server)
