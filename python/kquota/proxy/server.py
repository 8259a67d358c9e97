"""The proxy: Kafka's client quotas in front of a Kafka-protocol broker.

One asyncio task per client connection, each with its own upstream connection, and in it
two: a reader (client to upstream) and a responder (upstream to client). Like a Kafka
broker's socket server, requests are handled one at a time and in order: the responder
takes each response in turn, checks the quota (``QuotaPlugin``) at that moment, writes
the throttle into the response and sends it; responses go out in request order and each
one's correlation id is checked against its request's. A KIP-219 mute holds both: the
reader reads nothing more and the responder handles nothing more until it ends.

The one liberty taken: a Produce request may be forwarded while earlier Produce requests
of the same connection still wait for their responses (at most ``_PIPELINE_DEPTH``, and
never while the connection is muted), as a client pipelines them, so that the broker
is not idle while a response travels back through the proxy. Its quota is still checked
when its turn comes, after the mute its predecessor's response may have started, so the
throttles and the times the client gets its responses are those of Kafka; only the
broker's append can come earlier. Any other request (fetch, SASL, ApiVersions, ...) is
forwarded only once every earlier one has been answered: a fetch's ``max_bytes`` is capped
by the quota as it stands after them, and SASL changes whose quota applies.
A produce request larger than ``_HEAD_BYTES`` is forwarded as it is read, once its
header and acks are (cut-through, ``kquota.proxy.stream``).

Per API (see ``kquota.proxy.codec`` for how messages are read):

* Produce: the request's size against the produce quota and the proxy's handling time
  (this thread's CPU time for the request) against the request quota, except for
  ``acks=0``, which has no response but still mutes the connection when throttled.
* Fetch (from consumers): the request's ``max_bytes`` capped by the fetch quota window;
  the response's size against the fetch quota; a throttled fetch is answered with an
  empty fetch response carrying the throttle (its bytes are unrecorded).
* ApiVersions: versions capped to those the codec reads, then as any other API.
* SaslHandshake / SaslAuthenticate: never throttled (Kafka handles them in the network
  layer); the user name of PLAIN and SCRAM is taken once the broker accepts it.
* CreateTopics, CreatePartitions, DeleteTopics, with a ``mutation`` manager whose quotas
  are enabled: the controller-mutation quota (KIP-599, ``kquota.proxy.mutation``). The
  partitions of each topic are counted as Kafka's controller counts them (the topics'
  partitions now come from a Metadata request the proxy sends upstream first) and
  recorded in request order. At strict versions (CreateTopics v6+, CreatePartitions v3+,
  DeleteTopics v5+) the topics a quota refuses are taken out of the request and answered
  with ``THROTTLING_QUOTA_EXCEEDED``, merged with the broker's results in the request's
  order (no request goes upstream when every topic is refused); at older versions every
  topic is forwarded and recorded. The response carries the larger of the mutation and
  request throttles and the connection is muted for it, as Kafka does.
* Any other API: the request quota.

With ``connection_quotas`` (KIP-612), each new connection is first held to the broker's
and the listener's ``max.connection.creation.rate`` (accepting waits, one connection at a
time, as Kafka's acceptor does), then to its IP's ``connection_creation_rate``: a
connection over it is accepted and closed after the throttle time, unread.

Every response with a ``throttle_time_ms`` field carries the applied throttle (the
broker's own value is kept when it is larger). Requests are never re-encoded, and
responses only when they are throttled fetches or ApiVersions.

Bad input (a malformed or oversized frame, an unknown API key or version, a response that
does not match) or a dead upstream closes that one connection with one log line.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Final

from kquota import (
    ConnectionQuotas,
    ControllerMutationQuotaManager,
    MutationRequestQuota,
    monotonic_ms,
    mutation_is_strict,
)
from kquota.broker import QuotaOutcome, QuotaPlugin
from kquota.exceptions import InvalidConfigError, KquotaError, ProxyError
from kquota.proxy import codec
from kquota.proxy import mutation as mutations
from kquota.proxy.capture import TrafficCapture
from kquota.proxy.metadata import METADATA, MetadataWatch
from kquota.proxy.sasl import ANONYMOUS, PRINCIPAL_MECHANISMS, principal_from_auth_bytes
from kquota.proxy.stream import Peer

__all__ = ["DEFAULT_UPSTREAM_TIMEOUT", "ProxyServer", "kafka_clock_ms"]

log = logging.getLogger("kquota.proxy")

DEFAULT_UPSTREAM_TIMEOUT: Final = 300.0
"""Seconds to wait for the upstream's response to one request before giving up on it."""

