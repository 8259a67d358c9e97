"""KIP-219 throttled channels: mute a client's connection after answering it.

A broker answers a throttled request at once, with ``throttle_time_ms`` in the response,
and then reads nothing more from that connection until the throttle has passed. Kafka
keeps a delay queue of throttled channels that a reaper thread drains, unmuting each
channel when its time is up, and a task that removes idle quota sensors every 30 s.

:class:`ThrottledChannels` is that part as a library, and it does both chores itself:

* :meth:`ThrottledChannels.throttle` goes through :meth:`kquota.QuotaManager.throttle`,
  which records the throttle-time sensor and queues the channel in the core's delay queue
  (so ``queue-size`` metrics come from the core); the queue is drained with
  :meth:`kquota.QuotaManager.expired_channels` as mutes end;
* idle sensors of every manager are expired (:meth:`kquota.QuotaManager.expire_sensors`)
  once :data:`SENSOR_EXPIRY_INTERVAL_MS` of the clock have passed, as Kafka's
  ``ExpireSensorTask`` does.

What this class adds is the per-connection state (which channels are open and until when
each one is muted) and that maintenance, so that a service running for months stays
bounded without its author knowing about either. See :class:`ThrottledChannels` for how
it runs.

Channels are positive integers handed out by :meth:`ThrottledChannels.open`. A throttle
without a channel (``QuotaManager.throttle(..., channel=None)``, what
:class:`~kquota.broker.QuotaPlugin` does for a request that names no channel) is counted
in the throttle-time sensor but never queued.

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
import weakref
from collections.abc import Callable, Iterable

from kquota._core import (
    EXPIRY_TASK_MS,
    ControllerMutationQuotaManager,
    QuotaManager,
    maintenance_due,
    monotonic_ms,
    next_maintenance_ms,
    next_sensor_expiry_ms,
)
from kquota.exceptions import ChannelError

_Manager = QuotaManager | ControllerMutationQuotaManager
"""A manager with a delay queue: a client quota's, or the controller-mutation quota's."""

__all__ = ["MAX_THROTTLE_MS", "SENSOR_EXPIRY_INTERVAL_MS", "ThrottledChannels"]

MAX_THROTTLE_MS = 2**31 - 1
"""The largest throttle accepted: Kafka's throttle times are 32-bit ints."""

SENSOR_EXPIRY_INTERVAL_MS: int = EXPIRY_TASK_MS
"""How often idle sensors are expired: Kafka's ``ExpireSensorTask`` runs every 30 s (the
core's broker timetable, which decides when maintenance is due)."""

_log = logging.getLogger("kquota.broker")

_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[None]"]

