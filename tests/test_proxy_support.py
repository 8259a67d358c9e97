"""What the proxy tests share (no tests here): a proxy running in a thread, a plugin that
keeps its outcomes, raw Kafka frames built with kio, and topics made with an admin client."""

from __future__ import annotations

import asyncio
import contextlib
import io
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kio.serial import entity_writer
from kio.static.primitive import i16, i32
from kquota.broker import QuotaOutcome, QuotaPlugin
from kquota.proxy import ProxyServer


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


class RecordingPlugin(QuotaPlugin):
    """The real plugin, keeping every outcome it returned (in order) for the test to compare."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.applied: list[Applied] = []
        self._lock = threading.Lock()

    def _keep(
        self, api: str, user: str, client_id: str, size: float, out: QuotaOutcome, now: int
    ) -> None:
        manager = self.produce if api == "produce" else self.fetch
        rate = manager.measure(user, client_id, now_ms=now)
        with self._lock:
            self.applied.append(Applied(api, user, client_id, size, out, now, rate))

    def on_produce(self, user: str, client_id: str, size_bytes: float, *a: Any, **kw: Any) -> Any:
        now = self._now(kw)  # the plugin's clock, read once as the plugin does
        out = super().on_produce(user, client_id, size_bytes, *a, now_ms=now, **kw)
        self._keep("produce", user, client_id, size_bytes, out, now)
        return out

    def on_fetch(self, user: str, client_id: str, response_bytes: float, *a: Any, **kw: Any) -> Any:
        now = self._now(kw)
        out = super().on_fetch(user, client_id, response_bytes, *a, now_ms=now, **kw)
        self._keep("fetch", user, client_id, response_bytes, out, now)
        return out

    def _now(self, kw: dict[str, Any]) -> int:
        """The time the caller gave (``now_ms``, taken out of ``kw``), else the clock's."""
        now = kw.pop("now_ms", None)
        return self.channels.now_ms() if now is None else int(now)

    def rates_after(self, api: str, client_id: str, start_ms: int) -> list[float]:
        """The sensor's rate at each of ``client_id``'s ``api`` requests from ``start_ms``."""
        with self._lock:
            return [
                a.rate
                for a in self.applied
                if a.api == api
                and a.client_id == client_id
                and a.at_ms >= start_ms
                and a.rate is not None
            ]

    def first_ms(self, api: str, client_id: str) -> int:
        """When ``client_id``'s first ``api`` request was recorded."""
        with self._lock:
            return min(a.at_ms for a in self.applied if a.api == api and a.client_id == client_id)

    def throttles(self, api: str, client_id: str) -> list[int]:
        """The positive throttles applied to ``client_id``'s ``api`` requests, in order."""
        with self._lock:
            return [
                a.outcome.throttle_time_ms
                for a in self.applied
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
    upstream: tuple[str, int], port: int, plugin: QuotaPlugin | None = None, **kwargs: Any
) -> Iterator[RunningProxy]:
    """A :class:`ProxyServer` on ``127.0.0.1:port`` served by an event loop in a thread."""
    plugin = plugin if plugin is not None else RecordingPlugin()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="proxy-loop", daemon=True)
    thread.start()
    server = ProxyServer(upstream, plugin, **kwargs)
    running = RunningProxy(server, plugin, loop)
    try:
        asyncio.run_coroutine_threadsafe(server.start("127.0.0.1", port), loop).result(10)
        yield running
    finally:
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(server.shutdown(5), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
        plugin.close()


# -- raw frames ----------------------------------------------------------------------------


def encode_request(header: Any, body: Any) -> bytes:
    """A request frame (size prefix included), encoded with kio."""
    out = io.BytesIO()
    entity_writer(type(header))(out, header)
    entity_writer(type(body))(out, body)
    data = out.getvalue()
    return struct.pack(">i", len(data)) + data


def api_versions_request(correlation_id: int, client_id: str = "raw") -> bytes:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.request_header.v2.header import RequestHeader

    header = RequestHeader(
        request_api_key=i16(18),
        request_api_version=i16(3),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    body = ApiVersionsRequest(client_software_name="kquota-test", client_software_version="1")
    return encode_request(header, body)


def read_frame(sock: socket.socket) -> bytes | None:
    """One response frame (without its size), or ``None`` if the peer closed."""
    prefix = _recv_exactly(sock, 4)
    if prefix is None:
        return None
    size = struct.unpack(">i", prefix)[0]
    return _recv_exactly(sock, size)


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


class TimingRelay:
    """A TCP relay in front of the proxy that notes when each request starts to arrive and
    when each response (with the throttle it carries) was passed on, per connection.

    It listens where the broker's advertised address points, so every connection of a
    client goes through it; it reads the frames with the proxy's codec.
    """

    def __init__(self, listen_port: int, target: tuple[str, int]) -> None:
        from kquota.proxy import codec

        self._codec = codec
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
        codec = self._codec
        if request:
            header = codec.parse_request_header(frame)
            pending[header.correlation_id] = (header.api.key, header.api.version)
            event = (conn, at, "request", header.api.key, 0)
        else:
            key, version = pending.pop(codec.response_correlation_id(frame))
            spec = codec.api(key, version)
            _, body = spec.response_header(frame)
            offset = spec.throttle_offset(frame, body)
            throttle = codec.read_int32(frame, offset) if offset is not None else 0
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
