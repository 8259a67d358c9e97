"""``kquota proxy``'s overhead: a librdkafka producer of 1 KiB messages, no quota.

Six ways to the same Tansu 0.6.0 broker (in memory, on 127.0.0.1), measured in the same
run with their rounds interleaved (round ``i`` runs every role, in an order rotated by
``i``), so that the load of a shared machine falls on all of them alike:

* ``direct`` (baseline): the producer talks to Tansu itself;
* ``relay`` (baseline): through a plain asyncio byte relay (``relay`` below: each chunk
  received is written to the other side at once, both directions at once, with asyncio's
  protocols and flow control), which shows what Python in the path costs at all;
* ``rust_relay`` (baseline): through ``kquota-relay`` (an example of ``rust/kquota-proxy``,
  built by ``make bench``): tokio copying bytes both ways, the floor a proxy in Rust is held
  to;
* ``rust_framed`` (baseline): ``kquota-relay --framed``, which reads every frame and decodes
  its header, and matches each response to its request;
* ``kquota`` (subject): ``kquota proxy`` with a store that has no quota for this client:
  the connections served, and the quotas applied, by its Rust data path on its own tokio
  threads (2, the default ``--threads``);
* ``gateway`` (subject): ``kquota proxy --bootstrap`` in front of the same broker as a
  cluster of one, which advertises its own address: the gateway rewrites it in the
  responses and serves the broker on a port of its own (Tansu's node id, 111, from the
  first of ``--broker-ports``), so the producer bootstraps from the gateway and produces
  through the broker's port on it.

The relays and the proxies run as their own processes, as a user runs them: ``kquota
proxy`` is started with ``python -m kquota proxy``, so it has its own interpreter and GIL
and does not compete with the producer's Python thread in this process (which an
in-process proxy on an event-loop thread would, for the GIL, and be measured slower than
it is).

Each round starts a fresh Tansu advertising the address its clients must use (its own for
``direct``, the relay's or the proxy's otherwise) and kills it at the end: Tansu keeps every
byte produced in memory, so a round holds at most ``MESSAGES`` KiB (200 MiB in a full run)
and no round inherits another's heap.

Groups:

* ``proxy_produce_1kib``: the time to produce ``MESSAGES`` messages of 1 KiB (``acks=all``,
  librdkafka's defaults otherwise) from the first ``produce()`` to the end of ``flush()``,
  after one message has been delivered to warm up the connections; per message in the
  table, so ratio = baseline time / kquota time = kquota's throughput / the baseline's.
  A subject's ``extra_info`` also has that ratio round by round (``median_round_ratios``:
  the median over rounds of the baseline's time / the subject's in the same round), which
  a change of the machine's load between rounds moves less.
* ``proxy_produce_latency_p99``: per-message delivery latency from librdkafka's delivery
  reports (``Message.latency()``: from ``produce()`` to the broker's acknowledgement) of
  ``LATENCY_MESSAGES`` messages sent one at a time (``linger.ms=0``, each delivered before
  the next is produced); a round's value is the p99 of its messages, the table shows the
  median round. ``extra_info`` has the p50 and p99 over all rounds, the p99 added to
  the direct path, and the median over rounds of that round's p99 less the direct
  path's in the same round.
* ``proxy_cpu_per_request``: CPU time of the process in front of the broker (every role
  but ``direct``) over the timed part of a ``proxy_produce_1kib`` round, per **produce
  request** of that part, in ns. The CPU time is the process's user and system time, all
  threads (``cpu_time``: ``CLOCK_PROCESS_CPUTIME_ID`` of that pid, utime + stime of
  ``/proc/PID/stat`` in ns), read just before the first ``produce()`` and just after
  ``flush()``; the produce requests are counted by librdkafka (``req.Produce`` of its
  statistics, every ``STATS_INTERVAL_MS``, read once before and once after), about 100
  requests of ~1 MB in a quick round, as librdkafka batches 1 KiB messages. It includes
  what the kernel charges the process for moving the bytes through the loopback, and the
  process's idle CPU (a few ms a second for ``kquota proxy``, its store and maintenance
  threads: 1-3 % here). ``extra_info`` has the rounds' requests, CPU and CPU per
  request, the median CPU per message and the share of system time over all rounds
  (stime, counted in clock ticks of 10 ms, so only roughly).
* ``proxy_cpu_per_request_one_message``: the same over a ``proxy_produce_latency_p99``
  round, where every produce request carries one message: what a request costs the
  process apart from its bytes.

pytest-benchmark times only functions it calls itself, one test after another; the rounds
here are measured by a module fixture, interleaved, and given to each role's benchmark as
its rounds (``_record``). ``make bench-quick`` runs fewer and smaller rounds.

``python benches/test_proxy.py relay LISTEN_PORT UPSTREAM_PORT`` runs the relay.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from quick import pick  # benches/quick.py, next to this file (also when run as the relay)

ROLES = ("direct", "relay", "rust_relay", "rust_framed", "kquota", "gateway")
"""``kquota`` and ``gateway`` are the subjects; the others are baselines (see
benches/conftest.py)."""
SUBJECTS = ("kquota", "gateway")
TANSU_NODE_ID = 111
"""Tansu's node id: the gateway serves it on the first of its broker ports + 111."""
PROXIES = tuple(role for role in ROLES if role != "direct")
"""The roles with a process between the producer and the broker, whose CPU is measured."""
MESSAGE = b"x" * 1024
TOPIC = "bench"
MESSAGES = pick(200_000, 100_000)
ROUNDS = pick(7, 3)
LATENCY_MESSAGES = pick(1_000, 300)
LATENCY_ROUNDS = pick(5, 3)
STATS_INTERVAL_MS = 100
"""librdkafka's statistics, from which the produce requests of a run are counted."""
RUST_RELAY = (
    Path(__file__).resolve().parents[1] / "target" / "release" / "examples" / "kquota-relay"
)


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


