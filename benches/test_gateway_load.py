"""The gateway under many connections: memory per idle connection, CPU per request and p99
latency with many clients active, against a bare relay and the broker itself.

Three ways to the same Tansu 0.6.0 broker (a fresh one each time, in memory, on
127.0.0.1), each run in turn, the order rotated round by round:

* ``direct`` (baseline): the clients talk to Tansu itself (latency only: nothing in front);
* ``rust_relay`` (baseline): ``kquota-relay``, tokio copying bytes both ways, the floor a
  process in front of the broker is held to;
* ``gateway`` (subject): ``kquota proxy --bootstrap`` in front of Tansu as a cluster of one,
  its own process, as a user runs it; the clients connect to its bootstrap port, so every
  Metadata response has its broker address rewritten.

A round opens ``IDLE`` connections, each answered one Metadata request (so that its
connection to the broker is open too) and then silent, and reads the front's resident
memory (``VmRSS``) before and after: the difference per connection is
``gateway_memory_per_idle_connection``, in KiB. With those still open, ``ACTIVE`` more
connections each send Metadata requests (v12, no topics: the broker list) one after the
other for ``ACTIVE_S`` seconds, from one asyncio event loop in this process; every
request's time from its write to its answer read is kept. ``gateway_load_latency_p99`` is a
round's p99 of those, in ms; ``gateway_load_cpu_per_request`` is the front's CPU time
(user and system, every thread) over the active phase per request answered, in µs.

A process here may hold at most 20,000 file descriptors (the hard limit, which it cannot
raise), and a connection through the gateway holds two of them there (the client's and the
broker's): ``IDLE`` + ``ACTIVE`` stays under 10,000 (8,000 + 1,000 in a full run; the
figures for 10,000 idle and 1,000 active connections are the per-connection values times
those counts). The clients share the machine's two cores with the broker and the front,
so the latencies are those of a loaded machine, alike for every role.
"""

from __future__ import annotations

import asyncio
import statistics
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from quick import pick  # benches/quick.py, next to this file
from test_proxy import Cpu, Front, _record, _role, cpu_time, interleaved, p99, store

__all__ = ["store"]  # the quota store fixture of the proxy bench, shared

ROLES = ("direct", "rust_relay", "gateway")
PROXIES = tuple(role for role in ROLES if role != "direct")
IDLE = pick(8_000, 2_000)
ACTIVE = pick(1_000, 200)
ACTIVE_S = pick(15.0, 5.0)
ROUNDS = pick(3, 1)
OPEN_AT_ONCE = 200
"""Connections opened at once while the idle ones are made (the accept backlog is 4096)."""


def _metadata_request(correlation_id: int) -> bytes:
    from kafka_wire import encode_request
    from kio.schema.metadata.v12.request import MetadataRequest

    body = MetadataRequest(topics=(), include_topic_authorized_operations=False)
    return encode_request(body, correlation_id, "load")


async def _exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes
) -> None:
    writer.write(request)
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    await reader.readexactly(size)


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    await _exchange(reader, writer, _metadata_request(1))
    return reader, writer


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


@dataclass(frozen=True)
class Round:
    """What one round measured for one role."""

    idle_kib_per_connection: float | None
    latencies_s: list[float]
    cpu: Cpu | None

    @property
    def requests(self) -> int:
        return len(self.latencies_s)

    def cpu_us_per_request(self) -> float:
        assert self.cpu is not None and self.requests > 0
        return self.cpu.total * 1e6 / self.requests


async def _load(front: Front) -> Round:
    port = int(front.bootstrap.rsplit(":", 1)[1])
    before = rss_kib(front.pid) if front.pid is not None else None
    idle: list[asyncio.StreamWriter] = []
    for start in range(0, IDLE, OPEN_AT_ONCE):
        batch = await asyncio.gather(
            *(_connect(port) for _ in range(min(OPEN_AT_ONCE, IDLE - start)))
        )
        idle += [writer for _, writer in batch]
    await asyncio.sleep(1)  # the front's allocator settles
    per_connection = None
    if front.pid is not None and before is not None:
        per_connection = (rss_kib(front.pid) - before) / IDLE
    connections = await asyncio.gather(*(_connect(port) for _ in range(ACTIVE)))
    latencies: list[float] = []
    cpu_before = cpu_time(front.pid) if front.pid is not None else None
    deadline = time.perf_counter() + ACTIVE_S

    async def active(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        correlation_id = 2
        while time.perf_counter() < deadline:
            request = _metadata_request(correlation_id)
            sent = time.perf_counter()
            await _exchange(reader, writer, request)
            latencies.append(time.perf_counter() - sent)
            correlation_id += 1

    await asyncio.gather(*(active(r, w) for r, w in connections))
    cpu = None
    if front.pid is not None and cpu_before is not None:
        cpu = cpu_time(front.pid) - cpu_before
    for writer in [*idle, *(w for _, w in connections)]:
        writer.close()
    return Round(per_connection, latencies, cpu)


def load_round(front: Front) -> Round:
    return asyncio.run(_load(front))


@pytest.fixture(scope="module")
def rounds(tmp_path_factory: pytest.TempPathFactory, store: Path) -> dict[str, list[Round]]:
    import resource

    limit, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if limit < 2 * (IDLE + ACTIVE) + 500:  # two in the gateway for each connection
        raise RuntimeError(
            f"{IDLE} idle + {ACTIVE} active connections need {2 * (IDLE + ACTIVE)} file"
            f" descriptors in the gateway; a process may hold {limit} here"
        )
    folder = tmp_path_factory.mktemp("gateway-load")
    return interleaved(load_round, ROUNDS, folder, store, ROLES)


def _subject(benchmark: Any, group: str, role: str, unit: str) -> None:
    _role(benchmark, group, role)
    benchmark.extra_info["unit"] = unit
    if role == "gateway":
        benchmark.extra_info["subject"] = True


@pytest.mark.parametrize("role", PROXIES)
def test_memory_per_idle_connection(
    benchmark: Any, rounds: dict[str, list[Round]], role: str
) -> None:
    _subject(benchmark, "gateway_memory_per_idle_connection", role, "KiB/connection")
    benchmark.extra_info["idle_connections"] = IDLE
    values = [r.idle_kib_per_connection for r in rounds[role]]
    assert all(v is not None for v in values)
    _record(benchmark, [float(v) for v in values if v is not None])


@pytest.mark.parametrize("role", ROLES)
def test_latency_p99_under_load(benchmark: Any, rounds: dict[str, list[Round]], role: str) -> None:
    _subject(benchmark, "gateway_load_latency_p99", role, "ms")
    benchmark.extra_info["connections"] = {"idle": IDLE, "active": ACTIVE}
    runs = rounds[role]
    every = [s for r in runs for s in r.latencies_s]
    benchmark.extra_info["requests_per_s"] = [round(r.requests / ACTIVE_S) for r in runs]
    benchmark.extra_info["p50_ms"] = round(statistics.median(every) * 1e3, 3)
    benchmark.extra_info["p99_ms"] = round(p99(every) * 1e3, 3)
    _record(benchmark, [p99(r.latencies_s) * 1e3 for r in runs])


@pytest.mark.parametrize("role", PROXIES)
def test_cpu_per_request_under_load(
    benchmark: Any, rounds: dict[str, list[Round]], role: str
) -> None:
    _subject(benchmark, "gateway_load_cpu_per_request", role, "µs/request")
    runs = rounds[role]
    benchmark.extra_info["requests"] = [r.requests for r in runs]
    _record(benchmark, [r.cpu_us_per_request() for r in runs])
