"""A Kafka-like produce service over TCP with kquota: quotas, KIP-219 mutes, Prometheus.

The protocol is text lines, plus raw bytes for the payload::

    client: HELLO <user> <client-id>\\n          server: OK\\n
    client: PRODUCE <n>\\n<n bytes>              server: ACK <throttle_time_ms>\\n

For every request the service records the bytes (produce quota) and the time it spent
handling them (request quota), answers at once with the throttle time, and then, as a
Kafka broker does (KIP-219), reads nothing more from that connection until the throttle
has passed. A client that ignores ``throttle_time_ms`` is slowed down all the same: its
next request waits in the socket. Metrics are served over HTTP for Prometheus. The
plugin drains its delay queue and expires idle sensors by itself (no reaper task here).

Run a 10-second demo (a greedy client and a polite one), or serve until Ctrl-C. The demo
uses 2 quota windows of 1 s (``--window-num``); with Kafka's default of 11 the greedy
client gets its quota only on average, in bursts about 11 s apart::

    python examples/kafka_like_service.py
    python examples/kafka_like_service.py --serve --port 9092 --metrics-port 9404
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import kquota
from kquota.broker import MetricsServer, QuotaCollector, QuotaPlugin, serve_metrics

MAX_REQUEST_BYTES = 1 << 20


@dataclass(frozen=True)
class Handled:
    """One produce request as the service processed it (for logs and tests).

    Everything the plugin was told is here, so the request can be replayed exactly.
    """

    channel: int
    user: str
    client_id: str
    at_ms: int  # when it was read and checked, on the plugin's clock
    size_bytes: int
    thread_time_ns: int  # handler time recorded against the request quota
    throttle_time_ms: int
    muted_until_ms: int | None
    sent_at_ms: int  # when the answer had gone out, on the plugin's clock
    network_thread_time_ns: int  # recorded after the answer, without a check


class ProtocolError(Exception):
    """A client broke the protocol; the service answers ``ERR`` and closes the connection."""


def make_plugin(
    *, bytes_per_s: float, request_percentage: float = 50.0, num_samples: int = 11
) -> QuotaPlugin:
    """Every user gets its own ``bytes_per_s`` produce quota and ``request_percentage``.

    ``num_samples`` is Kafka's ``quota.window.num`` (windows of one second).
    """
    plugin = QuotaPlugin(
        kquota.QuotaManager("produce", num_samples=num_samples),
        kquota.QuotaManager("fetch", num_samples=num_samples),
        kquota.QuotaManager("request", num_samples=num_samples),
    )
    every_user = kquota.Entity(user=kquota.DEFAULT)
    plugin.produce.set_quota(every_user, bytes_per_s)
    plugin.request.set_quota(every_user, request_percentage)
    return plugin


class KafkaLikeService:
    """The TCP service: one :class:`QuotaPlugin`, one throttled channel per connection.

    The plugin is the caller's: :meth:`QuotaPlugin.close` it (or use it in a ``with``
    block) when done, which stops its maintenance thread.
    """

    def __init__(
        self,
        plugin: QuotaPlugin,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        metrics_port: int | None = 0,
        on_handled: Callable[[Handled], None] | None = None,
    ) -> None:
        self.plugin = plugin
        self.stored_bytes = 0  # stands in for the log a broker appends to
        self._host, self._port, self._metrics_port = host, port, metrics_port
        self._on_handled = on_handled
        self._server: asyncio.Server | None = None
        self._metrics: MetricsServer | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        """The TCP port clients connect to."""
        assert self._server is not None, "start() first"
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def metrics_url(self) -> str | None:
        """Where Prometheus scrapes the metrics (``None`` without a metrics port)."""
        return None if self._metrics is None else self._metrics.url

    async def start(self) -> None:
        """Listen for clients and serve metrics (the plugin maintains itself)."""
        if self._metrics_port is not None:
            collector = QuotaCollector(*self.plugin.managers, quota_value_metric=True)
            self._metrics = serve_metrics(collector, port=self._metrics_port, host=self._host)
        self._server = await asyncio.start_server(self._accept, self._host, self._port)

    async def close(self) -> None:
        """Stop listening, drop every connection and stop serving metrics."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._metrics is not None:
            self._metrics.close()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._spawn(self._connection(reader, writer))

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        channels = self.plugin.channels
        channel = channels.open()
        try:
            user, client_id = await self._hello(reader, writer)
            while True:
                # KIP-219: while the channel is muted, its next request stays unread.
                await channels.wait_unmuted(channel)
                header = await reader.readline()
                if not header:
                    return
                size = _parse_produce(header)
                payload = await reader.readexactly(size)

                started = time.perf_counter_ns()
                self.stored_bytes += len(payload)  # "handle" the request
                handler_ns = time.perf_counter_ns() - started
                now = channels.now_ms()
                outcome = self.plugin.on_produce(
                    user, client_id, size, handler_ns, channel=channel, now_ms=now
                )

                sending = time.perf_counter_ns()  # answer at once, throttled or not
                writer.write(f"ACK {outcome.throttle_time_ms}\n".encode())
                await writer.drain()
                network_ns = time.perf_counter_ns() - sending
                sent = channels.now_ms()
                self.plugin.on_response_sent(user, client_id, network_ns, now_ms=sent)
                if self._on_handled is not None:
                    self._on_handled(
                        Handled(
                            channel,
                            user,
                            client_id,
                            now,
                            size,
                            handler_ns,
                            outcome.throttle_time_ms,
                            outcome.muted_until_ms,
                            sent,
                            network_ns,
                        )
                    )
        except ProtocolError as e:
            writer.write(f"ERR {e}\n".encode())
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        finally:
            channels.close(channel)
            writer.close()

    @staticmethod
    async def _hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> tuple[str, str]:
        words = (await reader.readline()).decode(errors="replace").split()
        if len(words) != 3 or words[0] != "HELLO":
            raise ProtocolError("expected: HELLO <user> <client-id>")
        writer.write(b"OK\n")
        await writer.drain()
        return words[1], words[2]