@dataclass(frozen=True)
class Front:
    """Where the producer connects, and the process there (``None``: the broker itself)."""

    bootstrap: str
    pid: int | None


@dataclass(frozen=True)
class Cpu:
    """CPU time of a process, in seconds: ``total`` (user and system) and ``system``."""

    total: float
    system: float

    def __sub__(self, other: Cpu) -> Cpu:
        return Cpu(self.total - other.total, self.system - other.system)


def cpu_time(pid: int) -> Cpu:
    """CPU time of process ``pid`` so far (every thread, those ended included). The total
    is its ``CLOCK_PROCESS_CPUTIME_ID``, read with the clock id that Linux's
    ``clock_getcpuclockid(pid)`` gives: the sum utime + stime of ``/proc/PID/stat``, in
    nanoseconds rather than clock ticks (10 ms), which matter in a run of a few hundred
    milliseconds. The system part is stime, in ticks."""
    total = time.clock_gettime_ns(((~pid) << 3) | 2) / 1e9
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return Cpu(total, int(fields[12]) / os.sysconf("SC_CLK_TCK"))  # field 15, stime


@contextmanager
def _path(role: str, folder: Path, store: Path) -> Iterator[Front]:
    """A fresh Tansu and, but for ``direct``, its front; yields where to connect."""
    from tansu import listening, tansu_argv  # tests/support: not on the relay's path

    broker = _free_port()
    front = broker if role == "direct" else _free_port()
    advertised = broker if role == "gateway" else front
    python = [sys.executable, "-X", "faulthandler"]
    fronts = {
        "relay": [*python, __file__, "relay", str(front), str(broker)],
        "rust_relay": [str(RUST_RELAY), f"127.0.0.1:{front}", f"127.0.0.1:{broker}"],
        "rust_framed": [str(RUST_RELAY), f"127.0.0.1:{front}", f"127.0.0.1:{broker}", "--framed"],
    }
    fronts["kquota"] = [
        *(*python, "-m", "kquota", "proxy", "--listen", f"127.0.0.1:{front}"),
        *("--upstream", f"127.0.0.1:{broker}", "--store", str(store)),
        *("--log-level", "WARNING"),
    ]
    broker_port = _free_port()
    fronts["gateway"] = [
        *(*python, "-m", "kquota", "proxy", "--listen", f"127.0.0.1:{front}"),
        *("--bootstrap", f"127.0.0.1:{broker}", "--store", str(store)),
        *("--broker-ports", f"{broker_port - TANSU_NODE_ID}-{broker_port}"),
        *("--log-level", "WARNING"),
    ]
    with ExitStack() as stack:
        tansu = tansu_argv(broker, advertised)
        stack.enter_context(listening(tansu, broker, "Tansu", folder / "tansu.log"))
        pid = None
        if role in fronts:
            log = folder / f"{role}.log"
            pid = stack.enter_context(listening(fronts[role], front, role, log)).pid
        bootstrap = f"127.0.0.1:{front}"
        _create_topic(bootstrap)
        yield Front(bootstrap, pid)


def _create_topic(bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)], request_timeout=30)[TOPIC].result(timeout=60)


# -- the producer's runs --------------------------------------------------------------------


