"""KIP-219 throttled channels (kquota.broker.channels): mutes, the core's delay queue,
asyncio waits, reapers and bad input."""

from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
import time

import kquota
import numpy as np
import pytest
from kquota.broker import MAX_THROTTLE_MS, NO_CHANNEL, ThrottledChannels
from kquota.exceptions import ChannelError, InvalidValueError


def manager() -> kquota.QuotaManager:
    m = kquota.QuotaManager("produce")
    m.set_quota(kquota.Entity(user="u"), 100.0)
    return m


def test_throttle_mutes_until_the_end_and_reap_unmutes_with_callback() -> None:
    m = manager()
    unmuted: list[int] = []
    channels = ThrottledChannels([m], on_unmute=unmuted.append)
    ch = channels.open()
    assert ch != NO_CHANNEL and channels.is_open(ch) and len(channels) == 1
    assert not channels.is_muted(ch, now_ms=0)

    assert channels.throttle(ch, 250, manager=m, user="u", client_id="c", now_ms=1000) == 1250
    assert channels.is_muted(ch, now_ms=1000)
    assert channels.is_muted(ch, now_ms=1249)
    assert channels.muted_until(ch, now_ms=1100) == 1250
    assert not channels.is_muted(ch, now_ms=1250)  # the clock decides, before any reap
    # The throttle went through the core: throttle-time sensor and delay queue.
    assert m.queue_size() == 1 and channels.queue_size() == 1
    assert channels.next_unmute_ms() == 1250
    assert m.throttle_time_avg("u", "c", now_ms=1000) == 250.0

    assert channels.reap(now_ms=1249) == []
    assert unmuted == []
    assert channels.reap(now_ms=1250) == [ch]
    assert unmuted == [ch]
    assert m.queue_size() == 0 and channels.next_unmute_ms() is None
    assert channels.muted_until(ch, now_ms=0) is None  # unmuted for good after the reap


def test_muting_twice_keeps_the_later_end() -> None:
    m = manager()
    unmuted: list[int] = []
    channels = ThrottledChannels([m], on_unmute=unmuted.append)
    ch = channels.open()
    assert channels.throttle(ch, 500, manager=m, user="u", client_id="c", now_ms=0) == 500
    # A shorter throttle later does not shorten the mute.
    assert channels.throttle(ch, 100, manager=m, user="u", client_id="c", now_ms=10) == 500
    assert channels.muted_until(ch, now_ms=200) == 500
    assert m.queue_size() == 2  # both throttles were accounted, as in Kafka
    assert channels.reap(now_ms=110) == []  # the earlier entry leaves the queue only
    assert m.queue_size() == 1 and channels.is_muted(ch, now_ms=110)
    # A longer one moves the end later.
    assert channels.throttle(ch, 900, manager=m, user="u", client_id="c", now_ms=200) == 1100
    assert channels.reap(now_ms=500) == []
    assert channels.is_muted(ch, now_ms=500)
    assert channels.reap(now_ms=1100) == [ch]
    assert unmuted == [ch]


@pytest.mark.parametrize(
    "bad",
    [-1, 0, math.nan, 1.5, "10", True, None, MAX_THROTTLE_MS + 1, -(2**70), math.inf],
)
def test_bad_throttle_is_rejected_naming_it_and_changes_nothing(bad: object) -> None:
    m = manager()
    channels = ThrottledChannels([m])
    ch = channels.open()
    with pytest.raises(ChannelError, match=f"invalid throttle_ms {re.escape(repr(bad))}:"):
        channels.throttle(ch, bad, manager=m, user="u", client_id="c", now_ms=0)  # type: ignore[arg-type]
    assert issubclass(ChannelError, InvalidValueError)
    assert not channels.is_muted(ch, now_ms=0)
    assert m.queue_size() == 0
    assert m.throttle_time_avg("u", "c", now_ms=0) is None


def test_numpy_ints_and_the_largest_throttle_are_accepted() -> None:
    m = manager()
    channels = ThrottledChannels([m])
    ch = channels.open()
    assert channels.throttle(ch, np.int64(7), manager=m, user="u", client_id="c", now_ms=0) == 7  # type: ignore[arg-type]
    end = channels.throttle(ch, MAX_THROTTLE_MS, manager=m, user="u", client_id="c", now_ms=0)
    assert end == MAX_THROTTLE_MS


