"""Live updates over the project websocket: who may connect, what arrives, and — with Redis —
that an event published in one process reaches clients of two separate daphne processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from memorysaas.asgi import application
from memorysaas.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from memorysaas.kernel.realtime import next_project_seq, project_group, publish
from tests.processes import database_url, free_port, log_tail, popen_server

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = (b"origin", b"http://127.0.0.1")
ROOT = Path(__file__).resolve().parent.parent


def _session_cookie(person) -> str:
    client = Client()
    client.force_login(person.user, backend="django.contrib.auth.backends.ModelBackend")
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


def _communicator(project_id, *headers: tuple[bytes, bytes]) -> WebsocketCommunicator:
    return WebsocketCommunicator(application, f"/ws/projects/{project_id}/", headers=[ORIGIN, *headers])


async def _connect(project_id, *headers):
    communicator = _communicator(project_id, *headers)
    connected, code = await communicator.connect()
    return communicator, connected, code


def test_anonymous_sockets_are_closed_unauthenticated(alice):
    async_to_sync(_anonymous_sockets_are_closed_unauthenticated)(alice)


async def _anonymous_sockets_are_closed_unauthenticated(alice):
    _, connected, code = await _connect(alice.project.id)
    assert (connected, code) == (False, CLOSE_UNAUTHENTICATED)
    _, connected, code = await _connect(alice.project.id, (b"authorization", b"Bearer msk_nope_nope"))
    assert (connected, code) == (False, CLOSE_UNAUTHENTICATED)


def test_outsiders_and_missing_projects_look_the_same(alice, charlie):
    async_to_sync(_outsiders_and_missing_projects_look_the_same)(alice, charlie)


async def _outsiders_and_missing_projects_look_the_same(alice, charlie):
    cookie = (b"cookie", (await sync_to_async(_session_cookie)(charlie)).encode())
    for project_id in (alice.project.id, uuid.uuid4()):
        _, connected, code = await _connect(project_id, cookie)
        assert (connected, code) == (False, CLOSE_NOT_FOUND)
    key = (b"authorization", f"Bearer {charlie.key}".encode())
    _, connected, code = await _connect(alice.project.id, key)
    assert (connected, code) == (False, CLOSE_NOT_FOUND)


def test_a_member_gets_hello_then_each_event_in_sequence(alice, bob):
    async_to_sync(_a_member_gets_hello_then_each_event_in_sequence)(alice, bob)


async def _a_member_gets_hello_then_each_event_in_sequence(alice, bob):
    cookie = (b"cookie", (await sync_to_async(_session_cookie)(bob)).encode())
    communicator, connected, _ = await _connect(alice.project.id, cookie)
    assert connected
    hello = await communicator.receive_json_from()
    assert hello["event"] == "hello"
    first = await sync_to_async(publish)(alice.project.id, "memory.created", {"id": "m1"})
    second = await sync_to_async(publish)(alice.project.id, "review.needed", {"count": 3})
    assert (first, second) == (hello["seq"] + 1, hello["seq"] + 2)
    assert await communicator.receive_json_from() == {
        "event": "memory.created",
        "seq": first,
        "data": {"id": "m1"},
    }
    assert (await communicator.receive_json_from())["event"] == "review.needed"
    await communicator.send_json_to({"type": "ping"})
    assert (await communicator.receive_json_from())["event"] == "pong"
    await communicator.disconnect()


def test_writes_that_need_review_announce_it(alice, bob):
    async_to_sync(_writes_that_need_review_announce_it)(alice, bob)


async def _writes_that_need_review_announce_it(alice, bob):
    from apps.memories.services import memory_create, memory_feedback
    from apps.memories.validation import MemoryDraft

    cookie = (b"cookie", (await sync_to_async(_session_cookie)(bob)).encode())
    communicator, connected, _ = await _connect(alice.project.id, cookie)
    assert connected and (await communicator.receive_json_from())["event"] == "hello"

    def create(**fields):
        draft = MemoryDraft(type="gotcha", content=f"Refunds round half-even {uuid.uuid4()}", **fields)
        return memory_create(project=alice.project, actor=alice.principal, draft=draft)

    def flag(memory, note):
        return memory_feedback(memory=memory, actor=bob.principal, kind="flag", note=note)

    inferred = await sync_to_async(create)(source="observer_inferred", needs_review=True)
    assert [(await communicator.receive_json_from())["event"] for _ in range(2)] == [
        "memory.created", "review.needed",
    ]  # fmt: skip
    taught = await sync_to_async(create)(needs_review=False)
    assert (await communicator.receive_json_from())["event"] == "memory.created"
    await sync_to_async(flag)(taught, "wrong")
    events = [await communicator.receive_json_from() for _ in range(2)]
    assert [e["event"] for e in events] == ["memory.updated", "review.needed"]
    assert events[1]["data"] == {"memory_ids": [str(taught.id)]}
    await sync_to_async(flag)(inferred, "again")
    await sync_to_async(publish)(alice.project.id, "sentinel", {})
    # it already needed review: no second notice between the update and the sentinel
    assert [(await communicator.receive_json_from())["event"] for _ in range(2)] == [
        "memory.updated",
        "sentinel",
    ]
    await communicator.disconnect()


def test_an_api_key_connects_and_a_reconnect_learns_the_current_seq(alice):
    async_to_sync(_an_api_key_connects_and_a_reconnect_learns_the_current_seq)(alice)


async def _an_api_key_connects_and_a_reconnect_learns_the_current_seq(alice):
    key = (b"authorization", f"Bearer {alice.key}".encode())
    communicator, connected, _ = await _connect(alice.project.id, key)
    assert connected
    before = (await communicator.receive_json_from())["seq"]
    await communicator.disconnect()
    await sync_to_async(publish)(alice.project.id, "memory.updated", {})  # missed while away
    communicator, _, _ = await _connect(alice.project.id, key)
    assert (await communicator.receive_json_from())["seq"] == before + 1
    await communicator.disconnect()


def test_project_page_opens_the_socket(alice):
    client = Client()
    client.force_login(alice.user, backend="django.contrib.auth.backends.ModelBackend")
    page = client.get(f"/o/{alice.org.slug}/p/{alice.project.slug}/").content.decode()
    assert f'ws-connect="/ws/projects/{alice.project.id}/"' in page


# --------------------------------------------------------------------------- two daphne processes


@pytest.fixture
def two_daphnes():
    redis_url = os.environ.get("REDIS_URL")
    if not redis_url:
        pytest.skip("needs a real Redis at REDIS_URL: the channel layer that joins two daphne processes")
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "memorysaas.settings.local",
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_url,
        "CHANNELS_PREFIX": prefix,
        "SECRET_KEY": settings.SECRET_KEY,
        "DB_CONN_MAX_AGE": "0",
    }
    ports, processes = [free_port(), free_port()], []
    for port in ports:
        processes.append(
            popen_server(
                [
                    sys.executable,
                    "-m",
                    "daphne",
                    "-b",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "memorysaas.asgi:application",
                ],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
            )
        )
    try:
        for port, process in zip(ports, processes, strict=True):
            _wait_until_serving(port, process)
        yield ports, prefix, redis_url
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)


def _wait_until_serving(port: int, process: subprocess.Popen) -> None:
    """Poll until daphne answers (or has died): readiness by condition, not by sleeping."""
    for _ in range(600):
        if process.poll() is not None:
            raise AssertionError(f"daphne on {port} exited: {log_tail(process.log, 2000)}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=1).status_code in (200, 503):
                return
        except httpx.HTTPError:
            pass
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=0.1)
    raise AssertionError(f"daphne on {port} never served")


@pytest.mark.redis
def test_an_event_reaches_clients_of_two_daphne_processes_through_redis(alice, bob, two_daphnes):
    from channels_redis.core import RedisChannelLayer
    from websockets.sync.client import connect

    ports, prefix, redis_url = two_daphnes
    path = f"/ws/projects/{alice.project.id}/"
    headers = [
        (ports[0], {"Cookie": _session_cookie(alice), "Origin": "http://127.0.0.1"}),
        (ports[1], {"Authorization": f"Bearer {bob.key}", "Origin": "http://127.0.0.1"}),
    ]
    stack = contextlib.ExitStack()
    sockets = [
        stack.enter_context(connect(f"ws://127.0.0.1:{port}{path}", additional_headers=extra))
        for port, extra in headers
    ]
    with stack:
        hellos = [json.loads(ws.recv(timeout=30)) for ws in sockets]
        assert [h["event"] for h in hellos] == ["hello", "hello"]
        # A third process (this test) publishes into the Redis layer both daphnes listen on.
        layer = RedisChannelLayer(hosts=[redis_url], prefix=prefix)
        seq = next_project_seq(alice.project.id)
        message = {"type": "project.event", "event": "memory.created", "seq": seq, "data": {"id": "x"}}
        asyncio.run(layer.group_send(project_group(alice.project.id), message))
        received = [json.loads(ws.recv(timeout=30)) for ws in sockets]
        assert received == [{"event": "memory.created", "seq": seq, "data": {"id": "x"}}] * 2
        assert seq == hellos[0]["seq"] + 1


def test_taking_access_away_closes_the_sockets_it_covered(alice, bob, person_with_role):
    """Access was checked when a socket opened and never again: a removed member, and a revoked
    key, went on receiving the project's events."""
    async_to_sync(_taking_access_away_closes_the_sockets_it_covered)(alice, bob, person_with_role)


