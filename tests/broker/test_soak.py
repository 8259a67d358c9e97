"""A plugin that runs for months stays bounded: a soak on a simulated clock.

10^6 distinct client ids, each connected for about a minute (three requests 20 s apart:
a produce, a fetch and another request, some of them throttled with their channel muted,
some throttled without a channel), arriving one every 16 ms, so four and a half simulated
hours of arrivals; then an hour and a half of quiet. Everything goes through
:class:`~kquota.broker.QuotaPlugin` as a service calls it (open a channel, check the
request, answer, wait for the unmute, response sent, close); nobody calls
``expire_sensors`` or drains the delay queue: the plugin's own maintenance does.

At the end every sensor has expired, the delay queues are empty, no channel is open, and
the process's memory is back near where it started. The workload runs in a fresh
interpreter so that the memory measured is the workload's alone; it prints its numbers as
one JSON line, which the test reads and reports (``pytest -s`` shows them).

Memory is the resident set size (/proc/self/statm) after ``malloc_trim(0)``: glibc keeps
freed heap pages mapped (and reuses them) until asked to return them, so the RSS without
it says how much the allocator cached at the peak, not what the process still holds. Both
are reported.

Run it by hand with ``python tests/broker/test_soak.py [CLIENTS]``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CLIENTS = 1_000_000
ARRIVAL_MS = 16  # a new client every 16 ms: 4 h 27 min of arrivals for 10^6 clients
REQUEST_GAP_MS = 20_000  # each client: requests at +0, +20 s, +40 s, closes at +60 s
STEPS_APART = REQUEST_GAP_MS // ARRIVAL_MS  # a client's steps are this many arrivals apart
EXPIRY_MS = 3_600_000  # Kafka's default sensor expiry: an hour without a record
SAMPLE_EVERY = 2_000  # clients between samples of RSS, sensors and queue sizes
MEMORY_TOLERANCE = 0.10


def rss_bytes() -> int:
    """The resident set size of this process, from /proc/self/statm."""
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class SimClock:
    """A simulated clock: time moves only when the workload says so."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def events(clients: int) -> Iterator[tuple[int, int, int]]:
    """``(time_ms, stage, client)`` in time order: stages 0-2 are requests, 3 the close.

    Arrivals are ARRIVAL_MS apart and a client's steps REQUEST_GAP_MS apart, a whole number
    of arrivals: at each arrival's time one client starts, and the clients that started
    1, 2 and 3 gaps earlier take their next step.
    """
    assert STEPS_APART * ARRIVAL_MS == REQUEST_GAP_MS
    for tick in range(clients + 3 * STEPS_APART):
        t = tick * ARRIVAL_MS
        for stage in (3, 2, 1, 0):  # leaving first, arriving last
            k = tick - stage * STEPS_APART
            if 0 <= k < clients:
                yield t, stage, k


def malloc_trim() -> None:
    """Have glibc return the free pages of its heaps to the system."""
    ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim(0)


def soak(clients: int) -> dict[str, Any]:
    """The workload, then the memory once its plugin is dropped; returns the numbers."""
    started = time.perf_counter()
    numbers = workload(clients)
    # With the plugin gone: what it held was its own, not leaked elsewhere.
    gc.collect()
    malloc_trim()
    numbers["dropped_rss_trimmed"] = rss_bytes()
    numbers["runtime_s"] = round(time.perf_counter() - started, 1)
    return numbers


