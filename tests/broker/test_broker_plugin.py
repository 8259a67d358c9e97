"""The request-path plugin (kquota.broker.plugin): Kafka's produce/fetch/request logic,
the maintenance it runs by itself, the conformance vectors replayed through it, bad input,
and the plugin example of the guide (docs/guide/broker-plugin.md)."""

from __future__ import annotations

import asyncio
import bisect
import dataclasses
import functools
import math
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kquota
import paths
import pytest
from broker_support import SimClock, no_thread_left_behind  # noqa: F401 (autouse fixture)
from kquota.broker import QuotaOutcome, QuotaPlugin, ThrottledChannels
from kquota.conformance import Scenario, load_scenario
from kquota.exceptions import ChannelError, InvalidConfigError, InvalidUsageError, InvalidValueError

ROOT = paths.ROOT
VECTORS = ROOT.parent / "shared" / "conformance"
USER = kquota.Entity(user="u")
HANG_S = 30.0  # bounds a wait that would otherwise hang; never a measurement


def plugin_with(
    produce: float | None = None, fetch: float | None = None, request: float | None = None
) -> QuotaPlugin:
    plugin = QuotaPlugin(clock=SimClock())
    for manager, quota in zip(plugin.managers, (produce, fetch, request), strict=True):
        if quota is not None:
            manager.set_quota(USER, quota)
    return plugin


# -- produce ---------------------------------------------------------------------------


def test_produce_throttle_mutes_the_channel_through_the_produce_manager() -> None:
    plugin = plugin_with(produce=100.0, request=1000.0)
    ch = plugin.channels.open()
    # 2000 B over 10 padded seconds: 200 B/s, (200 - 100) / 100 * 10 s.
    outcome = plugin.on_produce("u", "c", 2000, 1000, channel=ch, now_ms=0)
    assert outcome == QuotaOutcome(10_000, False, "produce", 10_000)
    assert outcome.throttled
    assert plugin.channels.muted_until(ch, now_ms=0) == 10_000
    assert plugin.produce.queue_size() == 1 and plugin.request.queue_size() == 0
    assert plugin.produce.throttle_time_avg("u", "c", now_ms=0) == 10_000.0
    assert math.isnan(plugin.request.throttle_time_avg("u", "c", now_ms=0) or 0.0)
    assert plugin.channels.reap(now_ms=10_000) == [ch]


def test_request_throttle_wins_when_larger_and_on_ties() -> None:
    # Request quota 1 %: 5 s of handler time is capped at one window, 1000 ms.
    # Produce: 1100 B over 10 s is 110 B/s against 100, (110 - 100) / 100 * 10 s = 1000 ms.
    plugin = plugin_with(produce=100.0, request=1.0)
    ch = plugin.channels.open()
    tie = plugin.on_produce("u", "c", 1100, 5_000_000_000, channel=ch, now_ms=0)
    assert tie == QuotaOutcome(1000, False, "request", 1000)
    assert plugin.request.queue_size() == 1 and plugin.produce.queue_size() == 0
    assert plugin.request.throttle_time_avg("u", "c", now_ms=0) == 1000.0

    plugin = plugin_with(produce=1e9, request=1.0)
    small_bytes = plugin.on_produce("u", "c", 10, 5_000_000_000, now_ms=0)
    assert small_bytes == QuotaOutcome(1000, False, "request", 1000)

    plugin = plugin_with(produce=100.0, request=1.0)
    big_bytes = plugin.on_produce("u", "c", 3000, 5_000_000_000, now_ms=0)
    assert big_bytes == QuotaOutcome(20_000, False, "produce", 20_000)


def test_acks_0_skips_the_request_quota() -> None:
    plugin = plugin_with(produce=1e9, request=1.0)
    outcome = plugin.on_produce("u", "c", 10, 5_000_000_000, acks=0, now_ms=0)
    assert outcome == QuotaOutcome()
    assert not outcome.throttled
    assert plugin.request.measure("u", "c", now_ms=0) is None  # nothing was recorded
    assert plugin.produce.measure("u", "c", now_ms=0) == 1.0


