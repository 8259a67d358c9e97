"""A pure-Python reference model of ``kquota._core``, written straight from the spec.

It implements the API of ``python/kquota/_core.pyi`` from
``shared/docs/kafka-quota-semantics.md`` (section numbers below refer to it): plain,
single-threaded and without cleverness, so that it can serve as a second oracle for the
Rust core (tests replay the same traces through both) and as the baseline of the
benchmarks.

It does not need the compiled module: when ``kquota`` cannot be imported it defines
stand-in exception classes with the same names. Those, Java's arithmetic, the argument
checks and the sampled windows are in ``reference_primitives.py``.
"""

from __future__ import annotations

import heapq
import itertools
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Final, Literal, TypeVar

import numpy as np
import numpy.typing as npt
from reference_primitives import (
    InvalidConfigError,
    InvalidQuotaError,
    InvalidUsageError,
    InvalidValueError,
    KquotaError,
    Samples,
    checked_int,
    checked_quota,
    checked_sample,
    checked_str,
    checked_usage,
    checked_window,
    java_round,
    monotonic_ms,
    now_or_clock,
    to_int32,
)

__all__ = [
    "DEFAULT",
    "UNLIMITED",
    "Check",
    "Entity",
    "InvalidConfigError",
    "InvalidQuotaError",
    "InvalidUsageError",
    "InvalidValueError",
    "KquotaError",
    "QuotaManager",
    "QuotaType",
    "RequestOutcome",
    "RequestPath",
    "SampledRate",
    "monotonic_ms",
    "sanitize_user",
]

DEFAULT: Final = "<default>"
"""The ``<default>`` entity marker."""

UNLIMITED: Final = float(2**63 - 1)
"""The bound of a sensor no quota applies to: the double nearest 2**63 - 1 (section 6.4)."""

QuotaType = Literal["produce", "fetch", "request"]

_SENSOR_TYPE_NAMES: Final[dict[str, str]] = {
    "produce": "Produce",
    "fetch": "Fetch",
    "request": "Request",
}
_NANOS_TO_PERCENT: Final = 100.0 / 1e9  # section 5: computed once, then times the nanos
_THROTTLE_TIME_SAMPLES: Final = 2  # the broker's default metric config (section 2.5)
_THROTTLE_TIME_WINDOW_MS: Final = 30_000

# The enabled-levels bits of section 6.2.
_CLIENT_LEVEL: Final = 1
_USER_LEVEL: Final = 2
_USER_CLIENT_LEVEL: Final = 4
_SINGLE_LEVELS: Final = frozenset({_CLIENT_LEVEL, _USER_LEVEL, _USER_CLIENT_LEVEL})

# Java's URLEncoder leaves these alone (and '*', which Kafka's sanitizer then encodes anyway).
_URL_UNRESERVED: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_"
)


def sanitize_user(principal: str) -> str:
    """A principal name in Kafka's sanitized form (section 6.1).

    Java's ``URLEncoder`` keeps ASCII letters, digits and ``.-_*``, turns a space into ``+``
    and percent-encodes every other UTF-8 byte in upper case; Kafka then replaces ``+`` by
    ``%20`` and ``*`` by ``%2A``. That is the same as percent-encoding every byte except
    ASCII letters, digits and ``.-_``. An unpaired surrogate becomes ``?`` (``%3F``), as in
    Java.
    """
    principal = checked_str("principal", principal)
    parts: list[str] = []
    for char in principal:
        if char in _URL_UNRESERVED:
            parts.append(char)
        else:
            parts.extend(f"%{byte:02X}" for byte in char.encode("utf-8", errors="replace"))
    return "".join(parts)


# -- public classes -----------------------------------------------------------------------


@dataclass(frozen=True)
class Entity:
    """A quota entity: ``<user>``, ``<client-id>`` or ``<user, client-id>``.

    ``None`` leaves a dimension out; :data:`DEFAULT` is the default entity of that
    dimension. At least one of the two must be given.
    """

    user: str | None = None
    client_id: str | None = None

    def __post_init__(self) -> None:
        if self.user is not None:
            checked_str("user", self.user)
        if self.client_id is not None:
            checked_str("client_id", self.client_id)
        if self.user is None and self.client_id is None:
            raise InvalidConfigError("an entity needs a user, a client_id or both; got neither")


