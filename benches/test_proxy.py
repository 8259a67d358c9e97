"""``kquota proxy``'s overhead: a librdkafka producer of 1 KiB messages, no quota.

Three ways to the same Tansu 0.6.0 broker (in memory, on 127.0.0.1), measured in the same
run with their rounds interleaved (round ``i`` runs every role, in an order rotated by
``i``), so that the load of a shared machine falls on all of them alike:

* ``direct`` (baseline): the producer talks to Tansu itself;
* ``relay`` (baseline): through a plain asyncio byte relay (``relay`` below: each chunk
  received is written to the other side at once, both directions at once, with asyncio's
  protocols and flow control), which shows what Python in the path costs at all;
* ``rust_relay`` (baseline): through ``kquota-relay`` (``rust/kquota-proxy``, built by
  ``make bench``): tokio copying bytes both ways, the floor a proxy in Rust is held to;
* ``rust_framed`` (baseline): ``kquota-relay --framed``, which reads every frame and decodes
  its header, and matches each response to its request;
* ``kquota``: through ``kquota proxy`` with a store that has no quota for this client.

The relay and the proxy run as their own processes, as a user runs them: ``kquota proxy``
is started with ``python -m kquota proxy``, so it has its own interpreter and GIL and does
not compete with the producer's Python thread in this process (which an in-process proxy
on an event-loop thread would, for the GIL, and be measured slower than it is).

Each round starts a fresh Tansu advertising the address its clients must use (its own for
``direct``, the relay's or the proxy's otherwise) and kills it at the end: Tansu keeps every
byte produced in memory, so a round holds at most ``MESSAGES`` KiB (200 MiB in a full run)
and no round inherits another's heap.

Groups:

* ``proxy_produce_1kib``: the time to produce ``MESSAGES`` messages of 1 KiB (``acks=all``,
  librdkafka's defaults otherwise) from the first ``produce()`` to the end of ``flush()``,
  after one message has been delivered to warm up the connections; per message in the
  table, so ratio = baseline time / kquota time = kquota's throughput / the baseline's.
* ``proxy_produce_latency_p99``: per-message delivery latency from librdkafka's delivery
  reports (``Message.latency()``: from ``produce()`` to the broker's acknowledgement) of
  ``LATENCY_MESSAGES`` messages sent one at a time (``linger.ms=0``, each delivered before
  the next is produced); a round's value is the p99 of its messages, the table shows the
  median round. ``extra_info`` has the p50 and p99 over all rounds and the p99 added to
  the direct path.

pytest-benchmark times only functions it calls itself, one test after another; the rounds
here are measured by a module fixture, interleaved, and given to each role's benchmark as
its rounds (``_record``). ``make bench-quick`` runs fewer and smaller rounds.

``python benches/test_proxy.py relay LISTEN_PORT UPSTREAM_PORT`` runs the relay.
"""

from __future__ import annotations

import asyncio
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from quick import pick  # benches/quick.py, next to this file (also when run as the relay)

ROLES = ("direct", "relay", "rust_relay", "rust_framed", "kquota")
"""``kquota`` is the subject; the others are baselines (see benches/conftest.py)."""
TANSU_VERSION = "0.6.0"
MESSAGE = b"x" * 1024
TOPIC = "bench"
MESSAGES = pick(200_000, 100_000)
ROUNDS = pick(7, 3)
LATENCY_MESSAGES = pick(1_000, 300)
LATENCY_ROUNDS = pick(5, 3)
RUST_RELAY = Path(__file__).resolve().parents[1] / "target" / "release" / "kquota-relay"


# -- the relay (baseline), run as its own process ------------------------------------------


class _Relay(asyncio.Protocol):
    """One side of a relayed connection: what it receives is written to its peer's side at
    once; a peer whose socket buffer is full pauses this side's reading (backpressure).
    A client's side (``upstream_port`` given) connects its peer first, reading nothing
    until then."""

    def __init__(self, peer: _Relay | None = None, upstream_port: int | None = None) -> None:
        self.peer = peer
        self.upstream_port = upstream_port
        self.transport: asyncio.Transport | None = None
        self.linking: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        if self.upstream_port is not None:
            transport.pause_reading()
            self.linking = asyncio.get_running_loop().create_task(self._link(transport))

    async def _link(self, transport: asyncio.Transport) -> None:
        upstream = _Relay(self)
        loop = asyncio.get_running_loop()
        assert self.upstream_port is not None
        try:
            await loop.create_connection(lambda: upstream, "127.0.0.1", self.upstream_port)
        except OSError:
            transport.close()
            return
        self.peer = upstream
        transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        assert self.peer is not None and self.peer.transport is not None
        self.peer.transport.write(data)

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