async def _taking_access_away_closes_the_sockets_it_covered(alice, bob, person_with_role):
    from apps.tenants import services
    from apps.tenants.models import Membership
    from apps.tenants.roles import Role

    viewer = await sync_to_async(person_with_role)(Role.VIEWER)
    sockets = {}
    for name, header in {
        "bob": (b"cookie", (await sync_to_async(_session_cookie)(bob)).encode()),
        "bob's key": (b"authorization", f"Bearer {bob.key}".encode()),
        "viewer's key": (b"authorization", f"Bearer {viewer.key}".encode()),
        "alice": (b"cookie", (await sync_to_async(_session_cookie)(alice)).encode()),
    }.items():
        communicator, connected, _ = await _connect(alice.project.id, header)
        assert connected and (await communicator.receive_json_from())["event"] == "hello"
        sockets[name] = communicator

    def remove_bob():
        membership = Membership.objects.get(user=bob.user, organization=alice.org)
        services.membership_remove(membership=membership, actor=alice.principal)

    await sync_to_async(remove_bob)()
    for name in ("bob", "bob's key"):
        assert (await sockets[name].receive_output())["type"] == "websocket.close", name
    await sync_to_async(lambda: services.api_key_revoke(api_key=viewer.api_key, actor=alice.principal))()
    assert (await sockets["viewer's key"].receive_output())["type"] == "websocket.close"
    await sync_to_async(publish)(alice.project.id, "sentinel", {})
    assert (await sockets["alice"].receive_json_from())["event"] == "sentinel"  # (still there)
    await sockets["alice"].disconnect()