_STREAM_LIMIT: Final = 256 * 1024
"""Bytes a stream reader buffers before it stops reading its socket (backpressure)."""

_HEAD_BYTES: Final = 16 * 1024
"""A request larger than this is read in two steps: its first ``_HEAD_BYTES``, then, if
they are a produce request's header, transactional id and acks (all the proxy reads of
it), its records are forwarded as they arrive; any other request is read whole."""

_FOLLOWER_FETCH: Final = "follower_fetch"
"""The API a fetch from a replica is captured as: the proxy applies only the request
quota to it, as the back-test does to any API it does not know."""


def kafka_clock_ms() -> int:
    """Kafka's clock (``Time.SYSTEM.milliseconds()``, wall-clock milliseconds) without its
    jumps: the same clock as :func:`kquota.monotonic_ms`, the core's default, which starts
    at the wall-clock time and then advances monotonically.

    One rule depends on the clock's origin: a new token bucket (the controller-mutation
    quota) starts with 0 tokens last updated at time 0, so on Kafka's clock it is full at
    its first use, whereas on a clock that started with the process it would hold only the
    seconds since then. Kept as the proxy's name for it.
    """
    return monotonic_ms()


_PIPELINE_DEPTH: Final = 8
"""Produce requests of one connection forwarded and not yet answered, at most."""

DEFAULT_LISTENER: Final = "PLAINTEXT"
"""The listener name the proxy's connections count under in the connection quotas."""

_OWN_CORRELATION_IDS: Final = 0x7F000000
"""Where the correlation ids of the proxy's own Metadata requests start."""


@dataclass(slots=True, eq=False)
class _Mutation:
    """A mutation request under the controller-mutation quota, as recorded."""

    request: mutations.MutationRequest
    quota: MutationRequestQuota
    rewritten: bool
    """Some topics were refused: the response is merged by the proxy."""
    local: bool
    """Every topic was refused: nothing went upstream."""
    permits: int
    """Partitions recorded (accepted)."""


@dataclass(slots=True, eq=False)
class _Pending:
    """A request forwarded to the upstream whose response the client has not had yet."""

    header: codec.RequestHeader
    user: str
    size: int
    acks: int
    fetch: dict[str, object]
    thread_ns: int
    """The proxy's CPU time on the request so far (reading and forwarding it)."""
    mutation: _Mutation | None = None


@dataclass(slots=True, eq=False)
class _Connection:
    """One client connection and its upstream connection."""

    peer: str
    channel: int
    client: Peer
    upstream: Peer | None = None
    user: str = ANONYMOUS
    client_id: str = ""
    mechanism: str | None = None
    pending_user: str | None = None
    reading: bool = False
    """The reader is forwarding a request (from its turn to its last byte)."""
    task: asyncio.Task[None] | None = None
    reader: asyncio.Task[None] | None = None
    pending: collections.deque[_Pending] = field(default_factory=collections.deque)
    produces: int = 0
    """Produce requests in ``pending``."""
    reader_done: bool = False
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    answered: asyncio.Event = field(default_factory=asyncio.Event)