def workload(clients: int) -> dict[str, Any]:
    """10^6 clients through one plugin; returns the numbers."""
    import kquota
    from kquota.broker import QuotaPlugin

    started = time.perf_counter()
    clock = SimClock()
    plugin = QuotaPlugin(clock=clock)  # a simulated clock: no background thread
    every_client = kquota.Entity(client_id=kquota.DEFAULT)
    plugin.produce.set_quota(every_client, 10_000.0)  # bytes/s
    plugin.fetch.set_quota(every_client, 20_000.0)
    plugin.request.set_quota(every_client, 5.0)  # percent of a thread
    channels = plugin.channels
    gc.collect()
    start_rss = rss_bytes()

    open_channels: dict[int, int] = {}  # client -> channel
    muted_until: dict[int, int] = {}  # client -> end of its channel's mute
    peak = {"rss": start_rss, "sensors": 0, "queue": 0, "channels": 0}
    counts = {"requests": 0, "throttled": 0, "throttled_no_channel": 0, "empty_fetches": 0}
    last_ms = 0

    def sample() -> None:
        peak["rss"] = max(peak["rss"], rss_bytes())
        peak["sensors"] = max(peak["sensors"], sum(m.sensor_count() for m in plugin.managers))
        peak["queue"] = max(peak["queue"], channels.queue_size())
        peak["channels"] = max(peak["channels"], len(channels))

    for t, stage, k in events(clients):
        clock.now = last_ms = t
        client = f"client-{k}"
        kind = k % 10  # 0: throttled produce; 3: throttled fetch; 5: throttled, no channel
        if stage == 0:
            open_channels[k] = channels.open()  # the client connects
            if k % SAMPLE_EVERY == 0:
                sample()
        elif stage == 3:
            channels.close(open_channels.pop(k))  # and leaves
            muted_until.pop(k, None)
            continue
        channel = None if kind == 5 else open_channels[k]
        # KIP-219: the service reads nothing of a muted channel before its mute ends.
        assert t >= muted_until.get(k, t), f"{client} read while muted"
        if stage == 0:
            size = 150_000 if kind in (0, 5) else 1_000 + k % 997
            outcome = plugin.on_produce("", client, size, 40_000, channel=channel)
        elif stage == 1:
            size = 400_000 if kind == 3 else 2_000 + k % 991
            outcome = plugin.on_fetch("", client, size, 60_000, channel=channel)
            counts["empty_fetches"] += outcome.empty_response
        else:
            outcome = plugin.on_request("", client, 30_000, channel=channel)
        counts["requests"] += 1
        if outcome.throttled:  # answered at once with outcome.throttle_time_ms
            counts["throttled"] += 1
            if channel is None:
                counts["throttled_no_channel"] += 1
            elif outcome.muted_until_ms is not None:
                muted_until[k] = outcome.muted_until_ms
        plugin.on_response_sent("", client, 10_000)
    sample()
    workload_s = time.perf_counter() - started

    # Quiet: nothing but the maintenance, once an hour and a half has passed. A new
    # connection is a call like any other (and creates no sensor).
    clock.now = last_ms + EXPIRY_MS + 1_800_000
    channels.close(channels.open())
    gc.collect()
    end_rss = rss_bytes()
    # glibc keeps freed heap pages mapped until asked to hand them back (they are reused
    # for the next allocations); what RSS is left after that is what the process holds.
    malloc_trim()
    end_rss_trimmed = rss_bytes()
    return {
        "clients": clients,
        "simulated_hours": round(clock.now / 3_600_000, 2),
        **counts,
        "start_rss": start_rss,
        "peak_rss": peak["rss"],
        "end_rss": end_rss,
        "end_rss_trimmed": end_rss_trimmed,
        "peak_sensors": peak["sensors"],
        "peak_queue": peak["queue"],
        "peak_open_channels": peak["channels"],
        "end_sensor_names": sum(len(m.sensor_names()) for m in plugin.managers),
        "end_queue": channels.queue_size(),
        "end_open_channels": len(channels),
        "background_thread": channels.background_thread() is not None,
        "workload_s": round(workload_s, 1),
    }


@pytest.fixture(scope="module")
def numbers() -> dict[str, Any]:
    """The soak's numbers, from a fresh interpreter (only its memory is measured)."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    result = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), str(CLIENTS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=1800,  # bounds a hang only
        check=False,
    )
    assert result.returncode == 0, result.stderr
    got: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    mib = 1 << 20
    print(
        f"\nsoak: {got['clients']} clients, {got['requests']} requests"
        f" ({got['throttled']} throttled, {got['throttled_no_channel']} without a channel,"
        f" {got['empty_fetches']} empty fetches) over {got['simulated_hours']} simulated h;"
        f" RSS start {got['start_rss'] / mib:.1f} MiB, peak {got['peak_rss'] / mib:.1f} MiB,"
        f" end {got['end_rss_trimmed'] / mib:.1f} MiB after malloc_trim"
        f" ({got['end_rss'] / mib:.1f} MiB before;"
        f" {got['dropped_rss_trimmed'] / mib:.1f} MiB once the plugin is dropped);"
        f" peak sensors {got['peak_sensors']}, peak queue {got['peak_queue']},"
        f" peak open channels {got['peak_open_channels']}; {got['runtime_s']} s"
    )
    return got


@pytest.mark.slow
def test_soak_everything_expires_and_drains(numbers: dict[str, Any]) -> None:
    assert numbers["clients"] == CLIENTS
    assert numbers["requests"] == 3 * CLIENTS
    assert numbers["throttled"] > CLIENTS // 10 and numbers["throttled_no_channel"] > 0
    assert numbers["empty_fetches"] > 0
    # At its peak the plugin held every client of the last hour or so, and queued mutes.
    assert numbers["peak_sensors"] > EXPIRY_MS // ARRIVAL_MS
    assert numbers["peak_queue"] > 0 and numbers["peak_open_channels"] > 0
    # And then nothing: no sensor, no queued mute, no open channel, no thread.
    assert numbers["end_sensor_names"] == 0
    assert numbers["end_queue"] == 0
    assert numbers["end_open_channels"] == 0
    assert not numbers["background_thread"]


@pytest.mark.slow
def test_soak_memory_returns_to_its_start(numbers: dict[str, Any]) -> None:
    """Once every sensor has expired the RSS is back within ``MEMORY_TOLERANCE`` of the
    start, although the peak holds hundreds of thousands of live quota sensors (each with
    its throttle-time sensor): a map's table never shrinks by itself, so the core rebuilds
    its maps right-sized after mass expiry; without that they would keep their peak
    capacity, far above the tolerance."""
    start, end = numbers["start_rss"], numbers["end_rss_trimmed"]
    assert numbers["peak_rss"] > start
    assert end <= start * (1 + MEMORY_TOLERANCE), (
        f"RSS {start} -> {end} bytes after malloc_trim (peak {numbers['peak_rss']},"
        f" {numbers['end_rss']} before malloc_trim)"
    )


if __name__ == "__main__":
    print(json.dumps(soak(int(sys.argv[1]) if len(sys.argv) > 1 else CLIENTS)))
