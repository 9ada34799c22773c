"""The SDK's transport: which failures it retries (tenacity), and the errors it raises. Served by
httpx's MockTransport, which answers as a server would, request by request."""

from __future__ import annotations

import httpx
import pytest
from memorysaas_client import ApiError, Client, Unreachable
from memorysaas_client.transport import RetryPolicy

FAST = RetryPolicy(attempts=3, initial_wait=0, max_wait=0)
PROJECT = "6f1c2a34-0000-4000-8000-00000000abcd"
MEMORY = {"id": "0c7d7d9e-1111-4000-8000-000000000001", "type": "gotcha", "content": "x"}


def client(answers: list) -> tuple[Client, list[httpx.Request]]:
    """A client whose requests get `answers` in turn (a response, or an exception to raise)."""
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers[len(seen) - 1]
        if isinstance(answer, Exception):
            raise answer
        return answer

    return Client("http://memory.test", "msk_key", retry=FAST, transport=httpx.MockTransport(handle)), seen


def test_a_refusal_before_any_work_is_retried_after_the_servers_wait():
    api, seen = client([
        httpx.Response(503, headers={"Retry-After": "0"}, json={"error": {"code": "unavailable", "message": "busy", "details": None}}),
        httpx.Response(429, headers={"Retry-After": "0"}, json={"error": {"code": "rate_limited", "message": "slow", "details": None}}),
        httpx.Response(201, json=MEMORY),
    ])  # fmt: skip
    memory = api.memories.create(PROJECT, type="gotcha", content="x")
    assert str(memory.id) == MEMORY["id"] and len(seen) == 3
    assert seen[0].headers["Authorization"] == "Bearer msk_key"


def test_a_create_that_may_have_arrived_is_not_sent_again():
    api, seen = client([httpx.ReadTimeout("no answer"), httpx.Response(201, json=MEMORY)])
    with pytest.raises(Unreachable):
        api.memories.create(PROJECT, type="gotcha", content="x")
    assert len(seen) == 1


def test_an_idempotent_call_is_sent_again_after_a_lost_answer():
    api, seen = client([
        httpx.ReadTimeout("no answer"),
        httpx.Response(200, json={"accepted": 2, "duplicates": 0, "event_count": 2, "notes": []}),
    ])  # fmt: skip
    assert api.sessions.events("s1", [{"seq": 1, "type": "reasoning", "text": "a"}]).accepted == 2
    assert len(seen) == 2 and seen[0].content == seen[1].content


def test_a_request_that_never_left_is_retried_even_when_not_idempotent():
    api, seen = client([httpx.ConnectError("refused"), httpx.Response(201, json=MEMORY)])
    api.memories.create(PROJECT, type="gotcha", content="x")
    assert len(seen) == 2


def test_an_unreachable_service_is_reported_after_the_attempts():
    api, seen = client([httpx.ConnectError("refused")] * 3)
    with pytest.raises(Unreachable, match="cannot be reached"):
        api.search(PROJECT, "jwt")
    assert len(seen) == 3


def test_an_error_answer_is_an_api_error_with_the_envelope_and_is_not_retried():
    details = [{"loc": ["body", "type"], "msg": "unknown type"}]
    api, seen = client([
        httpx.Response(422, json={"error": {"code": "validation_error", "message": "The request is not valid.", "details": details}}),
    ])  # fmt: skip
    with pytest.raises(ApiError) as raised:
        api.memories.create(PROJECT, type="nonsense", content="x")
    assert (raised.value.status, raised.value.code, raised.value.details) == (
        422,
        "validation_error",
        details,
    )
    assert isinstance(raised.value, httpx.HTTPStatusError) and len(seen) == 1