def test_a_throttle_wrapped_negative_means_not_throttled() -> None:
    # produce_tiny_quota_int_overflow: the second record's throttle wraps to -726389969.
    plugin = QuotaPlugin(clock=SimClock())
    plugin.produce.set_quota(kquota.Entity(user="tiny"), 0.001)
    ch = plugin.channels.open()
    first = plugin.on_produce("tiny", "c", 1, 0, channel=ch, now_ms=2)
    assert first == QuotaOutcome(990_000, False, "produce", 990_002)
    assert plugin.produce.record("tiny", "c", 0.0, now_ms=3) > 0  # still violated ...
    wrapped = plugin.on_produce("tiny", "c", 1_000_000, 0, now_ms=3)
    assert wrapped == QuotaOutcome()  # ... but the wrapped throttle is not applied
    assert wrapped.throttle_time_ms == 0
    assert plugin.produce.queue_size() == 1


# -- fetch -----------------------------------------------------------------------------


def test_throttled_fetch_is_empty_and_its_bytes_are_unrecorded() -> None:
    plugin = plugin_with(fetch=100.0)
    twin = kquota.QuotaManager("fetch")  # the same operations, by hand
    twin.set_quota(USER, 100.0)
    assert plugin.on_fetch("u", "c", 500, 0, now_ms=0) == QuotaOutcome()
    twin.record("u", "c", 500, now_ms=0)
    outcome = plugin.on_fetch("u", "c", 5000, 0, now_ms=100)
    assert outcome.empty_response and outcome.throttled_by == "fetch"
    assert outcome.throttle_time_ms == twin.record("u", "c", 5000, now_ms=100) > 0
    twin.unrecord("u", "c", 5000, now_ms=100)
    assert plugin.fetch.measure("u", "c", now_ms=100) == twin.measure("u", "c", now_ms=100)
    assert plugin.fetch.measure("u", "c", now_ms=100) == pytest.approx(500 / 10.1)


def test_fetch_throttled_by_the_request_quota_is_unrecorded_too() -> None:
    plugin = plugin_with(fetch=1e9, request=1.0)
    ch = plugin.channels.open()
    outcome = plugin.on_fetch("u", "c", 4000, 5_000_000_000, channel=ch, now_ms=0)
    assert outcome == QuotaOutcome(1000, True, "request", 1000)
    assert plugin.fetch.measure("u", "c", now_ms=0) == 0.0
    assert plugin.request.queue_size() == 1 and plugin.fetch.queue_size() == 0


def test_served_fetch_keeps_its_bytes() -> None:
    plugin = plugin_with(fetch=1000.0)
    assert plugin.on_fetch("u", "c", 4000, 0, now_ms=0) == QuotaOutcome()
    assert plugin.fetch.measure("u", "c", now_ms=0) == 400.0


def test_fetch_max_bytes_is_capped_by_the_quota_window() -> None:
    plugin = QuotaPlugin(fetch=kquota.QuotaManager("fetch", num_samples=4), clock=SimClock())
    assert plugin.fetch_max_bytes("u", "c", 52_428_800, now_ms=0) == 52_428_800  # no quotas
    plugin.fetch.set_quota(USER, 1000.0)
    assert plugin.fetch_max_bytes("u", "c", 52_428_800, now_ms=0) == 3000  # 1000 * 3 * 1 s
    assert plugin.fetch_max_bytes("u", "c", 1000, now_ms=0) == 1000
    assert plugin.fetch_max_bytes("other", "c", 52_428_800, now_ms=0) == 52_428_800
    plugin.fetch.set_quota(USER, 1e300)  # Java's saturating int cast
    assert plugin.fetch_max_bytes("u", "c", 2**40, now_ms=0) == 2**31 - 1
    with pytest.raises(InvalidValueError, match=r"invalid requested_max_bytes 1\.5"):
        plugin.fetch_max_bytes("u", "c", 1.5, now_ms=0)  # type: ignore[arg-type]


