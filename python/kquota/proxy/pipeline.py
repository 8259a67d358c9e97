"""One client connection through the proxy: its reader and responder, and the order they
keep.

The reader (client to upstream) reads each request, waits for its turn and hands it to the
proxy to check and forward; the responder (upstream to client) answers the forwarded
requests one at a time, in order, each once the connection's mute (if any) has ended. A
KIP-219 mute holds both. A request's turn comes once every earlier one has been answered,
except that a Produce request may go while earlier Produce requests of the connection still
wait for their responses (at most :data:`PIPELINE_DEPTH`, and never while the connection is
muted), as a client pipelines them, so that the broker is not idle while a response travels
back through the proxy. A produce request larger than :data:`HEAD_BYTES` is forwarded as it
is read, once its header and acks are (cut-through, :mod:`kquota.proxy.stream`).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from kquota.broker import QuotaPlugin
from kquota.exceptions import ProxyError
from kquota.proxy import codec
from kquota.proxy.sasl import SaslExchange
from kquota.proxy.stream import Peer

if TYPE_CHECKING:
    from kquota.proxy.mutation_quota import RecordedMutation

__all__ = [
    "HEAD_BYTES",
    "PIPELINE_DEPTH",
    "STREAM_LIMIT",
    "Connection",
    "Pending",
    "check_correlation",
    "produce_head",
    "read_requests",
    "read_response",
    "read_size",
    "respond",
    "send",
    "stop",
    "wait_turn",
]

log = logging.getLogger("kquota.proxy")

STREAM_LIMIT: Final = 256 * 1024
"""Bytes a stream reader buffers before it stops reading its socket (backpressure)."""

HEAD_BYTES: Final = 16 * 1024
"""A request larger than this is read in two steps: its first ``HEAD_BYTES``, then, if
they are a produce request's header, transactional id and acks (all the proxy reads of
it), its records are forwarded as they arrive; any other request is read whole."""

PIPELINE_DEPTH: Final = 8
"""Produce requests of one connection forwarded and not yet answered, at most."""


@dataclass(slots=True, eq=False)
class Pending:
    """A request forwarded to the upstream whose response the client has not had yet."""

    header: codec.RequestHeader
    user: str
    size: int
    acks: int
    fetch: dict[str, object]
    thread_ns: int
    """The proxy's CPU time on the request so far (reading and forwarding it)."""
    mutation: RecordedMutation | None = None


@dataclass(slots=True, eq=False)
class Connection:
    """One client connection and its upstream connection."""

    peer: str
    channel: int
    client: Peer
    upstream: Peer | None = None
    sasl: SaslExchange = field(default_factory=SaslExchange)
    """The connection's SASL exchange and the user its quotas apply to."""
    client_id: str = ""
    reading: bool = False
    """The reader is forwarding a request (from its turn to its last byte)."""
    task: asyncio.Task[None] | None = None
    reader: asyncio.Task[None] | None = None
    pending: collections.deque[Pending] = field(default_factory=collections.deque)
    produces: int = 0
    """Produce requests in ``pending``."""
    reader_done: bool = False
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    answered: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def user(self) -> str:
        """The principal name the connection's quotas apply to."""
        return self.sasl.user

    def who(self) -> str:
        """The client as a log line names it: its address and, once known, its client id."""
        if self.client_id:
            return f"{self.peer} (client id {self.client_id!r})"
        return self.peer


async def read_requests(
    connection: Connection,
    plugin: QuotaPlugin,
    max_request_bytes: int,
    forward: Callable[[Connection, bytes, int], Awaitable[None]],
    closing: Callable[[], bool],
) -> None:
    """The reader: each request read, then checked and forwarded by ``forward(connection,
    first_bytes, size)``, which queues it for the responder; ends at the client's end of
    stream or when the proxy shuts down (``closing()``)."""
    client, peer = connection.client, connection.peer
    try:
        while not closing():
            connection.reading = False
            await plugin.channels.wait_unmuted(connection.channel)
            size = await read_size(client, "request", max_request_bytes)
            if size is None:
                log.debug("connection from %s closed by the client", peer)
                break
            frame = await client.read_exactly(min(size, HEAD_BYTES))
            await forward(connection, frame, size)
    except asyncio.CancelledError:
        if not closing():
            raise
    finally:
        connection.reading = False
        connection.reader_done = True
        connection.arrived.set()