def test_a_key_that_expires_while_its_socket_is_open_gets_nothing_after(alice, monkeypatch):
    """Its socket went on receiving the project's events after the key itself was refused."""
    async_to_sync(_a_key_that_expires_while_its_socket_is_open_gets_nothing_after)(alice, monkeypatch)


async def _a_key_that_expires_while_its_socket_is_open_gets_nothing_after(alice, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from apps.tenants import services
    from memorysaas import consumers

    soon = timezone.now() + timedelta(hours=1)
    _, key = await sync_to_async(
        lambda: services.api_key_create(
            organization=alice.org,
            actor=alice.principal,
            name="ci",
            scopes=["memories:read"],
            expires_at=soon,
        )
    )()
    communicator, connected, _ = await _connect(
        alice.project.id, (b"authorization", f"Bearer {key}".encode())
    )
    assert connected and (await communicator.receive_json_from())["event"] == "hello"
    await sync_to_async(publish)(alice.project.id, "before", {})
    assert (await communicator.receive_json_from())["event"] == "before"
    # two hours on, as the consumer reads the clock
    monkeypatch.setattr(consumers.timezone, "now", lambda: soon + timedelta(hours=1))
    await sync_to_async(publish)(alice.project.id, "after", {})
    assert (await communicator.receive_output())["type"] == "websocket.close"


def test_signing_out_closes_the_sockets_that_session_opened(alice):
    """After signing out, the session's sockets went on receiving the project's events."""
    async_to_sync(_signing_out_closes_the_sockets_that_session_opened)(alice)


async def _signing_out_closes_the_sockets_that_session_opened(alice):
    client = Client()
    await sync_to_async(client.force_login)(alice.user, backend="django.contrib.auth.backends.ModelBackend")
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    leaving, connected, _ = await _connect(alice.project.id, (b"cookie", cookie.encode()))
    assert connected and (await leaving.receive_json_from())["event"] == "hello"
    staying, connected, _ = await _connect(
        alice.project.id, (b"cookie", (await sync_to_async(_session_cookie)(alice)).encode())
    )
    assert connected and (await staying.receive_json_from())["event"] == "hello"

    response = await sync_to_async(client.post)("/accounts/logout/")
    assert response.status_code == 302
    assert (await leaving.receive_output())["type"] == "websocket.close"
    await sync_to_async(publish)(alice.project.id, "sentinel", {})
    assert (await staying.receive_json_from())["event"] == "sentinel"  # (another session of hers)
    await staying.disconnect()


def test_a_new_password_or_a_deactivation_closes_the_sockets_it_signed_out(alice, bob):
    """A password change signs out the person's other sessions, and deactivating them signs out
    every session and stops their keys; the sockets those opened went on receiving events."""
    async_to_sync(_a_new_password_or_a_deactivation_closes_the_sockets_it_signed_out)(alice, bob)


async def _a_new_password_or_a_deactivation_closes_the_sockets_it_signed_out(alice, bob):
    from tests.conftest import PASSWORD

    changing = Client()
    await sync_to_async(changing.force_login)(alice.user, backend="django.contrib.auth.backends.ModelBackend")
    sockets = {}
    for name, header in {
        "alice elsewhere": (b"cookie", (await sync_to_async(_session_cookie)(alice)).encode()),
        "bob": (b"cookie", (await sync_to_async(_session_cookie)(bob)).encode()),
        "bob's key": (b"authorization", f"Bearer {bob.key}".encode()),
    }.items():
        communicator, connected, _ = await _connect(alice.project.id, header)
        assert connected and (await communicator.receive_json_from())["event"] == "hello"
        sockets[name] = communicator

    new = "a-Brand-new-passphrase-42"
    response = await sync_to_async(changing.post)(
        "/accounts/password/change/", {"oldpassword": PASSWORD, "password1": new, "password2": new}
    )
    assert response.status_code == 302, response.content
    assert (await sockets["alice elsewhere"].receive_output())["type"] == "websocket.close"
    await sync_to_async(publish)(alice.project.id, "sentinel", {})
    for name in ("bob", "bob's key"):  # (still there: her password is not theirs)
        assert (await sockets[name].receive_json_from())["event"] == "sentinel", name

    def deactivate_bob():
        bob.user.is_active = False
        bob.user.save()

    await sync_to_async(deactivate_bob)()
    for name in ("bob", "bob's key"):
        assert (await sockets[name].receive_output())["type"] == "websocket.close", name


def test_frames_that_are_not_json_text_are_ignored(alice):
    """A binary or non-JSON frame raised inside channels: the consumer died without leaving its
    group, and every later event was queued for a socket that was gone."""
    async_to_sync(_frames_that_are_not_json_text_are_ignored)(alice)


async def _frames_that_are_not_json_text_are_ignored(alice):
    communicator, connected, _ = await _connect(
        alice.project.id, (b"authorization", f"Bearer {alice.key}".encode())
    )
    assert connected and (await communicator.receive_json_from())["event"] == "hello"
    await communicator.send_to(text_data="garbage")
    await communicator.send_to(bytes_data=b"\x00\x01")
    await communicator.send_json_to({"type": "ping"})
    assert (await communicator.receive_json_from())["event"] == "pong"
    await communicator.disconnect()


def test_a_personal_memory_is_announced_without_its_id(alice, bob):
    """Every watcher of the project hears memory events: a teammate learned the id (and timing)
    of each personal memory, and of its edits and deletion."""
    async_to_sync(_a_personal_memory_is_announced_without_its_id)(alice, bob)


async def _a_personal_memory_is_announced_without_its_id(alice, bob):
    from apps.memories.models import Memory
    from apps.memories.services import memory_create, memory_delete
    from apps.memories.validation import MemoryDraft

    cookie = (b"cookie", (await sync_to_async(_session_cookie)(bob)).encode())
    communicator, connected, _ = await _connect(alice.project.id, cookie)
    assert connected and (await communicator.receive_json_from())["event"] == "hello"

    def create(scope):
        draft = MemoryDraft(type="preference", content=f"Alice likes tabs {scope}.", scope=scope)
        return memory_create(project=alice.project, actor=alice.principal, draft=draft)

    mine = await sync_to_async(create)("personal")
    shared = await sync_to_async(create)("project")
    await sync_to_async(lambda: memory_delete(memory=Memory.objects.get(id=mine.id), actor=alice.principal))()
    events = [await communicator.receive_json_from() for _ in range(3)]
    assert [(e["event"], e["data"]["memory_ids"]) for e in events] == [
        ("memory.created", []),
        ("memory.created", [str(shared.id)]),
        ("memory.deleted", []),
    ]
    await communicator.disconnect()


def test_an_api_key_socket_needs_no_origin_but_a_cookie_socket_does(alice):
    """The Origin check turned away agents and CLIs (which send none) although it only guards
    what a browser's cookies authenticate."""
    async_to_sync(_an_api_key_socket_needs_no_origin_but_a_cookie_socket_does)(alice)


async def _an_api_key_socket_needs_no_origin_but_a_cookie_socket_does(alice):
    path = f"/ws/projects/{alice.project.id}/"
    key = (b"authorization", f"Bearer {alice.key}".encode())
    agent = WebsocketCommunicator(application, path, headers=[key])
    assert (await agent.connect())[0] is True
    assert (await agent.receive_json_from())["event"] == "hello"
    await agent.disconnect()
    cookie = (b"cookie", (await sync_to_async(_session_cookie)(alice)).encode())
    for headers in ([cookie], [cookie, (b"origin", b"https://evil.example")]):
        browser = WebsocketCommunicator(application, path, headers=headers)
        assert (await browser.connect())[0] is False


def test_an_org_memory_is_announced_in_every_project_it_applies_in(alice, bob):
    """Its events went only to its home project's socket, while the other projects' pages list
    it too and never refreshed."""
    async_to_sync(_an_org_memory_is_announced_in_every_project_it_applies_in)(alice, bob)


async def _an_org_memory_is_announced_in_every_project_it_applies_in(alice, bob):
    from apps.memories.services import memory_create
    from apps.memories.validation import MemoryDraft
    from tests.factories import ProjectFactory

    sibling = await sync_to_async(ProjectFactory)(organization=alice.org, name="Sibling", slug="sibling")
    key = (b"authorization", f"Bearer {alice.key}".encode())
    communicator, connected, _ = await _connect(sibling.id, key)
    assert connected and (await communicator.receive_json_from())["event"] == "hello"

    def create(scope):
        draft = MemoryDraft(type="requirement", content=f"Money is stored in cents ({scope}).", scope=scope)
        return memory_create(project=alice.project, actor=alice.principal, draft=draft)

    await sync_to_async(create)("project")  # (applies only at home: the sibling hears nothing)
    wide = await sync_to_async(create)("org")
    event = await communicator.receive_json_from()
    assert (event["event"], event["data"]["memory_ids"]) == ("memory.created", [str(wide.id)])
    await communicator.disconnect()


def test_the_redis_layer_waits_longer_than_its_blocking_pop():
    """redis-py 8 stops reading a socket after 5 s, the length of channels-redis's blocking pop:
    each idle websocket's receive failed at 5 s and daphne closed it (1011)."""
    from channels_redis.core import RedisChannelLayer

    from memorysaas.settings.base import redis_channel_hosts

    layer = RedisChannelLayer(hosts=redis_channel_hosts("redis://127.0.0.1:6379/0"))
    pool = layer.create_pool(0)  # (makes no connection)
    assert pool.connection_kwargs["socket_timeout"] > layer.brpop_timeout


def test_keys_guessed_over_a_socket_spend_the_addresss_failed_authentication_budget(alice, settings):
    async_to_sync(_keys_guessed_over_a_socket_spend_the_budget)(alice, settings)


async def _keys_guessed_over_a_socket_spend_the_budget(alice, settings):
    from memorysaas.consumers import CLOSE_RATE_LIMITED

    settings.RATE_LIMIT_ENABLED, settings.RATE_LIMIT_STORE = True, "postgres"
    settings.RATE_LIMIT_FAILED_AUTH_BURST, settings.RATE_LIMIT_FAILED_AUTH_PER_MINUTE = 2, 1
    attacker = (b"x-forwarded-for", b"203.0.113.66")  # (behind the loopback proxy the test stands for)

    async def attempt(key: str, address=attacker) -> int | None:
        communicator = _communicator(alice.project.id, (b"authorization", f"Bearer {key}".encode()), address)
        communicator.scope["client"] = ("127.0.0.1", 50000)
        connected, code = await communicator.connect()
        if connected:
            await communicator.disconnect()
        return None if connected else code

    guessed = f"msk_{uuid.uuid4().hex[:8]}_{uuid.uuid4().hex}{uuid.uuid4().hex[:8]}"
    assert [await attempt(guessed), await attempt("not-a-key")] == [CLOSE_UNAUTHENTICATED] * 2
    assert await attempt(alice.key) == CLOSE_RATE_LIMITED  # (out of budget: even a good key)
    # Over HTTP the same address is out of budget too; another address is not.
    response = await sync_to_async(Client().get)(
        "/api/v1/me", HTTP_AUTHORIZATION=f"Bearer {alice.key}", HTTP_X_FORWARDED_FOR="203.0.113.66"
    )
    assert response.status_code == 429
    assert await attempt(alice.key, (b"x-forwarded-for", b"198.51.100.7")) is None


def test_checking_an_open_sockets_revoked_key_again_spends_no_failed_authentication_budget(
    alice, person_with_role, settings
):
    async_to_sync(_rechecking_a_revoked_key_spends_no_budget)(alice, person_with_role, settings)


async def _rechecking_a_revoked_key_spends_no_budget(alice, person_with_role, settings):
    from apps.tenants import services
    from apps.tenants.roles import Role

    settings.RATE_LIMIT_ENABLED, settings.RATE_LIMIT_STORE = True, "postgres"
    settings.RATE_LIMIT_FAILED_AUTH_BURST, settings.RATE_LIMIT_FAILED_AUTH_PER_MINUTE = 1, 1
    viewer = await sync_to_async(person_with_role)(Role.VIEWER)
    address = (b"x-forwarded-for", b"203.0.113.67")

    async def connect(key: str):
        communicator = _communicator(alice.project.id, (b"authorization", f"Bearer {key}".encode()), address)
        communicator.scope["client"] = ("127.0.0.1", 50000)
        return communicator, *(await communicator.connect())

    socket, connected, _ = await connect(viewer.key)
    assert connected and (await socket.receive_json_from())["event"] == "hello"
    await sync_to_async(lambda: services.api_key_revoke(api_key=viewer.api_key, actor=alice.principal))()
    assert (await socket.receive_output())["type"] == "websocket.close"
    # The recheck that closed it was no failed guess: the address's one failure is still unspent.
    other, connected, _ = await connect(alice.key)
    assert connected
    await other.disconnect()