# -- other requests and the response ---------------------------------------------------


def test_other_requests_use_the_request_quota_only() -> None:
    plugin = plugin_with(produce=1.0, fetch=1.0, request=1.0)
    ch = plugin.channels.open()
    outcome = plugin.on_request("u", "c", 5_000_000_000, channel=ch, now_ms=0)
    assert outcome == QuotaOutcome(1000, False, "request", 1000)
    assert plugin.channels.is_muted(ch, now_ms=999)
    assert plugin.produce.measure("u", "c", now_ms=0) is None
    assert plugin.fetch.measure("u", "c", now_ms=0) is None


def test_network_thread_time_is_recorded_without_a_check() -> None:
    plugin = plugin_with(request=1.0)
    plugin.on_response_sent("u", "c", 5_000_000_000, now_ms=0)
    assert plugin.request.measure("u", "c", now_ms=0) == 50.0  # 500 % of a thread over 10 s
    assert plugin.request.queue_size() == 0
    # It only affects the next request.
    assert plugin.on_request("u", "c", 0, now_ms=0) == QuotaOutcome(1000, False, "request", 1000)


def test_plugin_clock_is_read_once_per_request() -> None:
    reads: list[int] = []

    def clock() -> int:
        reads.append(1000 + 100 * len(reads))  # a clock that moves on every read
        return reads[-1]

    plugin = QuotaPlugin(clock=clock)
    plugin.produce.set_quota(USER, 100.0)
    ch = plugin.channels.open()
    before = len(reads)
    outcome = plugin.on_produce("u", "c", 2000, 0, channel=ch)
    assert len(reads) == before + 1  # maintenance and throttle reuse the request's time
    assert outcome.muted_until_ms == reads[-1] + 10_000  # the time of the request


# -- throttles without a channel, and the maintenance the plugin runs ------------------


def test_a_request_without_a_channel_is_accounted_but_never_queued() -> None:
    plugin = plugin_with(produce=100.0, request=1.0)
    outcome = plugin.on_produce("u", "c", 2000, 1000, now_ms=0)  # no channel
    assert outcome == QuotaOutcome(10_000, False, "produce", 10_000)
    assert plugin.produce.throttle_time_avg("u", "c", now_ms=0) == 10_000.0
    assert [m.queue_size() for m in plugin.managers] == [0, 0, 0]
    assert plugin.channels.queue_size() == 0 and plugin.channels.next_unmute_ms() is None


def test_the_plugin_expires_idle_sensors_of_its_managers_by_itself() -> None:
    """Nobody calls expire_sensors: other clients' requests do it, every 30 s of the clock,
    once a client has been idle for the sensor expiry (Kafka's default, 1 hour)."""
    clock = SimClock()
    plugin = QuotaPlugin(clock=clock)
    for manager in plugin.managers:
        manager.set_quota(kquota.Entity(client_id=kquota.DEFAULT), 1e9)
    plugin.on_produce("", "old", 100, 1000)
    plugin.on_fetch("", "old", 100, 1000)
    assert [len(m.sensor_names()) for m in plugin.managers] == [2, 2, 2]
    for t in range(0, 3_600_000 + 30_001, 30_000):  # a busy client, once every 30 s
        clock.now = t
        plugin.on_request("", "busy", 1000)
        plugin.on_response_sent("", "busy", 500)
        if t == 3_600_000:  # idle for exactly the expiry: not yet (Kafka: strictly longer)
            assert "Produce-:old" in plugin.produce.sensor_names()
    names = [m.sensor_names() for m in plugin.managers]
    assert names == [[], [], ["Request-:busy", "RequestThrottleTime-:busy"]]
    # and the busy client's go too, an hour after its last request
    clock.now += 3_600_000 + 30_000
    plugin.fetch_max_bytes("", "someone", 1000)  # any call does it (this one reads a sensor)
    names = [m.sensor_names() for m in plugin.managers]
    assert names == [[], ["Fetch-:someone", "FetchThrottleTime-:someone"], []]