async def respond(
    connection: Connection,
    plugin: QuotaPlugin,
    answer: Callable[[Connection, Pending], Awaitable[None]],
) -> None:
    """The responder: each forwarded request answered in turn by ``answer``, once the
    connection's mute (if any) has ended; ends when the reader has and every forwarded
    request is answered."""
    while True:
        while not connection.pending:
            if connection.reader_done:
                return
            connection.arrived.clear()
            await connection.arrived.wait()
        await plugin.channels.wait_unmuted(connection.channel)
        entry = connection.pending[0]
        await answer(connection, entry)
        connection.pending.popleft()
        if entry.header.api.key == codec.PRODUCE:
            connection.produces -= 1
        connection.answered.set()


async def wait_turn(connection: Connection, plugin: QuotaPlugin, produce: bool) -> None:
    """Wait until a request may go upstream: the connection not muted, and every earlier
    request answered, or (a produce request) only produce requests in flight, fewer than
    :data:`PIPELINE_DEPTH`."""
    while True:
        await plugin.channels.wait_unmuted(connection.channel)
        in_flight = len(connection.pending)
        if not in_flight or (produce and connection.produces == in_flight < PIPELINE_DEPTH):
            return
        connection.answered.clear()
        await connection.answered.wait()


def produce_head(head: bytes) -> codec.RequestHeader | None:
    """The header of a produce request whose first bytes are ``head``, if they hold its
    header and acks; ``None`` otherwise (read the request whole and parse it then)."""
    try:
        header = codec.parse_request_header(head)
        if header.api.key != codec.PRODUCE:
            return None
        header.api.read_request(head, header.body_offset, "acks")
    except Exception:
        return None
    return header


async def read_size(reader: Peer, what: str, limit: int) -> int | None:
    """The next frame's size, ``None`` at a clean end of stream."""
    try:
        prefix = await reader.read_exactly(4)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise ProxyError(f"truncated {what} size ({len(exc.partial)} of 4 bytes)") from None
    size = codec.read_int32(prefix, 0)
    if size <= 0 or size > limit:
        raise ProxyError(f"invalid {what} size {size}: expected 1 to {limit} bytes")
    return size


async def read_response(reader: Peer, timeout: float, limit: int) -> bytes:
    """The upstream's next response frame (without its size), within ``timeout`` seconds."""
    try:
        async with asyncio.timeout(timeout):
            size = await read_size(reader, "response", limit)
            if size is None:
                raise ProxyError("the upstream closed the connection")
            return await reader.read_exactly(size)
    except asyncio.IncompleteReadError:
        raise ProxyError("the upstream closed the connection mid-response") from None
    except TimeoutError:
        raise ProxyError(f"no response from the upstream within {timeout:g} s") from None


def check_correlation(response: bytes, header: codec.RequestHeader) -> None:
    """Raise :class:`~kquota.exceptions.ProxyError` unless ``response`` answers the request
    of ``header`` (responses come in request order)."""
    correlation_id = codec.response_correlation_id(response)
    if correlation_id != header.correlation_id:
        spec = header.api
        raise ProxyError(
            f"upstream answered correlation id {correlation_id} to request"
            f" {header.correlation_id} ({spec.name} v{spec.version})"
        )


async def send(
    connection: Connection,
    parts: list[bytes | memoryview],
    entity: tuple[str, str] | None,
    plugin: QuotaPlugin,
) -> None:
    """Write a response to the client; the network thread's time of it goes to
    ``entity``'s request quota without a check (Kafka's ``recordNoThrottle``)."""
    started = time.thread_time_ns()
    connection.client.write(parts)
    spent = time.thread_time_ns() - started
    await connection.client.drain()
    if entity is not None:
        plugin.on_response_sent(entity[0], entity[1], spent)


async def stop(*tasks: asyncio.Task[None] | None) -> None:
    """Cancel the tasks still running and wait for them; their errors are already
    reported (or do not matter once the connection closes)."""
    running = [task for task in tasks if task is not None and not task.done()]
    for one in running:
        one.cancel()
    if running:
        await asyncio.wait(running)
    for ended in tasks:
        if ended is not None and not ended.cancelled():
            ended.exception()  # retrieved: asyncio does not log it again
