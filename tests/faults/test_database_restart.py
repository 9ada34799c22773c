"""PostgreSQL stopped and started again under a load of 20 clients writing memories through a real
daphne, with real workers embedding them: errors (5xx, in the API's envelope) only while the
database is away, the same web process serving again within 5 s of its return, no acknowledged
write lost, no memory left pending."""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass

import httpx

from tests.faults.conftest import RETRY, Stack, wait_until

CLIENTS = 20
# The web process must serve again within this long after the database is back.
RECOVERY_SECONDS = 5.0
# Writes before the stop, failures while down, writes begun after the recovery window: enough of
# each that every phase was exercised.
BEFORE_STOP = 20
WHILE_DOWN = 5
AFTER_RECOVERY = 20


@dataclass
class Outcome:
    started: float
    ended: float
    status: int  # 0: no HTTP answer (the connection failed or timed out)
    body: dict | None


class Load:
    """CLIENTS threads, each posting one memory after another until told to stop."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.outcomes: list[Outcome] = []
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(n,)) for n in range(CLIENTS)]

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join(timeout=60)
        assert not any(t.is_alive() for t in self.threads), "a client never finished its request"

    def _client(self, n: int) -> None:
        with self.stack.client(timeout=30) as api:
            while not self.done.is_set():
                content = f"Client {n} wrote this fact {uuid.uuid4().hex} during the restart test."
                started = time.monotonic()
                try:
                    response = api.post(
                        f"projects/{self.stack.project_id}/memories",
                        json={"type": "gotcha", "content": content},
                    )
                    status, body = response.status_code, _json(response)
                except httpx.HTTPError:
                    status, body = 0, None
                with self.lock:
                    self.outcomes.append(Outcome(started, time.monotonic(), status, body))

    def count(self, predicate) -> int:
        with self.lock:
            return sum(1 for o in self.outcomes if predicate(o))


def _json(response: httpx.Response) -> dict | None:
    try:
        return response.json()
    except ValueError:
        return None


def _is_envelope(body: dict | None) -> bool:
    error = (body or {}).get("error")
    return isinstance(error, dict) and bool(error.get("code")) and bool(error.get("message"))


def test_a_database_restart_under_load_loses_no_acknowledged_write(stack):
    stack.start_web_and_workers()
    postgres = stack.postgres
    with Load(stack) as load:
        wait_until(
            lambda: load.count(lambda o: o.status == 201) >= BEFORE_STOP, timeout=60, what="writes flow"
        )
        stop_began = time.monotonic()
        postgres.stop()
        stopped = time.monotonic()
        wait_until(
            lambda: load.count(lambda o: o.ended > stopped and o.status != 201) >= WHILE_DOWN,
            timeout=60,
            what="clients were answered with errors while the database was down",
        )
        postgres.start()
        back = time.monotonic()
        recovered_by = back + RECOVERY_SECONDS
        wait_until(
            lambda: load.count(lambda o: o.started > recovered_by) >= AFTER_RECOVERY,
            timeout=60,
            what="clients answered after the recovery window",
        )
    outcomes = load.outcomes
    first = min((o.ended for o in outcomes if o.status == 201 and o.ended > back), default=float("nan"))
    print(
        f"writes: {len(outcomes)}, errors {sum(o.status != 201 for o in outcomes)}; database down "
        f"{back - stop_began:.1f} s; first write acknowledged {first - back:.1f} s after its return"
    )

    # Errors only while the database was away (or within the recovery window), and in the envelope.
    errors = [o for o in outcomes if o.status != 201]
    assert errors, "no request met the outage: nothing was tested"
    assert all(o.ended >= stop_began and o.started <= recovered_by for o in errors), [
        (round(o.started - back, 2), o.status, o.body) for o in errors if o.started > recovered_by
    ][:10]
    assert all(500 <= o.status < 600 and _is_envelope(o.body) for o in errors), {
        (o.status, str(o.body)[:200]) for o in errors if not (500 <= o.status < 600 and _is_envelope(o.body))
    }
    # Served again within RECOVERY_SECONDS, by the same daphne: every request begun after is a 201.
    after = [o for o in outcomes if o.started > recovered_by]
    assert len(after) >= AFTER_RECOVERY and all(o.status == 201 for o in after)
    assert stack.web.poll() is None and [p.args[2] for p in stack.processes].count("daphne") == 1

    # No acknowledged write lost, and every memory embedded in the end.
    acknowledged = {o.body["id"] for o in outcomes if o.status == 201}
    stored = {str(i) for (i,) in stack.rows("SELECT id FROM memories_memory")}
    assert acknowledged <= stored, f"{len(acknowledged - stored)} acknowledged writes are missing"
    drain = time.monotonic()
    wait_until(
        lambda: set(stack.embedding_counts()) == {"ready"},
        timeout=RETRY + 90,
        what="every memory embedded",
        state=stack.embedding_counts,
    )
    retried = stack.log_tail("qcluster", chars=10**6).count("met a database outage")
    print(
        f"every memory embedded {time.monotonic() - drain:.1f} s after the load ended; {retried} task retries"
    )
