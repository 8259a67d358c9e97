"""KIP-219 throttled channels (kquota.broker.channels): mutes, the core's delay queue, the
maintenance that runs by itself (inline on a simulated clock, plus a background thread on
the real one), asyncio waits, reapers and bad input.

No assertion here depends on how fast the machine is: simulated clocks where times are
compared, and on the real clock only what the code guarantees (a mute never ends before
its time, callbacks fire) with generous timeouts that only bound a hang."""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import re
import threading

import kquota
import numpy as np
import pytest
from broker_support import SimClock, no_thread_left_behind  # noqa: F401 (autouse fixture)
from kquota.broker import MAX_THROTTLE_MS, SENSOR_EXPIRY_INTERVAL_MS, ThrottledChannels
from kquota.exceptions import ChannelError, InvalidValueError

HANG_S = 30.0  # bounds a wait that would otherwise hang; never a measurement


def manager(expiry_ms: int = 3_600_000) -> kquota.QuotaManager:
    m = kquota.QuotaManager("produce", sensor_expiry_ms=expiry_ms)
    m.set_quota(kquota.Entity(user="u"), 100.0)
    return m


def test_throttle_mutes_until_the_end_and_reap_unmutes_with_callback() -> None:
    m = manager()
    unmuted: list[int] = []
    clock = SimClock()
    channels = ThrottledChannels([m], on_unmute=unmuted.append, clock=clock)
    ch = channels.open()
    assert ch >= 1 and channels.is_open(ch) and len(channels) == 1
    assert not channels.is_muted(ch, now_ms=0)

    assert channels.throttle(ch, 250, manager=m, user="u", client_id="c", now_ms=1000) == 1250
    assert channels.is_muted(ch, now_ms=1000)
    assert channels.is_muted(ch, now_ms=1249)
    assert channels.muted_until(ch, now_ms=1100) == 1250
    # The throttle went through the core: throttle-time sensor and delay queue.
    assert m.queue_size() == 1 and channels.queue_size() == 1
    assert channels.next_unmute_ms() == 1250 and channels.next_due_ms() == 1250
    assert m.throttle_time_avg("u", "c", now_ms=1000) == 250.0

    assert channels.reap(now_ms=1249) == []
    assert unmuted == []
    assert channels.reap(now_ms=1250) == [ch]
    assert unmuted == [ch]
    assert m.queue_size() == 0 and channels.next_unmute_ms() is None
    assert channels.muted_until(ch, now_ms=0) is None  # unmuted for good after the reap
    assert channels.background_thread() is None  # a simulated clock: no thread


def test_any_call_at_the_end_of_a_mute_drains_the_queue_by_itself() -> None:
    m = manager()
    unmuted: list[int] = []
    clock = SimClock()
    channels = ThrottledChannels([m], on_unmute=unmuted.append, clock=clock)
    a, b = channels.open(), channels.open()
    channels.throttle(a, 100, manager=m, user="u", client_id="a", now_ms=0)
    channels.throttle(b, 300, manager=m, user="u", client_id="b", now_ms=0)
    assert channels.is_muted(a, now_ms=99) and unmuted == []
    # Reading b's state at 100 is a call like any other: a's entry is drained with it.
    assert channels.is_muted(b, now_ms=100)
    assert unmuted == [a] and m.queue_size() == 1
    clock.now = 300
    channels.open()  # a new connection at 300: b's mute ends on the way
    assert unmuted == [a, b] and m.queue_size() == 0
    assert channels.next_due_ms() == SENSOR_EXPIRY_INTERVAL_MS  # only the next expiry


def test_muting_twice_keeps_the_later_end() -> None:
    m = manager()
    unmuted: list[int] = []
    channels = ThrottledChannels([m], on_unmute=unmuted.append, clock=SimClock())
    ch = channels.open()
    assert channels.throttle(ch, 500, manager=m, user="u", client_id="c", now_ms=0) == 500
    # A shorter throttle later does not shorten the mute.
    assert channels.throttle(ch, 100, manager=m, user="u", client_id="c", now_ms=10) == 500
    assert m.queue_size() == 2  # both throttles were accounted, as in Kafka
    assert channels.reap(now_ms=110) == []  # the earlier entry leaves the queue only
    assert m.queue_size() == 1 and channels.is_muted(ch, now_ms=110)
    assert channels.muted_until(ch, now_ms=200) == 500
    # A longer one moves the end later.
    assert channels.throttle(ch, 900, manager=m, user="u", client_id="c", now_ms=200) == 1100
    assert channels.reap(now_ms=500) == []
    assert channels.is_muted(ch, now_ms=500)
    assert channels.reap(now_ms=1100) == [ch]
    assert unmuted == [ch]