@dataclass(frozen=True)
class Check:
    """The outcome of a quota-checked record on a :class:`SampledRate`."""

    violated: bool
    throttle_ms: int
    """Kafka's throttle time as a 64-bit integer (0 when not violated)."""
    rate: float | None
    """The rate measured by the check, or ``None`` when no bound was set."""


class SampledRate:
    """One Kafka ``Rate`` over sampled windows, with an optional upper bound."""

    def __init__(
        self, num_samples: int = 11, window_ms: int = 1000, quota: float | None = None
    ) -> None:
        samples, window = checked_window(num_samples, window_ms)
        self._quota = None if quota is None else checked_quota(quota)
        self._samples = Samples(samples, window)

    @property
    def num_samples(self) -> int:
        return self._samples.num_samples

    @property
    def window_ms(self) -> int:
        return self._samples.window_ms

    @property
    def quota(self) -> float | None:
        return self._quota

    def set_quota(self, quota: float | None) -> None:
        """Replace the bound (``None`` removes it); samples are kept."""
        self._quota = None if quota is None else checked_quota(quota)

    def record(self, value: float, now_ms: int | None = None) -> Check:
        """Record ``value`` (any finite float) and check the bound (sections 3 and 4)."""
        amount = checked_sample(value)
        now = now_or_clock(now_ms)
        self._samples.record(amount, now)
        if self._quota is None:
            return Check(violated=False, throttle_ms=0, rate=None)
        rate = self._samples.rate(now)
        if rate <= self._quota:
            return Check(violated=False, throttle_ms=0, rate=rate)
        excess = ((rate - self._quota) / self._quota) * self._samples.elapsed_window_ms(now)
        return Check(violated=True, throttle_ms=java_round(excess), rate=rate)

    def record_no_check(self, value: float, now_ms: int | None = None) -> None:
        """Record ``value`` without checking (or measuring) anything."""
        amount = checked_sample(value)
        self._samples.record(amount, now_or_clock(now_ms))

    def measure(self, now_ms: int | None = None) -> float:
        """The rate per second at ``now_ms``; purges obsolete samples, as in Kafka."""
        return self._samples.rate(now_or_clock(now_ms))


# -- the quota manager (sections 5 to 8, 11) ----------------------------------------------


class _Default(Enum):
    """The ``<default>`` entity of a dimension, apart from any name (even ``"<default>"``)."""

    MARKER = DEFAULT


_Name = str | _Default | None  # one dimension of an override key: a name, default or absent
_EntityKey = tuple[_Name, _Name]  # (sanitized user, client id)
_Tags = tuple[str, str]  # (user tag, client-id tag)
_ANY: Final = _Default.MARKER


def _entity_key(entity: Entity) -> _EntityKey:
    user: _Name
    if entity.user is None:
        user = None
    elif entity.user == DEFAULT:
        user = _ANY
    else:
        user = sanitize_user(entity.user)
    client: _Name = _ANY if entity.client_id == DEFAULT else entity.client_id
    return user, client


def _entity_level(key: _EntityKey) -> int:
    user, client = key
    if user is None:
        return _CLIENT_LEVEL
    return _USER_LEVEL if client is None else _USER_CLIENT_LEVEL


@dataclass(slots=True)
class _Sensor:
    last_record_ms: int
    """Creation time, then the time of every record (section 11)."""


@dataclass(slots=True)
class _QuotaSensor(_Sensor):
    rate: SampledRate


@dataclass(slots=True)
class _ThrottleTimeSensor(_Sensor):
    samples: Samples


_SensorT = TypeVar("_SensorT", bound=_Sensor)


