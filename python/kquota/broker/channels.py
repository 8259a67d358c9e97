"""KIP-219 throttled channels: mute a client's connection after answering it.

A broker answers a throttled request at once, with ``throttle_time_ms`` in the response,
and then reads nothing more from that connection until the throttle has passed. Kafka
keeps a delay queue of throttled channels that a reaper thread drains, unmuting each
channel when its time is up.

:class:`ThrottledChannels` is that part as a library. It does not keep a delay queue of
its own: :meth:`ThrottledChannels.throttle` goes through :meth:`kquota.QuotaManager.throttle`,
which records the throttle-time sensor and queues the channel in the core's delay queue
(so ``queue-size`` metrics come from the core), and :meth:`ThrottledChannels.reap` drains
those queues with :meth:`kquota.QuotaManager.expired_channels`. What this class adds is
the per-connection state: which channels are open and until when each one is muted.

Channels are small integers handed out by :meth:`ThrottledChannels.open`. Channel ``0``
(:data:`NO_CHANNEL`) is never handed out: a throttle accounted under it is counted in
the delay queue and the metrics but mutes nothing.

Times are integer milliseconds of one clock, :func:`kquota.monotonic_ms` by default (the
clock the core uses when ``now_ms`` is omitted).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import operator
import threading
from collections.abc import Callable, Iterable

from kquota._core import QuotaManager, monotonic_ms
from kquota.exceptions import ChannelError

__all__ = ["MAX_THROTTLE_MS", "NO_CHANNEL", "ThrottledChannels"]

NO_CHANNEL = 0
"""The channel id of a throttle that mutes no connection (never returned by ``open``)."""

MAX_THROTTLE_MS = 2**31 - 1
"""The largest throttle accepted: Kafka's throttle times are 32-bit ints."""

_log = logging.getLogger("kquota.broker")

_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]


def validate_throttle_ms(throttle_ms: object) -> int:
    """``throttle_ms`` as an int in ``1..MAX_THROTTLE_MS``, or :class:`ChannelError`.

    Integers of any type implementing ``__index__`` (e.g. NumPy ints) are accepted;
    bools, floats (NaN included), strings and values out of range are not.
    """
    value: int | None = None
    if not isinstance(throttle_ms, bool) and hasattr(throttle_ms, "__index__"):
        value = operator.index(throttle_ms)
    if value is None or not 0 < value <= MAX_THROTTLE_MS:
        raise ChannelError(
            f"invalid throttle_ms {throttle_ms!r}: expected an int from 1 to {MAX_THROTTLE_MS}"
            " (only a throttle > 0 mutes a channel)"
        )
    return value