def test_idle_sensors_expire_every_30_s_of_the_clock_without_being_asked() -> None:
    """Kafka's ExpireSensorTask: every 30 s, sensors idle for longer than the expiry go."""
    m = manager(expiry_ms=1000)
    clock = SimClock()
    channels = ThrottledChannels([m], clock=clock)
    channels.open()  # the first call at 0 expires (nothing yet) and schedules 30 000
    assert channels.next_due_ms() == SENSOR_EXPIRY_INTERVAL_MS
    m.record("u", "c", 10.0, now_ms=0)
    assert m.sensor_names() == ["Produce-u:", "ProduceThrottleTime-u:"]
    clock.now = 29_999  # idle for far longer than 1 s, but the task has not run yet
    channels.open()
    assert len(m.sensor_names()) == 2
    clock.now = 30_000
    channels.open()
    assert m.sensor_count() == 0
    assert channels.next_due_ms() == 60_000
    # A manager added later is expired too.
    fetch = kquota.QuotaManager("fetch", sensor_expiry_ms=1000)
    fetch.set_quota(kquota.Entity(user="u"), 100.0)
    fetch.record("u", "c", 10.0, now_ms=30_000)
    channels.add_manager(fetch)
    clock.now = 59_999
    channels.open()
    assert len(fetch.sensor_names()) == 2
    channels.maintain(now_ms=60_000)  # the same thing, asked for explicitly
    assert fetch.sensor_count() == 0


def test_maintenance_is_left_to_the_thread_already_doing_it() -> None:
    """A call that finds maintenance in progress (here: an on_unmute callback calling back
    into the channels) does not wait for it or run it twice."""
    m = manager()
    clock = SimClock()
    seen: list[tuple[int, bool]] = []
    channels: ThrottledChannels

    def on_unmute(channel: int) -> None:
        seen.append((channel, channels.is_muted(channel, now_ms=clock.now)))
        channels.throttle(channel, 50, manager=m, user="u", client_id="c", now_ms=clock.now)

    channels = ThrottledChannels([m], on_unmute=on_unmute, clock=clock)
    ch = channels.open()
    channels.throttle(ch, 10, manager=m, user="u", client_id="c", now_ms=0)
    clock.now = 10
    channels.open()
    assert seen == [(ch, False)]
    assert channels.muted_until(ch, now_ms=10) == 60  # muted again from the callback
    assert channels.next_due_ms() == 60


@pytest.mark.parametrize(
    "bad",
    [-1, 0, math.nan, 1.5, "10", True, None, MAX_THROTTLE_MS + 1, -(2**70), math.inf],
)
def test_bad_throttle_is_rejected_naming_it_and_changes_nothing(bad: object) -> None:
    m = manager()
    channels = ThrottledChannels([m], clock=SimClock())
    ch = channels.open()
    with pytest.raises(ChannelError, match=f"invalid throttle_ms {re.escape(repr(bad))}:"):
        channels.throttle(ch, bad, manager=m, user="u", client_id="c", now_ms=0)  # type: ignore[arg-type]
    assert issubclass(ChannelError, InvalidValueError)
    assert not channels.is_muted(ch, now_ms=0)
    assert m.queue_size() == 0
    assert m.throttle_time_avg("u", "c", now_ms=0) is None


@pytest.mark.parametrize("bad", ["soon", [1], 1j])
def test_bad_now_ms_is_a_type_error_naming_it(bad: object) -> None:
    channels = ThrottledChannels([manager()], clock=SimClock())
    ch = channels.open()
    match = f"argument now_ms: expected an int, got .*{re.escape(repr(bad))}"
    with pytest.raises(TypeError, match=match):
        channels.is_muted(ch, now_ms=bad)  # type: ignore[arg-type]


def test_bad_background_value_is_rejected() -> None:
    with pytest.raises(ChannelError, match="invalid background 'yes'"):
        ThrottledChannels(background="yes")  # type: ignore[arg-type]


def test_numpy_ints_and_the_largest_throttle_are_accepted() -> None:
    m = manager()
    channels = ThrottledChannels([m], clock=SimClock())
    ch = channels.open()
    assert channels.throttle(ch, np.int64(7), manager=m, user="u", client_id="c", now_ms=0) == 7  # type: ignore[arg-type]
    end = channels.throttle(ch, MAX_THROTTLE_MS, manager=m, user="u", client_id="c", now_ms=0)
    assert end == MAX_THROTTLE_MS


