"""Type stubs for ``kquota._core``, the compiled binding over the Rust core.

Everything here is re-exported from :mod:`kquota`; import it from there (except the
helpers :func:`applied_throttles`, :func:`double_to_int` and :func:`recommend_quotas`
of kquota's own modules).
Times are integer milliseconds. Every ``now_ms`` parameter is optional: when it
is omitted the core reads :func:`monotonic_ms` (Kafka's clock: wall-clock milliseconds
since the epoch at its first call, then monotonic), so use either caller-supplied times
or the clock with one manager, not both.
"""

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Final, Literal, Self, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "CLIENT_QUOTA_KEYS",
    "DEFAULT",
    "EXPIRY_TASK_MS",
    "IP_QUOTA_KEYS",
    "MUTATION_STRICT_SINCE",
    "NANOS_TO_PERCENT",
    "QUOTA_CALLBACK_METHODS",
    "QUOTA_TYPES",
    "REQUEST_LOG_NETWORK_TIME",
    "REQUEST_LOG_READ_KINDS",
    "REQUEST_LOG_REASONS",
    "REQUEST_LOG_SAME_POSITION",
    "REQUEST_LOG_TOPIC_OPS",
    "UNLIMITED",
    "UNLIMITED_CONNECTION_RATE",
    "BrokerNode",
    "Check",
    "ClusterMetadata",
    "ConnectionDecision",
    "ConnectionQuotas",
    "ControllerMutationQuotaManager",
    "Entity",
    "InvalidConfigError",
    "InvalidQuotaError",
    "InvalidUsageError",
    "InvalidValueError",
    "KquotaError",
    "MutationCheck",
    "MutationRequestQuota",
    "PartitionLeader",
    "ProxyDataPath",
    "ProxyDecision",
    "QuotaCallbackError",
    "QuotaManager",
    "ReplayKernel",
    "RequestOutcome",
    "RequestPath",
    "SampledRate",
    "SensorReading",
    "TokenBucket",
    "__version__",
    "applied_throttles",
    "canonical_ip",
    "check_proxy_options",
    "check_quota",
    "check_quota_key",
    "check_quota_value",
    "check_window_seconds",
    "double_to_int",
    "maintenance_due",
    "monotonic_ms",
    "mutation_is_strict",
    "mutation_response_throttle",
    "next_maintenance_ms",
    "next_sensor_expiry_ms",
    "parse_request_log",
    "recommend_quotas",
    "sanitize_user",
    "throttled_fetch_size",
    "token_bucket_throttle_time",
    "unrecorded_by_request",
    "update_cluster_metadata",
]

__version__: Final[str]

DEFAULT: Final[str]
"""The ``<default>`` entity marker, as in ``kafka-configs --entity-default``."""

UNLIMITED: Final[float]
"""The bound a sensor enforces when no quota applies: the double nearest 2**63 - 1."""

_QuotaType = Literal["produce", "fetch", "request"]

def monotonic_ms() -> int:
    """The clock the core uses when ``now_ms`` is omitted: Kafka's clock without its jumps.

    Wall-clock milliseconds since the epoch at the first call in the process, advanced by
    a monotonic clock since (never back). As on a broker, a new controller-mutation token
    bucket is full at its first use.
    """

def sanitize_user(principal: str) -> str:
    """A principal name in Kafka's sanitized form (URL-encoded UTF-8, ``%20`` and ``%2A``)."""

def canonical_ip(ip: str) -> str:
    """An IP address literal as the connection quota keys it: an IPv4-mapped IPv6 address
    (``::ffff:10.0.0.1``) is its IPv4 address, as Java's ``InetAddress`` reads it; IPv6 is
    compressed. Raises :class:`InvalidUsageError` for anything else (host names are not
    resolved)."""

def check_quota(value: float) -> float:
    """``value`` if every manager takes it as a quota (finite and greater than 0), else
    :class:`InvalidQuotaError`."""

def check_quota_key(key: str, *, ip: bool | None = None) -> None:
    """Raises :class:`InvalidQuotaError` with Kafka's message (``Invalid configuration key
    ...``) unless ``key`` is a client-quota key of an IP entity (``ip=True``), of a user or
    client-id entity (``ip=False``), or of either (``None``)."""

def check_quota_value(key: str, value: float, *, ip: bool | None = None) -> float:
    """``value`` if Kafka's controller accepts it for ``key`` (on the kind of entity
    ``ip`` names, as in :func:`check_quota_key`; ``None``: the kind ``key`` belongs on),
    and it is finite; else :class:`InvalidQuotaError` with Kafka's message, the value and
    what would have been accepted. Byte rates are LONGs and ``connection_creation_rate``
    an INT (whole, greater than 0, within the type); ``request_percentage`` and
    ``controller_mutation_rate`` are DOUBLEs (greater than 0). The one check of a quota
    setting that the quota file, ``kquota configs`` and the gateway's AlterClientQuotas
    all make."""

def unrecorded_by_request(request_ms: npt.ArrayLike) -> npt.NDArray[np.bool_]:
    """For each fetch, whether its request-quota throttle makes the fetch quota unrecord
    it (a throttle > 0): the request half of the rule :class:`RequestPath` applies, for a
    fetch manager's ``record_batch(..., unrecord_if=...)``."""

CLIENT_QUOTA_KEYS: Final[tuple[str, ...]]
"""The client-quota keys of user and client-id entities, in Kafka's order:
``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``,
``controller_mutation_rate``."""

IP_QUOTA_KEYS: Final[tuple[str, ...]]
"""The client-quota keys of IP entities: ``connection_creation_rate``."""

QUOTA_TYPES: Final[tuple[_QuotaType, ...]]
"""The client-quota types in the core's order: ``("produce", "fetch", "request")``."""

NANOS_TO_PERCENT: Final[float]
"""One nanosecond of thread time in ``request_percentage`` units (percent of one thread
for one second)."""

MUTATION_STRICT_SINCE: Final[dict[str, int]]
"""Each mutation API (``create_topics``, ``create_partitions``, ``delete_topics``) and the
first request version on which Kafka enforces ``controller_mutation_rate`` strictly."""

QUOTA_CALLBACK_METHODS: Final[tuple[str, ...]]
"""The methods a quota callback must have (:class:`kquota.QuotaCallback`)."""

@final
class Entity:
    """A quota entity: ``<user>``, ``<client-id>`` or ``<user, client-id>``.

    ``None`` leaves a dimension out; :data:`DEFAULT` is the default entity of that
    dimension. At least one of the two must be given. Entities are immutable and
    hashable.
    """

    def __new__(cls, user: str | None = None, client_id: str | None = None) -> Self: ...
    @property
    def user(self) -> str | None: ...
    @property
    def client_id(self) -> str | None: ...
    def __eq__(self, other: object, /) -> bool: ...
    def __hash__(self) -> int: ...

@final
class Check:
    """The outcome of a quota-checked record on a :class:`SampledRate`."""

    @property
    def violated(self) -> bool: ...
    @property
    def throttle_ms(self) -> int:
        """Kafka's throttle time as a 64-bit integer (0 when not violated)."""
    @property
    def rate(self) -> float | None:
        """The rate measured by the check, or ``None`` when no bound was set."""