async def relay(listen_port: int, upstream_port: int) -> None:
    """Relay every connection to ``127.0.0.1:upstream_port``, bytes as they come: asyncio's
    protocols, the least Python a relay can run per chunk."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _Relay(upstream_port=upstream_port), "127.0.0.1", listen_port
    )
    print(f"relay: listening on 127.0.0.1:{listen_port}", flush=True)
    await server.serve_forever()


# -- the broker and what is in front of it -------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _tansu_binary() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "kquota" / f"tansu-{TANSU_VERSION}" / "bin" / "tansu"


def _wait_listening(port: int, process: subprocess.Popen[bytes], what: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            tail = log.read_text()[-2000:]
            raise RuntimeError(f"{what} exited with {process.returncode}: {tail}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen on {port} within 30 s") from None
            time.sleep(0.02)


@contextmanager
def _process(argv: list[str], port: int, what: str, log: Path) -> Iterator[None]:
    """``argv`` running until the block ends (then terminated), once it listens on ``port``."""
    with log.open("ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        _wait_listening(port, process, what, log)
        yield
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextmanager
def _path(role: str, folder: Path, store: Path) -> Iterator[str]:
    """A fresh Tansu and, but for ``direct``, its front; yields the bootstrap."""
    broker = _free_port()
    front = broker if role == "direct" else _free_port()
    tansu = [
        str(_tansu_binary()),
        "broker",
        "--storage-engine",
        "memory://tansu/",
        "--listener-url",
        f"tcp://127.0.0.1:{broker}",
        "--advertised-listener-url",
        f"tcp://127.0.0.1:{front}",
    ]
    python = [sys.executable, "-X", "faulthandler"]
    fronts = {
        "relay": [*python, __file__, "relay", str(front), str(broker)],
        "rust_relay": [str(RUST_RELAY), f"127.0.0.1:{front}", f"127.0.0.1:{broker}"],
        "rust_framed": [str(RUST_RELAY), f"127.0.0.1:{front}", f"127.0.0.1:{broker}", "--framed"],
        "kquota": [
            *(*python, "-m", "kquota", "proxy", "--listen", f"127.0.0.1:{front}"),
            *("--upstream", f"127.0.0.1:{broker}", "--store", str(store)),
            *("--log-level", "WARNING"),
        ],
    }
    with ExitStack() as stack:
        stack.enter_context(_process(tansu, broker, "Tansu", folder / "tansu.log"))
        if role in fronts:
            stack.enter_context(_process(fronts[role], front, role, folder / f"{role}.log"))
        bootstrap = f"127.0.0.1:{front}"
        _create_topic(bootstrap)
        yield bootstrap


def _create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)], request_timeout=30)[TOPIC].result(timeout=60)


# -- the producer's runs --------------------------------------------------------------------


def _producer(bootstrap: str, **config: Any) -> Any:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "bench", **config})
    failures: list[Any] = []
    producer.produce(TOPIC, MESSAGE, on_delivery=lambda err, _m: err and failures.append(err))
    assert producer.flush(30) == 0 and not failures, failures  # connections and metadata
    return producer


def produce_run(bootstrap: str) -> float:
    """Seconds to produce ``MESSAGES`` messages of 1 KiB until the last one is acknowledged."""
    failures: list[Any] = []
    producer = _producer(
        bootstrap,
        **{"delivery.report.only.error": True, "on_delivery": lambda err, _m: failures.append(err)},
    )
    produce, poll = producer.produce, producer.poll
    started = time.perf_counter()
    for _ in range(MESSAGES):
        while True:
            try:
                produce(TOPIC, MESSAGE)
                break
            except BufferError:  # librdkafka's queue is full: let it drain
                poll(0.001)
    assert producer.flush(120) == 0
    elapsed = time.perf_counter() - started
    assert not failures, failures[:3]
    return elapsed


def latency_run(bootstrap: str) -> list[float]:
    """Delivery latencies (s) of ``LATENCY_MESSAGES`` messages sent one at a time."""
    producer = _producer(bootstrap, **{"linger.ms": 0})
    latencies: list[float] = []

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        latencies.append(msg.latency())

    for _ in range(LATENCY_MESSAGES):
        producer.produce(TOPIC, MESSAGE, on_delivery=delivered)
        assert producer.flush(30) == 0
    assert len(latencies) == LATENCY_MESSAGES
    return latencies


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


# -- interleaved rounds ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A quota store with a quota for another client only: none applies to ``bench``."""
    if not _tansu_binary().is_file():
        pytest.skip(f"Tansu {TANSU_VERSION} is not built at {_tansu_binary()}: run `make tools`")
    path = tmp_path_factory.mktemp("proxy-store") / "quotas.sqlite"
    subprocess.run(
        [
            *(sys.executable, "-m", "kquota", "configs", "--store", str(path), "--alter"),
            *("--entity-type", "clients", "--entity-name", "someone-else"),
            *("--add-config", "producer_byte_rate=1000000"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return path


def interleaved(
    run: Callable[[str], Any], rounds: int, folder: Path, store: Path
) -> dict[str, list[Any]]:
    """``run(bootstrap)`` for every role, ``rounds`` times, in an order rotated each round."""
    if not RUST_RELAY.is_file():
        raise FileNotFoundError(
            f"no {RUST_RELAY}: make bench builds it (make target/release/kquota-relay)"
        )
    results: dict[str, list[Any]] = {role: [] for role in ROLES}
    for i in range(rounds):
        turn = i % len(ROLES)
        for role in ROLES[turn:] + ROLES[:turn]:
            with _path(role, folder, store) as bootstrap:
                results[role].append(run(bootstrap))
    return results


@pytest.fixture(scope="module")
def throughput(tmp_path_factory: pytest.TempPathFactory, store: Path) -> dict[str, list[float]]:
    folder = tmp_path_factory.mktemp("proxy-throughput")
    return interleaved(produce_run, ROUNDS, folder, store)


@pytest.fixture(scope="module")
def latency(tmp_path_factory: pytest.TempPathFactory, store: Path) -> dict[str, list[list[float]]]:
    folder = tmp_path_factory.mktemp("proxy-latency")
    return interleaved(latency_run, LATENCY_ROUNDS, folder, store)


def _record(benchmark: Any, values: list[float]) -> None:
    """Give ``benchmark`` the rounds measured by the fixture, as if it had timed them
    (pytest-benchmark's own ``pedantic`` does the same with the times it measures)."""
    benchmark._mode = "rounds measured interleaved by benches/test_proxy.py"
    stats = benchmark._make_stats(1)
    for value in values:
        stats.update(value)


@pytest.mark.parametrize("role", ["kquota", "direct", "relay", "rust_relay", "rust_framed"])
def test_produce_throughput(benchmark: Any, throughput: dict[str, list[float]], role: str) -> None:
    benchmark.group = "proxy_produce_1kib"
    benchmark.extra_info["role"] = role
    benchmark.extra_info["calls"] = MESSAGES
    seconds = throughput[role]
    volume = MESSAGES * len(MESSAGE)
    benchmark.extra_info["mb_per_s"] = [round(volume / s / 1e6, 1) for s in seconds]
    benchmark.extra_info["median_mb_per_s"] = round(volume / statistics.median(seconds) / 1e6, 1)
    _record(benchmark, seconds)


@pytest.mark.parametrize("role", ["kquota", "direct", "relay", "rust_relay", "rust_framed"])
def test_produce_latency(benchmark: Any, latency: dict[str, list[list[float]]], role: str) -> None:
    benchmark.group = "proxy_produce_latency_p99"
    benchmark.extra_info["role"] = role
    rounds = latency[role]
    every = [x for r in rounds for x in r]
    direct = [x for r in latency["direct"] for x in r]
    benchmark.extra_info["p50_ms"] = round(statistics.median(every) * 1e3, 3)
    benchmark.extra_info["p99_ms"] = round(p99(every) * 1e3, 3)
    benchmark.extra_info["p99_added_ms"] = round((p99(every) - p99(direct)) * 1e3, 3)
    _record(benchmark, [p99(r) for r in rounds])


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "relay":
        sys.exit("usage: python benches/test_proxy.py relay LISTEN_PORT UPSTREAM_PORT")
    asyncio.run(relay(int(sys.argv[2]), int(sys.argv[3])))