@pytest.mark.parametrize("channel", [12345, 0, -1, "a", None])
def test_unknown_channel_is_a_clear_error_everywhere(channel: object) -> None:
    m = manager()
    channels = ThrottledChannels([m], clock=SimClock())
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
        await asyncio.wait_for(channels.wait_unmuted(channel), timeout=HANG_S)  # type: ignore[arg-type]

    with pytest.raises(ChannelError, match=match):
        asyncio.run(wait())
    assert m.queue_size() == 0


def test_closed_channel_is_unknown_and_its_queue_entries_are_dropped() -> None:
    m = manager()
    unmuted: list[int] = []
    channels = ThrottledChannels([m], on_unmute=unmuted.append, clock=SimClock())
    ch = channels.open()
    channels.throttle(ch, 100, manager=m, user="u", client_id="c", now_ms=0)
    channels.close(ch)
    assert not channels.is_open(ch) and len(channels) == 0
    with pytest.raises(ChannelError, match="unknown channel"):
        channels.close(ch)
    assert m.queue_size() == 1
    channels.maintain(now_ms=100)
    assert m.queue_size() == 0 and unmuted == []
    assert channels.open() != ch  # ids are not reused


def test_a_throttle_without_a_channel_is_accounted_but_never_queued() -> None:
    m = manager()
    channels = ThrottledChannels([m], clock=SimClock())
    ch = channels.open()
    assert m.throttle("u", "c", 50, now_ms=0) == 50  # channel=None, the default
    assert m.throttle("u", "c", 150, now_ms=0, channel=None) == 150
    assert m.throttle_time_avg("u", "c", now_ms=0) == 100.0
    assert channels.queue_size() == 0 and channels.next_unmute_ms() is None
    assert not channels.is_muted(ch, now_ms=0)


def test_managers_are_added_once_and_by_throttle() -> None:
    produce, fetch = manager(), kquota.QuotaManager("fetch")
    channels = ThrottledChannels([produce, produce], clock=SimClock())
    assert channels.managers == (produce,)
    ch = channels.open()
    channels.throttle(ch, 10, manager=fetch, user="u", client_id="c", now_ms=0)
    assert list(channels.managers) == [produce, fetch]
    assert channels.reap(now_ms=10) == [ch]


def test_entries_queued_before_a_manager_is_added_are_drained_in_time() -> None:
    m = manager()
    m.throttle("u", "c", 40, now_ms=0, channel=7)  # queued directly, before the channels
    channels = ThrottledChannels(clock=SimClock())
    assert channels.next_due_ms() is None  # before the first call: due at once
    channels.open()
    assert channels.next_due_ms() == SENSOR_EXPIRY_INTERVAL_MS
    channels.add_manager(m)
    assert channels.next_due_ms() == 40
    channels.maintain(now_ms=40)
    assert m.queue_size() == 0


# -- the real clock: the background thread ---------------------------------------------


def test_mutes_end_on_time_in_a_quiet_threaded_service() -> None:
    """No reaper, no further call: the background thread unmutes, never early."""
    m = manager()
    fired: list[tuple[int, int, str]] = []
    done = threading.Event()
    channels: ThrottledChannels

    def on_unmute(channel: int) -> None:
        fired.append((channel, channels.now_ms(), threading.current_thread().name))
        done.set()

    with ThrottledChannels([m], on_unmute=on_unmute) as channels:
        assert channels.background
        ch = channels.open()
        thread = channels.background_thread()
        assert thread is not None and thread.daemon
        end = channels.throttle(ch, 50, manager=m, user="u", client_id="c")
        assert done.wait(HANG_S), "the mute never ended"
        assert fired == [(ch, fired[0][1], "kquota-channels")]
        assert fired[0][1] >= end  # never before the end of the mute
        assert m.queue_size() == 0 and not channels.is_muted(ch)
    assert not thread.is_alive()  # the with block stopped it


def test_mutes_end_on_time_in_asyncio_without_a_reaper_task() -> None:
    m = manager()

    async def run() -> tuple[int, int, int]:
        loop = asyncio.get_running_loop()
        unmuted: asyncio.Queue[tuple[int, int]] = asyncio.Queue()

        def on_unmute(channel: int) -> None:  # from the background thread: to the loop
            loop.call_soon_threadsafe(unmuted.put_nowait, (channel, channels.now_ms()))

        channels = ThrottledChannels([m], on_unmute=on_unmute)
        try:
            ch = channels.open()
            end = channels.throttle(ch, 40, manager=m, user="u", client_id="c")
            channel, at = await asyncio.wait_for(unmuted.get(), HANG_S)
            assert channel == ch
            return ch, end, at
        finally:
            channels.shutdown()

    _, end, at = asyncio.run(run())
    assert at >= end
    assert m.queue_size() == 0