@final
class SensorReading:
    """One live quota sensor as a metrics reporter reads it (see :meth:`QuotaManager.snapshot`)."""

    @property
    def user(self) -> str:
        """The ``user`` tag (sanitized; empty when the sensor is not per user)."""
    @property
    def client_id(self) -> str:
        """The ``client-id`` tag (empty when the sensor is not per client id)."""
    @property
    def rate(self) -> float:
        """The measured rate: bytes/s, or percent of one thread for ``request``."""
    @property
    def bound(self) -> float:
        """The bound the sensor enforces (:data:`UNLIMITED` when no quota applies)."""
    @property
    def throttle_time_avg(self) -> float | None:
        """The throttle-time average (NaN with no throttles), ``None`` if that sensor expired."""

@final
class SampledRate:
    """One Kafka ``Rate`` over sampled windows, with an optional upper bound.

    ``num_samples`` samples of ``window_ms`` each (Kafka's quota defaults: 11 x 1000).
    Safe to share between threads.
    """

    def __new__(
        cls, num_samples: int = 11, window_ms: int = 1000, quota: float | None = None
    ) -> Self: ...
    @property
    def num_samples(self) -> int: ...
    @property
    def window_ms(self) -> int: ...
    @property
    def quota(self) -> float | None: ...
    def set_quota(self, quota: float | None) -> None:
        """Replace the bound (``None`` removes it); samples are kept."""
    def record(self, value: float, now_ms: int | None = None) -> Check:
        """Record ``value`` (any finite float) and check the bound, as ``Sensor.record``."""
    def record_no_check(self, value: float, now_ms: int | None = None) -> None:
        """Record ``value`` without checking (or measuring) anything."""
    def measure(self, now_ms: int | None = None) -> float:
        """The rate per second at ``now_ms``. Measuring purges obsolete samples, as in Kafka."""