def test_mutes_end_with_the_next_call_on_a_simulated_clock() -> None:
    clock = SimClock()
    unmuted: list[int] = []
    channels = ThrottledChannels(on_unmute=unmuted.append, clock=clock)
    plugin = QuotaPlugin(channels=channels, clock=clock)
    plugin.produce.set_quota(USER, 100.0)
    ch = channels.open()
    outcome = plugin.on_produce("u", "c", 2000, 0, channel=ch)
    assert outcome.muted_until_ms == 10_000 and plugin.produce.queue_size() == 1
    clock.now = 9_999
    plugin.on_request("someone", "else", 0)
    assert unmuted == [] and channels.is_muted(ch)
    clock.now = 10_000
    plugin.on_request("someone", "else", 0)  # another client's request drains the queue
    assert unmuted == [ch] and plugin.produce.queue_size() == 0
    assert not channels.is_muted(ch)


def test_a_muted_channel_is_unmuted_on_time_in_a_quiet_threaded_service() -> None:
    """Real time, no reaper, no further request: the background thread unmutes."""
    done = threading.Event()
    fired: list[tuple[int, int]] = []

    def on_unmute(channel: int) -> None:
        fired.append((channel, channels.now_ms()))
        done.set()

    channels = ThrottledChannels(on_unmute=on_unmute)
    with channels, QuotaPlugin(channels=channels) as plugin:
        plugin.produce.set_quota(USER, 1_000_000.0)
        ch = channels.open()
        # 10.3 MB at once over a fresh sensor's 10 s window: 3 % over, a 300 ms throttle.
        outcome = plugin.on_produce("u", "c", 10_300_000, 0, channel=ch)
        assert outcome.throttled and outcome.muted_until_ms is not None
        assert done.wait(HANG_S), "the mute never ended"
        assert fired == [(ch, fired[0][1])] and fired[0][1] >= outcome.muted_until_ms
        # The plugin does not stop channels it was given; their owner does.
        plugin.close()
        assert channels.background_thread() is not None
    assert channels.background_thread() is None


def test_close_and_with_stop_the_thread_of_the_plugins_own_channels() -> None:
    plugin = QuotaPlugin()
    plugin.on_request("u", "c", 1000)
    thread = plugin.channels.background_thread()
    assert thread is not None and thread.is_alive()
    plugin.close()
    plugin.close()
    assert not thread.is_alive()
    assert plugin.on_request("u", "c", 1000) == QuotaOutcome()  # still works, inline only
    assert plugin.channels.background_thread() is None

    with QuotaPlugin() as plugin:
        plugin.on_request("u", "c", 1000)
        thread = plugin.channels.background_thread()
        assert thread is not None
    assert not thread.is_alive()
    assert QuotaPlugin(background=False).channels.background is False
    assert QuotaPlugin(clock=SimClock()).channels.background is False


def test_background_with_channels_given_is_rejected() -> None:
    with pytest.raises(InvalidConfigError, match="invalid background True with channels given"):
        QuotaPlugin(channels=ThrottledChannels(clock=SimClock()), background=True)


