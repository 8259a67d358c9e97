"""The proxy: Kafka's client quotas in front of a Kafka-protocol broker.

One asyncio task per client connection, each with its own upstream connection, and in it
two: a reader (client to upstream) and a responder (upstream to client). Like a Kafka
broker's socket server, requests are handled one at a time and in order: the responder
takes each response in turn, checks the quota (``QuotaPlugin``) at that moment, writes
the throttle into the response and sends it; responses go out in request order and each
one's correlation id is checked against its request's. A KIP-219 mute holds both: the
reader reads nothing more and the responder handles nothing more until it ends.

The one liberty taken: a Produce request may be forwarded while earlier Produce requests
of the same connection still wait for their responses (at most ``PIPELINE_DEPTH``, and
never while the connection is muted), as a client pipelines them, so that the broker
is not idle while a response travels back through the proxy. Its quota is still checked
when its turn comes, after the mute its predecessor's response may have started, so the
throttles and the times the client gets its responses are those of Kafka; only the
broker's append can come earlier. Any other request (fetch, SASL, ApiVersions, ...) is
forwarded only once every earlier one has been answered: a fetch's ``max_bytes`` is capped
by the quota as it stands after them, and SASL changes whose quota applies.
A produce request larger than ``HEAD_BYTES`` is forwarded as it is read, once its
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

The rules above are those of both data paths; the modules named below are the asyncio one
(``data_path="asyncio"``, deprecated, to be removed).

By default the connections are served by the Rust data path
(:class:`kquota._core.ProxyDataPath`, the ``kquota-proxy`` crate) on threads of its own,
with the same rules and no Python on a request's way: the quota decisions call the core
directly, and Python keeps the control plane (the managers' quotas, updated live; the
capture, fed from the decisions in batches). A quota callback is asked from those threads
(taking the GIL) only when a client is resolved and when a Metadata response shows the
brokers or partition leaders changed.

:class:`ProxyServer` composes the parts, one module each: the connection's reader and
responder (:mod:`kquota.proxy.pipeline`), KIP-612 admission
(:mod:`kquota.proxy.admission`), the controller-mutation quota
(:mod:`kquota.proxy.mutation_quota`), the SASL exchange (:mod:`kquota.proxy.sasl`), what is
read from and written into messages (:mod:`kquota.proxy.rewrite`) and the capture
(:mod:`kquota.proxy.capture`); it checks each request's quota and answers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Final, Literal, NamedTuple

from kio.schema.index import api_key_map

from kquota import ConnectionQuotas, ControllerMutationQuotaManager, monotonic_ms
from kquota._core import ProxyDataPath, RequestOutcome
from kquota.broker import QuotaOutcome, QuotaPlugin
from kquota.exceptions import InvalidConfigError, KquotaError, ProxyError
from kquota.proxy import codec
from kquota.proxy import mutation as mutations
from kquota.proxy.admission import DEFAULT_LISTENER, ConnectionAdmission
from kquota.proxy.capture import TrafficCapture, flush_every_second
from kquota.proxy.metadata import METADATA, MetadataWatch
from kquota.proxy.mutation_quota import MutationQuota, RecordedMutation
from kquota.proxy.pipeline import (
    STREAM_LIMIT,
    Connection,
    Pending,
    check_correlation,
    produce_head,
    read_requests,
    read_response,
    respond,
    send,
    stop,
    wait_turn,
)
from kquota.proxy.rewrite import (
    cap_fetch_request,
    read_request_field,
    read_response_field,
    throttled_fetch_response,
    with_throttle,
)
from kquota.proxy.sasl import ANONYMOUS
from kquota.proxy.stream import Peer

__all__ = [
    "DATA_PATHS",
    "DEFAULT_LISTENER",
    "DEFAULT_UPSTREAM_TIMEOUT",
    "DataPath",
    "ProxyDecision",
    "ProxyServer",
    "kafka_clock_ms",
]

log = logging.getLogger("kquota.proxy")

DEFAULT_UPSTREAM_TIMEOUT: Final = 300.0
"""Seconds to wait for the upstream's response to one request before giving up on it."""