class _Stats:
    """librdkafka's statistics as they come (``stats_cb``), to count produce requests."""

    def __init__(self) -> None:
        self.latest: dict[str, Any] = {}

    def __call__(self, text: str) -> None:
        self.latest = json.loads(text)

    def produce_requests_after(self, producer: Any, moment: float) -> int:
        """Produce requests the producer had sent (and had answered), in statistics
        emitted after ``moment`` (``time.monotonic()``; librdkafka's ``ts`` is the same
        clock, in microseconds): polls until some are."""
        deadline = time.monotonic() + 10
        while self.latest.get("ts", 0) / 1e6 <= moment:
            assert time.monotonic() < deadline, "no librdkafka statistics within 10 s"
            producer.poll(STATS_INTERVAL_MS / 1e3 / 4)
        return sum(b["req"].get("Produce", 0) for b in self.latest["brokers"].values())


def _producer(bootstrap: str, **config: Any) -> tuple[Any, _Stats]:
    from confluent_kafka import Producer

    stats = _Stats()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "bench",
            "statistics.interval.ms": STATS_INTERVAL_MS,
            "stats_cb": stats,
            **config,
        }
    )
    failures: list[Any] = []
    producer.produce(TOPIC, MESSAGE, on_delivery=lambda err, _m: err and failures.append(err))
    assert producer.flush(30) == 0 and not failures, failures  # connections and metadata
    return producer, stats


@dataclass(frozen=True)
class Run:
    """What one run measured: the produce requests it sent, and the front's CPU time over
    its timed part (``None`` for ``direct``, which has no front)."""

    requests: int
    cpu: Cpu | None

    def cpu_ns_per_request(self) -> float:
        assert self.cpu is not None and self.requests > 0
        return self.cpu.total * 1e9 / self.requests


@dataclass(frozen=True)
class Produced(Run):
    seconds: float


@dataclass(frozen=True)
class Latencies(Run):
    latencies: list[float]


def _cpu(front: Front) -> Cpu | None:
    return None if front.pid is None else cpu_time(front.pid)


def _spent(front: Front, before: Cpu | None) -> Cpu | None:
    """The front's CPU time since ``before``."""
    now = _cpu(front)
    return None if now is None or before is None else now - before


def produce_run(front: Front) -> Produced:
    """Seconds to produce ``MESSAGES`` messages of 1 KiB until the last one is
    acknowledged, the produce requests that took and the front's CPU time meanwhile."""
    failures: list[Any] = []
    producer, stats = _producer(
        front.bootstrap,
        **{"delivery.report.only.error": True, "on_delivery": lambda err, _m: failures.append(err)},
    )
    before = stats.produce_requests_after(producer, time.monotonic())
    produce, poll = producer.produce, producer.poll
    cpu_before = _cpu(front)
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
    cpu = _spent(front, cpu_before)
    requests = stats.produce_requests_after(producer, time.monotonic()) - before
    assert not failures, failures[:3]
    return Produced(requests, cpu, elapsed)


def latency_run(front: Front) -> Latencies:
    """Delivery latencies (s) of ``LATENCY_MESSAGES`` messages sent one at a time (one
    produce request each), and the front's CPU time meanwhile."""
    producer, stats = _producer(front.bootstrap, **{"linger.ms": 0})
    before = stats.produce_requests_after(producer, time.monotonic())
    latencies: list[float] = []

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        latencies.append(msg.latency())

    cpu_before = _cpu(front)
    for _ in range(LATENCY_MESSAGES):
        producer.produce(TOPIC, MESSAGE, on_delivery=delivered)
        assert producer.flush(30) == 0
    cpu = _spent(front, cpu_before)
    requests = stats.produce_requests_after(producer, time.monotonic()) - before
    assert len(latencies) == LATENCY_MESSAGES
    return Latencies(requests, cpu, latencies)


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


# -- interleaved rounds ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A quota store with a quota for another client only: none applies to ``bench``."""
    from tansu import TANSU_VERSION, tansu_binary

    if not tansu_binary().is_file():
        pytest.skip(f"Tansu {TANSU_VERSION} is not built at {tansu_binary()}: run `make tools`")
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
    run: Callable[[Front], Any],
    rounds: int,
    folder: Path,
    store: Path,
    roles: tuple[str, ...] = ROLES,
) -> dict[str, list[Any]]:
    """``run(front)`` for every role, ``rounds`` times, in an order rotated each round."""
    if not RUST_RELAY.is_file():
        raise FileNotFoundError(
            f"no {RUST_RELAY}: make bench builds it (make target/release/examples/kquota-relay)"
        )
    results: dict[str, list[Any]] = {role: [] for role in roles}
    for i in range(rounds):
        turn = i % len(roles)
        for role in roles[turn:] + roles[:turn]:
            with _path(role, folder, store) as front:
                results[role].append(run(front))
    return results


@pytest.fixture(scope="module")
def throughput(tmp_path_factory: pytest.TempPathFactory, store: Path) -> dict[str, list[Produced]]:
    folder = tmp_path_factory.mktemp("proxy-throughput")
    return interleaved(produce_run, ROUNDS, folder, store)


