"""A channel layer over PostgreSQL LISTEN/NOTIFY, for when there is no Redis (`make run`).

What a worker publishes (graph index progress, the memories a finalize promoted) must reach the
sockets a daphne process holds. Every message is one NOTIFY on a channel named after the layer's
prefix; every process that holds sockets LISTENs on it and hands each message to its own sockets.
So group membership lives in memory, in the process whose socket joined: nothing to store, and
nothing left behind by a process that died. A process that only sends (a worker) opens one
connection, on a thread of its own, the first time it sends.

Delivery is at most once, as with Redis: a message sent while a process's listening connection
is down (a database restart) is not seen there; the listener reconnects, and the clients' sequence
numbers (memorysaas.kernel.realtime) show them the gap so they fetch again.

Why not the `channels-postgres` package: docs/decisions/live-updates-without-redis.md.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgpack
import psycopg
from channels.exceptions import ChannelFull
from channels.layers import BaseChannelLayer
from psycopg import sql

logger = logging.getLogger(__name__)

# NOTIFY takes at most 8000 bytes; a larger message goes as several in one transaction, which
# PostgreSQL delivers one after the other, and the receivers put back together.
CHUNK = 7000
# A listening connection that heard nothing this long checks the server is still there.
LISTEN_CHECK_SECONDS = 30
# How long joining a group (or sending to our own channel) waits for the listening connection
# before it fails: while the database is away a socket is refused rather than left hanging.
READY_SECONDS = 10
# Reconnection waits double from the first to the last.
RECONNECT_FIRST, RECONNECT_LAST = 0.2, 5.0
# The connection settings a psycopg connection string cannot carry (Django's own objects).
_NOT_CONNINFO = ("cursor_factory", "context", "prepare_threshold")


class PostgresChannelLayer(BaseChannelLayer):
    extensions = ["groups", "flush"]

    def __init__(
        self, prefix: str = "memorysaas", database: str = "default", expiry: int = 60, capacity: int = 100
    ) -> None:
        super().__init__(expiry=expiry, capacity=capacity)
        self.notify_channel = f"{prefix}.channels"
        self.database = database
        self.client = uuid.uuid4().hex[:12]  # this process's channels start with it
        self._receiver: _Receiver | None = None
        self._sender: _Sender | None = None

    # -------------------------------------------------------------- channel layer API

    async def new_channel(self, prefix: str = "specific") -> str:
        return f"{prefix}.{self.client}!{uuid.uuid4().hex}"

    async def send(self, channel: str, message: dict[str, Any]) -> None:
        self.require_valid_channel_name(channel)
        assert "__asgi_channel__" not in message
        if self._is_local(channel):
            # Our own channel: make sure we listen before the message goes out, or it is missed.
            await self._receiving().ready()
        await self._send({"c": channel, "m": message})

    async def receive(self, channel: str) -> dict[str, Any]:
        self.require_valid_channel_name(channel)
        if not self._is_local(channel):
            raise ValueError(f"{channel} belongs to another process; only its own channels can be read")
        return await self._receiving().queue(channel).get()

    async def group_add(self, group: str, channel: str) -> None:
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        receiver = self._receiving()
        receiver.groups[group].add(channel)
        # Whatever is sent to the group once this returns reaches the channel.
        await receiver.ready()

    async def group_discard(self, group: str, channel: str) -> None:
        self.require_valid_group_name(group)
        self.require_valid_channel_name(channel)
        if self._receiver is None:
            return
        members = self._receiver.groups.get(group)
        if members is not None:
            members.discard(channel)
            if not members:
                del self._receiver.groups[group]
        if not any(channel in m for m in self._receiver.groups.values()):
            self._receiver.queues.pop(channel, None)

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.require_valid_group_name(group)
        await self._send({"g": group, "m": message})

    async def flush(self) -> None:
        if self._receiver is not None:
            self._receiver.groups.clear()
            self._receiver.queues.clear()

    async def close(self) -> None:
        """Stop listening and close this process's connections."""
        if self._receiver is not None:
            self._receiver.stop()
            self._receiver = None
        if self._sender is not None and self._sender.pid == os.getpid():
            await asyncio.get_running_loop().run_in_executor(self._sender.thread, self._sender.disconnect)
            self._sender.thread.shutdown()
        self._sender = None

    # -------------------------------------------------------------- inside

    def _is_local(self, channel: str) -> bool:
        return "!" in channel and channel.split("!", 1)[0].endswith(f".{self.client}")

    def _receiving(self) -> _Receiver:
        """This process's listener, started on the running event loop (daphne's) if need be."""
        loop = asyncio.get_running_loop()
        if self._receiver is None or self._receiver.loop is not loop or self._receiver.loop.is_closed():
            if self._receiver is not None:
                self._receiver.stop()
            self._receiver = _Receiver(self, loop)
        return self._receiver

    async def _send(self, envelope: dict[str, Any]) -> None:
        payloads = _payloads(envelope)
        if self._sender is None or self._sender.pid != os.getpid():
            # (A worker forked from a process that had one: the parent's connection is not ours.)
            self._sender = _Sender(self)
        await asyncio.get_running_loop().run_in_executor(self._sender.thread, self._sender.notify, payloads)

    def conninfo(self, role: str) -> str:
        """The database's connection string, its sessions named after `role` (in pg_stat_activity)."""
        from django.db import connections

        params = connections[self.database].get_connection_params()
        for key in _NOT_CONNINFO:
            params.pop(key, None)
        return psycopg.conninfo.make_conninfo("", **params, application_name=f"channel-layer-{role}")

    def deliver(self, envelope: dict[str, Any], receiver: _Receiver) -> None:
        message = envelope["m"]
        if "g" in envelope:
            targets = list(receiver.groups.get(envelope["g"], ()))
        elif self._is_local(envelope["c"]):
            targets = [envelope["c"]]
        else:
            return
        for channel in targets:
            try:
                queue = receiver.queue(channel)
                if queue.qsize() >= self.get_capacity(channel):
                    raise ChannelFull(channel)
                queue.put_nowait(message)
            except ChannelFull:
                logger.warning("Channel %s is full; a message for it was dropped", channel)