DataPath = Literal["asyncio", "rust"]
"""How a :class:`ProxyServer` serves its connections."""

DATA_PATHS: Final[tuple[DataPath, ...]] = ("asyncio", "rust")

_DRAIN_INTERVAL_S: Final = 0.1
"""How often the Rust data path's decisions are moved into a capture."""

_FOLLOWER_FETCH: Final = "follower_fetch"
"""The API a fetch from a replica is captured as: the proxy applies only the request
quota to it, as the back-test does to any API it does not know."""


class ProxyDecision(NamedTuple):
    """One quota decision of the Rust data path (:meth:`ProxyServer.take_decisions`)."""

    at_ms: int
    """When the quotas were checked, on :func:`kafka_clock_ms`."""
    user: str
    client_id: str
    api_key: int
    api_version: int
    correlation_id: int
    follower: bool
    """A fetch from a replica: held to the request quota only."""
    size: float
    """A produce request's size or a consumer fetch response's size; 0 otherwise."""
    thread_ns: float
    """The request time recorded (ns): the proxy's own, with the broker's as the proxy sees
    it for an API Kafka answers at once."""
    acks: int
    """A produce request's ``acks`` (-1 for other APIs)."""
    outcome: RequestOutcome
    """For a mutation request, the request quota's, with the applied throttle."""
    mutation_throttle_ms: int | None
    """A mutation request's controller-mutation throttle (``None`` for other APIs)."""
    peer: str
    """The client's ``HOST:PORT``."""

    @property
    def api(self) -> str:
        """The API's name as a capture records it (``follower_fetch`` for a replica's)."""
        if self.follower:
            return _FOLLOWER_FETCH
        return api_key_map.get(self.api_key, f"api_{self.api_key}")


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

    ``data_path`` chooses what serves the connections: ``"rust"`` (the default: the Rust
    data path on ``threads`` threads of its own, which reads the plugin's managers directly
    and keeps its quota decisions for :meth:`take_decisions` when ``keep_decisions`` is
    set) or ``"asyncio"`` (this event loop; deprecated, to be removed). The Rust data path applies
    Kafka's rules from the core, so methods a :class:`~kquota.broker.QuotaPlugin` subclass
    overrides (``on_produce``, ...) are called only on the asyncio one.
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
        data_path: DataPath = "rust",
        threads: int = 2,
        keep_decisions: bool = False,
    ) -> None:
        if data_path not in DATA_PATHS:
            raise InvalidConfigError(
                f"invalid data_path {data_path!r}: expected one of {', '.join(DATA_PATHS)}"
            )
        if isinstance(threads, bool) or not isinstance(threads, int) or not 0 < threads <= 256:
            raise InvalidConfigError(f"invalid threads {threads!r}: expected an int from 1 to 256")
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
        self._admission = (
            None
            if connection_quotas is None
            else ConnectionAdmission(connection_quotas, listener, plugin.channels.now_ms)
        )
        self._mutations = (
            None
            if mutation is None
            else MutationQuota(mutation, plugin, default_num_partitions, self._read_response)
        )
        self._metadata = MetadataWatch(plugin)  # tells a quota callback (KIP-257)
        self.data_path: DataPath = data_path
        self.threads = threads
        self.keep_decisions = keep_decisions
        self._rust: ProxyDataPath | None = None
        self._capture_ticker: asyncio.Task[None] | None = None
        self._server: asyncio.Server | None = None
        self._connections: set[Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    # -- life cycle -----------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Listen on ``host:port`` (``port=0``: any free port, see :attr:`address`)."""
        loop = asyncio.get_running_loop()
        if self.data_path == "rust":
            self._start_rust(host, port)
            return
        if self._admission is not None:
            self._admission.start()
        self._server = await loop.create_server(
            lambda: Peer(STREAM_LIMIT, on_made=self._accept), host, port, reuse_address=True
        )
        if self.capture is not None:
            self.capture.align(self.plugin.channels.now_ms())
            self._capture_ticker = loop.create_task(flush_every_second(self.capture))

    def _start_rust(self, host: str, port: int) -> None:
        upstream_host, upstream_port = self.upstream
        plugin = self.plugin
        self._rust = ProxyDataPath(
            f"{upstream_host}:{upstream_port}",
            plugin.produce,
            plugin.fetch,
            plugin.request,
            mutation=self.mutation,
            default_num_partitions=self.default_num_partitions,
            connection_quotas=self.connection_quotas,
            listener=self.listener,
            listen=f"{host}:{port}",
            max_request_bytes=self.max_request_bytes,
            max_response_bytes=self.max_response_bytes,
            connect_timeout=self.connect_timeout,
            upstream_timeout=self.upstream_timeout,
            threads=self.threads,
            keep_decisions=self.keep_decisions or self.capture is not None,
        )
        if self.capture is not None:
            self.capture.align(plugin.channels.now_ms())
            loop = asyncio.get_running_loop()
            self._capture_ticker = loop.create_task(self._capture_decisions(self.capture))

    def take_decisions(self) -> list[ProxyDecision]:
        """The Rust data path's quota decisions since the last call, oldest first (with
        ``keep_decisions``; a capture takes them itself)."""
        if self._rust is None:
            return []
        return [
            ProxyDecision(at, user, client_id, *request, follower, size, ns, acks, out, mut, peer)
            for (
                at,
                user,
                client_id,
                request,
                follower,
                size,
                ns,
                acks,
                out,
                mut,
                peer,
            ) in self._rust.take_decisions()
        ]

    async def _capture_decisions(self, capture: TrafficCapture) -> None:
        flusher = asyncio.get_running_loop().create_task(flush_every_second(capture))
        try:
            while True:
                self._capture_taken(capture)
                await asyncio.sleep(_DRAIN_INTERVAL_S)
        finally:
            await stop(flusher)

    def _capture_taken(self, capture: TrafficCapture) -> None:
        for d in self.take_decisions():
            silent = d.api_key == codec.PRODUCE and d.acks == 0
            outcome = d.outcome
            capture.add(
                d.at_ms,
                d.user,
                d.client_id,
                d.api,
                int(d.size),
                None if silent else int(d.thread_ns),
                d.acks if d.api_key == codec.PRODUCE else None,
                outcome.throttle_ms if outcome.throttled else 0,
                d.api_version,
                d.correlation_id,
                d.peer,
            )

    @property
    def address(self) -> tuple[str, int]:
        """The ``(host, port)`` the proxy listens on."""
        if self._rust is not None:
            return self._rust.address
        if self._server is None or not self._server.sockets:
            raise ProxyError("the proxy is not listening: call start() first")
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    @property
    def connections(self) -> int:
        """Client connections open now."""
        if self._rust is not None:
            return self._rust.connections
        return len(self._connections)

    @property
    def ip_throttled_connections(self) -> int:
        """Connections closed unread since :meth:`start` because their IP was over its
        ``connection_creation_rate``."""
        if self._rust is not None:
            return self._rust.ip_throttled_connections
        return 0 if self._admission is None else self._admission.ip_throttled

    async def shutdown(self, timeout: float = 30.0) -> None:
        """Stop accepting, answer the requests in flight, then close every connection.

        Connections waiting for their next request (or for their mute to end, or for
        their turn to forward one: it is dropped unread, as a muted broker leaves it) are
        closed at once; those with requests in flight (being forwarded, or forwarded and
        not yet answered) finish them first, for at most ``timeout`` seconds.
        """
        self._closing = True
        if self._rust is not None:
            await self._shutdown_rust(self._rust, timeout)
            return
        if self._server is not None:
            self._server.close()
        if self._admission is not None:
            self._admission.cancel_waiting()  # throttled connections: closed now, not later
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
            await stop(self._capture_ticker)
        if self.capture is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.capture.close)

    async def _shutdown_rust(self, data_path: ProxyDataPath, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, data_path.shutdown, timeout)
        if self._capture_ticker is not None:
            await stop(self._capture_ticker)
        if self.capture is not None:
            self._capture_taken(self.capture)  # the decisions of the last requests
            await loop.run_in_executor(None, self.capture.close)

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
            self._admission is not None
            and isinstance(address, tuple)
            and not await self._admission.admit(client, str(address[0]), peer, self._is_closing)
        ):
            return
        channel = self.plugin.channels.open()
        connection = Connection(peer, channel, client, task=asyncio.current_task())
        self._connections.add(connection)
        reader = responder = None
        try:
            await self._connect_upstream(connection)
            loop = asyncio.get_running_loop()
            reader = connection.reader = loop.create_task(
                read_requests(
                    connection, self.plugin, self.max_request_bytes, self._forward, self._is_closing
                )
            )
            responder = loop.create_task(respond(connection, self.plugin, self._answer))
            await asyncio.wait((reader, responder), return_when=asyncio.FIRST_EXCEPTION)
            for task in (reader, responder):
                error = task.exception() if task.done() and not task.cancelled() else None
                if error is not None:
                    raise error
        except asyncio.CancelledError:
            if not self._closing:
                raise
        except ProxyError as exc:
            log.warning("closing connection from %s: %s", connection.who(), exc)
        except asyncio.IncompleteReadError:
            log.warning("closing connection from %s: the client closed mid-request", peer)
        except (ConnectionError, TimeoutError, OSError) as exc:
            log.warning("closing connection from %s: %s", connection.who(), _reason(exc))
        except KquotaError as exc:
            log.warning("closing connection from %s: %s", connection.who(), exc)
        except Exception as exc:  # a bug: still one line, and only this connection
            log.error(
                "closing connection from %s: internal error: %s: %s",
                connection.who(),
                type(exc).__name__,
                exc,
            )
        finally:
            await stop(reader, responder)
            self._connections.discard(connection)
            with contextlib.suppress(KquotaError):
                self.plugin.channels.close(channel)
            if connection.upstream is not None:
                await connection.upstream.close()
            await client.close()

    def _is_closing(self) -> bool:
        return self._closing

    async def _connect_upstream(self, connection: Connection) -> None:
        host, port = self.upstream
        loop = asyncio.get_running_loop()
        try:
            _, connection.upstream = await asyncio.wait_for(
                loop.create_connection(lambda: Peer(STREAM_LIMIT), host, port),
                self.connect_timeout,
            )
        except (OSError, TimeoutError) as exc:
            raise ProxyError(f"upstream {host}:{port} unreachable: {_reason(exc)}") from None

    async def _forward(self, connection: Connection, frame: bytes, size: int) -> None:
        """Forward one request (once it may go) and queue it for the responder.

        ``frame`` is the request's first bytes, all ``size`` of them unless it is larger
        than ``HEAD_BYTES``: then a produce request's rest is forwarded as it arrives,
        and any other request's rest is read first.
        """
        started = time.thread_time_ns()
        rest = size - len(frame)
        header = produce_head(frame) if rest else None
        if rest and header is None:
            frame += await connection.client.read_exactly(rest)
            rest = 0
        if header is None:
            header = codec.parse_request_header(frame)
        spec = header.api
        produce = spec.key == codec.PRODUCE
        connection.client_id = header.client_id
        spent = time.thread_time_ns() - started
        await wait_turn(connection, self.plugin, produce)
        connection.reading = True  # from here on, shutting down waits for it
        started = time.thread_time_ns()
        acks = -1
        fetch: dict[str, object] = {}
        mutation: RecordedMutation | None = None
        if produce:
            acks = int(read_request_field(spec, frame, header, "acks").get("acks", -1))
        elif spec.key == codec.FETCH:
            user, client_id = connection.user, header.client_id
            frame, fetch = cap_fetch_request(
                spec,
                frame,
                header,
                lambda requested: self.plugin.fetch_max_bytes(user, client_id, requested),
            )
        elif (
            spec.key in mutations.MUTATION_APIS
            and self._mutations is not None
            and self._mutations.enabled
        ):
            mutation = await self._mutations.record(connection, spec, frame, header)
            if mutation.local:  # every topic refused: answered without the upstream
                spent += time.thread_time_ns() - started
                connection.pending.append(
                    Pending(header, connection.user, size, acks, fetch, spent, mutation)
                )
                connection.arrived.set()
                return
            if mutation.rewritten:
                frame = mutation.request.rewritten()
                size = len(frame)
        elif spec.key == codec.SASL_HANDSHAKE:
            if spec.version == 0:
                raise ProxyError("SaslHandshake v0 (raw SASL tokens) is not supported")
            mechanism = read_request_field(spec, frame, header, "mechanism")["mechanism"]
            connection.sasl.mechanism = str(mechanism)
        elif spec.key == codec.SASL_AUTHENTICATE and connection.sasl.mechanism is not None:
            auth = read_request_field(spec, frame, header, "auth_bytes")["auth_bytes"]
            if connection.sasl.authenticate(auth):
                log.warning(
                    "connection from %s: SASL %s principal unknown to the proxy;"
                    " its quotas apply as %s",
                    connection.peer,
                    connection.sasl.mechanism,
                    ANONYMOUS,
                )

        upstream = connection.upstream
        assert upstream is not None
        upstream.write((codec.int32(size), frame))
        if rest:  # a large produce request: its records go on as they arrive
            await connection.client.forward(rest, upstream)
        spent += time.thread_time_ns() - started
        connection.pending.append(
            Pending(header, connection.user, size, acks, fetch, spent, mutation)
        )
        if produce:
            connection.produces += 1
        connection.arrived.set()
        await upstream.drain()

    async def _answer_mutation(self, connection: Connection, entry: Pending) -> None:
        """Answer a mutation request: the mutation and request throttles (the larger one
        applied), the upstream's results merged with the refused topics' errors."""
        state = entry.mutation
        quota = self._mutations
        assert state is not None and quota is not None
        header = entry.header
        response: bytes | None = None
        if not state.local:
            upstream = connection.upstream
            assert upstream is not None
            response = await self._read_response(upstream)
            check_correlation(response, header)
        resumed = time.thread_time_ns()
        now = self.plugin.channels.now_ms()
        thread_ns = entry.thread_ns + time.thread_time_ns() - resumed
        outcome = quota.outcome(connection, entry, thread_ns, now)
        self._captured(connection, now, entry, header.api.name, state.permits, thread_ns, outcome)
        parts = quota.response(entry, response, outcome)
        await self._send(connection, parts, (entry.user, header.client_id))

    async def _answer(self, connection: Connection, entry: Pending) -> None:
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
        check_correlation(response, header)
        _, body_offset = spec.response_header(response)
        parts: list[bytes | memoryview] = [codec.int32(len(response)), response]

        if spec.key in (codec.SASL_HANDSHAKE, codec.SASL_AUTHENTICATE):
            if spec.key == codec.SASL_AUTHENTICATE:
                error = read_response_field(spec, response, body_offset, "error_code")
                connection.sasl.result(error)
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
                empty = throttled_fetch_response(spec, header, fetch, outcome.throttle_time_ms)
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
        else:
            parts = with_throttle(spec, response, outcome, body_offset)
        await self._send(connection, parts, (user, client_id))

    def _captured(
        self,
        connection: Connection,
        now: int,
        entry: Pending,
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

    async def _read_response(self, reader: Peer) -> bytes:
        return await read_response(reader, self.upstream_timeout, self.max_response_bytes)

    async def _send(
        self,
        connection: Connection,
        parts: list[bytes | memoryview],
        entity: tuple[str, str] | None,
    ) -> None:
        await send(connection, parts, entity, self.plugin)


def _describe(peer: object) -> str:
    if isinstance(peer, tuple) and len(peer) >= 2:
        return f"{peer[0]}:{peer[1]}"
    return str(peer)


def _reason(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc)
    return text or type(exc).__name__
