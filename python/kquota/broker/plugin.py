"""What a broker-side service calls on every request: Kafka's request-path quota logic.

:class:`QuotaPlugin` holds the three quota managers of a broker (produce and fetch byte
rates, request time) and the :class:`~kquota.broker.channels.ThrottledChannels` of its
connections, and does per request what Kafka's request handlers do with them:

* produce: record the request's bytes against the produce quota and its handler-thread
  time against the request quota (not for ``acks=0``); apply the larger throttle;
* fetch: record handler time, then the response bytes; if either throttles, take the
  bytes back ("unrecord") and send an empty response carrying the throttle time;
* any other throttle-able request: the request quota only;
* CreateTopics, CreatePartitions, DeleteTopics: the request quota, and the throttle of
  the request's controller-mutation quota (KIP-599); the larger one is applied, through
  its own manager (Kafka's ``sendResponseMaybeThrottleWithControllerQuota``);
* after a response went out: add the network-thread time without a check.

These rules are the core's: :class:`kquota._core.RequestPath`, called once per request,
and for the mutation APIs its ``mutation_response_throttle``.
The channel is throttled through the manager whose throttle is applied (the request
manager when the two are equal), which records the throttle-time sensor and queues the
channel. A request without a channel is accounted in the throttle-time sensor only:
nothing is queued, since no connection waits. A throttle ``<= 0``, including one Kafka's
int conversion wrapped negative, means "not throttled" and the response carries 0.

The plugin also keeps itself bounded: every call runs the maintenance of its
:class:`~kquota.broker.channels.ThrottledChannels` when due (the delay queue drained as
mutes end, idle sensors expired every 30 s of the plugin's clock, as Kafka's broker does),
and on the real clock a daemon thread does the same while no call arrives. See
:class:`~kquota.broker.channels.ThrottledChannels` for how; :meth:`QuotaPlugin.close` (or
a ``with`` block) stops that thread.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kquota._core import (
    ClusterMetadata,
    ControllerMutationQuotaManager,
    QuotaManager,
    RequestPath,
    monotonic_ms,
    mutation_response_throttle,
)
from kquota._core import update_cluster_metadata as _update_cluster_metadata
from kquota.broker.channels import ThrottledChannels
from kquota.callback import QuotaCallback, load_callback
from kquota.exceptions import ChannelError, InvalidConfigError, InvalidUsageError, InvalidValueError
from kquota.quota_types import QuotaType

__all__ = ["QuotaOutcome", "QuotaPlugin", "QuotaType"]


ThrottledBy = Literal["produce", "fetch", "request", "controller_mutation"]
"""The quota whose throttle a :class:`QuotaOutcome` applied."""


@dataclass(frozen=True, slots=True)
class QuotaOutcome:
    """What the quota check of one request decided.

    ``throttle_time_ms`` goes into the response (>= 0). ``empty_response`` is set for a
    throttled fetch: send an empty fetch response (its bytes were unrecorded).
    ``throttled_by`` names the quota whose throttle was applied and ``muted_until_ms``
    is the end of the channel's mute (both ``None`` when not throttled). With
    ``acks=0`` Kafka sends no produce response at all but still mutes the channel.
    """

    throttle_time_ms: int = 0
    empty_response: bool = False
    throttled_by: ThrottledBy | None = None
    muted_until_ms: int | None = None

    @property
    def throttled(self) -> bool:
        """Whether the request was throttled (and the channel muted)."""
        return self.throttle_time_ms > 0


_NOT_THROTTLED = QuotaOutcome()


class QuotaPlugin:
    """A broker's produce, fetch and request quota managers and its throttled channels.

    Managers not given are created with Kafka's defaults (11 windows of 1 s). Each
    ``on_*`` method takes the client's principal name and client id, an optional
    ``channel`` from :meth:`ThrottledChannels.open` (without one the throttle is still
    accounted in the throttle-time sensor, but nothing is queued and no connection is
    muted) and an optional ``now_ms``; without it the plugin reads ``clock`` once and uses
    that time for every call the request makes. Use either the clock or your own times,
    not both.

    Maintenance needs nothing from you: each call first runs what is due on ``channels``
    (:meth:`ThrottledChannels.maintain`: ended mutes drained, idle sensors of the three
    managers expired every 30 s). With the default ``clock`` (:func:`kquota.monotonic_ms`,
    Kafka's clock without its jumps) a daemon thread also keeps it going between calls, so
    mutes end and ``on_unmute`` fires on time in a quiet service; with any other clock (a
    simulation) time moves only with the calls and no thread is started. ``background``
    overrides that choice when the plugin creates its channels; :meth:`close` or a ``with``
    block stops the thread of channels the plugin created (channels passed in belong to the
    caller). Safe to share between threads.

    ``quota_callback`` (a :class:`~kquota.QuotaCallback`, or ``"module:factory"`` to load
    one) is a custom quota callback (KIP-257) for the three managers the plugin creates:
    it resolves clients and gives their limits instead of Kafka's precedence. Managers
    passed in must then have been built with that same callback. The plugin owns it:
    :meth:`close` calls its ``close()``. Tell it about cluster changes with
    :meth:`update_cluster_metadata`.
    """

    def __init__(
        self,
        produce: QuotaManager | None = None,
        fetch: QuotaManager | None = None,
        request: QuotaManager | None = None,
        *,
        channels: ThrottledChannels | None = None,
        clock: Callable[[], int] = monotonic_ms,
        background: bool | None = None,
        quota_callback: QuotaCallback | str | None = None,
    ) -> None:
        if isinstance(quota_callback, str):
            quota_callback = load_callback(quota_callback)
        self._callback = quota_callback
        self._produce = _manager("produce", produce, quota_callback)
        self._fetch = _manager("fetch", fetch, quota_callback)
        self._request = _manager("request", request, quota_callback)
        self._path = RequestPath(self._produce, self._fetch, self._request)
        self._clock = clock
        self._owns_channels = channels is None
        if channels is None:
            channels = ThrottledChannels(clock=clock, background=background)
        elif background is not None:
            raise InvalidConfigError(
                f"invalid background {background!r} with channels given: it is an option of"
                " the channels the plugin creates; pass it to ThrottledChannels instead"
            )
        self._channels = channels
        for manager in self.managers:
            self._channels.add_manager(manager)

    @property
    def produce(self) -> QuotaManager:
        """The produce byte-rate manager (``producer_byte_rate``)."""
        return self._produce

    @property
    def fetch(self) -> QuotaManager:
        """The fetch byte-rate manager (``consumer_byte_rate``)."""
        return self._fetch

    @property
    def request(self) -> QuotaManager:
        """The request-time manager (``request_percentage``)."""
        return self._request

    @property
    def managers(self) -> tuple[QuotaManager, QuotaManager, QuotaManager]:
        """``(produce, fetch, request)``, e.g. for :class:`~kquota.broker.QuotaCollector`."""
        return (self._produce, self._fetch, self._request)

    @property
    def channels(self) -> ThrottledChannels:
        """The channels this plugin mutes; their delay queues are the managers'."""
        return self._channels

    def close(self) -> None:
        """Stop the background maintenance thread of the channels this plugin created.

        The plugin keeps working (maintenance then runs only inline, on calls); calling
        it again does nothing. Channels passed to the constructor are left to their owner.
        """
        if self._owns_channels:
            self._channels.shutdown()
        callback, self._callback = self._callback, None
        if callback is not None:
            callback.close()

    @property
    def quota_callback(self) -> QuotaCallback | None:
        """The custom quota callback (``None`` without one, or once closed)."""
        return self._callback

    def update_cluster_metadata(self, metadata: ClusterMetadata) -> bool:
        """Tell the quota callback the cluster's brokers and partition leaders changed;
        when it answers true, every limit of the three managers is asked again (Kafka's
        broker on an UpdateMetadata request). Without a callback: nothing, ``False``."""
        return _update_cluster_metadata(metadata, *self.managers)

    def __enter__(self) -> QuotaPlugin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the request path -----------------------------------------------------------

    def on_produce(
        self,
        user: str,
        client_id: str,
        size_bytes: float,
        thread_time_ns: float,
        *,
        acks: int = -1,
        channel: int | None = None,
        now_ms: int | None = None,
    ) -> QuotaOutcome:
        """A produce request of ``size_bytes`` that took ``thread_time_ns`` of handler time.

        The applied throttle is the larger of the produce and request throttles (the
        core's request path decides, ties to the request quota); the request quota is
        skipped for ``acks=0``.
        """
        _usage("size_bytes", size_bytes)
        _usage("thread_time_ns", thread_time_ns)
        now = self._begin(channel, now_ms)
        return self._check(
            user, client_id, "produce", size_bytes, thread_time_ns, acks, channel, now
        )

    def on_fetch(
        self,
        user: str,
        client_id: str,
        response_bytes: float,
        thread_time_ns: float,
        *,
        channel: int | None = None,
        now_ms: int | None = None,
    ) -> QuotaOutcome:
        """A consumer fetch whose response holds ``response_bytes``.

        Records handler time against the request quota, then the bytes against the
        fetch quota. If either throttles, the bytes are unrecorded and the outcome asks
        for an empty response. Do not call it for replica (follower) fetches: they are
        not subject to client quotas.
        """
        _usage("response_bytes", response_bytes)
        _usage("thread_time_ns", thread_time_ns)
        now = self._begin(channel, now_ms)
        return self._check(
            user, client_id, "fetch", response_bytes, thread_time_ns, -1, channel, now
        )

    def on_request(
        self,
        user: str,
        client_id: str,
        thread_time_ns: float,
        *,
        channel: int | None = None,
        now_ms: int | None = None,
    ) -> QuotaOutcome:
        """Any other throttle-able request: the request quota only."""
        _usage("thread_time_ns", thread_time_ns)
        now = self._begin(channel, now_ms)
        return self._check(user, client_id, "other", 0.0, thread_time_ns, -1, channel, now)

    def on_mutation(
        self,
        user: str,
        client_id: str,
        thread_time_ns: float,
        mutation_throttle_ms: int,
        mutation: ControllerMutationQuotaManager,
        *,
        channel: int | None = None,
        now_ms: int | None = None,
    ) -> QuotaOutcome:
        """A CreateTopics, CreatePartitions or DeleteTopics response about to be sent.

        ``mutation_throttle_ms`` is the request's controller-mutation throttle
        (:meth:`kquota.MutationRequestQuota.throttle_time` at ``now_ms``, Kafka's int).
        The request quota is recorded as for any request; the response carries the larger
        of the two throttles, and the channel is muted through the manager of the larger
        one (the request manager when they are equal), as Kafka's
        ``sendResponseMaybeThrottleWithControllerQuota`` does: the core's
        ``mutation_response_throttle`` decides.
        """
        _usage("thread_time_ns", thread_time_ns)
        if not isinstance(mutation, ControllerMutationQuotaManager):
            raise InvalidConfigError(
                f"invalid mutation {mutation!r}: expected a ControllerMutationQuotaManager"
            )
        if (
            isinstance(mutation_throttle_ms, bool)
            or not isinstance(mutation_throttle_ms, int)
            or not -(2**31) <= mutation_throttle_ms < 2**31
        ):
            raise InvalidUsageError(
                f"invalid mutation_throttle_ms {mutation_throttle_ms!r}: expected an int"
                f" from {-(2**31)} to {2**31 - 1} (Kafka's int)"
            )
        now = self._begin(channel, now_ms)
        outcome = self._path.record(
            user, client_id, "other", 0.0, thread_time_ns, acks=-1, now_ms=now
        )
        request_ms = outcome.throttle_ms if outcome.throttled_by is not None else 0
        throttle, by = mutation_response_throttle(request_ms, mutation_throttle_ms)
        if by is None:
            return _NOT_THROTTLED
        manager: QuotaManager | ControllerMutationQuotaManager
        manager = mutation if by == "controller_mutation" else self._request
        if channel is None:
            end = manager.throttle(user, client_id, throttle, now_ms=now)
        else:
            end = self._channels.throttle(
                channel, throttle, manager=manager, user=user, client_id=client_id, now_ms=now
            )
        return QuotaOutcome(throttle, False, by, end)

    def on_response_sent(
        self,
        user: str,
        client_id: str,
        network_thread_time_ns: float,
        *,
        now_ms: int | None = None,
    ) -> None:
        """After a response went out: add its network-thread time, without a check.

        It only affects later requests (Kafka's ``recordNoThrottle``).
        """
        now = self._clock() if now_ms is None else now_ms
        self._channels._tick(now)  # maintenance, if due
        self._request.record_no_throttle(user, client_id, network_thread_time_ns, now_ms=now)

    def fetch_max_bytes(
        self, user: str, client_id: str, requested_max_bytes: int, *, now_ms: int | None = None
    ) -> int:
        """The fetch's max bytes capped by the client's fetch quota, as Kafka caps it.

        The cap is ``bound * (num_samples - 1) * window_seconds`` converted to a 32-bit
        int as Java does (saturating); with no quota it is ``2**31 - 1``.
        """
        if isinstance(requested_max_bytes, bool) or not isinstance(requested_max_bytes, int):
            raise InvalidValueError(
                f"invalid requested_max_bytes {requested_max_bytes!r}: expected an int"
            )
        now = self._clock() if now_ms is None else now_ms
        self._channels._tick(now)  # maintenance, if due
        return self._path.fetch_max_bytes(user, client_id, requested_max_bytes, now_ms=now)

    # -- internals ------------------------------------------------------------------

    def _begin(self, channel: int | None, now_ms: int | None) -> int:
        """Check the channel before anything is recorded; fix the request's time; run the
        maintenance if it is due."""
        if channel is not None and not self._channels.is_open(channel):
            raise ChannelError(
                f"unknown channel {channel!r}: expected an id returned by open() and not closed"
            )
        now = self._clock() if now_ms is None else now_ms
        self._channels._tick(now)  # the amortized check: one comparison when nothing is due
        return now

    def _check(
        self,
        user: str,
        client_id: str,
        kind: Literal["produce", "fetch", "other"],
        size_bytes: float,
        thread_time_ns: float,
        acks: int,
        channel: int | None,
        now: int,
    ) -> QuotaOutcome:
        """The core's request path; a channel is muted through :class:`ThrottledChannels`."""
        path = self._path
        if channel is None:  # accounted in the throttle-time sensor; nothing to queue
            outcome = path.handle(
                user, client_id, kind, size_bytes, thread_time_ns, acks=acks, now_ms=now
            )
            end = outcome.muted_until_ms
        else:
            outcome = path.record(
                user, client_id, kind, size_bytes, thread_time_ns, acks=acks, now_ms=now
            )
            if outcome.throttled_by is None:
                return _NOT_THROTTLED
            # The channels queue it and note its mute under their lock (so a reap between
            # the two cannot lose the unmute), through the manager whose throttle applied.
            end = self._channels.throttle(
                channel,
                outcome.throttle_ms,
                manager=path.manager(outcome.throttled_by),
                user=user,
                client_id=client_id,
                now_ms=now,
            )
        if outcome.throttled_by is None:
            return _NOT_THROTTLED
        return QuotaOutcome(outcome.throttle_ms, outcome.unrecorded, outcome.throttled_by, end)


def _manager(
    quota_type: QuotaType, manager: QuotaManager | None, callback: QuotaCallback | None
) -> QuotaManager:
    if manager is None:
        return QuotaManager(quota_type, callback=callback)
    if manager.quota_type != quota_type:
        raise InvalidConfigError(
            f"invalid {quota_type} manager: its quota type is {manager.quota_type!r},"
            f" expected {quota_type!r}"
        )
    if callback is not None and manager.callback is not callback:
        raise InvalidConfigError(
            f"invalid {quota_type} manager with quota_callback {callback!r}: the manager was"
            f" built with callback {manager.callback!r}; build it with"
            " QuotaManager(..., callback=quota_callback) or let the plugin create it"
        )
    return manager


def _usage(name: str, value: float) -> None:
    """Reject a bad usage value before anything of the request is recorded."""
    kind = type(value)
    if (kind is int or kind is float) and 0 <= value < math.inf:
        return  # the usual case, without the ABC check below
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= value < math.inf:
        raise InvalidUsageError(
            f"invalid usage value {name}={value!r}: expected a finite number >= 0"
        )