def _payloads(envelope: dict[str, Any]) -> list[str]:
    text = base64.b64encode(msgpack.packb(envelope, use_bin_type=True)).decode("ascii")
    if len(text) <= CHUNK:
        return [text]
    key = uuid.uuid4().hex[:12]
    pieces = [text[i : i + CHUNK] for i in range(0, len(text), CHUNK)]
    return [f"~{key}:{n}:{len(pieces)}:{piece}" for n, piece in enumerate(pieces)]


class _Sender:
    """One connection per process that sends, used from one thread (so from any event loop)."""

    def __init__(self, layer: PostgresChannelLayer) -> None:
        self.layer = layer
        self.pid = os.getpid()
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="channel-layer-send")
        self.connection: psycopg.Connection | None = None

    def disconnect(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None

    def notify(self, payloads: list[str]) -> None:
        """Send the payloads in one transaction (a chunked message stays in one piece); a
        connection the server dropped is opened again once."""
        for attempt in (1, 2):
            try:
                if self.connection is None or self.connection.closed:
                    self.connection = psycopg.connect(self.layer.conninfo("send"), autocommit=True)
                with self.connection.transaction():
                    for payload in payloads:
                        self.connection.execute(
                            "SELECT pg_notify(%s, %s)", (self.layer.notify_channel, payload)
                        )
                return
            except psycopg.OperationalError:
                with contextlib.suppress(Exception):
                    self.connection.close()
                self.connection = None
                if attempt == 2:
                    raise


class _Receiver:
    """The sockets of this process: their queues, the groups they joined, and the listening
    connection that feeds them."""

    def __init__(self, layer: PostgresChannelLayer, loop: asyncio.AbstractEventLoop) -> None:
        self.layer = layer
        self.loop = loop
        self.queues: dict[str, asyncio.Queue] = {}
        self.groups: defaultdict[str, set[str]] = defaultdict(set)
        self.listening = asyncio.Event()
        self.partial: dict[str, list[str | None]] = {}
        self.task = loop.create_task(self._listen(), name="channel-layer-listen")

    def queue(self, channel: str) -> asyncio.Queue:
        if channel not in self.queues:
            self.queues[channel] = asyncio.Queue()
        return self.queues[channel]

    async def ready(self) -> None:
        try:
            await asyncio.wait_for(self.listening.wait(), READY_SECONDS)
        except TimeoutError:
            raise ConnectionError(f"the channel layer is not listening after {READY_SECONDS} s") from None

    def stop(self) -> None:
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.task.cancel)

    async def _listen(self) -> None:
        wait = RECONNECT_FIRST
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                    self.layer.conninfo("listen"), autocommit=True
                ) as connection:
                    await connection.execute(
                        sql.SQL("LISTEN {}").format(sql.Identifier(self.layer.notify_channel))
                    )
                    self.listening.set()
                    wait = RECONNECT_FIRST
                    while True:
                        async for note in connection.notifies(timeout=LISTEN_CHECK_SECONDS):
                            self._heard(note.payload)
                        await connection.execute("SELECT 1")  # (raises if the server went away)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self.listening.clear()
                logger.warning("The channel layer lost its listening connection (%s); reconnecting", error)
                await asyncio.sleep(wait)
                wait = min(wait * 2, RECONNECT_LAST)

    def _heard(self, payload: str) -> None:
        try:
            if payload.startswith("~"):
                payload = self._assembled(payload)
                if payload is None:
                    return
            envelope = msgpack.unpackb(base64.b64decode(payload), raw=False)
        except Exception:
            logger.exception("The channel layer heard a message it could not read")
            return
        self.layer.deliver(envelope, self)

    def _assembled(self, piece: str) -> str | None:
        key, n, total, text = piece[1:].split(":", 3)
        parts = self.partial.setdefault(key, [None] * int(total))
        parts[int(n)] = text
        if any(p is None for p in parts):
            if len(self.partial) > 100:  # (pieces whose rest never came: a listener that reconnected)
                self.partial.pop(next(iter(self.partial)))
            return None
        del self.partial[key]
        return "".join(parts)  # type: ignore[arg-type]