def test_a_throttle_ending_sooner_wakes_the_sleeping_thread() -> None:
    """The thread sleeps until the next end; a new, sooner end must not wait for it."""
    m = manager()
    fired: list[int] = []
    first = threading.Event()

    def on_unmute(channel: int) -> None:
        fired.append(channel)
        first.set()

    with ThrottledChannels([m], on_unmute=on_unmute) as channels:
        slow, quick = channels.open(), channels.open()
        channels.throttle(slow, 3_600_000, manager=m, user="u", client_id="slow")
        channels.throttle(quick, 30, manager=m, user="u", client_id="quick")
        assert first.wait(HANG_S), "the sooner mute was not noticed"
        assert fired == [quick]
        assert channels.is_muted(slow)


def test_the_thread_stops_when_the_channels_are_garbage_collected() -> None:
    channels = ThrottledChannels([manager()])
    channels.open()
    thread = channels.background_thread()
    assert thread is not None and thread.is_alive()
    del channels
    gc.collect()
    thread.join(HANG_S)
    assert not thread.is_alive()


def test_shutdown_is_final_and_maintenance_goes_on_inline() -> None:
    m = manager()
    unmuted: list[int] = []
    channels = ThrottledChannels([m], on_unmute=unmuted.append)
    ch = channels.open()
    thread = channels.background_thread()
    assert thread is not None
    channels.shutdown()
    channels.shutdown()  # again: nothing
    assert not thread.is_alive() and channels.background_thread() is None
    channels.throttle(ch, 1, manager=m, user="u", client_id="c", now_ms=0)
    channels.open()  # no thread again after a shutdown ...
    assert channels.background_thread() is None
    channels.maintain()  # ... and what is due still gets done
    assert unmuted == [ch]


def test_no_thread_with_background_false_or_a_simulated_clock() -> None:
    for channels in (ThrottledChannels(background=False), ThrottledChannels(clock=SimClock())):
        channels.open()
        assert not channels.background and channels.background_thread() is None
    # A clock of your own that follows real time can ask for the thread.
    with ThrottledChannels(clock=kquota.monotonic_ms, background=True) as channels:
        channels.open()
        assert channels.background_thread() is not None


# -- asyncio waits and the optional reapers --------------------------------------------


def test_wait_unmuted_returns_at_the_end_of_the_mute_never_before() -> None:
    m = manager()
    unmuted: list[int] = []
    channels = ThrottledChannels([m], on_unmute=unmuted.append, background=False)
    ch = channels.open()

    async def run() -> tuple[int, int]:
        await channels.wait_unmuted(ch)  # not muted: at once
        end = channels.throttle(ch, 80, manager=m, user="u", client_id="c")
        await asyncio.wait_for(channels.wait_unmuted(ch), timeout=HANG_S)
        return end, channels.now_ms()

    end, returned_at = asyncio.run(run())
    assert returned_at >= end
    assert not channels.is_muted(ch)
    assert unmuted == [ch]  # the waiter drained the queue itself
    assert m.queue_size() == 0


def test_wait_unmuted_follows_a_mute_extended_meanwhile() -> None:
    m = manager()
    channels = ThrottledChannels([m], background=False)
    ch = channels.open()

    async def run() -> tuple[int, int]:
        channels.throttle(ch, 50, manager=m, user="u", client_id="c")
        waiter = asyncio.create_task(channels.wait_unmuted(ch))
        await asyncio.sleep(0)  # the waiter is now waiting for the first end
        later = channels.throttle(ch, 150, manager=m, user="u", client_id="c")
        await asyncio.wait_for(waiter, timeout=HANG_S)
        return later, channels.now_ms()

    later, returned_at = asyncio.run(run())
    assert returned_at >= later


def test_close_wakes_a_waiter_with_an_error_at_once() -> None:
    m = manager()
    channels = ThrottledChannels([m], background=False)
    ch = channels.open()

    async def run() -> None:
        channels.throttle(ch, 3_600_000, manager=m, user="u", client_id="c")  # an hour
        waiter = asyncio.create_task(channels.wait_unmuted(ch))
        await asyncio.sleep(0)
        channels.close(ch)
        with pytest.raises(ChannelError, match=f"unknown channel {ch}"):
            await asyncio.wait_for(waiter, timeout=HANG_S)  # not the hour

    asyncio.run(run())