class ThrottledChannels:
    """Open client channels and their KIP-219 mutes, over the core's delay queues.

    ``managers`` are the quota managers whose delay queues this object drains; a manager
    passed to :meth:`throttle` is added automatically. Drain those queues only through
    this object (not with ``expired_channels`` directly), and use one
    ``ThrottledChannels`` per set of managers: channel ids are only unique within it.

    ``on_unmute(channel)`` is called, outside any lock, for every channel whose mute has
    ended when the delay queue is reaped (by :meth:`reap`, :meth:`run_reaper`,
    :meth:`run_reaper_blocking` or a :meth:`wait_unmuted` that reaches its deadline). An
    exception in it is logged to the ``kquota.broker`` logger and does not stop the
    other callbacks.

    A channel throttled again while muted keeps the later of the two ends: a mute only
    ever moves later (as a KIP-219 client's own back-off does). Safe to share between
    threads and event loops.
    """

    def __init__(
        self,
        managers: Iterable[QuotaManager] = (),
        *,
        on_unmute: Callable[[int], object] | None = None,
        clock: Callable[[], int] = monotonic_ms,
    ) -> None:
        self._lock = threading.Lock()
        self._managers: list[QuotaManager] = []
        # open channel -> end of its mute (ms), or None when not muted
        self._muted_until: dict[int, int | None] = {}
        self._waiters: dict[int, list[_Waiter]] = {}
        self._ids = itertools.count(NO_CHANNEL + 1)
        self._on_unmute = on_unmute
        self._clock = clock
        self._reaper_wakeups: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        for manager in managers:
            self.add_manager(manager)

    # -- set-up ---------------------------------------------------------------------

    @property
    def managers(self) -> tuple[QuotaManager, ...]:
        """The quota managers whose delay queues this object drains."""
        with self._lock:
            return tuple(self._managers)

    def add_manager(self, manager: QuotaManager) -> None:
        """Drain ``manager``'s delay queue from now on (adding it twice changes nothing)."""
        with self._lock:
            if not any(m is manager for m in self._managers):
                self._managers.append(manager)

    def now_ms(self) -> int:
        """The current time on this object's clock."""
        return self._clock()

    # -- channels -------------------------------------------------------------------

    def open(self) -> int:
        """Register a new channel (one per client connection) and return its id (>= 1)."""
        channel = next(self._ids)
        with self._lock:
            self._muted_until[channel] = None
        return channel

    def close(self, channel: int) -> None:
        """Forget ``channel``; a coroutine waiting in :meth:`wait_unmuted` raises at once.

        Closing an unknown or already closed channel raises :class:`ChannelError`. Its
        delay-queue entries stay until their time passes (Kafka's do too), then are
        dropped by :meth:`reap`.
        """
        with self._lock:
            self._known(channel)
            del self._muted_until[channel]
            waiters = self._waiters.pop(channel, [])
        self._wake(waiters)

    def is_open(self, channel: int) -> bool:
        """Whether ``channel`` was opened and not closed."""
        with self._lock:
            return channel in self._muted_until

    def __len__(self) -> int:
        """The number of open channels."""
        with self._lock:
            return len(self._muted_until)

    # -- mutes ----------------------------------------------------------------------

    def throttle(
        self,
        channel: int,
        throttle_ms: int,
        *,
        manager: QuotaManager,
        user: str,
        client_id: str,
        now_ms: int | None = None,
    ) -> int:
        """Mute ``channel`` for ``throttle_ms`` (an int > 0) from ``now_ms``; return the mute's end.

        The throttle is accounted by ``manager.throttle(user, client_id, ...)``: the
        client's throttle-time sensor and the manager's delay queue. If the channel is
        already muted until later, that later end is kept and returned. A bad
        ``throttle_ms`` or a channel that is not open raises :class:`ChannelError` and
        changes nothing.
        """
        value = validate_throttle_ms(throttle_ms)
        self.add_manager(manager)
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            current = self._known(channel)
            # Queue and update under the lock: a reap that drains this entry checks the
            # channel's end only after both are done.
            end = manager.throttle(user, client_id, value, now_ms=now, channel=channel)
            if current is None or end > current:
                self._muted_until[channel] = current = end
            wakeups = list(self._reaper_wakeups)
        for loop, event in wakeups:
            _call_soon(loop, event.set)
        return current

    def muted_until(self, channel: int, now_ms: int | None = None) -> int | None:
        """The end of ``channel``'s mute if it is muted at ``now_ms``, else ``None``.

        This reads the clock: a mute whose end has passed is over even before the delay
        queue is reaped (the callback only fires at the reap).
        """
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            end = self._known(channel)
        return end if end is not None and end > now else None

    def is_muted(self, channel: int, now_ms: int | None = None) -> bool:
        """Whether ``channel`` is muted at ``now_ms``.

        An unknown or closed channel raises :class:`ChannelError`.
        """
        return self.muted_until(channel, now_ms) is not None

    async def wait_unmuted(self, channel: int) -> None:
        """Return once ``channel`` is not muted (at once if it is not muted now).

        When the deadline is reached this coroutine reaps the delay queue itself, so it
        never depends on a separate reaper. A mute extended meanwhile is waited for too.
        Raises :class:`ChannelError` if the channel is unknown or is closed meanwhile.
        """
        loop = asyncio.get_running_loop()
        while True:
            now = self._clock()
            with self._lock:
                end = self._known(channel)
                if end is None:
                    return
                if end > now:
                    future: asyncio.Future[None] = loop.create_future()
                    self._waiters.setdefault(channel, []).append((loop, future))
            if end <= now:
                self.reap(now)
                self._end_mute_if_due(channel, now)
                continue
            try:
                await asyncio.wait({future}, timeout=(end - now) / 1000)
            finally:
                with self._lock:
                    waiters = self._waiters.get(channel)
                    if waiters is not None:
                        waiters[:] = [w for w in waiters if w[1] is not future]
                        if not waiters:
                            del self._waiters[channel]
                future.cancel()

    # -- the delay queue ------------------------------------------------------------

    def reap(self, now_ms: int | None = None) -> list[int]:
        """Drain the managers' delay queues up to ``now_ms``; return the channels unmuted.

        Calls ``on_unmute`` for each of them (manager by manager, each in the order its
        queue's entries end). Entries of closed channels, of :data:`NO_CHANNEL` and of a
        channel that is still muted until later only leave the queue.
        """
        now = self._clock() if now_ms is None else now_ms
        expired: list[int] = []
        for manager in self.managers:
            expired.extend(manager.expired_channels(now_ms=now))
        unmuted: list[int] = []
        waiters: list[_Waiter] = []
        with self._lock:
            for channel in expired:
                end = self._muted_until.get(channel)
                if end is not None and end <= now:
                    self._muted_until[channel] = None
                    unmuted.append(channel)
                    waiters.extend(self._waiters.pop(channel, []))
        self._wake(waiters)
        self._notify(unmuted)
        return unmuted

    def next_unmute_ms(self) -> int | None:
        """The earliest end of a mute still in one of the managers' delay queues."""
        ends = [e for m in self.managers if (e := m.next_unmute_ms()) is not None]
        return min(ends, default=None)

    def queue_size(self) -> int:
        """Entries waiting in the managers' delay queues (the sum of their ``queue-size``)."""
        return sum(m.queue_size() for m in self.managers)

    async def run_reaper(self, max_wait_ms: int = 1000) -> None:
        """Reap the delay queues as mutes end, until cancelled (Kafka's reaper, in asyncio).

        Sleeps until the next end in the queues, at most ``max_wait_ms``, and wakes
        early when a channel is throttled. Run it as a task:
        ``asyncio.create_task(channels.run_reaper())``.
        """
        wait_s = _validate_max_wait(max_wait_ms)
        wakeup = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._reaper_wakeups.append(wakeup)
        try:
            while True:
                wakeup[1].clear()
                self.reap()
                delay = self._delay_s(wait_s)
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wakeup[1].wait(), delay)
        finally:
            with self._lock:
                self._reaper_wakeups.remove(wakeup)

    def run_reaper_blocking(self, stop: threading.Event, max_wait_ms: int = 1000) -> None:
        """Reap the delay queues until ``stop`` is set (Kafka's reaper thread).

        Polls at the next end in the queues, at most every ``max_wait_ms``. Run it in a
        thread: ``threading.Thread(target=channels.run_reaper_blocking, args=(stop,))``.
        """
        wait_s = _validate_max_wait(max_wait_ms)
        while not stop.is_set():
            self.reap()
            stop.wait(self._delay_s(wait_s))

    # -- internals ------------------------------------------------------------------

    def _known(self, channel: int) -> int | None:
        """The mute end of an open channel; the caller holds the lock."""
        try:
            return self._muted_until[channel]
        except (KeyError, TypeError):
            raise ChannelError(
                f"unknown channel {channel!r}: expected an id returned by open() and not closed"
            ) from None

    def _end_mute_if_due(self, channel: int, now: int) -> None:
        """Unmute a channel whose end has passed though no queue entry announced it."""
        with self._lock:
            end = self._muted_until.get(channel)
            if end is None or end > now:
                return
            self._muted_until[channel] = None
            waiters = self._waiters.pop(channel, [])
        self._wake(waiters)
        self._notify([channel])

    def _delay_s(self, max_wait_s: float) -> float:
        nxt = self.next_unmute_ms()
        if nxt is None:
            return max_wait_s
        return min(max(nxt - self._clock(), 0) / 1000, max_wait_s)

    def _notify(self, channels: list[int]) -> None:
        if self._on_unmute is None:
            return
        for channel in channels:
            try:
                self._on_unmute(channel)
            except Exception:
                _log.exception("on_unmute(%d) raised", channel)

    @staticmethod
    def _wake(waiters: list[_Waiter]) -> None:
        for loop, future in waiters:
            _call_soon(loop, _resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _call_soon(loop: asyncio.AbstractEventLoop, func: Callable[..., object], *args: object) -> None:
    with contextlib.suppress(RuntimeError):  # a closed loop: nobody waits any more
        loop.call_soon_threadsafe(func, *args)


def _validate_max_wait(max_wait_ms: int) -> float:
    if isinstance(max_wait_ms, bool) or not isinstance(max_wait_ms, int) or max_wait_ms <= 0:
        raise ChannelError(f"invalid max_wait_ms {max_wait_ms!r}: expected an int > 0")
    return max_wait_ms / 1000