def _pop_idle(sensors: dict[_Tags, _SensorT], now_ms: int, expiry_ms: int) -> list[_Tags]:
    idle = [tags for tags, sensor in sensors.items() if now_ms - sensor.last_record_ms > expiry_ms]
    for tags in idle:
        del sensors[tags]
    return idle


class QuotaManager:
    """Kafka's client-quota manager for one quota type."""

    def __init__(
        self,
        quota_type: QuotaType,
        *,
        num_samples: int = 11,
        window_ms: int = 1000,
        sensor_expiry_ms: int = 3_600_000,
    ) -> None:
        if quota_type not in _SENSOR_TYPE_NAMES:
            raise InvalidConfigError(
                f"quota_type must be 'produce', 'fetch' or 'request', got {quota_type!r}"
            )
        samples, window = checked_window(num_samples, window_ms)
        if window % 1000:
            raise InvalidConfigError(
                f"window_ms must be a whole number of seconds (a multiple of 1000), got {window}"
            )
        expiry = checked_int("sensor_expiry_ms", sensor_expiry_ms)
        if expiry < 0:
            raise InvalidConfigError(f"sensor_expiry_ms must be >= 0, got {expiry}")
        self._quota_type: QuotaType = quota_type
        self._type_name = _SENSOR_TYPE_NAMES[quota_type]
        self._num_samples = samples
        self._window_ms = window
        self._sensor_expiry_ms = expiry
        self._levels = 0
        self._overrides: dict[_EntityKey, tuple[Entity, float]] = {}
        self._quota_sensors: dict[_Tags, _QuotaSensor] = {}
        self._throttle_sensors: dict[_Tags, _ThrottleTimeSensor] = {}
        self._delay_queue: list[tuple[int, int, int]] = []  # (end_ms, insertion order, channel)
        self._insertions = itertools.count()

    @property
    def quota_type(self) -> QuotaType:
        return self._quota_type

    @property
    def num_samples(self) -> int:
        return self._num_samples

    @property
    def window_ms(self) -> int:
        return self._window_ms

    @property
    def sensor_expiry_ms(self) -> int:
        return self._sensor_expiry_ms

    @property
    def enabled(self) -> bool:
        """Whether any quota was ever set or removed (Kafka measures nothing until then)."""
        return self._levels != 0

    # -- configuration ---------------------------------------------------------------------

    def set_quota(self, entity: Entity, value: float) -> None:
        """Set the override for ``entity``: a finite value > 0 (section 6.5)."""
        entity = _as_entity(entity)
        bound = checked_quota(value)
        key = _entity_key(entity)
        self._levels |= _entity_level(key)
        self._overrides[key] = (entity, bound)
        self._refresh_bounds(key)

    def remove_quota(self, entity: Entity) -> None:
        """Delete the override for ``entity``; the level counts as touched all the same."""
        key = _entity_key(_as_entity(entity))
        self._levels |= _entity_level(key)
        self._overrides.pop(key, None)
        self._refresh_bounds(key)

    def quota(self, entity: Entity) -> float | None:
        """The override configured for exactly ``entity``, or ``None``."""
        override = self._overrides.get(_entity_key(_as_entity(entity)))
        return None if override is None else override[1]

    def quotas(self) -> list[tuple[Entity, float]]:
        """Every override, in no particular order."""
        return list(self._overrides.values())

    # -- the request path --------------------------------------------------------------------

    def tags(self, user: str, client_id: str) -> tuple[str, str]:
        """The ``(user, client-id)`` metric tags of a client's requests (section 6.3)."""
        sanitized = sanitize_user(user)
        client = checked_str("client_id", client_id)
        if self._levels in (0, _CLIENT_LEVEL):
            return "", client
        if self._levels == _USER_LEVEL:
            return sanitized, ""
        if self._levels == _USER_CLIENT_LEVEL:
            return sanitized, client
        overrides = self._overrides
        if (sanitized, client) in overrides or (sanitized, _ANY) in overrides:
            return sanitized, client
        if (sanitized, None) in overrides:
            return sanitized, ""
        if (_ANY, client) in overrides or (_ANY, _ANY) in overrides:
            return sanitized, client
        if (_ANY, None) in overrides:
            return sanitized, ""
        return "", client

    def quota_for(self, user: str, client_id: str) -> float | None:
        """The bound that applies to the client now, or ``None`` when none does."""
        return self._lookup(self.tags(user, client_id))

    def record(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> int:
        """Record usage with a quota check; return Kafka's (32-bit) throttle time in ms."""
        tags = self.tags(user, client_id)
        amount = self._usage(value)
        now = now_or_clock(now_ms)
        if not self.enabled:
            return 0
        sensor = self._sensors(tags, now)[0]
        sensor.last_record_ms = now
        check = sensor.rate.record(amount, now)
        if not check.violated:
            return 0
        throttle = check.throttle_ms
        if self._quota_type == "request":
            throttle = min(throttle, self._window_ms)  # KIP-124: at most one window
        return to_int32(throttle)

    def unrecord(self, user: str, client_id: str, value: float, now_ms: int | None = None) -> None:
        """Take back ``value`` recorded earlier (a throttled fetch), without a check."""
        tags = self.tags(user, client_id)
        self._record_unchecked(tags, -self._usage(value), now_or_clock(now_ms))

    def record_no_throttle(
        self, user: str, client_id: str, value: float, now_ms: int | None = None
    ) -> None:
        """Record usage without a check (e.g. network-thread time after the response)."""
        tags = self.tags(user, client_id)
        self._record_unchecked(tags, self._usage(value), now_or_clock(now_ms))

    def throttle(
        self,
        user: str,
        client_id: str,
        throttle_ms: int,
        now_ms: int | None = None,
        channel: int | None = None,
    ) -> int:
        """Account a throttle of ``throttle_ms`` > 0: throttle-time sensor, and the delay
        queue when it has a ``channel`` (without one nothing would drain the entry).

        Like Kafka's ``throttle``, this gets or creates the client's sensors even on a
        manager that has no quota (the broker never throttles through such a manager).
        """
        tags = self.tags(user, client_id)
        delay = checked_int("throttle_ms", throttle_ms)
        if delay <= 0:
            raise InvalidUsageError(f"throttle_ms must be > 0, got {delay}")
        if channel is not None:
            channel = checked_int("channel", channel)
        now = now_or_clock(now_ms)
        sensor = self._sensors(tags, now)[1]
        sensor.last_record_ms = now
        sensor.samples.record(float(delay), now)
        end_ms = now + delay
        if channel is not None:
            heapq.heappush(self._delay_queue, (end_ms, next(self._insertions), channel))
        return end_ms

    def expired_channels(self, now_ms: int | None = None) -> list[int]:
        """Remove the delay-queue entries ending at or before ``now_ms``; return their channels."""
        now = now_or_clock(now_ms)
        channels: list[int] = []
        while self._delay_queue and self._delay_queue[0][0] <= now:
            channels.append(heapq.heappop(self._delay_queue)[2])
        return channels

    def queue_size(self) -> int:
        """Throttled channels waiting in the delay queue."""
        return len(self._delay_queue)

    def max_value_in_quota_window(
        self, user: str, client_id: str, now_ms: int | None = None
    ) -> float:
        """The fetch-size cap of section 7: ``bound * (num_samples - 1) * window_seconds``."""
        tags = self.tags(user, client_id)
        now = now_or_clock(now_ms)
        if not self.enabled:
            return sys.float_info.max
        self._sensors(tags, now)
        limit = self._lookup(tags)
        if limit is None:
            return sys.float_info.max
        return limit * (self._num_samples - 1) * (self._window_ms // 1000)

    # -- reading -------------------------------------------------------------------------------

    def measure(self, user: str, client_id: str, now_ms: int | None = None) -> float | None:
        """The client's current rate (purges, like a JMX read), or ``None`` with no sensor."""
        sensor = self._quota_sensors.get(self.tags(user, client_id))
        now = now_or_clock(now_ms)
        return None if sensor is None else sensor.rate.measure(now)

    def bound(self, user: str, client_id: str) -> float | None:
        """The bound the client's existing sensor enforces, or ``None`` with no sensor."""
        sensor = self._quota_sensors.get(self.tags(user, client_id))
        return None if sensor is None else sensor.rate.quota

    def throttle_time_avg(
        self, user: str, client_id: str, now_ms: int | None = None
    ) -> float | None:
        """The throttle-time average (NaN with no throttles), ``None`` with no sensor."""
        sensor = self._throttle_sensors.get(self.tags(user, client_id))
        now = now_or_clock(now_ms)
        return None if sensor is None else sensor.samples.average(now)

    def expire_sensors(self, now_ms: int | None = None) -> list[str]:
        """Remove sensors idle for longer than the expiry; return their Kafka names, sorted."""
        now = now_or_clock(now_ms)
        expiry = self._sensor_expiry_ms
        removed = [
            self._quota_sensor_name(tags) for tags in _pop_idle(self._quota_sensors, now, expiry)
        ] + [
            self._throttle_sensor_name(tags)
            for tags in _pop_idle(self._throttle_sensors, now, expiry)
        ]
        return sorted(removed)

    def sensor_names(self) -> list[str]:
        """Kafka names of the live sensors, sorted."""
        return sorted(
            [self._quota_sensor_name(tags) for tags in self._quota_sensors]
            + [self._throttle_sensor_name(tags) for tags in self._throttle_sensors]
        )

    # -- batch -----------------------------------------------------------------------------------

    def record_batch(
        self,
        now_ms: npt.NDArray[np.int64],
        key_index: npt.NDArray[np.int64],
        values: npt.NDArray[np.float64],
        keys: Sequence[tuple[str, str]],
        unrecord_if: npt.NDArray[np.bool_] | None = None,
    ) -> npt.NDArray[np.int32]:
        """Record many requests in order, as :meth:`record` one at a time.

        For a ``fetch`` manager an event whose throttle is > 0, or whose ``unrecord_if``
        entry is true, is then unrecorded; other quota types refuse ``unrecord_if``.
        Everything is validated before the first event is recorded.
        """
        if unrecord_if is not None and self._quota_type != "fetch":
            raise InvalidUsageError(
                f"unrecord_if given to a {self._quota_type} manager: only a fetch manager unrecords"
            )
        times = _batch_array("now_ms", now_ms, np.int64)
        indices = _batch_array("key_index", key_index, np.int64)
        amounts = _batch_array("values", values, np.float64)
        drops = (
            np.zeros(len(times), dtype=np.bool_)
            if unrecord_if is None
            else _batch_array("unrecord_if", unrecord_if, np.bool_)
        )
        lengths = {len(times), len(indices), len(amounts), len(drops)}
        if len(lengths) != 1:
            raise InvalidUsageError(
                "now_ms, key_index, values and unrecord_if must have the same length, got "
                f"{len(times)}, {len(indices)}, {len(amounts)} and {len(drops)}"
            )
        clients = [
            (checked_str("keys[i][0]", user), checked_str("keys[i][1]", client))
            for user, client in keys
        ]
        for position, index in enumerate(indices.tolist()):
            if not 0 <= index < len(clients):
                raise InvalidUsageError(
                    f"key_index[{position}] must be in [0, {len(clients)}), got {index}"
                )
        for position, amount in enumerate(amounts.tolist()):
            if not (math.isfinite(amount) and amount >= 0.0):
                raise InvalidUsageError(
                    f"values[{position}] must be a finite number >= 0, got {amount!r}"
                )

        unrecord = self._quota_type == "fetch"
        throttles: list[int] = []
        for now, index, amount, drop in zip(
            times.tolist(), indices.tolist(), amounts.tolist(), drops.tolist(), strict=True
        ):
            user, client = clients[index]
            throttle = self.record(user, client, amount, now)
            if unrecord and (throttle > 0 or drop):
                self.unrecord(user, client, amount, now)
            throttles.append(throttle)
        return np.array(throttles, dtype=np.int32)

    # -- internals -------------------------------------------------------------------------------

    def _usage(self, value: object) -> float:
        """Validate a usage and convert it to the rate's unit (request: nanos to percent)."""
        amount = checked_usage(value)
        return amount * _NANOS_TO_PERCENT if self._quota_type == "request" else amount

    def _lookup(self, tags: _Tags) -> float | None:
        """Section 6.4: the override that applies to a tag pair, or ``None``."""
        user, client = tags
        candidates: list[_EntityKey]
        if user and client:
            candidates = [(user, client), (user, _ANY), (_ANY, client), (_ANY, _ANY)]
        elif user:
            candidates = [(user, None), (_ANY, None)]
        elif client:
            candidates = [(None, client), (None, _ANY)]
        else:
            candidates = []
        for key in candidates:
            override = self._overrides.get(key)
            if override is not None:
                return override[1]
        return None

    def _quota_limit(self, tags: _Tags) -> float:
        """The bound a sensor with these tags enforces: the override, else unlimited."""
        limit = self._lookup(tags)
        return UNLIMITED if limit is None else limit

    def _refresh_bounds(self, key: _EntityKey) -> None:
        """Section 6.5: update the bounds of existing sensors after an override changed."""
        user, client = key
        if self._levels in _SINGLE_LEVELS and _ANY not in key:
            tags = (
                user if isinstance(user, str) else "",
                client if isinstance(client, str) else "",
            )
            sensor = self._quota_sensors.get(tags)
            if sensor is not None:
                sensor.rate.set_quota(self._quota_limit(tags))
        else:
            for tags, sensor in self._quota_sensors.items():
                sensor.rate.set_quota(self._quota_limit(tags))

    def _sensors(self, tags: _Tags, now_ms: int) -> tuple[_QuotaSensor, _ThrottleTimeSensor]:
        """Get or create the quota and throttle-time sensors of a tag pair."""
        quota_sensor = self._quota_sensors.get(tags)
        if quota_sensor is None:
            rate = SampledRate(self._num_samples, self._window_ms, self._quota_limit(tags))
            quota_sensor = self._quota_sensors[tags] = _QuotaSensor(now_ms, rate)
        throttle_sensor = self._throttle_sensors.get(tags)
        if throttle_sensor is None:
            samples = Samples(_THROTTLE_TIME_SAMPLES, _THROTTLE_TIME_WINDOW_MS)
            throttle_sensor = self._throttle_sensors[tags] = _ThrottleTimeSensor(now_ms, samples)
        return quota_sensor, throttle_sensor

    def _record_unchecked(self, tags: _Tags, amount: float, now_ms: int) -> None:
        if not self.enabled:
            return
        sensor = self._sensors(tags, now_ms)[0]
        sensor.last_record_ms = now_ms
        sensor.rate.record_no_check(amount, now_ms)

    def _quota_sensor_name(self, tags: _Tags) -> str:
        return f"{self._type_name}-{tags[0]}:{tags[1]}"

    def _throttle_sensor_name(self, tags: _Tags) -> str:
        return f"{self._type_name}ThrottleTime-{tags[0]}:{tags[1]}"


def _as_entity(entity: object) -> Entity:
    if not isinstance(entity, Entity):
        raise TypeError(f"entity must be an Entity, got {entity!r}")
    return entity


_ScalarT = TypeVar("_ScalarT", bound=np.generic)


def _batch_array(name: str, values: object, dtype: type[_ScalarT]) -> npt.NDArray[_ScalarT]:
    array = np.asarray(values)
    if array.ndim != 1:
        raise InvalidValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if array.size and not np.can_cast(array.dtype, dtype, casting="same_kind"):
        raise TypeError(f"{name} must hold {np.dtype(dtype).name} values, got {array.dtype}")
    return array.astype(dtype, copy=False)


# -- the request path --------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestOutcome:
    """What the quota check of one request decided (``kquota.RequestOutcome``)."""

    produce_throttle_ms: int
    fetch_throttle_ms: int
    request_throttle_ms: int
    throttle_ms: int
    throttled_by: QuotaType | None
    unrecorded: bool
    muted_until_ms: int | None

    @property
    def throttled(self) -> bool:
        return self.throttle_ms > 0


class RequestPath:
    """Kafka's request handling written out as the per-manager calls its handlers make
    (``KafkaApis.handleProduceRequest``/``handleFetchRequest``, spec sections 9-11).

    Duck-typed over the managers: it runs on this model's managers or on kquota's, so the
    property tests use it as the plain composition the core's path must equal.
    """

    def __init__(self, produce: QuotaManager, fetch: QuotaManager, request: QuotaManager) -> None:
        for expected, manager in (("produce", produce), ("fetch", fetch), ("request", request)):
            if manager.quota_type != expected:
                raise InvalidConfigError(
                    f"invalid {expected} manager: its quota type is {manager.quota_type!r}"
                )
        self.produce, self.fetch, self.request = produce, fetch, request

    def manager(self, quota_type: QuotaType) -> QuotaManager:
        return {"produce": self.produce, "fetch": self.fetch, "request": self.request}[quota_type]

    def record(
        self,
        user: str,
        client_id: str,
        kind: str,
        size_bytes: float = 0.0,
        thread_time_ns: float | None = None,
        *,
        acks: int = -1,
        now_ms: int | None = None,
    ) -> RequestOutcome:
        if kind not in ("produce", "fetch", "other"):
            raise InvalidUsageError(f"invalid kind {kind!r}")
        if kind != "other":
            checked_usage(size_bytes)
        if thread_time_ns is not None:
            checked_usage(thread_time_ns)
        now = now_or_clock(now_ms)
        checks_request = thread_time_ns is not None and not (kind == "produce" and acks == 0)
        produce_ms = fetch_ms = request_ms = 0
        if kind == "produce":
            produce_ms = self.produce.record(user, client_id, size_bytes, now)
        if checks_request:
            request_ms = self.request.record(user, client_id, thread_time_ns, now)
        unrecorded = False
        if kind == "fetch":
            fetch_ms = self.fetch.record(user, client_id, size_bytes, now)
            if fetch_ms > 0 or request_ms > 0:
                self.fetch.unrecord(user, client_id, size_bytes, now)
                unrecorded = True
        bytes_ms = max(produce_ms, fetch_ms)
        applied = max(bytes_ms, request_ms)
        by: QuotaType | None = None
        if applied > 0:
            if bytes_ms <= request_ms:
                by = "request"
            else:
                by = "produce" if kind == "produce" else "fetch"
        return RequestOutcome(
            produce_ms, fetch_ms, request_ms, max(applied, 0), by, unrecorded, None
        )

    def handle(
        self,
        user: str,
        client_id: str,
        kind: str,
        size_bytes: float = 0.0,
        thread_time_ns: float | None = None,
        *,
        acks: int = -1,
        now_ms: int | None = None,
        channel: int | None = None,
    ) -> RequestOutcome:
        now = now_or_clock(now_ms)
        out = self.record(user, client_id, kind, size_bytes, thread_time_ns, acks=acks, now_ms=now)
        if out.throttled_by is None:
            return out
        manager = self.manager(out.throttled_by)
        end = manager.throttle(user, client_id, out.throttle_ms, now, channel=channel)
        return RequestOutcome(
            out.produce_throttle_ms,
            out.fetch_throttle_ms,
            out.request_throttle_ms,
            out.throttle_ms,
            out.throttled_by,
            out.unrecorded,
            end,
        )

    def fetch_max_bytes(
        self, user: str, client_id: str, requested_max_bytes: int, now_ms: int | None = None
    ) -> int:
        cap = self.fetch.max_value_in_quota_window(user, client_id, now_or_clock(now_ms))
        as_int = 0 if math.isnan(cap) else int(max(min(cap, 2**31 - 1), -(2**31)))
        return min(requested_max_bytes, as_int)