class ProxyServer:
    """A Kafka-protocol proxy that applies ``plugin``'s quotas in front of ``upstream``.

    ``upstream`` is ``(host, port)`` of the broker, which must advertise the proxy's
    address (Metadata and FindCoordinator responses pass through unchanged).
    ``max_request_bytes`` is Kafka's ``socket.request.max.bytes``; responses larger than
    ``max_response_bytes`` close the connection too. With ``capture``, every request whose
    quota the proxy checks is added to it, as it was checked (``kquota proxy --capture``).

    ``mutation`` enables the controller-mutation quota of CreateTopics, CreatePartitions
    and DeleteTopics (``default_num_partitions`` is the broker's ``num.partitions``, what
    a CreateTopics topic with -1 partitions gets); ``connection_quotas`` the connection
    creation rates, counted under ``listener`` (added to them at :meth:`start` if they
    lack it). Both are read live: a :class:`~kquota.config.live.LiveQuotas` may update
    them while the proxy runs. Their times are the plugin's clock: give the plugin
    :func:`kafka_clock_ms` (as ``kquota proxy`` does) for Kafka's full new token buckets.
    """

    def __init__(
        self,
        upstream: tuple[str, int],
        plugin: QuotaPlugin,
        *,
        max_request_bytes: int = codec.MAX_REQUEST_BYTES,
        max_response_bytes: int = codec.MAX_REQUEST_BYTES,
        connect_timeout: float = 10.0,
        upstream_timeout: float = DEFAULT_UPSTREAM_TIMEOUT,
        capture: TrafficCapture | None = None,
        mutation: ControllerMutationQuotaManager | None = None,
        connection_quotas: ConnectionQuotas | None = None,
        listener: str = DEFAULT_LISTENER,
        default_num_partitions: int = 1,
    ) -> None:
        if mutation is not None and not isinstance(mutation, ControllerMutationQuotaManager):
            raise InvalidConfigError(
                f"invalid mutation {mutation!r}: expected a ControllerMutationQuotaManager"
            )
        if connection_quotas is not None and not isinstance(connection_quotas, ConnectionQuotas):
            raise InvalidConfigError(
                f"invalid connection_quotas {connection_quotas!r}: expected a ConnectionQuotas"
            )
        if not isinstance(listener, str) or not listener:
            raise InvalidConfigError(f"invalid listener {listener!r}: expected a non-empty name")
        if (
            isinstance(default_num_partitions, bool)
            or not isinstance(default_num_partitions, int)
            or not 0 < default_num_partitions < 2**31
        ):
            raise InvalidConfigError(
                f"invalid default_num_partitions {default_num_partitions!r}:"
                f" expected an int from 1 to {2**31 - 1}"
            )
        for name, value in (
            ("max_request_bytes", max_request_bytes),
            ("max_response_bytes", max_response_bytes),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 2**31:
                raise InvalidConfigError(
                    f"invalid {name} {value!r}: expected an int from 1 to {2**31 - 1}"
                )
        self.upstream = upstream
        self.plugin = plugin
        self.max_request_bytes = max_request_bytes
        self.max_response_bytes = max_response_bytes
        self.connect_timeout = connect_timeout
        self.upstream_timeout = upstream_timeout
        self.capture = capture
        self.mutation = mutation
        self.connection_quotas = connection_quotas
        self.listener = listener
        self.default_num_partitions = default_num_partitions
        if mutation is not None:
            plugin.channels.add_manager(mutation)  # its delay queue and sensors kept
        self._acceptor: asyncio.Lock | None = None
        self._closing_later: set[asyncio.Task[None]] = set()
        self._ip_throttled = 0
        self._own_ids = itertools.count(_OWN_CORRELATION_IDS)
        self._metadata = MetadataWatch(plugin)  # tells a quota callback (KIP-257)
        self._capture_ticker: asyncio.Task[None] | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[_Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    # -- life cycle -----------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Listen on ``host:port`` (``port=0``: any free port, see :attr:`address`)."""
        loop = asyncio.get_running_loop()
        self._acceptor = asyncio.Lock()
        quotas = self.connection_quotas
        if quotas is not None and self.listener not in dict(quotas.listeners()):
            quotas.add_listener(self.listener)
        self._server = await loop.create_server(
            lambda: Peer(_STREAM_LIMIT, on_made=self._accept), host, port, reuse_address=True
        )
        if self.capture is not None:
            self.capture.align(self.plugin.channels.now_ms())
            self._capture_ticker = loop.create_task(_tick(self.capture))

    @property
    def address(self) -> tuple[str, int]:
        """The ``(host, port)`` the proxy listens on."""
        if self._server is None or not self._server.sockets:
            raise ProxyError("the proxy is not listening: call start() first")
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    @property
    def connections(self) -> int:
        """Client connections open now."""
        return len(self._connections)

    @property
    def ip_throttled_connections(self) -> int:
        """Connections closed unread since :meth:`start` because their IP was over its
        ``connection_creation_rate``."""
        return self._ip_throttled

    async def shutdown(self, timeout: float = 30.0) -> None:
        """Stop accepting, answer the requests in flight, then close every connection.

        Connections waiting for their next request (or for their mute to end, or for
        their turn to forward one: it is dropped unread, as a muted broker leaves it) are
        closed at once; those with requests in flight (being forwarded, or forwarded and
        not yet answered) finish them first, for at most ``timeout`` seconds.
        """
        self._closing = True
        if self._server is not None:
            self._server.close()
        for later in list(self._closing_later):
            later.cancel()  # throttled connections: closed now rather than later
        tasks = []
        for connection in list(self._connections):
            if connection.task is None:
                continue
            tasks.append(connection.task)
            if not connection.reading and connection.reader is not None:
                connection.reader.cancel()  # its in-flight requests are still answered
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        if self._server is not None:
            await self._server.wait_closed()
        if self._capture_ticker is not None:
            await _stop(self._capture_ticker)
        if self.capture is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.capture.close)

    # -- one connection -------------------------------------------------------------

    def _accept(self, client: Peer) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(client))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _serve(self, client: Peer) -> None:
        assert client.transport is not None
        address = client.transport.get_extra_info("peername")
        peer = _describe(address)
        if self._closing:
            await client.close()
            return
        if (
            self.connection_quotas is not None
            and isinstance(address, tuple)
            and not await self._admitted(client, str(address[0]), peer)
        ):
            return
        channel = self.plugin.channels.open()
        connection = _Connection(peer, channel, client, task=asyncio.current_task())
        self._connections.add(connection)
        reader = responder = None
        try:
            await self._connect_upstream(connection)
            loop = asyncio.get_running_loop()
            reader = connection.reader = loop.create_task(self._read_requests(connection))
            responder = loop.create_task(self._respond(connection))
            await asyncio.wait((reader, responder), return_when=asyncio.FIRST_EXCEPTION)
            for task in (reader, responder):
                error = task.exception() if task.done() and not task.cancelled() else None
                if error is not None:
                    raise error
        except asyncio.CancelledError:
            if not self._closing:
                raise
        except ProxyError as exc:
            log.warning("closing connection from %s: %s", _who(connection), exc)
        except asyncio.IncompleteReadError:
            log.warning("closing connection from %s: the client closed mid-request", peer)
        except (ConnectionError, TimeoutError, OSError) as exc:
            log.warning("closing connection from %s: %s", _who(connection), _reason(exc))
        except KquotaError as exc:
            log.warning("closing connection from %s: %s", _who(connection), exc)
        except Exception as exc:  # a bug: still one line, and only this connection
            log.error(
                "closing connection from %s: internal error: %s: %s",
                _who(connection),
                type(exc).__name__,
                exc,
            )
        finally:
            await _stop(reader, responder)
            self._connections.discard(connection)
            with contextlib.suppress(KquotaError):
                self.plugin.channels.close(channel)
            if connection.upstream is not None:
                await connection.upstream.close()
            await client.close()

    async def _admitted(self, client: Peer, ip: str, peer: str) -> bool:
        """KIP-612 on a new connection: wait out the broker and listener rates (one
        connection at a time, as Kafka's acceptor thread), then check the IP's rate; a
        connection over it is closed after the throttle time, unread (``False``). A
        shutdown meanwhile closes the connection at once (``False``)."""
        quotas = self.connection_quotas
        assert quotas is not None and self._acceptor is not None
        clock = self.plugin.channels.now_ms
        task = asyncio.current_task()
        assert task is not None
        self._closing_later.add(task)  # cancelled by a shutdown
        try:
            async with self._acceptor:
                delay = quotas.accept_delay(self.listener, clock())
                if delay > 0:
                    log.debug("delaying connection from %s by %d ms", peer, delay)
                    await asyncio.sleep(delay / 1000)
                throttle = quotas.admit_ip(self.listener, ip, clock())
            if throttle > 0:
                self._ip_throttled += 1
                log.debug("connection from %s over its IP's rate: closing in %d ms", peer, throttle)
                await asyncio.sleep(throttle / 1000)
        except asyncio.CancelledError:
            if not self._closing:
                raise
            throttle = 1
        finally:
            self._closing_later.discard(task)
        if throttle > 0 or self._closing:
            await client.close()
            return False
        return True

    async def _connect_upstream(self, connection: _Connection) -> None:
        host, port = self.upstream
        loop = asyncio.get_running_loop()
        try:
            _, connection.upstream = await asyncio.wait_for(
                loop.create_connection(lambda: Peer(_STREAM_LIMIT), host, port),
                self.connect_timeout,
            )
        except (OSError, TimeoutError) as exc:
            raise ProxyError(f"upstream {host}:{port} unreachable: {_reason(exc)}") from None

    async def _read_requests(self, connection: _Connection) -> None:
        """The reader: each request read, checked and forwarded, then queued for the
        responder; ends at the client's end of stream or when the proxy shuts down."""
        client, peer = connection.client, connection.peer
        try:
            while not self._closing:
                connection.reading = False
                await self.plugin.channels.wait_unmuted(connection.channel)
                size = await _read_size(client, "request", self.max_request_bytes)
                if size is None:
                    log.debug("connection from %s closed by the client", peer)
                    break
                frame = await client.read_exactly(min(size, _HEAD_BYTES))
                await self._forward(connection, frame, size)
        except asyncio.CancelledError:
            if not self._closing:
                raise
        finally:
            connection.reading = False
            connection.reader_done = True
            connection.arrived.set()

    async def _respond(self, connection: _Connection) -> None:
        """The responder: each forwarded request's response in turn, once the
        connection's mute (if any) has ended; ends when the reader has and every
        forwarded request is answered."""
        while True:
            while not connection.pending:
                if connection.reader_done:
                    return
                connection.arrived.clear()
                await connection.arrived.wait()
            await self.plugin.channels.wait_unmuted(connection.channel)
            entry = connection.pending[0]
            await self._answer(connection, entry)
            connection.pending.popleft()
            if entry.header.api.key == codec.PRODUCE:
                connection.produces -= 1
            connection.answered.set()

    async def _turn(self, connection: _Connection, produce: bool) -> None:
        """Wait until this request may go upstream: the connection not muted, and every
        earlier request answered, or (a produce request) only produce requests in
        flight, fewer than ``_PIPELINE_DEPTH``."""
        while True:
            await self.plugin.channels.wait_unmuted(connection.channel)
            in_flight = len(connection.pending)
            if not in_flight or (produce and connection.produces == in_flight < _PIPELINE_DEPTH):
                return
            connection.answered.clear()
            await connection.answered.wait()

    async def _forward(self, connection: _Connection, frame: bytes, size: int) -> None:
        """Forward one request (once it may go) and queue it for the responder.

        ``frame`` is the request's first bytes, all ``size`` of them unless it is larger
        than ``_HEAD_BYTES``: then a produce request's rest is forwarded as it arrives,
        and any other request's rest is read first.
        """
        started = time.thread_time_ns()
        rest = size - len(frame)
        header = _produce_head(frame) if rest else None
        if rest and header is None:
            frame += await connection.client.read_exactly(rest)
            rest = 0
        if header is None:
            header = codec.parse_request_header(frame)
        spec = header.api
        produce = spec.key == codec.PRODUCE
        connection.client_id = header.client_id
        spent = time.thread_time_ns() - started
        await self._turn(connection, produce)
        connection.reading = True  # from here on, shutting down waits for it
        started = time.thread_time_ns()
        acks = -1
        fetch: dict[str, object] = {}
        mutation: _Mutation | None = None
        if produce:
            acks = int(_read(spec, frame, header, "acks").get("acks", -1))
        elif spec.key == codec.FETCH:
            frame, fetch = self._fetch_request(
                spec, frame, header, connection.user, header.client_id
            )
        elif (
            spec.key in mutations.MUTATION_APIS
            and self.mutation is not None
            and self.mutation.enabled
        ):
            mutation = await self._record_mutation(connection, spec, frame, header)
            if mutation.local:  # every topic refused: answered without the upstream
                spent += time.thread_time_ns() - started
                connection.pending.append(
                    _Pending(header, connection.user, size, acks, fetch, spent, mutation)
                )
                connection.arrived.set()
                return
            if mutation.rewritten:
                frame = mutation.request.rewritten()
                size = len(frame)
        elif spec.key == codec.SASL_HANDSHAKE:
            if spec.version == 0:
                raise ProxyError("SaslHandshake v0 (raw SASL tokens) is not supported")
            connection.mechanism = str(_read(spec, frame, header, "mechanism")["mechanism"])
        elif spec.key == codec.SASL_AUTHENTICATE and connection.mechanism is not None:
            auth = _read(spec, frame, header, "auth_bytes")["auth_bytes"]
            if connection.pending_user is None and isinstance(auth, bytes):
                connection.pending_user = principal_from_auth_bytes(connection.mechanism, auth)
                if (
                    connection.pending_user is None
                    and connection.mechanism not in PRINCIPAL_MECHANISMS
                ):
                    log.warning(
                        "connection from %s: SASL %s principal unknown to the proxy;"
                        " its quotas apply as %s",
                        connection.peer,
                        connection.mechanism,
                        ANONYMOUS,
                    )

        upstream = connection.upstream
        assert upstream is not None
        upstream.write((codec.int32(size), frame))
        if rest:  # a large produce request: its records go on as they arrive
            await connection.client.forward(rest, upstream)
        spent += time.thread_time_ns() - started
        connection.pending.append(
            _Pending(header, connection.user, size, acks, fetch, spent, mutation)
        )
        if produce:
            connection.produces += 1
        connection.arrived.set()
        await upstream.drain()

    async def _record_mutation(
        self,
        connection: _Connection,
        spec: codec.Api,
        frame: bytes,
        header: codec.RequestHeader,
    ) -> _Mutation:
        """Count a mutation request's partitions per topic and record them in the
        client's controller-mutation quota, in request order; a strict quota refuses the
        topics once the bucket is overdrawn (Kafka's ``StrictControllerMutationQuota``)."""
        manager = self.mutation
        assert manager is not None
        request = mutations.parse(spec, frame, header)
        names = None if request.needs_all_topics else request.names
        counts = await self._partition_counts(connection, header.client_id, names)
        if request.needs_partition_counts:
            request.count(counts)
        else:
            mutations.count_created(request, self.default_num_partitions)
            for topic in request.topics:
                if topic.name in counts:
                    topic.permits = None  # TOPIC_ALREADY_EXISTS, before the quota
        strict = mutation_is_strict(request.api, spec.version)  # type: ignore[arg-type]
        quota = manager.request_quota(connection.user, header.client_id, strict)
        now = self.plugin.channels.now_ms()
        permits = 0
        for topic in request.topics:
            if topic.permits is None:
                continue
            if quota.record(float(topic.permits), now).accepted:
                permits += topic.permits
            else:
                topic.throttled = True
        rewritten = any(topic.throttled for topic in request.topics)
        return _Mutation(request, quota, rewritten, rewritten and not request.forwarded, permits)

    async def _partition_counts(
        self, connection: _Connection, client_id: str, names: list[str] | None
    ) -> dict[str | uuid.UUID, int]:
        """Partitions per topic (name and id) now, from a Metadata request on the
        connection's upstream (idle: every earlier request is answered)."""
        upstream = connection.upstream
        assert upstream is not None and not connection.pending
        correlation_id = next(self._own_ids) & 0x7FFFFFFF
        upstream.write((mutations.metadata_request(correlation_id, client_id, names),))
        await upstream.drain()
        response = await self._read_response(upstream)
        answered = codec.response_correlation_id(response)
        if answered != correlation_id:
            raise ProxyError(
                f"upstream answered correlation id {answered} to the proxy's Metadata"
                f" request {correlation_id}"
            )
        return mutations.partition_counts(response)

    async def _answer_mutation(self, connection: _Connection, entry: _Pending) -> None:
        """Answer a mutation request: the mutation and request throttles (the larger one
        applied), the upstream's results merged with the refused topics' errors."""
        state = entry.mutation
        manager = self.mutation
        assert state is not None and manager is not None
        header, user = entry.header, entry.user
        spec = header.api
        response: bytes | None = None
        if not state.local:
            upstream = connection.upstream
            assert upstream is not None
            response = await self._read_response(upstream)
            correlation_id = codec.response_correlation_id(response)
            if correlation_id != header.correlation_id:
                raise ProxyError(
                    f"upstream answered correlation id {correlation_id} to request"
                    f" {header.correlation_id} ({spec.name} v{spec.version})"
                )
        resumed = time.thread_time_ns()
        plugin = self.plugin
        now = plugin.channels.now_ms()
        thread_ns = entry.thread_ns + time.thread_time_ns() - resumed
        outcome = plugin.on_mutation(
            user,
            header.client_id,
            thread_ns,
            state.quota.throttle_time(now),
            manager,
            channel=connection.channel,
            now_ms=now,
        )
        self._captured(connection, now, entry, spec.name, state.permits, thread_ns, outcome)
        if state.rewritten:
            parts: list[bytes | memoryview] = [
                mutations.throttled_response(
                    state.request, header.correlation_id, response, outcome.throttle_time_ms
                )
            ]
        else:
            assert response is not None
            parts = self._with_throttle(spec, response, outcome)
        await self._send(connection, parts, (user, header.client_id))

    def _with_throttle(
        self, spec: codec.Api, response: bytes, outcome: QuotaOutcome
    ) -> list[bytes | memoryview]:
        """A response's frame with the applied throttle in it (the upstream's own value
        kept when it is larger)."""
        parts: list[bytes | memoryview] = [codec.int32(len(response)), response]
        if not outcome.throttled:
            return parts
        _, body_offset = spec.response_header(response)
        offset = spec.throttle_offset(response, body_offset)
        if offset is None or codec.read_int32(response, offset) >= outcome.throttle_time_ms:
            return parts
        view = memoryview(response)
        return [
            parts[0],
            view[:offset],
            codec.int32(outcome.throttle_time_ms),
            view[offset + 4 :],
        ]

    async def _answer(self, connection: _Connection, entry: _Pending) -> None:
        """Check the quota of one forwarded request and answer the client."""
        header, user, size, acks, fetch = (
            entry.header,
            entry.user,
            entry.size,
            entry.acks,
            entry.fetch,
        )
        spec = header.api
        client_id, channel = header.client_id, connection.channel
        plugin = self.plugin
        if spec.key == codec.PRODUCE and acks == 0:
            # No response (Kafka sends none for acks=0); a throttle still mutes.
            now = plugin.channels.now_ms()
            silent = plugin.on_produce(
                user, client_id, size, entry.thread_ns, acks=0, channel=channel, now_ms=now
            )
            self._captured(connection, now, entry, spec.name, size, None, silent)
            return
        if entry.mutation is not None:
            await self._answer_mutation(connection, entry)
            return

        upstream = connection.upstream
        assert upstream is not None
        response = await self._read_response(upstream)
        resumed = time.thread_time_ns()
        correlation_id = codec.response_correlation_id(response)
        if correlation_id != header.correlation_id:
            raise ProxyError(
                f"upstream answered correlation id {correlation_id} to request"
                f" {header.correlation_id} ({spec.name} v{spec.version})"
            )
        _, body_offset = spec.response_header(response)
        parts: list[bytes | memoryview] = [codec.int32(len(response)), response]

        if spec.key in (codec.SASL_HANDSHAKE, codec.SASL_AUTHENTICATE):
            if spec.key == codec.SASL_AUTHENTICATE:
                self._sasl_result(connection, spec, response, body_offset)
            await self._send(connection, parts, None)
            return

        outcome: QuotaOutcome
        thread_ns = entry.thread_ns + time.thread_time_ns() - resumed
        now = plugin.channels.now_ms()
        api = spec.name
        if spec.key == codec.PRODUCE:
            outcome = plugin.on_produce(
                user, client_id, size, thread_ns, acks=acks, channel=channel, now_ms=now
            )
        elif spec.key == codec.FETCH and fetch.get("consumer", True):
            size = 4 + len(response) - body_offset  # Kafka's FetchResponse.sizeOf
            outcome = plugin.on_fetch(user, client_id, size, thread_ns, channel=channel, now_ms=now)
            if outcome.empty_response:
                self._captured(connection, now, entry, api, size, thread_ns, outcome)
                session_id = fetch.get("session_id", 0)
                epoch = fetch.get("session_epoch", -1)
                incremental = isinstance(epoch, int) and epoch > 0
                empty = codec.empty_fetch_response(
                    spec,
                    header.correlation_id,
                    outcome.throttle_time_ms,
                    int(session_id) if incremental and isinstance(session_id, int) else 0,
                )
                await self._send(connection, [empty], (user, client_id))
                return
        else:
            outcome = plugin.on_request(user, client_id, thread_ns, channel=channel, now_ms=now)
            size = 0
            if spec.key == codec.FETCH:
                api = _FOLLOWER_FETCH
        self._captured(connection, now, entry, api, size, thread_ns, outcome)
        if spec.key == METADATA:
            self._metadata.seen(spec, response, body_offset, self.address)

        if spec.key == codec.API_VERSIONS:
            throttle = outcome.throttle_time_ms if outcome.throttled else None
            capped = codec.cap_api_versions(spec, response, body_offset, throttle)
            if capped is not None:
                parts = [capped]
        elif outcome.throttled:
            offset = spec.throttle_offset(response, body_offset)
            if offset is not None and codec.read_int32(response, offset) < (
                outcome.throttle_time_ms
            ):
                view = memoryview(response)
                parts = [
                    parts[0],
                    view[:offset],
                    codec.int32(outcome.throttle_time_ms),
                    view[offset + 4 :],
                ]
        await self._send(connection, parts, (user, client_id))

    def _captured(
        self,
        connection: _Connection,
        now: int,
        entry: _Pending,
        api: str,
        size: int,
        thread_ns: int | None,
        outcome: QuotaOutcome,
    ) -> None:
        capture = self.capture
        if capture is not None:
            header = entry.header
            capture.add(
                now,
                entry.user,
                header.client_id,
                api,
                size,
                thread_ns,
                entry.acks if header.api.key == codec.PRODUCE else None,
                outcome.throttle_time_ms if outcome.throttled else 0,
                header.api.version,
                header.correlation_id,
                connection.peer,
            )

    def _fetch_request(
        self,
        spec: codec.Api,
        frame: bytes,
        header: codec.RequestHeader,
        user: str,
        client_id: str,
    ) -> tuple[bytes, dict[str, object]]:
        """A consumer fetch's ``max_bytes`` capped by the fetch quota (as Kafka caps it)."""
        try:
            found = spec.read_request_offsets(
                frame,
                header.body_offset,
                "replica_id",
                "max_bytes",
                "session_id",
                "session_epoch",
            )
        except Exception as exc:
            raise ProxyError(f"malformed fetch v{spec.version} request: {exc}") from None
        values: dict[str, object] = {name: value for name, (value, _) in found.items()}
        replica = found.get("replica_id")
        if replica is None and spec.version >= 15:  # the replica id moved to a tagged field
            request = codec.read_fields(frame, header.body_offset, spec.request_type)
            replica_id = int(request.replica_state.replica_id)
        else:
            replica_id = int(replica[0]) if replica is not None else -1  # type: ignore[call-overload]
        values["consumer"] = replica_id < 0
        if replica_id >= 0 or "max_bytes" not in found:
            return frame, values
        requested, offset = found["max_bytes"]
        assert isinstance(requested, int)
        capped = self.plugin.fetch_max_bytes(user, client_id, requested)
        if capped < requested:
            patched = bytearray(frame)
            codec.patch_throttle(patched, offset, capped)
            return bytes(patched), values
        return frame, values

    def _sasl_result(
        self, connection: _Connection, spec: codec.Api, response: bytes, body_offset: int
    ) -> None:
        error = _read_response_field(spec, response, body_offset, "error_code")
        if error == 0 and connection.pending_user is not None:
            connection.user = connection.pending_user
        elif error != 0:
            connection.pending_user = None

    async def _read_response(self, reader: Peer) -> bytes:
        try:
            async with asyncio.timeout(self.upstream_timeout):
                size = await _read_size(reader, "response", self.max_response_bytes)
                if size is None:
                    raise ProxyError("the upstream closed the connection")
                return await reader.read_exactly(size)
        except asyncio.IncompleteReadError:
            raise ProxyError("the upstream closed the connection mid-response") from None
        except TimeoutError:
            raise ProxyError(
                f"no response from the upstream within {self.upstream_timeout:g} s"
            ) from None

    async def _send(
        self,
        connection: _Connection,
        parts: list[bytes | memoryview],
        entity: tuple[str, str] | None,
    ) -> None:
        started = time.thread_time_ns()
        connection.client.write(parts)
        spent = time.thread_time_ns() - started
        await connection.client.drain()
        if entity is not None:
            self.plugin.on_response_sent(entity[0], entity[1], spent)


