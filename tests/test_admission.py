"""The admission gate in front of Django (memorysaas/admission.py), driven as daphne drives it:
ASGI requests on one event loop, into an app whose requests stay in until the test lets them go."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from memorysaas.admission import AdmissionMiddleware, Gate, client_of


class HeldApp:
    """Stands for Django: records each request that reaches it and what it received first, and
    answers it when the test says so."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.first_message: dict[str, dict] = {}
        self._finish: dict[str, asyncio.Event] = {}

    def finish(self, name: str) -> None:
        self._finish.setdefault(name, asyncio.Event()).set()

    async def __call__(self, scope, receive, send) -> None:
        name = scope["name"]
        self.started.append(name)
        self.first_message[name] = await receive()
        await self._finish.setdefault(name, asyncio.Event()).wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})


class Request:
    """One client's request: its task, what it was sent back, and a way to hang up."""

    def __init__(self, middleware: AdmissionMiddleware, name: str, key: str) -> None:
        self.sent: list[dict] = []
        self._hung_up = asyncio.Event()
        self._body_given = False
        scope = {
            "type": "http",
            "name": name,
            "path": "/api/v1/projects/p/search",
            "headers": [(b"authorization", f"Bearer msk_{key}_secret".encode())],
            "client": ("127.0.0.1", 5000),
        }
        self.task = asyncio.create_task(middleware(scope, self._receive, self._send))

    async def _receive(self) -> dict:
        if not self._body_given:
            self._body_given = True
            return {"type": "http.request", "body": b'{"query": "x"}', "more_body": False}
        await self._hung_up.wait()
        return {"type": "http.disconnect"}

    async def _send(self, message: dict) -> None:
        self.sent.append(message)

    def hang_up(self) -> None:
        self._hung_up.set()

    @property
    def status(self) -> int | None:
        starts = [m for m in self.sent if m["type"] == "http.response.start"]
        return starts[0]["status"] if starts else None


async def settled(condition: Callable[[], bool] | None = None, turns: int = 200) -> None:
    """Let the event loop run until `condition` holds, or with none for a number of turns
    (everything that can move has moved)."""
    for _ in range(turns):
        if condition is not None and condition():
            return
        await asyncio.sleep(0)
    assert condition is None or condition(), "the condition never held"


def run(scenario) -> None:
    asyncio.run(scenario())


def test_requests_beyond_the_capacity_wait_and_go_in_as_places_free():
    async def scenario():
        app = HeldApp()
        gate = AdmissionMiddleware(app, Gate(capacity=2, per_client=2, queue=10))
        requests = [Request(gate, f"r{n}", key=f"k{n}") for n in range(3)]
        await settled()
        assert app.started == ["r0", "r1"]
        app.finish("r0")
        await settled(lambda: "r2" in app.started)
        assert app.started == ["r0", "r1", "r2"]
        # What the waiting client had sent reached the app unchanged.
        assert app.first_message["r2"]["body"] == b'{"query": "x"}'
        for name in ("r1", "r2"):
            app.finish(name)
        await asyncio.gather(*(r.task for r in requests))
        assert [r.status for r in requests] == [200, 200, 200]

    run(scenario)


def test_one_client_has_no_more_requests_in_than_its_share():
    async def scenario():
        app = HeldApp()
        gate = AdmissionMiddleware(app, Gate(capacity=10, per_client=2, queue=10))
        flood = [Request(gate, f"a{n}", key="flooder") for n in range(5)]
        await settled()
        assert app.started == ["a0", "a1"]
        other = Request(gate, "b0", key="quiet")
        await settled(lambda: "b0" in app.started)
        assert app.started == ["a0", "a1", "b0"]  # room left for everyone else
        for n in range(5):
            app.finish(f"a{n}")
        app.finish("b0")
        await asyncio.gather(*(r.task for r in [*flood, other]))

    run(scenario)