def test_whole_life_of_a_request_in_asyncio_on_the_real_clock() -> None:
    """Open, check, answer, wait for the unmute, response sent, close: as a service does."""
    answers: list[tuple[int, int | None, int]] = []

    async def connection(plugin: QuotaPlugin, sizes: list[int]) -> None:
        channel = plugin.channels.open()
        try:
            for size in sizes:
                await asyncio.wait_for(plugin.channels.wait_unmuted(channel), HANG_S)
                read_at = plugin.channels.now_ms()
                outcome = plugin.on_produce("u", "c", size, 50_000, channel=channel)
                answers.append((outcome.throttle_time_ms, outcome.muted_until_ms, read_at))
                plugin.on_response_sent("u", "c", 20_000)
        finally:
            plugin.channels.close(channel)

    with QuotaPlugin() as plugin:
        plugin.produce.set_quota(USER, 1_000_000.0)
        # 10.3 MB in a window of at most 11 s is over 1 MB/s whatever the timing.
        asyncio.run(connection(plugin, [5_000_000, 5_300_000, 1000]))
        assert len(plugin.channels) == 0
    assert answers[0][0] == 0 and answers[1][0] > 0
    muted_until = answers[1][1]
    assert muted_until is not None and answers[2][2] >= muted_until  # not read while muted


# -- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["0", [0], 1j])
def test_bad_now_ms_is_a_type_error_naming_it_and_records_nothing(bad: Any) -> None:
    plugin = plugin_with(produce=100.0)
    with pytest.raises(TypeError, match=f"argument now_ms: .*{re.escape(repr(bad))}"):
        plugin.on_produce("u", "c", 10, 10, now_ms=bad)
    assert plugin.produce.sensor_count() == 0


def test_unknown_channel_is_rejected_before_anything_is_recorded() -> None:
    plugin = plugin_with(produce=100.0, fetch=100.0, request=1.0)
    with pytest.raises(ChannelError, match="unknown channel 99"):
        plugin.on_produce("u", "c", 5000, 10, channel=99, now_ms=0)
    with pytest.raises(ChannelError, match="unknown channel 99"):
        plugin.on_fetch("u", "c", 5000, 10, channel=99, now_ms=0)
    with pytest.raises(ChannelError, match="unknown channel 99"):
        plugin.on_request("u", "c", 10, channel=99, now_ms=0)
    for manager in plugin.managers:
        assert manager.sensor_count() == 0


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, "10", None, True])
def test_bad_usage_is_rejected_naming_it_and_changes_nothing(bad: Any) -> None:
    plugin = plugin_with(produce=100.0, fetch=100.0, request=1.0)
    ch = plugin.channels.open()
    calls: list[tuple[str, Callable[[], object]]] = [
        ("size_bytes", lambda: plugin.on_produce("u", "c", bad, 10, channel=ch, now_ms=0)),
        ("thread_time_ns", lambda: plugin.on_produce("u", "c", 10, bad, channel=ch, now_ms=0)),
        ("response_bytes", lambda: plugin.on_fetch("u", "c", bad, 10, channel=ch, now_ms=0)),
        ("thread_time_ns", lambda: plugin.on_fetch("u", "c", 10, bad, channel=ch, now_ms=0)),
        ("thread_time_ns", lambda: plugin.on_request("u", "c", bad, channel=ch, now_ms=0)),
    ]
    for name, call in calls:
        with pytest.raises(InvalidUsageError, match=f"{name}={re.escape(repr(bad))}"):
            call()
    for manager in plugin.managers:
        assert manager.sensor_count() == 0
    assert not plugin.channels.is_muted(ch, now_ms=0)


def test_managers_of_the_wrong_type_are_rejected() -> None:
    with pytest.raises(InvalidConfigError, match=r"invalid produce manager.*'fetch'"):
        QuotaPlugin(produce=kquota.QuotaManager("fetch"))


def test_outcome_is_frozen() -> None:
    outcome = QuotaOutcome(5, False, "produce", 10)
    with pytest.raises(dataclasses.FrozenInstanceError):
        outcome.throttle_time_ms = 0  # type: ignore[misc]


# -- the conformance vectors, replayed through the plugin ------------------------------

PLUGIN_OPS = {
    "record",
    "record_no_throttle",
    "set_quota",
    "remove_quota",
    "measure",
    "metrics",
    "max_value_in_quota_window",
    "expire_sensors",
}