def test_cancelled_waiter_leaves_nothing_behind() -> None:
    m = manager()
    channels = ThrottledChannels([m], background=False)
    ch = channels.open()

    async def run() -> None:
        channels.throttle(ch, 60_000, manager=m, user="u", client_id="c")
        waiter = asyncio.create_task(channels.wait_unmuted(ch))
        await asyncio.sleep(0)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(run())
    assert channels._waiters == {}
    channels.close(ch)  # nothing to wake, no error


def test_a_queue_drained_behind_our_back_does_not_hang_a_waiter() -> None:
    m = manager()
    unmuted: list[int] = []
    channels = ThrottledChannels([m], on_unmute=unmuted.append, background=False)
    ch = channels.open()

    async def run() -> None:
        end = channels.throttle(ch, 30, manager=m, user="u", client_id="c")
        while kquota.monotonic_ms() < end:  # bounded by the 30 ms mute
            await asyncio.sleep(0.01)
        assert m.expired_channels() == [ch]  # not through the channels: breaks the contract
        await asyncio.wait_for(channels.wait_unmuted(ch), timeout=HANG_S)

    asyncio.run(run())
    assert unmuted == [ch]


def test_run_reaper_unmutes_as_mutes_end_on_the_event_loop() -> None:
    """With background=False, run_reaper is the reaper, and callbacks run on the loop."""
    m = manager()
    seen: dict[int, tuple[int, bool]] = {}

    async def run() -> tuple[ThrottledChannels, dict[int, int]]:
        loop_thread = threading.get_ident()
        done = asyncio.Event()

        def on_unmute(channel: int) -> None:
            seen[channel] = (channels.now_ms(), threading.get_ident() == loop_thread)
            if len(seen) == 2:
                done.set()

        channels = ThrottledChannels([m], on_unmute=on_unmute, background=False)
        a, b = channels.open(), channels.open()
        reaper = asyncio.create_task(channels.run_reaper(max_wait_ms=1000))
        await asyncio.sleep(0)  # the reaper now sleeps up to 1 s on an empty queue
        ends = {
            a: channels.throttle(a, 40, manager=m, user="u", client_id="c"),
            b: channels.throttle(b, 120, manager=m, user="u", client_id="c"),
        }
        await asyncio.wait_for(done.wait(), HANG_S)
        reaper.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reaper
        return channels, ends

    channels, ends = asyncio.run(run())
    assert set(seen) == set(ends)
    assert all(seen[ch][0] >= end for ch, end in ends.items())
    assert all(on_loop for _, on_loop in seen.values())
    assert m.queue_size() == 0
    assert channels._reaper_wakeups == []


def test_run_reaper_blocking_in_a_thread() -> None:
    m = manager()
    unmuted: list[int] = []
    done = threading.Event()

    def on_unmute(channel: int) -> None:
        unmuted.append(channel)
        done.set()

    channels = ThrottledChannels([m], on_unmute=on_unmute, background=False)
    ch = channels.open()
    stop = threading.Event()
    reaper = threading.Thread(target=channels.run_reaper_blocking, args=(stop, 20))
    reaper.start()
    try:
        channels.throttle(ch, 30, manager=m, user="u", client_id="c")
        assert done.wait(HANG_S)
    finally:
        stop.set()
        reaper.join(HANG_S)
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

    channels = ThrottledChannels([m], on_unmute=callback, clock=SimClock())
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

    channels = ThrottledChannels([m], on_unmute=on_unmute, clock=SimClock())
    ids = [channels.open() for _ in range(4000)]

    def throttle(part: list[int]) -> None:
        for i, ch in enumerate(part):
            channels.throttle(ch, 1 + i % 50, manager=m, user="u", client_id=str(ch), now_ms=0)

    def reap() -> None:
        for t in range(0, 60, 3):
            channels.reap(now_ms=t)
            channels.maintain(now_ms=t)

    threads = [threading.Thread(target=throttle, args=(ids[k::4],)) for k in range(4)]
    threads += [threading.Thread(target=reap) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
    channels.reap(now_ms=100)
    assert sorted(unmuted) == ids
    assert m.queue_size() == 0
    assert not any(channels.is_muted(ch, now_ms=0) for ch in ids)


def test_entries_queued_behind_our_back_are_drained_with_the_next_expiry() -> None:
    m = manager()
    clock = SimClock()
    channels = ThrottledChannels([m], clock=clock)
    channels.open()  # expiry at 0, next at 30 000
    m.throttle("u", "c", 10, now_ms=0, channel=99)  # not through the channels
    assert channels.next_due_ms() == SENSOR_EXPIRY_INTERVAL_MS  # they cannot know
    clock.now = SENSOR_EXPIRY_INTERVAL_MS
    channels.open()
    assert m.queue_size() == 0