def test_a_quiet_clients_request_goes_in_ahead_of_a_flooding_clients_backlog():
    async def scenario():
        app = HeldApp()
        gate = AdmissionMiddleware(app, Gate(capacity=3, per_client=3, queue=10))
        flood = [Request(gate, f"a{n}", key="flooder") for n in range(8)]
        await settled()
        other = Request(gate, "b0", key="quiet")
        await settled()
        assert app.started == ["a0", "a1", "a2"]  # full: the quiet client waits too
        app.finish("a0")
        await settled(lambda: len(app.started) == 4)
        assert app.started[-1] == "b0"  # the next free place is the quiet client's
        for n in range(8):
            app.finish(f"a{n}")
        app.finish("b0")
        await asyncio.gather(*(r.task for r in [*flood, other]))
        assert app.started.index("b0") == 3

    run(scenario)


def test_a_request_whose_client_hangs_up_while_waiting_never_runs_and_holds_no_place():
    async def scenario():
        app = HeldApp()
        middleware = AdmissionMiddleware(app, Gate(capacity=1, per_client=1, queue=10))
        first = Request(middleware, "first", key="a")
        left = Request(middleware, "left", key="b")
        await settled()
        left.hang_up()
        await settled(left.task.done)
        assert left.task.done() and left.sent == []  # dropped: nobody to answer
        app.finish("first")
        later = Request(middleware, "later", key="c")
        await settled(lambda: "later" in app.started)
        app.finish("later")
        await asyncio.gather(first.task, later.task)
        assert app.started == ["first", "later"]
        assert middleware.gate.total == 0 and not middleware.gate.waiting

    run(scenario)


def test_a_cancelled_waiting_request_gives_its_turn_to_the_next():
    async def scenario():
        app = HeldApp()
        middleware = AdmissionMiddleware(app, Gate(capacity=1, per_client=1, queue=10))
        first = Request(middleware, "first", key="a")
        cancelled = Request(middleware, "cancelled", key="b")
        after = Request(middleware, "after", key="c")
        await settled()
        cancelled.task.cancel()
        app.finish("first")
        await settled(lambda: "after" in app.started)
        app.finish("after")
        await asyncio.gather(first.task, after.task, cancelled.task, return_exceptions=True)
        assert app.started == ["first", "after"]
        assert middleware.gate.total == 0 and not middleware.gate.waiting

    run(scenario)


def test_a_client_with_too_many_requests_waiting_is_answered_429_in_the_envelope():
    async def scenario():
        app = HeldApp()
        middleware = AdmissionMiddleware(app, Gate(capacity=1, per_client=1, queue=1))
        running = Request(middleware, "running", key="a")
        waiting = Request(middleware, "waiting", key="a")
        await settled()
        refused = Request(middleware, "refused", key="a")
        await refused.task
        assert refused.status == 429
        start, body = refused.sent
        assert (b"retry-after", b"1") in start["headers"]
        assert json.loads(body["body"])["error"]["code"] == "rate_limited"
        app.finish("running")
        app.finish("waiting")
        await asyncio.gather(running.task, waiting.task)
        assert app.started == ["running", "waiting"]

    run(scenario)


def test_clients_are_told_apart_by_key_prefix_then_session_then_address(settings):
    def scope(*headers: tuple[bytes, bytes], address: str = "10.0.0.7") -> dict:
        return {"type": "http", "headers": list(headers), "client": (address, 1234)}

    key = (b"authorization", b"Bearer msk_ab12cd_s3cr3t")
    other_secret = (b"authorization", b"Bearer msk_ab12cd_different")
    assert client_of(scope(key)) == "key:ab12cd" == client_of(scope(other_secret))
    cookie = (b"cookie", f"csrftoken=x; {settings.SESSION_COOKIE_NAME}=abc".encode())
    assert client_of(scope(cookie)).startswith("session:")
    assert client_of(scope(cookie)) != client_of(scope((b"cookie", b"sessionid=zzz")))
    assert client_of(scope(address="10.0.0.7")) == "address:10.0.0.7"
    assert "s3cr3t" not in client_of(scope((b"authorization", b"Bearer s3cr3t")))