@functools.cache
def plugin_scenarios() -> list[Path]:
    paths = []
    for path in sorted(VECTORS.glob("*.json")):
        scenario = load_scenario(path)
        if scenario.quota_type != "sensor" and {s.op for s in scenario.steps} <= PLUGIN_OPS:
            paths.append(path)
    return paths


def same(expected: Any, actual: Any) -> bool:
    if expected == "NaN":
        return isinstance(actual, float) and math.isnan(actual)
    if isinstance(expected, float) and isinstance(actual, float):
        return math.isclose(expected, actual, rel_tol=1e-9)
    return bool(expected == actual)


def replay_through_plugin(scenario: Scenario) -> int:
    """Drive the scenario through QuotaPlugin as a broker would; return the steps checked."""
    managers = {
        t: kquota.QuotaManager(t, num_samples=scenario.num_samples, window_ms=scenario.window_ms)
        for t in ("produce", "fetch", "request")
    }
    clock = SimClock()
    plugin = QuotaPlugin(managers["produce"], managers["fetch"], managers["request"], clock=clock)
    manager = managers[scenario.quota_type]
    for q in scenario.quotas:
        manager.set_quota(kquota.Entity(q.user, q.client_id), q.value)
    channels: dict[tuple[str, str], int] = {}  # one connection per client, as a broker has
    checked = 0
    for step in scenario.steps:
        t, user, client = step.t_ms, step.user or "", step.client_id or ""
        clock.now = t
        actual: dict[str, Any] = {}
        if step.op == "record":
            value = step.value or 0.0
            ch = channels.get((user, client)) or channels.setdefault(
                (user, client), plugin.channels.open()
            )
            if scenario.quota_type == "produce":
                outcome = plugin.on_produce(user, client, value, 0, channel=ch, now_ms=t)
            elif scenario.quota_type == "fetch":
                outcome = plugin.on_fetch(user, client, value, 0, channel=ch, now_ms=t)
                assert outcome.empty_response == outcome.throttled
            else:
                outcome = plugin.on_request(user, client, int(value), channel=ch, now_ms=t)
            actual["throttle_ms"] = outcome.throttle_time_ms
        elif step.op == "record_no_throttle":
            plugin.on_response_sent(user, client, int(step.value or 0), now_ms=t)
        elif step.op == "set_quota":
            manager.set_quota(kquota.Entity(step.user, step.client_id), step.value or 0.0)
        elif step.op == "remove_quota":
            manager.remove_quota(kquota.Entity(step.user, step.client_id))
        elif step.op == "max_value_in_quota_window":
            actual["as_int"] = plugin.fetch_max_bytes(user, client, 2**31 - 1, now_ms=t)
        elif step.op == "expire_sensors":
            actual["removed"] = manager.expire_sensors(now_ms=t)
        if step.op == "metrics":
            plugin.channels.maintain(now_ms=t)  # a reaper may have run since the last call
            actual["throttle_time_avg"] = manager.throttle_time_avg(user, client, now_ms=t)
            actual["queue_size"] = manager.queue_size()
        if step.op in ("record", "measure", "metrics"):
            actual["rate"] = manager.measure(user, client, now_ms=t)
            actual["quota"] = manager.bound(user, client)
        for field, expected in (step.expect or {}).items():
            if field == "throttle_ms":
                expected = max(expected, 0)  # the response carries 0 for a wrapped throttle
            if field in actual:
                assert same(expected, actual[field]), (
                    f"{scenario.name} step {step.index} ({step.op} at {t}):"
                    f" {field} expected {expected!r}, got {actual[field]!r}"
                )
                checked += 1
    return checked


@pytest.mark.parametrize("path", plugin_scenarios(), ids=lambda p: p.stem)
def test_conformance_vectors_through_the_plugin(path: Path) -> None:
    assert replay_through_plugin(load_scenario(path)) > 0


