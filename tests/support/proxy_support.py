"""What the proxy tests share (no tests here): a proxy running in a thread, a plugin that
keeps its outcomes, raw Kafka frames built with kio, topics made with an admin client, and
command-line processes stopped as a user stops them."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_wire import (
    encode_request,
    encode_response,
    request_header,
    response_correlation_id,
    throttle_ms,
)
from kio.static.primitive import i16, i32
from kquota import QuotaManager, RequestPath
from kquota.broker import QuotaOutcome, QuotaPlugin
from kquota.proxy import ProxyDecision, ProxyServer


@dataclass(frozen=True)
class Applied:
    """One quota decision of the proxy, as the plugin returned it, with the rate of the
    client's sensor right after it (what Kafka's quota check measured, at the same time)."""

    api: str
    user: str
    client_id: str
    size: float
    outcome: QuotaOutcome
    at_ms: int
    rate: float | None
    broker: int = -1
    """The broker whose sensors measured it (a gateway's node id; -1 for a sidecar)."""


class RecordingPlugin(QuotaPlugin):
    """The real plugin, keeping every outcome the proxy's data path applied with its
    managers (in order) for the test to compare."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._applied: list[Applied] = []
        self._source: Callable[[], list[ProxyDecision]] | None = None
        self._pulling = threading.Lock()
        self.replay_mismatches: list[tuple[ProxyDecision, Any]] = []
        self._shadows: dict[int, RequestPath] = {}
        self._lock = threading.Lock()

    @property
    def applied(self) -> list[Applied]:
        """The outcomes so far: every decision made until now."""
        self.pull()
        return self._applied

    def follow(self, source: Callable[[], list[ProxyDecision]]) -> None:
        """Take the data path's decisions from ``source`` (``ProxyServer.take_decisions``)."""
        self._source = source

    def pull(self) -> None:
        """Add the decisions made since the last pull (in order: one pull at a time)."""
        if self._source is not None:
            with self._pulling:
                self.add_decisions(self._source())

    def add_decisions(self, decisions: list[ProxyDecision]) -> None:
        """Keep the data path's produce and consumer-fetch decisions as the outcomes it
        applied. The rate after each is read from a replay of the decisions, in order, on
        managers of the same windows and quotas (the sensors are the core's, deterministic,
        so it reads what the proxy's sensor did); a replay whose throttle differs from the
        proxy's is kept in ``replay_mismatches``. A gateway's decisions replay on managers
        of their own per broker, as each broker measures only its own traffic."""
        for d in decisions:
            shadow = self._shadow_path(d.broker)
            if d.mutation_throttle_ms is not None:
                o = d.outcome
                by = o.throttled_by or "controller_mutation"
                out = (
                    QuotaOutcome(o.throttle_ms, False, by, o.muted_until_ms)  # type: ignore[arg-type]
                    if o.throttled
                    else QuotaOutcome()
                )
                self.mutation_decided(d.mutation_throttle_ms, out)
                continue
            kind = "produce" if d.api_key == 0 else "fetch" if d.api_key == 1 else None
            if kind is None or d.follower:
                continue
            replayed = shadow.record(
                d.user, d.client_id, kind, d.size, d.thread_ns, acks=d.acks, now_ms=d.at_ms
            )
            manager = shadow.produce if kind == "produce" else shadow.fetch
            rate = manager.measure(d.user, d.client_id, now_ms=d.at_ms)
            o = d.outcome
            out = (
                QuotaOutcome(o.throttle_ms, o.unrecorded, o.throttled_by, o.muted_until_ms)
                if o.throttled
                else QuotaOutcome()
            )
            with self._lock:
                if replayed.throttle_ms != o.throttle_ms:
                    self.replay_mismatches.append((d, replayed))
                self._applied.append(
                    Applied(kind, d.user, d.client_id, d.size, out, d.at_ms, rate, d.broker)
                )

    def replay_broker_on(self, broker: int, path: RequestPath) -> None:
        """Replay ``broker``'s decisions on ``path`` (e.g. managers with that broker's own
        quota callback) instead of on plain copies of the plugin's managers."""
        self._shadows[broker] = path

    def mutation_decided(self, mutation_throttle_ms: int, outcome: QuotaOutcome) -> None:
        """A mutation request's outcome: kept by plugins that override it."""

    def _shadow_path(self, broker: int) -> RequestPath:
        """The replay's managers of ``broker``, with the real ones' quotas as they are now
        (a quota changed while the proxy runs reaches the replay at its next batch)."""
        shadow = self._shadows.get(broker)
        if shadow is None:
            copies = [
                QuotaManager(
                    real.quota_type, num_samples=real.num_samples, window_ms=real.window_ms
                )
                for real in self.managers
            ]
            shadow = self._shadows[broker] = RequestPath(*copies)
        for real, copy in zip(
            self.managers, (shadow.produce, shadow.fetch, shadow.request), strict=True
        ):
            now = dict(real.quotas())
            for entity, _ in copy.quotas():
                if entity not in now:
                    copy.remove_quota(entity)
            for entity, value in now.items():
                if copy.quota(entity) != value:
                    copy.set_quota(entity, value)
        return shadow

    def rates_after(self, api: str, client_id: str, start_ms: int) -> list[float]:
        """The sensor's rate at each of ``client_id``'s ``api`` requests from ``start_ms``."""
        self.pull()
        with self._lock:
            return [
                a.rate
                for a in self._applied
                if a.api == api
                and a.client_id == client_id
                and a.at_ms >= start_ms
                and a.rate is not None
            ]

    def first_ms(self, api: str, client_id: str) -> int:
        """When ``client_id``'s first ``api`` request was recorded."""
        self.pull()
        with self._lock:
            return min(a.at_ms for a in self._applied if a.api == api and a.client_id == client_id)

    def throttles(self, api: str, client_id: str) -> list[int]:
        """The positive throttles applied to ``client_id``'s ``api`` requests, in order."""
        self.pull()
        with self._lock:
            return [
                a.outcome.throttle_time_ms
                for a in self._applied
                if a.api == api and a.client_id == client_id and a.outcome.throttled
            ]


@dataclass
class RunningProxy:
    server: ProxyServer
    plugin: QuotaPlugin
    loop: asyncio.AbstractEventLoop
    tasks: list[Any] = field(default_factory=list)

    @property
    def address(self) -> str:
        host, port = self.server.address
        return f"{host}:{port}"

    def connections(self) -> int:
        return self.server.connections


@contextlib.contextmanager
def run_proxy(
    upstream: tuple[str, int],
    port: int,
    plugin: QuotaPlugin | None = None,
    **kwargs: Any,
) -> Iterator[RunningProxy]:
    """A :class:`ProxyServer` on ``127.0.0.1:port``, its control plane on an event loop in a
    thread. A :class:`RecordingPlugin` gets the proxy's decisions as they come."""
    plugin = plugin if plugin is not None else RecordingPlugin()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="proxy-loop", daemon=True)
    thread.start()
    recording = isinstance(plugin, RecordingPlugin)
    server = ProxyServer(upstream, plugin, keep_decisions=recording, **kwargs)
    running = RunningProxy(server, plugin, loop)
    done = threading.Event()

    def drain() -> None:  # often, so that the replay's quotas follow live changes
        assert isinstance(plugin, RecordingPlugin)
        while not done.wait(0.05):
            plugin.pull()
        plugin.pull()

    drainer = threading.Thread(target=drain, name="proxy-decisions", daemon=True)
    try:
        asyncio.run_coroutine_threadsafe(server.start("127.0.0.1", port), loop).result(10)
        if recording:
            assert isinstance(plugin, RecordingPlugin)
            plugin.follow(server.take_decisions)
            drainer.start()
        yield running
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(server.shutdown(5), loop).result(30)
        if recording:
            done.set()
            drainer.join(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        plugin.close()


def assert_proxy_cli_refuses(cases: list[tuple[list[str], str]], store: Path) -> None:
    """``kquota proxy ARGV --store STORE`` exits with status 2 and one line on stderr that
    holds the message, for each ``(argv, message)``."""
    for argv, message in cases:
        result = subprocess.run(
            [sys.executable, "-m", "kquota", "proxy", *argv, "--store", str(store)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode == 2, (argv, result.stderr)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (argv, result.stderr)


# -- raw frames ----------------------------------------------------------------------------


def api_versions_request(correlation_id: int, client_id: str = "raw") -> bytes:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    body = ApiVersionsRequest(client_software_name="kquota-test", client_software_version="1")
    return encode_request(body, correlation_id, client_id)


def read_frame(sock: socket.socket) -> bytes | None:
    """One response frame (without its size), or ``None`` if the peer closed."""
    prefix = _recv_exactly(sock, 4)
    if prefix is None:
        return None
    size = struct.unpack(">i", prefix)[0]
    return _recv_exactly(sock, size)


def connection_outcomes(port: int, count: int) -> list[bool]:
    """Open ``count`` connections to ``127.0.0.1:port`` one after another, send an
    ApiVersions request on each, then read them: ``True`` for a response, ``False`` for a
    connection the proxy closed unanswered (an IP over its connection creation rate)."""
    sockets = []
    try:
        for i in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sockets.append(sock)
            sock.sendall(api_versions_request(i, client_id=f"loop-{i}"))
        outcomes = []
        for sock in sockets:
            try:
                outcomes.append(read_frame(sock) is not None)
            except ConnectionResetError:
                outcomes.append(False)
        return outcomes
    finally:
        for sock in sockets:
            sock.close()


def _recv_exactly(sock: socket.socket, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def closed_by_peer(sock: socket.socket, timeout: float = 10.0) -> bool:
    """Whether the peer closes ``sock`` (EOF or reset) within ``timeout`` seconds."""
    sock.settimeout(timeout)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    """Create ``topic`` through the proxy with librdkafka's admin client (Tansu 0.6 does not
    create topics on Metadata)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, 1)], request_timeout=30)
    futures[topic].result(timeout=60)


def produce_greedily(
    bootstrap: str, topic: str, seconds: float, client_id: str
) -> tuple[int, list[int]]:
    """A greedy librdkafka producer of 1 kB messages (128 at most in flight) for
    ``seconds``, all acknowledged: how many it sent, and the throttles it was told, in ms."""
    from confluent_kafka import Producer

    throttles: list[int] = []

    def throttled(event: Any) -> None:
        if event.throttle_time > 0:
            throttles.append(round(event.throttle_time * 1000))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "batch.size": 65_536,
            "linger.ms": 5,
            "throttle_cb": throttled,
        }
    )
    start = time.monotonic()
    sent = 0
    while time.monotonic() - start < seconds:
        if len(producer) < 128:
            producer.produce(topic, sent.to_bytes(8, "big") + b"x" * 1000)
            sent += 1
            producer.poll(0)
        else:
            producer.poll(0.01)
    assert producer.flush(60) == 0
    return sent, throttles


def consume_from_start(
    bootstrap: str, topic: str, count: int, group: str, client_id: str, timeout_s: float
) -> list[bytes]:
    """The values of the first ``count`` messages of ``topic``, read from the start by a
    librdkafka consumer of ``group`` within ``timeout_s``; then checks that no more arrive."""
    from confluent_kafka import Consumer, KafkaException

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": client_id,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
    )
    consumer.subscribe([topic])
    received: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(received) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            received.append(msg.value())
        extra = consumer.poll(1.0)
        assert extra is None or extra.error() is not None, "more messages than produced"
    finally:
        consumer.close()
    return received


class TimingRelay:
    """A TCP relay in front of the proxy that notes when each request starts to arrive and
    when each response (with the throttle it carries) was passed on, per connection.

    It listens where the broker's advertised address points, so every connection of a
    client goes through it; it reads the frames with kio.
    """

    def __init__(self, listen_port: int, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", listen_port))
        self.events: list[tuple[int, float, str, int, int]] = []  # conn, t, kind, api, throttle
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._sockets: list[socket.socket] = []
        self._next = 0
        accept = threading.Thread(target=self._accept, name="relay-accept", daemon=True)
        accept.start()

    def close(self) -> None:
        with contextlib.suppress(OSError):  # wakes the accept() blocked in its thread
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            self._next += 1
            pending: dict[int, tuple[int, int]] = {}
            for args in ((client, upstream, True), (upstream, client, False)):
                thread = threading.Thread(
                    target=self._pump, args=(self._next, *args, pending), daemon=True
                )
                thread.start()

    def _pump(
        self,
        conn: int,
        src: socket.socket,
        dst: socket.socket,
        requests: bool,
        pending: dict[int, tuple[int, int]],
    ) -> None:
        buffer = b""
        started: float | None = None
        try:
            while True:
                chunk = src.recv(65536)
                if not chunk:
                    break
                now = time.monotonic()
                if not requests:  # a response counts from when it is passed on
                    dst.sendall(chunk)
                    now = time.monotonic()
                if not buffer:
                    started = now
                buffer += chunk
                while len(buffer) >= 4:
                    size = struct.unpack_from(">i", buffer)[0]
                    if len(buffer) < 4 + size:
                        break
                    frame, buffer = buffer[4 : 4 + size], buffer[4 + size :]
                    assert started is not None
                    self._note(conn, started if requests else now, frame, requests, pending)
                    started = now if buffer else None
                if requests:  # noted before the proxy can answer it
                    dst.sendall(chunk)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

    def _note(
        self,
        conn: int,
        at: float,
        frame: bytes,
        request: bool,
        pending: dict[int, tuple[int, int]],
    ) -> None:
        if request:
            header = request_header(frame)
            pending[header.correlation_id] = (header.api_key, header.api_version)
            event = (conn, at, "request", header.api_key, 0)
        else:
            key, version = pending.pop(response_correlation_id(frame))
            throttle = throttle_ms(frame, key, version) or 0
            event = (conn, at, "response", key, throttle)
        with self._lock:
            self.events.append(event)

    def sent_while_throttled(self, slack_s: float = 0.02) -> tuple[int, int]:
        """``(requests begun during a throttle the client had received, throttled responses)``."""
        with self._lock:
            events = sorted(self.events, key=lambda e: e[1])
        early = 0
        throttled = [e for e in events if e[2] == "response" and e[4] > 0]
        for conn, at, _, _, throttle in throttled:
            end = at + throttle / 1000 - slack_s
            early += sum(
                1 for c, t, kind, _, _ in events if c == conn and kind == "request" and at < t < end
            )
        return early, len(throttled)


# -- a stand-in broker, for what Tansu cannot be made to do on cue -------------------------

SCRIPT_HANG_S = 30.0
"""How long a scripted step may take before the test fails as hung (never reached when
the proxy works)."""
SCRIPT_QUIET_S = 0.3
"""How long :meth:`ScriptedBroker.nothing_more` listens for a request that must not come."""


def produce_request(
    correlation_id: int, client_id: str, size: int, acks: int = 1, records: bytes | None = None
) -> bytes:
    """A Produce v9 request whose records are ``size`` opaque bytes (the proxy reads none
    of them; a stand-in broker stores nothing): ``records`` when given, else ``size``
    times ``b"r"``."""
    import datetime

    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from kio.static.primitive import Records, i32Timedelta

    body = ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(
            TopicProduceData(
                name="t",  # type: ignore[arg-type]
                partition_data=(
                    PartitionProduceData(
                        index=i32(0), records=Records(b"r" * size if records is None else records)
                    ),
                ),
            ),
        ),
    )
    return encode_request(body, correlation_id, client_id)


def metadata_request(correlation_id: int, client_id: str) -> bytes:
    from kio.schema.metadata.v12.request import MetadataRequest

    body = MetadataRequest(topics=(), include_topic_authorized_operations=False)
    return encode_request(body, correlation_id, client_id)


def sasl_handshake_request(correlation_id: int, mechanism: str) -> bytes:
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    body = SaslHandshakeRequest(mechanism=mechanism)
    return encode_request(body, correlation_id, "sasl")


def sasl_authenticate_request(correlation_id: int, auth_bytes: bytes) -> bytes:
    from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest

    body = SaslAuthenticateRequest(auth_bytes=auth_bytes)
    return encode_request(body, correlation_id, "sasl")


def _response_body(api_key: int, correlation_id: int, error: int) -> Any:
    """A minimal response of ``api_key`` (the versions the requests above use)."""
    import datetime

    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i32Timedelta, i64, i64Timedelta

    no_throttle = i32Timedelta.parse(datetime.timedelta(0))
    if api_key == 0:
        from kio.schema.produce.v9 import response as produce

        partition = produce.PartitionProduceResponse(
            index=i32(0),
            error_code=ErrorCode(error),
            base_offset=i64(correlation_id),
            log_append_time=None,
            log_start_offset=i64(0),
            record_errors=(),
            error_message=None,
        )
        topic = produce.TopicProduceResponse(name="t", partition_responses=(partition,))  # type: ignore[arg-type]
        return produce.ProduceResponse(responses=(topic,), throttle_time=no_throttle)
    if api_key == 3:
        from kio.schema.metadata.v12.response import MetadataResponse

        return MetadataResponse(
            throttle_time=no_throttle,
            brokers=(),
            cluster_id=None,
            controller_id=i32(-1),  # type: ignore[arg-type]
            topics=(),
        )
    if api_key == 18:
        from kio.schema.api_versions.v3 import response as api_versions

        # Produce v9 and Metadata v12, the versions the requests above use
        versions = tuple(
            api_versions.ApiVersion(api_key=i16(key), min_version=i16(0), max_version=i16(top))
            for key, top in ((0, 9), (3, 12), (18, 3))
        )
        return api_versions.ApiVersionsResponse(
            error_code=ErrorCode(error), api_keys=versions, throttle_time=no_throttle
        )
    if api_key == 17:
        from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

        return SaslHandshakeResponse(
            error_code=ErrorCode(error), mechanisms=("PLAIN", "SCRAM-SHA-256")
        )
    if api_key == 36:
        from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse

        return SaslAuthenticateResponse(
            error_code=ErrorCode(error),
            error_message=None if error == 0 else "authentication failed",
            auth_bytes=b"server-message",
            session_lifetime=i64Timedelta.parse(datetime.timedelta(0)),
        )
    raise ValueError(f"no scripted response for API {api_key}")


def response_frame(api_key: int, correlation_id: int, error: int = 0) -> bytes:
    """A response frame (size prefix included), encoded with kio, with the response
    header of the response's own module."""
    return encode_response(_response_body(api_key, correlation_id, error), correlation_id)


class ScriptedBroker:
    """A stand-in broker for one connection: notes each request frame as it arrives
    (:meth:`next_request`; the frames themselves, without their size, in :attr:`frames`)
    and answers one only when told (:meth:`answer`)."""

    def __init__(self) -> None:
        import queue

        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.requests: queue.Queue[tuple[int, int]] = queue.Queue()
        self.frames: list[bytes] = []
        self.ended = threading.Event()
        """Set when the proxy closed the connection (or it failed)."""
        self.connection: socket.socket | None = None
        self._ready = threading.Event()
        threading.Thread(target=self._serve, name="scripted-broker", daemon=True).start()

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def _serve(self) -> None:
        try:
            self.connection, _ = self.listener.accept()
        except OSError:
            return
        self._ready.set()
        try:
            while True:
                try:
                    frame = read_frame(self.connection)
                except OSError:
                    return
                if frame is None:
                    return
                self.frames.append(frame)
                api_key, _, correlation_id = struct.unpack_from(">hhi", frame)
                self.requests.put((correlation_id, api_key))
        finally:
            self.ended.set()

    def next_request(self) -> tuple[int, int]:
        """``(correlation id, api key)`` of the next request to arrive."""
        return self.requests.get(timeout=SCRIPT_HANG_S)

    def nothing_more(self) -> bool:
        """No further request arrives within :data:`SCRIPT_QUIET_S`."""
        import queue

        try:
            self.requests.get(timeout=SCRIPT_QUIET_S)
        except queue.Empty:
            return True
        return False

    def answer(self, correlation_id: int, api_key: int, error: int = 0) -> None:
        assert self._ready.wait(SCRIPT_HANG_S) and self.connection is not None
        self.connection.sendall(response_frame(api_key, correlation_id, error))

    def exchange(self, api_key: int, error: int = 0) -> int:
        """Take the next request, which must be of ``api_key``, and answer it."""
        correlation_id, key = self.next_request()
        assert key == api_key, (key, api_key)
        self.answer(correlation_id, api_key, error)
        return correlation_id

    def close(self) -> None:
        self.listener.close()
        if self.connection is not None:
            self.connection.close()


def scrape_flat(url: str) -> dict[str, float]:
    """One HTTP scrape of a metrics endpoint: ``{'name{labels}': value}``."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


@dataclass
class Ended:
    """What a process stopped by :func:`stopped_by_sigterm` wrote to stderr."""

    stderr: str = ""


@contextlib.contextmanager
def stopped_by_sigterm(process: subprocess.Popen[str], timeout: float = 60) -> Iterator[Ended]:
    """Runs the block, then stops ``process`` as a user does (SIGTERM), which must exit
    with status 0 within ``timeout`` seconds. When the block fails, or the process does not
    end, it is killed. The yielded :class:`Ended` has its stderr once the block is over."""
    ended = Ended()
    try:
        yield ended
        process.send_signal(signal.SIGTERM)
        process.wait(timeout)
    finally:
        if process.poll() is None:
            process.kill()
        _, ended.stderr = process.communicate(timeout=30)
    assert process.returncode == 0, f"exit status {process.returncode}: {ended.stderr[-4000:]}"