@final
class QuotaManager:
    """Kafka's client-quota manager for one quota type.

    ``quota_type`` is ``"produce"`` or ``"fetch"`` (bytes/s, values are bytes) or
    ``"request"`` (percent of one thread, values are handler-thread nanoseconds).
    ``window_ms`` must be a whole number of seconds (``quota.window.size.seconds``).
    Sensors idle for more than ``sensor_expiry_ms`` are removed by
    :meth:`expire_sensors`. Safe to share between threads.

    With a ``callback`` (a :class:`kquota.QuotaCallback`, KIP-257) the metric tags and
    quota limits come from it instead of Kafka's precedence; it is called (with the GIL)
    only when a client is resolved to its sensors or the limits are reset, never for a
    record of a client already resolved. An object without the protocol's methods raises
    :class:`InvalidConfigError`; what the callback raises or returns wrongly raises
    :class:`QuotaCallbackError`.

    ``kafka_version`` (``"4.4"`` or ``"4.4.0"``; 3.8 or later) is the Kafka release whose
    rules the manager follows where releases differ: from 4.2 removing the last quota of a
    level (client-id, user, user + client-id) turns that level off again, and from 4.4 a
    produce or fetch throttle over ``2**31 - 1`` ms saturates instead of wrapping. The
    default is 4.1. A malformed or older version raises :class:`InvalidConfigError`.
    """

    def __new__(
        cls,
        quota_type: _QuotaType,
        *,
        num_samples: int = 11,
        window_ms: int = 1000,
        sensor_expiry_ms: int = 3_600_000,
        callback: Any | None = None,
        kafka_version: str | None = None,
    ) -> Self: ...
    @property
    def kafka_version(self) -> str:
        """The Kafka release the manager follows, as ``"major.minor"``."""
    @property
    def callback(self) -> Any | None:
        """The quota callback the manager was built with, or ``None``."""
    def reset_limits(self) -> None:
        """With a callback (Kafka's ``updateQuotaMetricConfigs``): ask every live sensor's
        limit again and make every client resolve again on its next request. Every limit is
        asked before anything changes. Does nothing without a callback."""
    def reset_if_required(self) -> bool:
        """Ask the callback's ``quota_reset_required`` and reset if it says so (Kafka asks on
        every request; kquota when a client is resolved and when this is called)."""
    @property
    def quota_type(self) -> _QuotaType: ...
    @property
    def num_samples(self) -> int: ...
    @property
    def window_ms(self) -> int: ...
    @property
    def sensor_expiry_ms(self) -> int: ...
    @property
    def enabled(self) -> bool:
        """Whether a quota level is enabled: before Kafka 4.2 once any quota was set or
        removed, from 4.2 while a quota exists (Kafka measures nothing until then)."""

    # -- configuration -----------------------------------------------------------
    def set_quota(self, entity: Entity, value: float) -> None:
        """Set the override for ``entity``: a finite value > 0. Effective on the next record.
        With a callback: its ``update_quota`` is called, then the limits are reset."""
    def remove_quota(self, entity: Entity) -> None:
        """Delete the override for ``entity`` (a no-op on the bound if there is none).
        With a callback: its ``remove_quota`` is called, then the limits are reset."""
    def quota(self, entity: Entity) -> float | None:
        """The override configured for exactly ``entity``, or ``None``."""
    def quotas(self) -> list[tuple[Entity, float]]:
        """Every override, in no particular order."""

    # -- the request path ----------------------------------------------------------
    def tags(self, user: str, client_id: str) -> tuple[str, str]:
        """The ``(user, client-id)`` metric tags the client's requests are recorded under
        (with a callback: as it gives them now)."""
    def quota_for(self, user: str, client_id: str) -> float | None:
        """The bound that applies to the client now, or ``None`` when none does (with a
        callback: as it gives it now)."""
    def record(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> int:
        """Record usage with a quota check; return Kafka's throttle time in ms.

        This is ``maybeRecordAndGetThrottleTimeMs``: the value is a 32-bit int exactly
        as Kafka computes it, so a pathological quota can wrap it negative. A value
        ``<= 0`` means "not throttled". It does not throttle the channel: call
        :meth:`throttle` with the throttle you apply, and for fetches :meth:`unrecord`
        the bytes you did not send.
        """
    def unrecord(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> None:
        """Take back ``value`` recorded earlier (a throttled fetch), without a check."""
    def record_no_throttle(
        self, user: str, client_id: str, value: float, now_ms: int | None = None
    ) -> None:
        """Record usage without a check (e.g. network-thread time after the response)."""
    def throttle(
        self,
        user: str,
        client_id: str,
        throttle_ms: int,
        now_ms: int | None = None,
        channel: int | None = None,
    ) -> int:
        """Account a throttle of ``throttle_ms`` > 0 in the client's throttle-time sensor.

        Returns the time (ms) at which the throttle ends. With a ``channel`` (an id of
        yours) the throttle is also queued in the delay queue, and
        :meth:`expired_channels` hands the id back when the mute has ended; without one
        nothing is queued (no connection waits for it).
        """
    def expired_channels(self, now_ms: int | None = None) -> list[int]:
        """Remove the delay-queue entries ending at or before ``now_ms``; return their channels."""
    def queue_size(self) -> int:
        """Throttled channels waiting in the delay queue (Kafka's ``queue-size``)."""
    def max_value_in_quota_window(
        self, user: str, client_id: str, now_ms: int | None = None
    ) -> float:
        """The fetch-size cap: ``bound * (num_samples - 1) * window_seconds``."""

    # -- reading -----------------------------------------------------------------
    def measure(self, user: str, client_id: str, now_ms: int | None = None) -> float | None:
        """The client's current rate (purges, like a JMX read), or ``None`` with no sensor."""
    def bound(self, user: str, client_id: str) -> float | None:
        """The bound the client's existing sensor enforces, or ``None`` with no sensor."""
    def throttle_time_avg(
        self, user: str, client_id: str, now_ms: int | None = None
    ) -> float | None:
        """The throttle-time average (NaN with no throttles), ``None`` with no sensor."""
    def expire_sensors(self, now_ms: int | None = None) -> list[str]:
        """Remove sensors idle for longer than the expiry; return their Kafka names, sorted."""
    def sensor_names(self) -> list[str]:
        """Kafka names of the live sensors, sorted."""
    def sensor_count(self) -> int:
        """Number of live quota sensors."""
    def next_unmute_ms(self) -> int | None:
        """The earliest end of a mute still in the delay queue."""
    def snapshot(self, now_ms: int | None = None) -> list[SensorReading]:
        """Every live quota sensor with its rate at ``now_ms`` (purges, like a JMX read).

        This is what a metrics scrape reads: the core's own sensors, no second copy.
        """

    # -- batch (back-testing) ------------------------------------------------------
    def record_batch(
        self,
        now_ms: npt.NDArray[np.int64],
        key_index: npt.NDArray[np.int64],
        values: npt.NDArray[np.float64],
        keys: Sequence[tuple[str, str]],
        unrecord_if: npt.NDArray[np.bool_] | None = None,
    ) -> npt.NDArray[np.int32]:
        """Record many requests in order, with the GIL released.

        Event ``i`` is ``record(*keys[key_index[i]], values[i], now_ms[i])`` and its
        throttle is what that call returns. On a ``fetch`` manager a throttled fetch (its
        throttle > 0, or ``unrecord_if[i]``, e.g. because the request quota throttled it)
        is then unrecorded, as the broker takes back the bytes of a fetch it answers
        empty: so there a batch equals :meth:`record` followed by :meth:`unrecord` for each
        throttled event, not :meth:`record` alone. ``unrecord_if`` on a ``produce`` or
        ``request`` manager raises :class:`InvalidUsageError` (Kafka unrecords nothing
        there). Returns the throttle of every event.
        """

def _bench_noop_record(user: str, client_id: str, value: float, now_ms: int | None = None) -> int:
    """Benchmark floor (benches/test_record.py): parses :meth:`QuotaManager.record`'s
    arguments the same way, does nothing, returns 0."""

@final
class RequestOutcome:
    """What the quota check of one request decided (:meth:`RequestPath.record`).

    The three ``*_throttle_ms`` are each manager's throttle as Kafka's int (0 when the
    request was not recorded there; a pathological quota can make one wrap negative, which
    means "not throttled"). ``throttle_ms`` is the applied one, what the response carries
    (> 0, or 0 when not throttled); ``throttled_by`` the quota that applied it.
    ``unrecorded`` is set for a fetch whose bytes were taken back (send an empty
    response). ``muted_until_ms`` is the end of the throttle once accounted
    (:meth:`RequestPath.handle`), else ``None``.
    """

    @property
    def produce_throttle_ms(self) -> int: ...
    @property
    def fetch_throttle_ms(self) -> int: ...
    @property
    def request_throttle_ms(self) -> int: ...
    @property
    def throttle_ms(self) -> int: ...
    @property
    def throttled_by(self) -> Literal["produce", "fetch", "request"] | None: ...
    @property
    def unrecorded(self) -> bool: ...
    @property
    def muted_until_ms(self) -> int | None: ...
    @property
    def throttled(self) -> bool:
        """Whether the request was throttled (``throttle_ms > 0``)."""

@final
class RequestPath:
    """Kafka's request handling over a broker's produce, fetch and request managers.

    * ``produce``: ``size_bytes`` on the produce quota, ``thread_time_ns`` on the request
      quota (not with ``acks=0``);
    * ``fetch``: ``thread_time_ns`` on the request quota, then ``size_bytes`` (the
      response) on the fetch quota; if either throttles, the bytes are unrecorded;
    * ``other``: the request quota only.

    The applied throttle is the larger one, ties to the request quota; ``<= 0`` is no
    throttle. ``thread_time_ns=None`` (not known, e.g. in a traffic trace) skips the
    request quota. The managers must be of the produce, fetch and request type
    (:class:`InvalidConfigError` otherwise). Safe to share between threads.
    """

    def __new__(cls, produce: QuotaManager, fetch: QuotaManager, request: QuotaManager) -> Self: ...
    @property
    def produce(self) -> QuotaManager: ...
    @property
    def fetch(self) -> QuotaManager: ...
    @property
    def request(self) -> QuotaManager: ...
    def manager(self, quota_type: Literal["produce", "fetch", "request"]) -> QuotaManager:
        """The manager of ``quota_type``: the one a ``throttled_by`` names."""

    def record(
        self,
        user: str,
        client_id: str,
        kind: Literal["produce", "fetch", "other"],
        size_bytes: float = 0.0,
        thread_time_ns: float | None = None,
        *,
        acks: int = -1,
        now_ms: int | None = None,
    ) -> RequestOutcome:
        """Record the request on its quotas, unrecord a throttled fetch, decide the throttle.

        Accounts no throttle (``muted_until_ms`` is ``None``): throttle the client with
        ``manager(outcome.throttled_by).throttle(...)``, or use :meth:`handle`. A bad value
        raises before anything is recorded.
        """

    def handle(
        self,
        user: str,
        client_id: str,
        kind: Literal["produce", "fetch", "other"],
        size_bytes: float = 0.0,
        thread_time_ns: float | None = None,
        *,
        acks: int = -1,
        now_ms: int | None = None,
        channel: int | None = None,
    ) -> RequestOutcome:
        """:meth:`record`, then throttle the client through the manager whose throttle applied.

        That manager's :meth:`QuotaManager.throttle` accounts the throttle-time sensor and,
        with a ``channel``, queues it until ``muted_until_ms``; without one the throttle is
        accounted only.
        """

    def fetch_max_bytes(
        self, user: str, client_id: str, requested_max_bytes: int, now_ms: int | None = None
    ) -> int:
        """The fetch's max bytes capped by the client's fetch quota, as Kafka caps it.

        ``min(requested_max_bytes, (int) max_value_in_quota_window(...))`` with Java's
        double-to-int cast (saturating); the cap is ``2**31 - 1`` with no quota.
        """

@final
class ReplayKernel:
    """A sequential replay of one broker's requests under several quota configurations.

    The same rules as :class:`RequestPath` over :class:`QuotaManager` per request, in the
    Rust core, for back-testing: every scenario (one :class:`RequestPath` each: its three
    managers' window, sensor expiry and quotas as they are now; their sensors are not
    touched) is replayed in the same pass over the events.

    ``pairs`` are the distinct ``(user, client_id)`` of the trace (principal names as the
    client authenticates); an event names its pair by position. Events come as NumPy
    columns (:meth:`feed`) **in time order, ties in input order**, across batches too: an
    event before the one before it raises :class:`InvalidUsageError` naming both rows.

    ``closed_loop=False`` replays each event at its time. ``closed_loop=True``: clients
    honour KIP-219 (a throttled client sends nothing until its throttle ends and its
    later requests shift by what it waited, as ``kquota.backtest.frames.replay_closed``);
    events are held until nothing fed later can come before them, so :meth:`feed` returns
    the rows replayed so far and :meth:`finish` the rest. ``client_limits`` (closed loop
    only): bounded clients, ``(buffer_bytes, delivery_timeout_ms, api_timeout_ms)`` as
    ``kquota.backtest.frames.ClientLimits`` says; a client sends what it holds as soon as
    it may, and the rows' ``unserved`` says which requests it could not hold or send in
    time (1: buffer full, 2: timed out; 0: served).

    The broker's sensor-expiry task runs every ``expiry_task_ms`` (Kafka: 30 000; at the
    multiples of it, before that millisecond's events), removing sensors idle for longer
    than the manager's ``sensor_expiry_ms``; ``None`` never expires sensors.

    ``quota_pass`` (open loop only): ``"all"`` replays every quota; ``"request"`` only the
    request quota (produce and fetch throttles are 0); ``"bytes"`` only the produce and
    fetch quotas, given each event's request-quota throttles in :meth:`feed`'s
    ``request_throttle_ms`` (a fetch the request quota throttled is not recorded). A
    request pass then a byte pass decide what one pass decides; a replay split by sensor
    needs them, because a request's request and byte sensors may be in different
    partitions. A pass other than ``"all"`` takes no controller mutation.
    One kernel is used from one thread at a time (another thread gets a
    :class:`KquotaError`); the GIL is released while a batch is replayed.
    """

    def __new__(
        cls,
        pairs: Sequence[tuple[str, str]],
        scenarios: Sequence[RequestPath],
        *,
        closed_loop: bool = False,
        expiry_task_ms: int | None = 30000,
        client_limits: tuple[int, int, int] | None = None,
        quota_pass: Literal["all", "request", "bytes"] = "all",
    ) -> Self: ...
    @property
    def closed_loop(self) -> bool: ...
    @property
    def pair_count(self) -> int: ...
    @property
    def scenario_count(self) -> int: ...
    @property
    def pending(self) -> int:
        """Closed loop: events fed and not replayed yet (summed over scenarios)."""

    def add_pairs(self, pairs: Sequence[tuple[str, str]]) -> int:
        """Append pairs to the pair table; returns the position of the first."""

    def feed(
        self,
        time_ms: npt.NDArray[np.int64],
        pair: npt.NDArray[np.int32],
        kind: npt.NDArray[np.int8],
        bytes: npt.NDArray[np.float64],
        thread_ns: npt.NDArray[np.float64],
        acks: npt.NDArray[np.int16],
        partitions: npt.NDArray[np.int32] | None = None,
        strict: npt.NDArray[np.bool_] | None = None,
        topic_offsets: npt.NDArray[np.int32] | None = None,
        topic_partitions: npt.NDArray[np.int32] | None = None,
        request_throttle_ms: npt.NDArray[np.int32] | None = None,
    ) -> dict[str, npt.NDArray[Any]]:
        """Replay a batch of events; returns the rows replayed, as columns.

        ``kind``: 0 produce, 1 fetch, 2 other, 3 controller mutation (CreateTopics,
        CreatePartitions, DeleteTopics: ``partitions[i]`` >= 0 partitions on the
        controller-mutation quota, strict when ``strict[i]``, as
        :meth:`ControllerMutationQuotaManager.record_strict` / ``record_permissive``;
        ``partitions`` and ``strict`` may be ``None`` when no event is a mutation).
        ``topic_offsets`` (``n + 1`` int32, rising from 0) and ``topic_partitions``
        (int32 >= 0) give a mutation's partitions per topic in request order, event
        ``i``'s being ``topic_partitions[topic_offsets[i]:topic_offsets[i + 1]]`` (their
        sum must be ``partitions[i]``): it is recorded topic by topic, as Kafka's
        controller and :class:`MutationRequestQuota` do, so a strict request's topics are
        refused once an earlier one overdrew the bucket. A mutation without topics is one
        topic of ``partitions[i]``; both may be ``None``.
        ``bytes``: finite and >= 0 (ignored for other and mutations). ``thread_ns``:
        handler-thread nanoseconds, NaN when unknown (then the request quota is not
        consulted). ``acks``: 0 skips the request quota of a produce.
        ``request_throttle_ms`` (``quota_pass="bytes"`` only, and then required): each
        scenario's request-quota throttles of the batch, scenario after scenario
        (``scenario_count * n`` values), as a request pass returned them.
        Every column is checked first: a bad value raises :class:`InvalidUsageError`
        naming its row, and nothing is replayed.

        The columns: ``scenario``, ``seq`` (the event's position over every batch fed),
        ``throttle_ms`` (applied), ``throttled_by`` (0 produce, 1 fetch, 2 request,
        3 controller mutation, -1 none), ``produce_throttle_ms``, ``fetch_throttle_ms``,
        ``request_throttle_ms`` (each manager's int, may be negative after Kafka's wrap),
        ``mutation_throttle_ms`` (the mutation quota's; the applied throttle is the larger
        of it and the request quota's, ties to the request quota), ``refused_partitions``
        (the partitions of the topics a strict mutation was refused), ``sent_ms`` and
        ``added_latency_ms``. Open loop: every event of the batch, scenario by scenario.
        """

    def finish(self) -> dict[str, npt.NDArray[Any]]:
        """Closed loop: replay every event still held (the end of the trace)."""

    def set_quota(
        self,
        scenario: int,
        quota_type: Literal["produce", "fetch", "request"],
        entity: Entity,
        value: float,
        now_ms: int,
    ) -> None:
        """Set an override in one scenario at ``now_ms`` (not before what was fed)."""

    def remove_quota(
        self,
        scenario: int,
        quota_type: Literal["produce", "fetch", "request"],
        entity: Entity,
        now_ms: int,
    ) -> None:
        """Remove an override in one scenario at ``now_ms``."""

    def set_mutation_manager(self, scenario: int, manager: ControllerMutationQuotaManager) -> None:
        """Take one scenario's controller-mutation quota (window, sensor expiry, quotas)
        from ``manager`` as it is now; call before feeding (its buckets start new)."""

    def set_mutation_quota(self, scenario: int, entity: Entity, value: float, now_ms: int) -> None:
        """Set a ``controller_mutation_rate`` override in one scenario at ``now_ms``."""

    def remove_mutation_quota(self, scenario: int, entity: Entity, now_ms: int) -> None:
        """Remove a ``controller_mutation_rate`` override in one scenario at ``now_ms``."""

    def mutation_tokens(self, scenario: int, pair: int, now_ms: int) -> float | None:
        """The pair's controller-mutation bucket tokens at ``now_ms`` (``None``: none)."""

    def expire_sensors(self, now_ms: int) -> None:
        """Run the broker's sensor-expiry task at ``now_ms`` in every scenario."""

    def record_no_throttle(self, pair: int, thread_time_ns: float, now_ms: int) -> None:
        """Record network-thread time on the request quota without a check."""

    def measure(
        self,
        scenario: int,
        quota_type: Literal["produce", "fetch", "request"],
        pair: int,
        now_ms: int,
    ) -> float | None:
        """The pair's sensor rate at ``now_ms`` (purges, as a metrics read); ``None``: none."""

    def tags(
        self, scenario: int, quota_type: Literal["produce", "fetch", "request"], pair: int
    ) -> tuple[str, str]:
        """The metric tags ``(user, client-id)`` of the pair's sensor."""

    def quota_for(
        self, scenario: int, quota_type: Literal["produce", "fetch", "request"], pair: int
    ) -> float | None:
        """The quota that applies to the pair (``None``: none)."""

    def max_value_in_quota_window(
        self, scenario: int, quota_type: Literal["produce", "fetch", "request"], pair: int
    ) -> float:
        """The pair's fetch-size cap from its ``quota_type`` bound: bound x (num_samples - 1)
        x window seconds, or the largest double with no quota (``maxValueInQuotaWindow``;
        Kafka caps a fetch with the fetch quota's)."""

    def summaries(self) -> dict[str, Any]:
        """Per scenario, quota type and sensor tags that recorded something: the summary.

        Columns (lists of str for the text ones, NumPy arrays otherwise): ``scenario``,
        ``quota_type`` (``produce``, ``fetch``, ``request`` or ``controller_mutation``:
        usage in partitions, ``bytes`` the partitions asked), ``sensor_user``,
        ``sensor_client_id``, ``quota`` (NaN when unlimited), ``requests``, ``bytes``,
        ``usage``, ``throttled_requests``, ``throttled_fraction``, ``total_throttle_ms``,
        ``mean_throttle_ms``, ``p50_throttle_ms``, ``p99_throttle_ms``, ``max_throttle_ms``
        (nearest rank; negative throttles count as 0), ``peak_rate`` (largest usage in
        ``num_samples - 1`` whole windows, per second), ``utilization``,
        ``mean_added_latency_ms``, ``max_added_latency_ms``; as
        ``kquota.backtest.frames.summarize`` defines them.
        """

def applied_throttles(
    produce_ms: npt.NDArray[np.int32],
    fetch_ms: npt.NDArray[np.int32],
    request_ms: npt.NDArray[np.int32],
) -> npt.NDArray[np.int32]:
    """Per event, the throttle :class:`RequestPath` applies given its three quotas' throttles.

    The largest, 0 when none is > 0. The arrays must have one length
    (:class:`InvalidUsageError` otherwise). The GIL is released.
    """

def mutation_response_throttle(
    request_ms: int, mutation_ms: int
) -> tuple[int, Literal["request", "controller_mutation"] | None]:
    """A CreateTopics, CreatePartitions or DeleteTopics response's throttle (KIP-599).

    The larger of the request quota's applied throttle and the controller-mutation
    throttle, ties to the request quota, and the quota whose manager applies it;
    ``(0, None)`` when neither is > 0. Both are Kafka's 32-bit ints.
    """

EXPIRY_TASK_MS: Final[int]
"""How often a broker expires idle sensors (ms): Kafka's ``ExpireSensorTask``, 30 s."""

def maintenance_due(
    now_ms: int, next_expiry_ms: int | None, next_unmute_ms: int | None
) -> tuple[bool, bool]:
    """What a broker's maintenance has to do at ``now_ms``: ``(expire, drain)``.

    Expire idle sensors when ``next_expiry_ms`` has come (``None``: none has run yet, so
    at once); drain the delay queues when the earliest mute ``next_unmute_ms`` has ended,
    or when expiring.
    """

def next_sensor_expiry_ms(now_ms: int) -> int:
    """The next expiry after sensors were expired at ``now_ms``: :data:`EXPIRY_TASK_MS` later."""

def next_maintenance_ms(next_expiry_ms: int | None, next_unmute_ms: int | None) -> int | None:
    """When maintenance is next due: the earlier of the next expiry and the next mute's
    end; ``None`` when no expiry has run yet (due at once)."""

def check_proxy_options(
    upstream: str,
    *,
    listen: str = "127.0.0.1:0",
    max_request_bytes: int = 104857600,
    max_response_bytes: int = 104857600,
    connect_timeout: float = 10.0,
    upstream_timeout: float = 300.0,
    connections_max_idle: float = 600.0,
    default_num_partitions: int = 1,
    listener: str = "PLAINTEXT",
    threads: int = 2,
    broker_ports: tuple[int, int] | None = None,
    advertised_host: str | None = None,
) -> None:
    """Checks a proxy's options by the rules :class:`ProxyDataPath` starts with, without
    resolving a host name (it resolves them when it starts): :class:`InvalidConfigError`
    ``invalid <option> <value>: <what is expected>`` for the first option outside its rule
    (a bool given for a number is refused). :class:`kquota.proxy.ProxyServer` and
    ``kquota proxy`` call it with their options."""

def check_window_seconds(window_ms: int) -> None:
    """``quota.window.size.seconds``: a quota manager's window is a whole number of
    seconds; :class:`InvalidConfigError` naming ``window_ms`` otherwise."""

def recommend_quotas(
    quota_type: _QuotaType,
    times_ms: npt.NDArray[np.int64],
    usage: npt.NDArray[np.float64],
    runs: npt.NDArray[np.int64],
    entities: npt.NDArray[np.int64],
    *,
    target: float,
    num_samples: int = 11,
    window_ms: int = 1000,
    unrecord_if: npt.NDArray[np.bool_] | None = None,
    kafka_version: str | None = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Per entity, the smallest quota that throttles at most ``target`` of its requests.

    The rows are sorted by entity, then broker, then replay order (times ascending within
    a run). ``runs`` are the row offsets of each (entity, broker) run, from 0 to the row
    count; ``entities`` the run offsets of each entity, from 0 to the run count.
    ``unrecord_if`` (fetch only) marks requests the request quota throttled. Each candidate
    quota is replayed through one fresh sensor per broker (a fetch throttled by either
    quota is unrecorded); the search is ``kquota.backtest.frames.recommend``'s bisection
    to 0.1 %, rounded up to whole bytes/s (hundredths of a percent for ``request``).
    Returns the quotas and the fractions they throttle. Bad offsets, lengths, usage or
    targets raise :class:`InvalidUsageError` naming the value. ``kafka_version`` is the
    release whose throttle arithmetic applies (as :class:`QuotaManager`'s). The GIL is
    released.
    """

def double_to_int(value: float) -> int:
    """Java's ``(int)`` cast of a double: truncation toward zero, saturating, NaN to 0."""

REQUEST_LOG_REASONS: Final[tuple[str, ...]]
"""Why a request-log line gives no row, by code: :func:`parse_request_log`'s reason
``k`` is ``REQUEST_LOG_REASONS[k - 1]`` (0 is a row); the same tuple as
``kquota.backtest.requestlog.REASONS``."""

REQUEST_LOG_TOPIC_OPS: Final[tuple[str, ...]]
"""The ``topic_op`` codes of :func:`parse_request_log`: ``create``, ``grow``,
``delete``, ``seen``."""

REQUEST_LOG_READ_KINDS: Final[tuple[str, ...]]
"""The ``read_kind`` codes of :func:`parse_request_log`: ``produced`` (a produced batch:
its topic as the line names it, partition, base offset and size) and ``asked`` (a
partition a throttled full consumer fetch asked for: its fetch offset and
``partitionMaxBytes``)."""

REQUEST_LOG_NETWORK_TIME: Final[str]
"""How :func:`parse_request_log`'s ``thread_ns`` estimates the network threads' time Kafka
charges to the request quota beyond the logged handler time, in one sentence (a
back-test's note)."""

REQUEST_LOG_SAME_POSITION: Final[int]
"""The ``fetch_position`` of an incremental fetch that lists and forgets no partition:
it reads from where its connection's previous fetch did."""

def parse_request_log(
    offsets: Any,
    data: Any,
    validity: Any | None,
    offset: int,
    length: int,
    num_partitions: int = 1,
) -> dict[str, npt.NDArray[Any]]:
    """Each line of Kafka's request log as a back-test row, or why it has none.

    Takes an Arrow string array's buffers (``offsets``: int32, ``data``, ``validity``: a
    bitmap or None; any buffer-protocol object, read without a copy) and the array's
    ``offset`` and ``length``; ``num_partitions`` is what a created topic gets when it asks
    for -1 and has no assignments. Returns numpy arrays by column, one entry per line:
    ``reason`` (uint8: 0 for a row, else a :data:`REQUEST_LOG_REASONS` position + 1),
    ``wall_us`` (the timestamp's wall clock as UTC microseconds), ``before_us`` (response
    queue + send time, microseconds), ``bytes``, ``thread_ns`` (request-quota time: the
    handler's and the network threads' estimate, :data:`REQUEST_LOG_NETWORK_TIME`), ``acks``,
    ``kafka_throttle``, ``api_version``, ``correlation_id``, ``strict``, ``share_fetch``,
    ``fetch_connection`` and ``fetch_position`` (a consumer fetch's connection and read
    position as 64-bit keys: equal keys, same partitions and offsets; null on other rows);
    ``NAME_valid`` beside a nullable one; strings ``example``, ``user``, ``client``, ``api``,
    ``topic_name``, ``topic_id``, ``read_topic`` as ``NAME_offsets`` (int32) and
    ``NAME_data`` (uint8); the topic list as ``topic_offsets``, ``topics_valid``,
    ``topic_op``, ``topic_count``, ``topic_name``, ``topic_id`` (a Metadata topic's id);
    the reads list as ``read_offsets``, ``read_kind`` (:data:`REQUEST_LOG_READ_KINDS`),
    ``read_topic``, ``read_partition``, ``read_offset``, ``read_bytes``; and, on a throttled
    full consumer fetch, ``fetch_empty`` (the size of its response with no records) and
    ``fetch_max_bytes``. ``ValueError`` when the buffers are too short or not contiguous.
    The GIL is released while parsing.
    """

def throttled_fetch_size(
    version: int, empty: int, max_bytes: int, partitions: list[tuple[int, int, int]]
) -> int:
    """The size Kafka checked against the fetch quota for a throttled consumer fetch of
    ``version`` whose response with no records is ``empty`` bytes (``fetch_empty``), under
    its ``max_bytes``, when each of its partitions, in request order, could read
    ``(partition_max_bytes, available, first_batch)``: the bytes from its fetch offset to
    the end the consumer may read, and the size of the batch at that offset."""

class KquotaError(Exception):
    """The base of every error kquota raises."""

class InvalidValueError(KquotaError, ValueError):
    """A value outside what kquota (and Kafka) accepts; the message names it."""

class InvalidConfigError(InvalidValueError):
    """A malformed configuration: window, samples, quota type or entity."""

class InvalidQuotaError(InvalidValueError):
    """A quota value that is zero, negative, NaN or infinite, or a quota key or value Kafka
    refuses for an entity."""

class InvalidUsageError(InvalidValueError):
    """A value given to a record call that kquota does not accept.

    A negative, NaN or infinite usage, a throttle <= 0, or batch arrays that do not match.
    """

class QuotaCallbackError(KquotaError):
    """A custom quota callback (KIP-257) raised, or returned a value of the wrong type
    or range; the message names the callback, the method and the value."""

# -- KIP-257: custom quota callbacks ------------------------------------------------------

@final
class BrokerNode:
    """One broker of the cluster, as a Metadata response lists it."""

    def __new__(cls, node_id: int, host: str, port: int, rack: str | None = None) -> Self: ...
    @property
    def node_id(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def rack(self) -> str | None: ...
    def __eq__(self, value: object, /) -> bool: ...
    __hash__: None  # type: ignore[assignment]

@final
class PartitionLeader:
    """One partition and its leader's broker id (``None``: no leader known)."""

    def __new__(cls, topic: str, partition: int, leader: int | None = None) -> Self: ...
    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def leader(self) -> int | None: ...
    def __eq__(self, value: object, /) -> bool: ...
    __hash__: None  # type: ignore[assignment]

@final
class ClusterMetadata:
    """What a quota callback's ``update_cluster_metadata`` is told: the brokers, the
    partitions with their leaders, the cluster id and the broker this process serves (or
    stands in front of), when known."""

    def __new__(
        cls,
        brokers: Sequence[BrokerNode] = ...,
        partitions: Sequence[PartitionLeader] = ...,
        *,
        cluster_id: str | None = None,
        local_broker: int | None = None,
    ) -> Self: ...
    @property
    def brokers(self) -> list[BrokerNode]: ...
    @property
    def partitions(self) -> list[PartitionLeader]: ...
    @property
    def cluster_id(self) -> str | None: ...
    @property
    def local_broker(self) -> int | None: ...

def update_cluster_metadata(metadata: ClusterMetadata, *managers: QuotaManager) -> bool:
    """Tell the callbacks of ``managers`` about ``metadata``, each distinct callback once,
    and reset the limits of the managers whose callback answered true (Kafka's broker on
    an UpdateMetadata request). Managers without a callback are skipped. Whether any
    callback answered true."""

# -- KIP-599: the controller-mutation quota ----------------------------------------------

_MutationApi = Literal["create_topics", "create_partitions", "delete_topics"]

UNLIMITED_CONNECTION_RATE: Final[int]
"""``2**31 - 1``: Kafka's "no limit" of every connection-rate setting."""

@final
class MutationCheck:
    """The outcome of a strict or permissive controller-mutation record."""

    @property
    def accepted(self) -> bool:
        """Whether the mutation was recorded (strict refuses it when already overdrawn)."""
    @property
    def violated(self) -> bool:
        """Whether the check found the bucket below zero tokens."""
    @property
    def throttle_ms(self) -> int:
        """Kafka's throttle, ``Math.round(-tokens / quota * 1000)`` (0 when not violated)."""

@final
class TokenBucket:
    """Kafka's ``TokenBucket`` stat with a bound: refills ``quota`` tokens per second up to
    a burst of ``num_samples * window_ms / 1000 * quota`` (at Kafka's pinned commit).

    A new bucket has 0 tokens, last updated at time 0 (so it is full at a wall-clock
    time). Every operation is atomic; safe to share between threads.
    """

    def __new__(cls, quota: float, *, num_samples: int = 11, window_ms: int = 1000) -> Self: ...
    @property
    def quota(self) -> float: ...
    def set_quota(self, quota: float) -> None:
        """Replace the bound; the tokens are kept."""
    @property
    def num_samples(self) -> int: ...
    @property
    def window_ms(self) -> int: ...
    @property
    def burst(self) -> float: ...
    @property
    def state(self) -> tuple[float, int]:
        """``(tokens, last_update_ms)`` as stored (no refill)."""
    def measure(self, now_ms: int | None = None) -> float:
        """The tokens at ``now_ms``; refills, so it changes the state (as in Kafka)."""
    def record(self, value: float, now_ms: int | None = None) -> None:
        """Take ``value`` tokens (any finite float; negative gives back, up to the burst)."""
    def record_strict(self, permits: float, now_ms: int | None = None) -> MutationCheck:
        """Refuse (with the throttle) if already below zero, else take ``permits``."""
    def record_permissive(self, permits: float, now_ms: int | None = None) -> MutationCheck:
        """Take ``permits``, then check: always accepted, throttled if overdrawn."""

def token_bucket_throttle_time(tokens: float, quota: float) -> int:
    """``Math.round(-tokens / quota * 1000)``: the throttle of an overdrawn bucket."""

def mutation_is_strict(api: _MutationApi, version: int) -> bool:
    """Whether Kafka enforces the quota strictly on ``api`` at request ``version``.

    Strict since CreateTopics v6, CreatePartitions v3, DeleteTopics v5.
    """

@final
class ControllerMutationQuotaManager:
    """Kafka's controller-mutation quota (``controller_mutation_rate``, KIP-599).

    Partitions created or deleted per second, per user / client id with the same
    entities and precedence as :class:`QuotaManager`, measured by a token bucket.
    Nothing is measured until a quota is set. ``kafka_version`` is the release whose rules
    enable and clear quota levels, as :class:`QuotaManager`'s. Safe to share between
    threads.
    """

    def __new__(
        cls,
        *,
        num_samples: int = 11,
        window_ms: int = 1000,
        sensor_expiry_ms: int = 3600000,
        kafka_version: str | None = None,
    ) -> Self: ...
    @property
    def kafka_version(self) -> str:
        """The Kafka release the manager follows, as ``"major.minor"``."""
    @property
    def num_samples(self) -> int: ...
    @property
    def window_ms(self) -> int: ...
    @property
    def enabled(self) -> bool: ...
    def set_quota(self, entity: Entity, value: float) -> None: ...
    def remove_quota(self, entity: Entity) -> None: ...
    def quota(self, entity: Entity) -> float | None: ...
    def quotas(self) -> list[tuple[Entity, float]]: ...
    def tags(self, user: str, client_id: str) -> tuple[str, str]: ...
    def quota_for(self, user: str, client_id: str) -> float | None: ...
    def record(self, user: str, client_id: str, permits: float, now_ms: int | None = None) -> int:
        """Kafka's ``maybeRecordAndGetThrottleTimeMs`` (strict), the throttle as an int."""
    def record_strict(
        self, user: str, client_id: str, permits: float, now_ms: int | None = None
    ) -> MutationCheck:
        """Refused (THROTTLING_QUOTA_EXCEEDED) with the throttle when already overdrawn."""
    def record_permissive(
        self, user: str, client_id: str, permits: float, now_ms: int | None = None
    ) -> MutationCheck:
        """Always accepted; throttled when the record overdrew the bucket."""
    def record_for(
        self,
        api: _MutationApi,
        version: int,
        user: str,
        client_id: str,
        permits: float,
        now_ms: int | None = None,
    ) -> MutationCheck:
        """Strict or permissive as Kafka picks for ``api`` at request ``version``."""
    def request_quota(
        self, user: str, client_id: str, strict: bool, now_ms: int | None = None
    ) -> MutationRequestQuota:
        """The quota of one request (Kafka's Strict/PermissiveControllerMutationQuota),
        made at ``now_ms``: while quotas are enabled it gets or creates the client's
        sensors then, and records into them for its life, even if a quota change moves
        the client to other tags meanwhile."""
    def tokens(self, user: str, client_id: str, now_ms: int | None = None) -> float | None:
        """The client's tokens at ``now_ms`` (refills); ``None`` without a bucket."""
    def mutation_rate(self, user: str, client_id: str, now_ms: int | None = None) -> float | None:
        """Kafka's ``mutation-rate``: partitions mutated per second (a ``Rate`` over the
        broker's metrics windows, 2 x 30 s; refused strict mutations not counted);
        ``None`` without a sensor."""
    def throttle(
        self,
        user: str,
        client_id: str,
        throttle_ms: int,
        now_ms: int | None = None,
        channel: int | None = None,
    ) -> int:
        """Account a throttle > 0 (and queue ``channel`` until it ends); returns the end."""
    def throttle_time_avg(
        self, user: str, client_id: str, now_ms: int | None = None
    ) -> float | None: ...
    def expired_channels(self, now_ms: int | None = None) -> list[int]: ...
    @property
    def queue_size(self) -> int: ...
    def next_unmute_ms(self) -> int | None:
        """The earliest end of a mute still in the delay queue (``None`` when empty)."""
    def sensor_names(self) -> list[str]: ...
    @property
    def sensor_count(self) -> int: ...
    def expire_sensors(self, now_ms: int | None = None) -> list[str]: ...

@final
class MutationRequestQuota:
    """One mutation request's quota: records each topic's partitions in turn."""

    @property
    def strict(self) -> bool: ...
    def record(self, permits: float, now_ms: int | None = None) -> MutationCheck: ...
    @property
    def last_throttle_ms(self) -> int:
        """The throttle of the last record that overdrew the bucket, as that record
        computed it (0 before any did): Kafka's ``lastThrottleTimeMs``."""
    @property
    def is_exceeded(self) -> bool:
        """A strict quota that refused a record (a permissive one never is)."""
    def throttle_time(self, now_ms: int | None = None) -> int:
        """The last throttle minus the time since it was computed, at least 0."""

# -- KIP-612: connection-creation rates ----------------------------------------------------

@final
class ConnectionDecision:
    """What the broker does with a new connection."""

    @property
    def accept_delay_ms(self) -> int:
        """How long the acceptor waits before accepting (broker/listener rate)."""
    @property
    def ip_throttle_ms(self) -> int:
        """> 0: the IP is over its rate; accepted, then closed after this many ms."""

@final
class ProxyDecision:
    """One quota decision of the proxy's data path (:meth:`ProxyDataPath.take_decisions`,
    ``kquota.proxy.ProxyServer.take_decisions``): a request as its quotas were checked.

    Made only by the data path. Two decisions are equal when every field is.
    """

    @property
    def at_ms(self) -> int:
        """When the quotas were checked, on :func:`monotonic_ms`."""
    @property
    def user(self) -> str:
        """The connection's user, whose quotas applied (``ANONYMOUS`` without SASL)."""
    @property
    def client_id(self) -> str:
        """The request header's client id."""
    @property
    def api_key(self) -> int:
        """The request's API key."""
    @property
    def api_version(self) -> int:
        """The request's API version."""
    @property
    def correlation_id(self) -> int:
        """The request header's correlation id."""
    @property
    def follower(self) -> bool:
        """A fetch from a replica: held to the request quota only."""
    @property
    def size(self) -> float:
        """A produce request's size or a consumer fetch response's size; 0 otherwise."""
    @property
    def thread_ns(self) -> float:
        """The request time recorded (ns): the proxy's own, with the broker's as the proxy
        sees it for an API Kafka answers at once."""
    @property
    def acks(self) -> int:
        """A produce request's ``acks`` (-1 for other APIs)."""
    @property
    def outcome(self) -> RequestOutcome:
        """For a mutation request, the request quota's, with the applied throttle."""
    @property
    def mutation_throttle_ms(self) -> int | None:
        """A mutation request's controller-mutation throttle (``None`` for other APIs)."""
    @property
    def peer(self) -> str:
        """The client's ``HOST:PORT``."""
    @property
    def broker(self) -> int:
        """In gateway mode, the node id of the broker whose quotas applied (-1 for a
        bootstrap connection before any response named the broker it reached); -1 for a
        sidecar."""
    @property
    def api(self) -> str:
        """The API's name as a capture records it (:meth:`ProxyDataPath.api_name`;
        ``follower_fetch`` for a replica's fetch)."""

@final
class ProxyDataPath:
    """Kafka's client quotas on every connection relayed to one broker: the proxy's data
    path in Rust (the ``kquota-proxy`` crate) on ``threads`` threads of its own, with the
    quotas of the three managers read directly. Returns once it listens on ``listen``
    (``HOST:PORT``, port 0: any free port); :class:`OSError` when it cannot. Used by
    :class:`kquota.proxy.ProxyServer`. Its options are held to :func:`check_proxy_options`'s
    rules, and its host names must resolve: :class:`InvalidConfigError` otherwise.

    With ``broker_ports=(first, last)`` it is a gateway in front of the cluster whose
    bootstrap addresses ``upstream`` lists (comma-separated): broker ``n`` gets the port
    ``first + n`` and sensors of its own (connection rates included), and responses name
    the brokers at ``advertised_host`` (default: the listen IP) and those ports.

    With ``admin`` (an object with ``describe()`` and ``alter(changes, validate_only)``,
    such as :class:`kquota.proxy.StoreAdmin`), DescribeClientQuotas and AlterClientQuotas
    are answered by the proxy, after Kafka's checks, instead of forwarded: with
    ``admin_ask_cluster``, only where the cluster allows the client's principal the same
    request (asked on the client's own connection, an alteration as ``validate_only``), and
    with ``admin_users``, only for connections whose principal is ``User:`` one of those
    names; others get Kafka's ``CLUSTER_AUTHORIZATION_FAILED``.

    A gateway whose managers have a quota callback needs ``callback_factory``, called
    with no argument for each broker it learns: each broker's three managers get the new
    callback it returns (each Kafka broker has an instance of its own), told every quota
    set so far, every change after and the cluster metadata as that broker.
    """

    def __new__(
        cls,
        upstream: str,
        produce: QuotaManager,
        fetch: QuotaManager,
        request: QuotaManager,
        *,
        mutation: ControllerMutationQuotaManager | None = None,
        default_num_partitions: int = 1,
        connection_quotas: ConnectionQuotas | None = None,
        listener: str = "PLAINTEXT",
        listen: str = "127.0.0.1:0",
        max_request_bytes: int = 104857600,
        max_response_bytes: int = 104857600,
        connect_timeout: float = 10.0,
        upstream_timeout: float = 300.0,
        connections_max_idle: float = 600.0,
        threads: int = 2,
        keep_decisions: bool = False,
        broker_ports: tuple[int, int] | None = None,
        advertised_host: str | None = None,
        admin: object | None = None,
        admin_ask_cluster: bool = True,
        admin_users: list[str] | None = None,
        callback_factory: Callable[[], object] | None = None,
    ) -> Self: ...
    @property
    def address(self) -> tuple[str, int]: ...
    @property
    def brokers(self) -> list[tuple[int, str, int]]:
        """A gateway's brokers: ``(node_id, upstream "HOST:PORT", port on the proxy)``, by
        node id (empty for a sidecar)."""
    def broker_managers(
        self,
    ) -> dict[
        int,
        tuple[
            QuotaManager,
            QuotaManager,
            QuotaManager,
            ControllerMutationQuotaManager | None,
            ConnectionQuotas | None,
        ],
    ]:
        """A gateway's brokers' managers, by node id: ``(produce, fetch, request,
        mutation, connection_quotas)`` for each broker a response has named (empty for a
        sidecar). Each is a new handle on the manager the broker's connections record on
        (not a copy), so reading it reads that broker's own sensors."""
    @property
    def connections(self) -> int: ...
    @property
    def running(self) -> bool: ...
    @property
    def ip_throttled_connections(self) -> int: ...
    @property
    def dropped_decisions(self) -> int: ...
    ANONYMOUS: ClassVar[str]
    """The user of a connection without SASL, or whose principal the proxy cannot read."""
    @staticmethod
    def api_name(api_key: int) -> str:
        """An API's name as a capture records it: Kafka's name in snake case
        (``"create_topics"``), ``"api_<key>"`` for a key the data path does not know."""
    def take_decisions(self) -> list[ProxyDecision]:
        """The quota decisions made since the last call, oldest first; empty unless built
        with ``keep_decisions``."""
    def shutdown(self, timeout: float = 30.0) -> None: ...

@final
class ConnectionQuotas:
    """Kafka's connection-creation-rate quotas of one broker (KIP-612).

    Per IP (``connection_creation_rate`` with overrides and a ``<default>``), per
    listener and broker-wide (``max.connection.creation.rate``). Rates are whole
    connections per second; :data:`UNLIMITED_CONNECTION_RATE` means no limit. Safe to
    share between threads.
    """

    def __new__(
        cls,
        *,
        num_samples: int = 11,
        window_ms: int = 1000,
        max_connection_creation_rate: int = 2147483647,
        inter_broker_listener: str | None = None,
    ) -> Self: ...
    @property
    def num_samples(self) -> int: ...
    @property
    def window_ms(self) -> int: ...
    def set_ip_quota(self, ip: str | None, rate: int | None) -> None:
        """Set (``rate=None``: remove) the quota of ``ip``, or of the ``<default>`` IP."""
    def ip_quota(self, ip: str) -> int: ...
    def ip_quotas(self) -> tuple[list[tuple[str, int]], int | None]: ...
    def set_broker_max_rate(self, rate: int) -> None: ...
    @property
    def broker_max_rate(self) -> int: ...
    def add_listener(
        self, listener: str, max_connection_creation_rate: int | None = None
    ) -> None: ...
    def set_listener_max_rate(self, listener: str, rate: int | None) -> None: ...
    def remove_listener(self, listener: str) -> bool: ...
    def listeners(self) -> list[tuple[str, int]]: ...
    def accept_delay(self, listener: str, now_ms: int | None = None) -> int:
        """Record a new connection in the broker and listener rates; the acceptor's delay."""
    def admit_ip(self, listener: str, ip: str, now_ms: int | None = None) -> int:
        """The IP check after the delay: 0 admitted, else close after that many ms."""
    def on_new_connection(
        self, listener: str, ip: str, now_ms: int | None = None
    ) -> ConnectionDecision:
        """Both steps: the delay, then the IP check at ``now_ms + delay``."""
    def broker_rate(self, now_ms: int | None = None) -> float: ...
    def listener_rate(self, listener: str, now_ms: int | None = None) -> float: ...
    def ip_rate(self, ip: str, now_ms: int | None = None) -> float | None: ...
    def ip_bound(self, ip: str) -> float | None: ...
    def listener_throttle_avgs(
        self, listener: str, now_ms: int | None = None
    ) -> tuple[float, float]:
        """Average accept delay and average IP throttle of a listener (NaN when none)."""
    def for_another_broker(self) -> ConnectionQuotas:
        """Another broker of the same cluster: the same configuration, shared (a change
        through either applies to both), and sensors of its own, as each Kafka broker
        counts only the connections it accepts."""
    def ip_sensor_names(self) -> list[str]: ...
    def expire_sensors(self, now_ms: int | None = None) -> list[str]: ...