async def _tick(capture: TrafficCapture) -> None:
    """Hand the capture's rows to its writer at least every second, also when no request
    comes to do it."""
    while True:
        await asyncio.sleep(1.0)
        capture.flush_due()


async def _stop(*tasks: asyncio.Task[None] | None) -> None:
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


def _read(spec: codec.Api, frame: bytes, header: codec.RequestHeader, name: str) -> dict[str, Any]:
    try:
        return spec.read_request(frame, header.body_offset, name)
    except Exception as exc:
        raise ProxyError(f"malformed {spec.name} v{spec.version} request: {exc}") from None


def _produce_head(head: bytes) -> codec.RequestHeader | None:
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


def _read_response_field(spec: codec.Api, response: bytes, body_offset: int, name: str) -> int:
    try:
        found = codec._finder(spec.response_type, (name,)).read(response, body_offset)
    except Exception as exc:
        raise ProxyError(f"malformed {spec.name} v{spec.version} response: {exc}") from None
    value: Any = found[name][0]
    return int(value)


async def _read_size(reader: Peer, what: str, limit: int) -> int | None:
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


def _describe(peer: object) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


def _who(connection: _Connection) -> str:
    if connection.client_id:
        return f"{connection.peer} (client id {connection.client_id!r})"
    return connection.peer


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc)
    return text or type(exc).__name__