def _parse_produce(header: bytes) -> int:
    words = header.split()
    if len(words) != 2 or words[0] != b"PRODUCE" or not words[1].isdigit():
        raise ProtocolError("expected: PRODUCE <n>")
    size = int(words[1])
    if size > MAX_REQUEST_BYTES:
        raise ProtocolError(f"request of {size} bytes; at most {MAX_REQUEST_BYTES}")
    return size


class ProduceClient:
    """A minimal client of the service (it ignores throttle times, like an old client)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    @classmethod
    async def connect(cls, host: str, port: int, user: str, client_id: str) -> ProduceClient:
        """Connect and identify as ``user`` / ``client_id``."""
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(f"HELLO {user} {client_id}\n".encode())
        await writer.drain()
        if await reader.readline() != b"OK\n":
            raise ConnectionError("the service refused the HELLO")
        return cls(reader, writer)

    async def produce(self, size_bytes: int) -> int:
        """Send ``size_bytes`` bytes; return the ``throttle_time_ms`` of the answer."""
        self._writer.write(b"PRODUCE %d\n" % size_bytes + bytes(size_bytes))
        await self._writer.drain()
        words = (await self._reader.readline()).split()
        if len(words) != 2 or words[0] != b"ACK":
            raise ConnectionError(f"unexpected answer {b' '.join(words)!r}")
        return int(words[1])

    async def close(self) -> None:
        """Close the connection."""
        self._writer.close()
        with contextlib.suppress(ConnectionError):
            await self._writer.wait_closed()


async def demo(seconds: float, bytes_per_s: float, num_samples: int) -> None:
    """Run a greedy and a polite client for ``seconds`` and print what each achieved."""
    accepted: dict[str, int] = {"greedy": 0, "polite": 0}
    throttled: dict[str, int] = {"greedy": 0, "polite": 0}

    def count(h: Handled) -> None:
        accepted[h.user] += h.size_bytes
        throttled[h.user] += h.throttle_time_ms > 0

    plugin = make_plugin(bytes_per_s=bytes_per_s, num_samples=num_samples)
    service = KafkaLikeService(plugin, on_handled=count)
    await service.start()
    print(f"service on 127.0.0.1:{service.port}, metrics at {service.metrics_url}")
    size = max(1, int(bytes_per_s / 100))
    stop_at = time.monotonic() + seconds

    async def run(user: str, pause_s: float) -> None:
        client = await ProduceClient.connect("127.0.0.1", service.port, user, "app")
        while time.monotonic() < stop_at:
            await client.produce(size)
            await asyncio.sleep(pause_s)
        await client.close()

    # greedy: as fast as the service lets it; polite: a fifth of its quota.
    await asyncio.gather(run("greedy", 0), run("polite", size / (bytes_per_s / 5)))
    for user in accepted:
        rate = accepted[user] / seconds
        print(
            f"{user:>7}: {rate:>10.0f} B/s = {rate / bytes_per_s:.2f} x quota,"
            f" {throttled[user]} throttled answers"
        )
    await service.close()
    plugin.close()


async def serve(host: str, port: int, metrics_port: int, bytes_per_s: float) -> None:
    """Serve until cancelled."""
    with make_plugin(bytes_per_s=bytes_per_s) as plugin:
        service = KafkaLikeService(plugin, host=host, port=port, metrics_port=metrics_port)
        await service.start()
        print(f"service on {host}:{service.port}, metrics at {service.metrics_url}")
        try:
            await asyncio.Event().wait()
        finally:
            await service.close()


def main(argv: list[str] | None = None) -> None:
    """Command line: a demo by default, ``--serve`` to keep serving."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--serve", action="store_true", help="serve until Ctrl-C")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--metrics-port", type=int, default=0)
    parser.add_argument("--quota", type=float, default=200_000.0, help="bytes/s per user")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the demo")
    parser.add_argument("--window-num", type=int, default=2, help="quota.window.num (demo)")
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        if args.serve:
            asyncio.run(serve(args.host, args.port, args.metrics_port, args.quota))
        else:
            asyncio.run(demo(args.seconds, args.quota, args.window_num))


if __name__ == "__main__":
    main()