@pytest.fixture(scope="module")
def latency(tmp_path_factory: pytest.TempPathFactory, store: Path) -> dict[str, list[Latencies]]:
    folder = tmp_path_factory.mktemp("proxy-latency")
    return interleaved(latency_run, LATENCY_ROUNDS, folder, store)


def _record(benchmark: Any, values: list[float]) -> None:
    """Give ``benchmark`` the rounds measured by the fixture, as if it had timed them
    (pytest-benchmark's own ``pedantic`` does the same with the times it measures)."""
    benchmark._mode = "rounds measured interleaved by benches/test_proxy.py"
    stats = benchmark._make_stats(1)
    for value in values:
        stats.update(value)


def _role(benchmark: Any, group: str, role: str) -> None:
    benchmark.group = group
    benchmark.extra_info["role"] = role
    if role in SUBJECTS and role != "kquota":
        benchmark.extra_info["subject"] = True


@pytest.mark.parametrize("role", ROLES)
def test_produce_throughput(
    benchmark: Any, throughput: dict[str, list[Produced]], role: str
) -> None:
    _role(benchmark, "proxy_produce_1kib", role)
    benchmark.extra_info["calls"] = MESSAGES
    seconds = [r.seconds for r in throughput[role]]
    volume = MESSAGES * len(MESSAGE)
    benchmark.extra_info["mb_per_s"] = [round(volume / s / 1e6, 1) for s in seconds]
    benchmark.extra_info["median_mb_per_s"] = round(volume / statistics.median(seconds) / 1e6, 1)
    benchmark.extra_info["produce_requests"] = [r.requests for r in throughput[role]]
    if role in SUBJECTS:  # round by round: a baseline's time / this role's, in the same round
        benchmark.extra_info["median_round_ratios"] = {
            other: round(
                statistics.median(
                    b.seconds / s for b, s in zip(throughput[other], seconds, strict=True)
                ),
                3,
            )
            for other in ROLES
            if other != role
        }
    _record(benchmark, seconds)


@pytest.mark.parametrize("role", ROLES)
def test_produce_latency(benchmark: Any, latency: dict[str, list[Latencies]], role: str) -> None:
    _role(benchmark, "proxy_produce_latency_p99", role)
    rounds = [r.latencies for r in latency[role]]
    every = [x for r in rounds for x in r]
    direct = [x for r in latency["direct"] for x in r.latencies]
    benchmark.extra_info["p50_ms"] = round(statistics.median(every) * 1e3, 3)
    benchmark.extra_info["p99_ms"] = round(p99(every) * 1e3, 3)
    benchmark.extra_info["p99_added_ms"] = round((p99(every) - p99(direct)) * 1e3, 3)
    added = [p99(r) - p99(d.latencies) for r, d in zip(rounds, latency["direct"], strict=True)]
    benchmark.extra_info["median_round_p99_added_ms"] = round(statistics.median(added) * 1e3, 3)
    _record(benchmark, [p99(r) for r in rounds])


def _cpu_info(benchmark: Any, runs: list[Produced] | list[Latencies], messages: int) -> None:
    benchmark.extra_info["unit"] = "ns/request"
    benchmark.extra_info["produce_requests"] = [r.requests for r in runs]
    spent = [r.cpu for r in runs if r.cpu is not None]
    benchmark.extra_info["cpu_ms"] = [round(c.total * 1e3, 2) for c in spent]
    benchmark.extra_info["cpu_us_per_request"] = [
        round(r.cpu_ns_per_request() / 1e3, 2) for r in runs
    ]
    benchmark.extra_info["median_cpu_us_per_message"] = round(
        statistics.median(c.total * 1e6 / messages for c in spent), 3
    )
    # stime counts in ticks of 10 ms: a share over every round
    benchmark.extra_info["system_share"] = round(
        sum(c.system for c in spent) / sum(c.total for c in spent), 2
    )
    _record(benchmark, [r.cpu_ns_per_request() for r in runs])


@pytest.mark.parametrize("role", PROXIES)
def test_cpu_per_request(benchmark: Any, throughput: dict[str, list[Produced]], role: str) -> None:
    _role(benchmark, "proxy_cpu_per_request", role)
    _cpu_info(benchmark, throughput[role], MESSAGES)


@pytest.mark.parametrize("role", PROXIES)
def test_cpu_per_request_one_message(
    benchmark: Any, latency: dict[str, list[Latencies]], role: str
) -> None:
    _role(benchmark, "proxy_cpu_per_request_one_message", role)
    _cpu_info(benchmark, latency[role], LATENCY_MESSAGES)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "relay":
        sys.exit("usage: python benches/test_proxy.py relay LISTEN_PORT UPSTREAM_PORT")
    asyncio.run(relay(int(sys.argv[2]), int(sys.argv[3])))