# Before the first call, maintenance is due at once (the first call schedules the rest).
_DUE_AT_ONCE = -(2**63)
# The background thread re-reads the clock at least this often (seconds), so a clock that
# is not kquota's (background=True) cannot make it oversleep for long.
_MAX_SLEEP_S = SENSOR_EXPIRY_INTERVAL_MS / 1000
_THREAD_NAME = "kquota-channels"


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

    ``managers`` are the quota managers whose delay queues this object drains and whose
    idle sensors it expires; a manager passed to :meth:`throttle` is added automatically.
    Drain those queues only through this object (not with ``expired_channels``
    directly), and use one ``ThrottledChannels`` per set of managers: channel ids are only
    unique within it.

    **Maintenance runs by itself.** Every call (``open``, ``close``, ``throttle``,
    ``is_muted``, ``muted_until``, and every request of a
    :class:`~kquota.broker.QuotaPlugin`) compares its time with the next due time, one
    integer comparison; when it is due, that call drains the delay-queue entries that have
    ended (unmuting their channels) and, once :data:`SENSOR_EXPIRY_INTERVAL_MS` have
    passed since the last time, expires the managers' idle sensors. This alone is exact and
    deterministic on a simulated ``clock``: time only moves when the service calls.

    On real time a service may go quiet while channels are muted, and their mutes must
    still end on time. So when ``background`` is true (by default: when ``clock`` is
    :func:`kquota.monotonic_ms`, the default) the first call also starts one daemon thread,
    named ``kquota-channels``, that sleeps until the next mute ends or the next expiry is
    due (woken early by a throttle that ends sooner) and does the same maintenance. A
    thread rather than an asyncio task because it serves threaded and asyncio services
    alike, needs no running loop at the first call, and cannot be starved by a busy loop;
    it holds the object only weakly, so it stops when the object is garbage-collected, and
    :meth:`shutdown` (or leaving a ``with`` block) stops it at once. On a simulated clock
    no thread is started: nothing would move its time. :meth:`run_reaper` (an asyncio task)
    and :meth:`run_reaper_blocking` remain for services that want the ``on_unmute``
    callbacks on a thread of their own (with ``background=False``).

    ``on_unmute(channel)`` is called, outside any lock, for every channel whose mute has
    ended when the delay queue is drained (by whichever of the above gets there first, so
    from any thread: an asyncio service should hand it to its loop with
    ``loop.call_soon_threadsafe``). An exception in it is logged to the ``kquota.broker``
    logger and does not stop the other callbacks.

    A channel throttled again while muted keeps the later of the two ends: a mute only
    ever moves later (as a KIP-219 client's own back-off does). Safe to share between
    threads and event loops.
    """

    def __init__(
        self,
        managers: Iterable[_Manager] = (),
        *,
        on_unmute: Callable[[int], object] | None = None,
        clock: Callable[[], int] = monotonic_ms,
        background: bool | None = None,
    ) -> None:
        if background is not None and not isinstance(background, bool):
            raise ChannelError(f"invalid background {background!r}: expected True, False or None")
        self._lock = threading.Lock()
        self._managers: list[_Manager] = []
        # open channel -> end of its mute (ms), or None when not muted
        self._muted_until: dict[int, int | None] = {}
        self._waiters: dict[int, list[_Waiter]] = {}
        self._ids = itertools.count(1)
        self._on_unmute = on_unmute
        self._clock = clock
        self._reaper_wakeups: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        # Maintenance. `_due` is read without a lock on every call: an int compared with
        # the call's time. It is min(_next_expiry, _next_unmute), written under `_lock`.
        self._maintaining = threading.Lock()  # taken without blocking: one at a time
        self._due = _DUE_AT_ONCE
        self._next_expiry: int | None = None  # None: expire at the first maintenance
        self._next_unmute: int | None = None  # earliest end among the queued entries
        self._background = clock is monotonic_ms if background is None else background
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._shut_down = False
        for manager in managers:
            self.add_manager(manager)

    # -- set-up ---------------------------------------------------------------------

    @property
    def managers(self) -> tuple[_Manager, ...]:
        """The quota managers whose delay queues this object drains."""
        with self._lock:
            return tuple(self._managers)

    def add_manager(self, manager: _Manager) -> None:
        """Drain ``manager``'s delay queue and expire its sensors from now on (adding it
        twice changes nothing)."""
        with self._lock:
            if not any(m is manager for m in self._managers):
                self._managers.append(manager)
                self._next_unmute = _earliest(self._next_unmute, manager.next_unmute_ms())
                self._set_due()

    def now_ms(self) -> int:
        """The current time on this object's clock."""
        return self._clock()

    @property
    def background(self) -> bool:
        """Whether a background thread keeps the maintenance going between calls."""
        return self._background

    def background_thread(self) -> threading.Thread | None:
        """The background thread if it is running (it starts at the first call)."""
        with self._lock:
            thread = self._thread
        return thread if thread is not None and thread.is_alive() else None

    def shutdown(self, timeout: float | None = 5.0) -> None:
        """Stop the background thread (waiting up to ``timeout`` s for it) for good.

        Maintenance still runs inline on every call afterwards; only the thread is gone.
        Open channels and their mutes are untouched. Calling it again does nothing.
        """
        with self._lock:
            self._shut_down = True
            thread, self._thread = self._thread, None
        self._stop.set()
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def __enter__(self) -> ThrottledChannels:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    # -- channels -------------------------------------------------------------------

    def open(self) -> int:
        """Register a new channel (one per client connection) and return its id (>= 1)."""
        self._tick(self._clock())
        channel = next(self._ids)
        with self._lock:
            self._muted_until[channel] = None
        return channel

    def close(self, channel: int) -> None:
        """Forget ``channel``; a coroutine waiting in :meth:`wait_unmuted` raises at once.

        Closing an unknown or already closed channel raises :class:`ChannelError`. Its
        delay-queue entries stay until their time passes (Kafka's do too), then are
        dropped by the maintenance.
        """
        with self._lock:
            self._known(channel)
            del self._muted_until[channel]
            waiters = self._waiters.pop(channel, [])
        self._wake_waiters(waiters)
        self._tick(self._clock())

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
        manager: _Manager,
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
        now = self._clock() if now_ms is None else now_ms
        self._tick(now)
        self.add_manager(manager)
        with self._lock:
            current = self._known(channel)
            # Queue and update under the lock: a reap that drains this entry checks the
            # channel's end only after both are done, and the next due time it computes
            # sees this entry.
            end = manager.throttle(user, client_id, value, now_ms=now, channel=channel)
            if current is None or end > current:
                self._muted_until[channel] = current = end
            sooner = self._next_unmute is None or end < self._next_unmute
            if sooner:
                self._next_unmute = end
                self._set_due()
            wakeups = list(self._reaper_wakeups)
        if sooner and self._thread is not None:
            self._wake.set()  # the background thread sleeps until the old next end
        for loop, event in wakeups:
            _call_soon(loop, event.set)
        return current

    def muted_until(self, channel: int, now_ms: int | None = None) -> int | None:
        """The end of ``channel``'s mute if it is muted at ``now_ms``, else ``None``.

        This reads the clock: a mute whose end has passed is over even before the delay
        queue is drained (the callback only fires then).
        """
        now = self._clock() if now_ms is None else now_ms
        self._tick(now)
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

        It never returns before the mute's end on the clock. When the deadline is reached
        this coroutine drains the delay queue itself, so it depends on no reaper. A mute
        extended meanwhile is waited for too. Raises :class:`ChannelError` if the channel
        is unknown or is closed meanwhile.
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

    # -- maintenance ----------------------------------------------------------------

    def maintain(self, now_ms: int | None = None) -> None:
        """Do now what is due at ``now_ms``: drain the ended queue entries and, if
        :data:`SENSOR_EXPIRY_INTERVAL_MS` have passed since the last expiry, expire idle
        sensors.

        Never needed: every call does it when due, and so does the background thread. It
        is there for a service on a simulated clock that wants time to pass without a
        request (e.g. at the end of a simulation). If another thread is maintaining at
        this moment, this call leaves it to that one.
        """
        self._maintain(self._clock() if now_ms is None else now_ms)

    def next_due_ms(self) -> int | None:
        """When the next maintenance is due (``None`` before the first call)."""
        due = self._due
        return None if due == _DUE_AT_ONCE else due

    def reap(self, now_ms: int | None = None) -> list[int]:
        """Drain the managers' delay queues up to ``now_ms``; return the channels unmuted.

        Calls ``on_unmute`` for each of them (manager by manager, each in the order its
        queue's entries end). Entries of closed channels and of a channel that is still
        muted until later only leave the queue.
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
            # Under the lock: a throttle queued meanwhile is either seen here or lowers
            # `_next_unmute` after this.
            nxt = None
            for manager in self._managers:
                nxt = _earliest(nxt, manager.next_unmute_ms())
            self._next_unmute = nxt
            self._set_due()
        self._wake_waiters(waiters)
        self._notify(unmuted)
        return unmuted

    def next_unmute_ms(self) -> int | None:
        """The earliest end of a mute still in one of the managers' delay queues."""
        ends = [e for m in self.managers if (e := m.next_unmute_ms()) is not None]
        return min(ends, default=None)

    def queue_size(self) -> int:
        """Entries waiting in the managers' delay queues (the sum of their ``queue-size``)."""
        return sum(
            m.queue_size if isinstance(m, ControllerMutationQuotaManager) else m.queue_size()
            for m in self.managers
        )

    async def run_reaper(self, max_wait_ms: int = 1000) -> None:
        """Drain the delay queues as mutes end, until cancelled (Kafka's reaper, in asyncio).

        Not needed with the background thread; with ``background=False`` it runs the
        ``on_unmute`` callbacks on the event loop. Sleeps until the next end in the queues,
        at most ``max_wait_ms``, and wakes early when a channel is throttled. Run it as a
        task: ``asyncio.create_task(channels.run_reaper())``.
        """
        wait_s = _validate_max_wait(max_wait_ms)
        wakeup = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._reaper_wakeups.append(wakeup)
        try:
            while True:
                wakeup[1].clear()
                self.maintain()
                self.reap()
                delay = self._delay_s(wait_s)
                if delay > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wakeup[1].wait(), delay)
        finally:
            with self._lock:
                self._reaper_wakeups.remove(wakeup)

    def run_reaper_blocking(self, stop: threading.Event, max_wait_ms: int = 1000) -> None:
        """Drain the delay queues until ``stop`` is set (Kafka's reaper thread).

        Not needed with the background thread. Polls at the next end in the queues, at
        most every ``max_wait_ms``. Run it in a thread:
        ``threading.Thread(target=channels.run_reaper_blocking, args=(stop,))``.
        """
        wait_s = _validate_max_wait(max_wait_ms)
        while not stop.is_set():
            self.maintain()
            self.reap()
            stop.wait(self._delay_s(wait_s))

    # -- internals ------------------------------------------------------------------

    def _tick(self, now: int) -> None:
        """The check every call makes: maintain if due (one comparison otherwise)."""
        try:
            due = now >= self._due
        except TypeError:
            raise TypeError(
                f"argument now_ms: expected an int, got {type(now).__name__} {now!r}"
            ) from None
        if due:
            self._maintain(now)

    def _maintain(self, now: int) -> None:
        if not self._maintaining.acquire(blocking=False):
            return  # another thread is at it; this call goes on with its request
        try:
            if self._background and self._thread is None and not self._shut_down:
                self._start_thread()
            # The core's timetable; with every expiry the queues are drained too, so
            # entries queued on a manager directly (not through this object) wait 30 s at
            # most.
            expiring, _ = maintenance_due(now, self._next_expiry, None)
            if expiring:
                for manager in self.managers:
                    manager.expire_sensors(now_ms=now)
                with self._lock:
                    self._next_expiry = next_sensor_expiry_ms(now)
                    self._set_due()
            _, draining = maintenance_due(now, self._next_expiry, self._next_unmute)
            if expiring or draining:
                self.reap(now)
        finally:
            self._maintaining.release()

    def _set_due(self) -> None:
        """Recompute the next due time; the caller holds the lock."""
        due = next_maintenance_ms(self._next_expiry, self._next_unmute)
        self._due = _DUE_AT_ONCE if due is None else due

    def _start_thread(self) -> None:
        with self._lock:
            if self._thread is not None or self._shut_down:
                return
            thread = threading.Thread(
                target=_background_loop,
                args=(weakref.ref(self), self._stop, self._wake),
                name=_THREAD_NAME,
                daemon=True,
            )
            self._thread = thread
        # Stops the thread when this object is garbage-collected (the thread only holds
        # it weakly, between its rounds).
        weakref.finalize(self, _stop_background, self._stop, self._wake)
        thread.start()

    def _background_round(self) -> float:
        """One round of the background thread; return how long to sleep (seconds)."""
        self._maintain(self._clock())
        due = self._due
        if due == _DUE_AT_ONCE:
            return 0.001
        return min(max(due - self._clock(), 1) / 1000, _MAX_SLEEP_S)

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
        self._wake_waiters(waiters)
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
    def _wake_waiters(waiters: list[_Waiter]) -> None:
        for loop, future in waiters:
            _call_soon(loop, _resolve, future)


def _background_loop(
    ref: weakref.ReferenceType[ThrottledChannels], stop: threading.Event, wake: threading.Event
) -> None:
    """The background thread: maintain, sleep until due, until stopped or collected."""
    while not stop.is_set():
        channels = ref()
        if channels is None:
            return
        wake.clear()
        try:
            delay = channels._background_round()
        except Exception:  # never let the thread die: log, and try again in a second
            _log.exception("kquota background maintenance failed")
            delay = 1.0
        del channels  # sleep without holding the object
        wake.wait(delay)


def _stop_background(stop: threading.Event, wake: threading.Event) -> None:
    stop.set()
    wake.set()


def _earliest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None or a <= b else b


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