@pytest.mark.parametrize("channel", [12345, NO_CHANNEL, -1, "a", None])
def test_unknown_channel_is_a_clear_error_everywhere(channel: object) -> None:
    m = manager()
    channels = ThrottledChannels([m])
    match = f"unknown channel {channel!r}: expected an id returned by open"
    with pytest.raises(ChannelError, match=match):
        channels.is_muted(channel, now_ms=0)  # type: ignore[arg-type]
    with pytest.raises(ChannelError, match=match):
        channels.muted_until(channel, now_ms=0)  # type: ignore[arg-type]
    with pytest.raises(ChannelError, match=match):
        channels.throttle(channel, 10, manager=m, user="u", client_id="c", now_ms=0)  # type: ignore[arg-type]
    with pytest.raises(ChannelError, match=match):
        channels.close(channel)  # type: ignore[arg-type]

    async def wait() -> None:
        await asyncio.wait_for(channels.wait_unmuted(channel), timeout=2)  # type: ignore[arg-type]

    with pytest.raises(ChannelError, match=match):
        asyncio.run(wait())
    assert m.queue_size() == 0


def test_closed_channel_is_unknown_and_its_queue_entries_are_dropped() -> None:
    m = manager()
    unmuted: list[int] = []
    channels = ThrottledChannels([m], on_unmute=unmuted.append)
    ch = channels.open()
    channels.throttle(ch, 100, manager=m, user="u", client_id="c", now_ms=0)
    channels.close(ch)
    assert not channels.is_open(ch) and len(channels) == 0
    with pytest.raises(ChannelError, match="unknown channel"):
        channels.close(ch)
    assert m.queue_size() == 1
    assert channels.reap(now_ms=100) == []
    assert m.queue_size() == 0 and unmuted == []
    assert channels.open() != ch  # ids are not reused


def test_no_channel_entries_count_in_the_queue_and_mute_nothing() -> None:
    m = manager()
    channels = ThrottledChannels([m])
    ch = channels.open()
    assert m.throttle("u", "c", 50, now_ms=0, channel=NO_CHANNEL) == 50
    assert channels.queue_size() == 1
    assert not channels.is_muted(ch, now_ms=0)
    assert channels.reap(now_ms=50) == []
    assert channels.queue_size() == 0


def test_managers_are_added_once_and_by_throttle() -> None:
    produce, fetch = manager(), kquota.QuotaManager("fetch")
    channels = ThrottledChannels([produce, produce])
    assert channels.managers == (produce,)
    ch = channels.open()
    channels.throttle(ch, 10, manager=fetch, user="u", client_id="c", now_ms=0)
    assert list(channels.managers) == [produce, fetch]
    assert channels.reap(now_ms=10) == [ch]


def test_wait_unmuted_returns_at_the_end_of_the_mute() -> None:
    m = manager()
    unmuted: list[int] = []
    channels = ThrottledChannels([m], on_unmute=unmuted.append)
    ch = channels.open()

    async def run() -> float:
        await channels.wait_unmuted(ch)  # not muted: at once
        channels.throttle(ch, 80, manager=m, user="u", client_id="c")
        start = time.monotonic()
        await asyncio.wait_for(channels.wait_unmuted(ch), timeout=5)
        return time.monotonic() - start

    waited = asyncio.run(run())
    assert 0.075 <= waited < 2.0
    assert not channels.is_muted(ch)
    assert unmuted == [ch]  # the waiter reaped the queue itself
    assert m.queue_size() == 0


def test_wait_unmuted_follows_a_mute_extended_meanwhile() -> None:
    m = manager()
    channels = ThrottledChannels([m])
    ch = channels.open()

    async def run() -> float:
        channels.throttle(ch, 50, manager=m, user="u", client_id="c")
        start = time.monotonic()
        waiter = asyncio.create_task(channels.wait_unmuted(ch))
        await asyncio.sleep(0.02)
        channels.throttle(ch, 150, manager=m, user="u", client_id="c")  # ends ~170 ms
        await asyncio.wait_for(waiter, timeout=5)
        return time.monotonic() - start

    waited = asyncio.run(run())
    assert 0.16 <= waited < 2.0


def test_close_wakes_a_waiter_with_an_error_at_once() -> None:
    m = manager()
    channels = ThrottledChannels([m])
    ch = channels.open()

    async def run() -> float:
        channels.throttle(ch, 60_000, manager=m, user="u", client_id="c")
        waiter = asyncio.create_task(channels.wait_unmuted(ch))
        await asyncio.sleep(0.01)
        start = time.monotonic()
        channels.close(ch)
        with pytest.raises(ChannelError, match=f"unknown channel {ch}"):
            await asyncio.wait_for(waiter, timeout=5)
        return time.monotonic() - start

    assert asyncio.run(run()) < 1.0