def test_the_vectors_cover_every_quota_type() -> None:
    types = {load_scenario(p).quota_type for p in plugin_scenarios()}
    assert types == {"produce", "fetch", "request"}


# -- how a greedy client fares, on a simulated clock -----------------------------------


def greedy_client(num_samples: int, quota: float, size: int, seconds: int) -> list[int]:
    """A client that sends ``size`` bytes whenever its channel is not muted, 100x its quota."""
    plugin = QuotaPlugin(
        produce=kquota.QuotaManager("produce", num_samples=num_samples), clock=SimClock()
    )
    plugin.produce.set_quota(USER, quota)
    ch = plugin.channels.open()
    gap = size / (100 * quota) * 1000
    t, sent = 0.0, []
    while t < seconds * 1000:
        now = int(t)
        plugin.channels.reap(now_ms=now)
        if plugin.channels.is_muted(ch, now_ms=now):
            t = plugin.channels.muted_until(ch, now_ms=now) or t
            continue
        plugin.on_produce("u", "c", size, 0, channel=ch, now_ms=now)
        sent.append(now)
        t += gap
    return sent


def rate_over(sent: list[int], start_ms: int, size: int, quota: float) -> float:
    count = bisect.bisect_left(sent, start_ms + 10_000) - bisect.bisect_left(sent, start_ms)
    return count * size / 10 / quota


def test_greedy_client_with_two_windows_gets_its_quota_over_10_s() -> None:
    sent = greedy_client(num_samples=2, quota=200_000.0, size=2000, seconds=60)
    assert 0.99 <= rate_over(sent, 0, 2000, 200_000.0) <= 1.01
    # After the start-up bursts settle, every 10 s window is within 1 %.
    for start in range(15_000, 50_001, 500):
        assert 0.99 <= rate_over(sent, start, 2000, 200_000.0) <= 1.01


def test_greedy_client_with_kafka_default_windows_bursts() -> None:
    """With 11 windows the first 10 s let 10 s worth of quota through at once, and later
    a sample leaving the window frees a burst: correct on average, not over every 10 s."""
    sent = greedy_client(num_samples=11, quota=200_000.0, size=2000, seconds=120)
    assert rate_over(sent, 0, 2000, 200_000.0) > 1.1
    rates = [rate_over(sent, s, 2000, 200_000.0) for s in range(20_000, 100_001, 500)]
    assert min(rates) < 0.5 and max(rates) > 1.09
    assert len(sent) * 2000 / 120 / 200_000.0 == pytest.approx(1.0, abs=0.02)


# -- the plugin's example in the guide (docs/guide/broker-plugin.md) --------------------


def readme_plugin_snippet() -> str:
    text = (ROOT / "docs" / "guide" / "broker-plugin.md").read_text()
    section = text.split("## On every request: `QuotaPlugin`", 1)[1]
    section = section.split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "no python block in the guide's plugin section"
    return match.group(1)


def test_readme_plugin_runs_and_is_under_20_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """The whole life of a request on the real clock, with metrics served. The sizes make
    the first two answers timing-proof (see test_core's first-screen test)."""
    code = readme_plugin_snippet()
    assert len(code.strip().splitlines()) < 20
    namespace: dict[str, Any] = {"__name__": "readme_plugin"}
    exec(compile(code, "broker-plugin.md", "exec"), namespace)
    out = capsys.readouterr().out.splitlines()
    answers = [int(line.split()[-1]) for line in out if line.startswith("alice throttle_time_ms")]
    assert len(answers) == 3 and answers[0] == 0 and answers[1] > 0
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", out[-1])
    plugin = namespace["plugin"]
    assert len(plugin.channels) == 0 and plugin.channels.background_thread() is None
    assert plugin.produce.throttle_time_avg("alice", "app-1") is not None


def test_package_docstring_example() -> None:
    import doctest

    import kquota.broker

    result = doctest.testmod(kquota.broker)
    assert result.attempted > 0 and result.failed == 0
