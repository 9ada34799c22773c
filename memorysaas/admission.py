"""Admission: how many HTTP requests this process works on at once, and whose go in first.

Django runs each request's code in a thread of its own, and that thread holds a connection from
the database pool while it works. Unbounded, a client that keeps many requests in flight starts
as many threads: past the pool's size they wait for a connection, and every other client's
requests wait behind them. This gate sits in front of Django (memorysaas/asgi.py) and lets at
most WEB_CONCURRENT_REQUESTS requests in at once, fewer than the pool holds, so a request that
is in gets its connection at once; the others wait here, on the event loop, holding no thread
and no connection.

Who goes in is fair between clients (an API key, else a signed-in session, else an address): a
client has at most WEB_CLIENT_CONCURRENT_REQUESTS requests in at once, and when a place frees,
the waiting client with the fewest requests in goes first (the longest waiting among equals). A
client that floods the service gets its share and no more, and another client's request goes
in at the next free place, ahead of the flood's backlog. A client with WEB_CLIENT_QUEUE requests
already waiting is answered 429 at once; a request whose client hangs up while it waits is
dropped without running.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
from collections import Counter, deque
from dataclasses import dataclass, field

from django.conf import settings


def client_of(scope: dict) -> str:
    """Who is asking, for fairness only (nothing is authenticated here): an API key's visible
    prefix, else a session cookie, else the peer address."""
    headers = dict(scope.get("headers") or [])
    authorization = headers.get(b"authorization", b"")
    if authorization[:7].lower() == b"bearer ":
        token = authorization[7:].strip()
        if token.startswith(b"msk_") and token.count(b"_") >= 2:
            return "key:" + token.split(b"_")[1].decode("latin-1")
        return "bearer:" + hashlib.sha256(token).hexdigest()[:16]
    cookie_name = settings.SESSION_COOKIE_NAME.encode()
    for part in headers.get(b"cookie", b"").split(b";"):
        name, _, value = part.strip().partition(b"=")
        if name == cookie_name and value:
            return "session:" + hashlib.sha256(value).hexdigest()[:16]
    client = scope.get("client") or ("?", 0)
    return f"address:{client[0]}"


@dataclass
class _Waiter:
    client: str
    order: int
    admitted: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Gate:
    """The counts and the waiting lines. Used from the event loop's thread only (no locks)."""

    def __init__(self, *, capacity: int, per_client: int, queue: int) -> None:
        self.capacity = max(1, capacity)
        self.per_client = max(1, min(per_client, self.capacity))
        self.queue = max(0, queue)
        self.inside: Counter[str] = Counter()
        self.total = 0
        self.waiting: dict[str, deque[_Waiter]] = {}
        self._order = itertools.count()

    def _can_enter(self, client: str) -> bool:
        return self.total < self.capacity and self.inside[client] < self.per_client

    def _enter(self, client: str) -> None:
        self.inside[client] += 1
        self.total += 1

    def try_enter(self, client: str) -> bool:
        """In at once if there is room and nobody this client would overtake is waiting."""
        if client in self.waiting or not self._can_enter(client):
            return False
        self._enter(client)
        return True

    def is_full_for(self, client: str) -> bool:
        return len(self.waiting.get(client, ())) >= self.queue

    def wait(self, client: str) -> _Waiter:
        waiter = _Waiter(client=client, order=next(self._order))
        self.waiting.setdefault(client, deque()).append(waiter)
        return waiter

    def leave(self, client: str) -> None:
        self.inside[client] -= 1
        if self.inside[client] <= 0:
            del self.inside[client]
        self.total -= 1
        self._admit()

    def withdraw(self, waiter: _Waiter) -> None:
        """A waiter that is not going in after all (its client left, or it was cancelled)."""
        if waiter.admitted.done() and not waiter.admitted.cancelled():
            self.leave(waiter.client)  # it had been let in: give its place back
            return
        line = self.waiting.get(waiter.client)
        if line is not None and waiter in line:
            line.remove(waiter)
            if not line:
                del self.waiting[waiter.client]
        waiter.admitted.cancel()

    def _admit(self) -> None:
        while self.total < self.capacity:
            eligible = [c for c in self.waiting if self.inside[c] < self.per_client]
            if not eligible:
                return
            client = min(eligible, key=lambda c: (self.inside[c], self.waiting[c][0].order))
            line = self.waiting[client]
            waiter = line.popleft()
            if not line:
                del self.waiting[client]
            self._enter(client)
            waiter.admitted.set_result(True)


def _too_many(client_waiting: int) -> list[dict]:
    body = {
        "error": {
            "code": "rate_limited",
            "message": "Too many requests from this client at once; wait for some to finish.",
            "details": {"waiting": client_waiting},
        }
    }
    return [
        {
            "type": "http.response.start",
            "status": 429,
            "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")],
        },
        {"type": "http.response.body", "body": json.dumps(body).encode()},
    ]


class AdmissionMiddleware:
    """ASGI middleware for HTTP: holds each request at the gate until it may go in."""

    def __init__(self, app, gate: Gate | None = None) -> None:
        self.app = app
        self._gate = gate

    @property
    def gate(self) -> Gate:
        if self._gate is None:  # made on first use: settings are read once Django is set up
            self._gate = Gate(
                capacity=settings.WEB_CONCURRENT_REQUESTS,
                per_client=settings.WEB_CLIENT_CONCURRENT_REQUESTS,
                queue=settings.WEB_CLIENT_QUEUE,
            )
        return self._gate

    async def __call__(self, scope, receive, send) -> None:
        gate = self.gate
        client = client_of(scope)
        if gate.try_enter(client):
            try:
                await self.app(scope, receive, send)
            finally:
                gate.leave(client)
            return
        if gate.is_full_for(client):
            for message in _too_many(len(gate.waiting.get(client, ()))):
                await send(message)
            return
        await self._wait_then_run(gate, client, scope, receive, send)

    async def _wait_then_run(self, gate: Gate, client: str, scope, receive, send) -> None:
        """Wait for a place while listening to the client: one that hangs up is dropped. What
        it sent meanwhile is handed on to Django unchanged."""
        inbox: asyncio.Queue = asyncio.Queue()
        hung_up = asyncio.Event()

        async def listen() -> None:
            while True:
                message = await receive()
                inbox.put_nowait(message)
                if message["type"] == "http.disconnect":
                    hung_up.set()
                    return

        listening = asyncio.create_task(listen())
        try:
            if not await _admitted(gate, gate.wait(client), hung_up):
                return
            try:
                await self.app(scope, inbox.get, send)
            finally:
                gate.leave(client)
        finally:
            listening.cancel()


async def _admitted(gate: Gate, waiter: _Waiter, hung_up: asyncio.Event) -> bool:
    """Whether the waiter went in (False: its client hung up first; it has left the line)."""
    left = asyncio.create_task(hung_up.wait())
    try:
        await asyncio.wait({waiter.admitted, left}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        gate.withdraw(waiter)
        raise
    finally:
        left.cancel()
    if hung_up.is_set() or not waiter.admitted.done():
        gate.withdraw(waiter)
        return False
    return True