def test_cancelled_waiter_leaves_nothing_behind() -> None:
    m = manager()
    channels = ThrottledChannels([m])
    ch = channels.open()

    async def run() -> None:
        channels.throttle(ch, 60_000, manager=m, user="u", client_id="c")
        waiter = asyncio.create_task(channels.wait_unmuted(ch))
        await asyncio.sleep(0.01)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(run())
    assert channels._waiters == {}
    channels.close(ch)  # nothing to wake, no error


def test_a_queue_drained_behind_our_back_does_not_hang_a_waiter() -> None:
    m = manager()
    unmuted: list[int] = []
    channels = ThrottledChannels([m], on_unmute=unmuted.append)
    ch = channels.open()

    async def run() -> None:
        channels.throttle(ch, 30, manager=m, user="u", client_id="c")
        await asyncio.sleep(0.05)
        assert m.expired_channels() == [ch]  # not through the channels: breaks the contract
        await asyncio.wait_for(channels.wait_unmuted(ch), timeout=2)

    asyncio.run(run())
    assert unmuted == [ch]


def test_run_reaper_unmutes_as_mutes_end_and_wakes_for_new_ones() -> None:
    m = manager()
    times: dict[int, float] = {}
    channels = ThrottledChannels([m], on_unmute=lambda c: times.setdefault(c, time.monotonic()))
    a, b = channels.open(), channels.open()

    async def run() -> float:
        reaper = asyncio.create_task(channels.run_reaper(max_wait_ms=1000))
        await asyncio.sleep(0.02)  # the reaper now sleeps up to 1 s on an empty queue
        start = time.monotonic()
        channels.throttle(a, 40, manager=m, user="u", client_id="c")
        channels.throttle(b, 120, manager=m, user="u", client_id="c")
        for _ in range(200):  # bounded: at most ~2 s
            if len(times) == 2:
                break
            await asyncio.sleep(0.01)
        reaper.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reaper
        return start

    start = asyncio.run(run())
    assert set(times) == {a, b}
    assert 0.035 <= times[a] - start < 0.5
    assert 0.115 <= times[b] - start < 0.6
    assert m.queue_size() == 0
    assert channels._reaper_wakeups == []


def test_run_reaper_blocking_in_a_thread() -> None:
    m = manager()
    unmuted: list[int] = []
    channels = ThrottledChannels([m], on_unmute=unmuted.append)
    ch = channels.open()
    stop = threading.Event()
    reaper = threading.Thread(target=channels.run_reaper_blocking, args=(stop, 20))
    reaper.start()
    try:
        channels.throttle(ch, 30, manager=m, user="u", client_id="c")
        deadline = time.monotonic() + 2
        while not unmuted and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
        stop.set()
        reaper.join(timeout=5)
    assert not reaper.is_alive()
    assert unmuted == [ch]
    with pytest.raises(ChannelError, match="invalid max_wait_ms 0"):
        channels.run_reaper_blocking(stop, 0)


def test_a_failing_callback_is_logged_and_the_others_still_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    m = manager()
    seen: list[int] = []

    def callback(channel: int) -> None:
        seen.append(channel)
        if len(seen) == 1:
            raise RuntimeError("boom")

    channels = ThrottledChannels([m], on_unmute=callback)
    a, b = channels.open(), channels.open()
    channels.throttle(a, 10, manager=m, user="u", client_id="c", now_ms=0)
    channels.throttle(b, 20, manager=m, user="u", client_id="c", now_ms=0)
    with caplog.at_level(logging.ERROR, logger="kquota.broker"):
        assert channels.reap(now_ms=20) == [a, b]
    assert seen == [a, b]
    assert f"on_unmute({a}) raised" in caplog.text


def test_throttles_and_reaps_from_many_threads_unmute_each_channel_once() -> None:
    m = manager()
    unmuted: list[int] = []
    lock = threading.Lock()

    def on_unmute(channel: int) -> None:
        with lock:
            unmuted.append(channel)

    channels = ThrottledChannels([m], on_unmute=on_unmute)
    ids = [channels.open() for _ in range(4000)]

    def throttle(part: list[int]) -> None:
        for i, ch in enumerate(part):
            channels.throttle(ch, 1 + i % 50, manager=m, user="u", client_id=str(ch), now_ms=0)

    def reap() -> None:
        for t in range(0, 60, 3):
            channels.reap(now_ms=t)

    threads = [threading.Thread(target=throttle, args=(ids[k::4],)) for k in range(4)]
    threads += [threading.Thread(target=reap) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    channels.reap(now_ms=100)
    assert sorted(unmuted) == ids
    assert m.queue_size() == 0
    assert not any(channels.is_muted(ch, now_ms=0) for ch in ids)
