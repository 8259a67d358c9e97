"""Per-sensor summaries of a replay: requests, throttles, peak rates and utilization of
each entity's sensor, as :func:`summarize` gives them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from kquota import QuotaManager
from kquota.backtest.frames import schema
from kquota.backtest.frames.replay import _pair_codes
from kquota.backtest.frames.schema import FloatArray, Int64Array
from kquota.config import QuotaConfig, Window
from kquota.quota_types import QuotaType

__all__ = [
    "RECORDED",
    "SENSOR_CLIENT",
    "SENSOR_USER",
    "SUMMARY_COLUMNS",
    "TIME",
    "USAGE",
    "entity_label",
    "nearest_rank",
    "pair_sensors",
    "peak_rates",
    "rate_span_seconds",
    "rate_unit",
    "sensor_bounds",
    "sensor_peaks",
    "summarize",
]

SENSOR_USER: Final = "sensor_user"
"""The ``user`` metric tag of a sensor (sanitized; empty when the sensor is not per user)."""
SENSOR_CLIENT: Final = "sensor_client_id"
"""The ``client-id`` metric tag of a sensor (empty when the sensor is not per client id)."""
USAGE: Final = "usage"
"""A request's usage in its quota's unit: bytes, or handler-thread nanoseconds."""
RECORDED: Final = "recorded"
"""Whether the usage stayed recorded (false for a throttled, hence unrecorded, fetch)."""
TIME: Final = "time_ms"
"""When the usage was recorded: :data:`SENT` (equal to :data:`TS` in open loop)."""

SUMMARY_COLUMNS: Final = (
    "quota_type",
    schema.BROKER,
    SENSOR_USER,
    SENSOR_CLIENT,
    "entity",
    "quota",
    "requests",
    schema.BYTES,
    USAGE,
    "throttled_requests",
    "throttled_fraction",
    "total_throttle_ms",
    "mean_throttle_ms",
    "p99_throttle_ms",
    "max_throttle_ms",
    "peak_rate",
    "utilization",
    "mean_added_latency_ms",
    "max_added_latency_ms",
)
"""The columns of :func:`summarize`, one row per sensor."""


def entity_label(user_tag: str, client_tag: str) -> str:
    """A sensor's tags as Kafka names the entity: ``user=alice, client-id=app-1``."""
    parts = []
    if user_tag:
        parts.append(f"user={user_tag}")
    if client_tag:
        parts.append(f"client-id={client_tag}")
    return ", ".join(parts) if parts else "(empty user and client id)"


def rate_unit(quota_type: QuotaType) -> float:
    """What one unit of usage is in the quota's unit: 1 byte, or :data:`NANOS_TO_PERCENT`."""
    return schema.NANOS_TO_PERCENT if quota_type == "request" else 1.0


def _rate_units(quota_type: QuotaType, usage: FloatArray) -> FloatArray:
    """Usage in the unit the quota bounds: bytes, or percent of a thread for ``request``."""
    return usage * schema.NANOS_TO_PERCENT if quota_type == "request" else usage


def rate_span_seconds(window: Window) -> float:
    """The length of the windowed rate of :func:`peak_rates`: ``num_samples - 1`` windows."""
    return max(window.num_samples - 1, 1) * window.window_ms / 1000.0


def _window_peaks(
    codes: Int64Array, times: Int64Array, amounts: Int64Array, window: Window, k: int
) -> Int64Array:
    """Per sensor code ``0..k-1``: the largest usage in ``num_samples - 1`` consecutive windows."""
    peaks = np.zeros(k, dtype=np.int64)
    if not len(codes):
        return peaks
    span = max(window.num_samples - 1, 1)
    index = times // window.window_ms
    index = index - index.min()
    stride = int(index.max()) + span + 1
    key = codes * stride + index
    windows, inverse = np.unique(key, return_inverse=True)
    sums = np.zeros(len(windows), dtype=np.int64)
    np.add.at(sums, inverse.ravel(), np.asarray(amounts, dtype=np.int64))
    running = np.concatenate((np.zeros(1, dtype=np.int64), np.cumsum(sums)))
    first = np.searchsorted(windows, windows - (span - 1), side="left")
    np.maximum.at(peaks, windows // stride, running[1:] - running[first])
    return peaks


def peak_rates(
    sensor: Int64Array, times: Int64Array, amounts: Int64Array, window: Window, unit: float = 1.0
) -> FloatArray:
    """Per sensor code ``0..k-1``, the peak of its windowed rate (per second).

    The rate over ``num_samples - 1`` whole windows of ``window_ms``, as a Kafka quota
    sensor measures it in steady state: windows are ``floor(t / window_ms)``, and the peak
    is the largest sum over any run of ``num_samples - 1`` consecutive windows (one window
    when ``num_samples`` is 1), as ``float(sum) * unit / seconds``. ``amounts`` are whole
    units of usage (bytes, nanoseconds; 0 for usage that was unrecorded), so the sums are
    exact and any implementation that follows this definition gets the same doubles.
    """
    k = int(sensor.max()) + 1 if len(sensor) else 0
    peaks = _window_peaks(sensor, times, amounts, window, k)
    return peaks.astype(np.float64) * unit / rate_span_seconds(window)


def sensor_peaks(
    sensor: Int64Array,
    times: Int64Array,
    amounts: Int64Array,
    throttles: Int64Array,
    window: Window,
) -> tuple[Int64Array, Int64Array, Int64Array]:
    """For sensors given by arbitrary ids: ``(ids, peak usage, p99 throttle)``.

    The peak is the integer sum behind :func:`peak_rates` (multiply by the unit, divide by
    :func:`rate_span_seconds`); the p99 is :func:`nearest_rank` of the throttles (negative
    ones count as 0). The Spark job runs this on every partition of sensor usage.
    """
    ids, codes = np.unique(np.asarray(sensor, dtype=np.int64), return_inverse=True)
    codes = codes.ravel().astype(np.int64)
    peaks = _window_peaks(codes, times, amounts, window, len(ids))
    clamped = np.maximum(np.asarray(throttles, dtype=np.int64), 0)
    order = np.lexsort((clamped, codes))
    counts = np.bincount(codes, minlength=len(ids))
    starts = np.concatenate((np.zeros(1, dtype=np.int64), np.cumsum(counts)[:-1]))
    ranks = (99 * counts + 99) // 100
    p99 = clamped[order][starts + ranks - 1] if len(ids) else np.zeros(0, dtype=np.int64)
    return ids, peaks, p99.astype(np.int64)


def nearest_rank(values: Int64Array, percent: int) -> int:
    """The ``percent``-th percentile by nearest rank: the ``ceil(percent * n / 100)``-th value."""
    if not len(values):
        return 0
    rank = (percent * len(values) + 99) // 100
    return int(np.partition(values, rank - 1)[rank - 1])


def pair_sensors(
    users: pd.Series, clients: pd.Series, managers: Mapping[QuotaType, QuotaManager]
) -> pd.DataFrame:
    """For ``(user, client_id)`` pairs: every sensor they record to and its bound.

    One row per pair and quota type of ``managers``: ``quota_type``, :data:`SENSOR_USER`,
    :data:`SENSOR_CLIENT` and ``quota`` (the bound, NaN when unlimited). Every pair with the
    same tags has the same bound (it is looked up from the tags), so this gives each
    sensor's bound from any of its clients.
    """
    codes, pairs = _pair_codes(users, clients)
    del codes
    rows: list[tuple[str, str, str, float]] = []
    for quota_type, manager in managers.items():
        for user, client in pairs:
            user_tag, client_tag = manager.tags(user, client)
            bound = manager.quota_for(user, client)
            rows.append((quota_type, user_tag, client_tag, math.nan if bound is None else bound))
    return pd.DataFrame(rows, columns=["quota_type", SENSOR_USER, SENSOR_CLIENT, "quota"])


def sensor_bounds(
    quota_types: Sequence[str],
    users: Sequence[str],
    clients: Sequence[str],
    config: QuotaConfig,
) -> FloatArray:
    """The bound each sensor enforces under ``config`` (NaN when unlimited), from one of its
    requests' ``(user, client_id)`` (every request of a sensor gives the same bound)."""
    managers: dict[str, QuotaManager] = {}
    out = np.full(len(quota_types), math.nan, dtype=np.float64)
    for i, (quota_type, user, client) in enumerate(zip(quota_types, users, clients, strict=True)):
        manager = managers.get(quota_type)
        if manager is None:
            manager = managers[quota_type] = config.manager(_quota_type(quota_type))
        bound = manager.quota_for(user, client)
        if bound is not None:
            out[i] = bound
    return out


def _quota_type(name: str) -> QuotaType:
    for quota_type in schema.QUOTA_TYPES:
        if name == quota_type:
            return quota_type
    raise ValueError(
        f"invalid quota type {name!r}: expected one of {', '.join(schema.QUOTA_TYPES)}"
    )


def summarize(usage: pd.DataFrame, config: QuotaConfig, quota_type: QuotaType) -> pd.DataFrame:
    """One row per sensor of one quota type: the entity summary (:data:`SUMMARY_COLUMNS`).

    ``usage`` holds one row per request recorded by a ``quota_type`` sensor, possibly of
    several sensors (and brokers), each complete: :data:`BROKER`, :data:`SENSOR_USER`,
    :data:`SENSOR_CLIENT`, :data:`USER`, :data:`CLIENT` (any request of the sensor; they
    give its quota), :data:`TIME`, :data:`USAGE` (whole bytes or nanoseconds),
    :data:`BYTES`, :data:`RECORDED`, :data:`THROTTLE` (this quota type's throttle; a
    negative, wrapped one counts as 0) and optionally :data:`ADDED_LATENCY`.

    Per sensor: ``requests``, ``bytes``, ``usage``; ``throttled_requests`` and
    ``throttled_fraction``; ``total_throttle_ms``, ``mean_throttle_ms`` (total / requests),
    ``p99_throttle_ms`` (:func:`nearest_rank`) and ``max_throttle_ms`` over all its requests;
    ``peak_rate`` (:func:`peak_rates`), ``quota`` (the bound under ``config``, NaN when
    unlimited) and ``utilization`` (peak rate / quota); the mean and largest added latency.
    """
    if usage.empty:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in SUMMARY_COLUMNS})
    keys = [schema.BROKER, SENSOR_USER, SENSOR_CLIENT]
    latency = (
        usage[schema.ADDED_LATENCY].to_numpy(dtype=np.int64)
        if schema.ADDED_LATENCY in usage.columns
        else np.zeros(len(usage), dtype=np.int64)
    )
    frame = pd.DataFrame(
        {
            schema.BROKER: usage[schema.BROKER].astype(object).to_numpy(),
            SENSOR_USER: usage[SENSOR_USER].astype(object).to_numpy(),
            SENSOR_CLIENT: usage[SENSOR_CLIENT].astype(object).to_numpy(),
            "throttle": usage[schema.THROTTLE].to_numpy(dtype=np.int64).clip(min=0),
            schema.BYTES: usage[schema.BYTES].to_numpy(dtype=np.int64),
            USAGE: usage[USAGE].to_numpy(dtype=np.int64),
            "latency": latency,
            schema.USER: usage[schema.USER].astype(object).to_numpy(),
            schema.CLIENT: usage[schema.CLIENT].astype(object).to_numpy(),
        }
    )
    frame["throttled"] = (frame["throttle"] > 0).astype(np.int64)
    grouped = frame.groupby(keys, sort=True, dropna=False, observed=True)
    out = grouped.agg(
        requests=("throttle", "size"),
        bytes=(schema.BYTES, "sum"),
        usage=(USAGE, "sum"),
        throttled_requests=("throttled", "sum"),
        total_throttle_ms=("throttle", "sum"),
        max_throttle_ms=("throttle", "max"),
        latency=("latency", "sum"),
        max_added_latency_ms=("latency", "max"),
        first_user=(schema.USER, "first"),
        first_client=(schema.CLIENT, "first"),
    )
    out["p99_throttle_ms"] = grouped["throttle"].agg(
        lambda v: nearest_rank(v.to_numpy(dtype=np.int64), 99)
    )
    out = out.reset_index()
    requests = out["requests"].to_numpy(dtype=np.float64)
    out["throttled_fraction"] = out["throttled_requests"].to_numpy(dtype=np.float64) / requests
    out["mean_throttle_ms"] = out["total_throttle_ms"].to_numpy(dtype=np.float64) / requests
    out["mean_added_latency_ms"] = out["latency"].to_numpy(dtype=np.float64) / requests

    sensor = grouped.ngroup().to_numpy(dtype=np.int64)
    amounts = np.where(usage[RECORDED].to_numpy(dtype=np.bool_), frame[USAGE].to_numpy(), 0)
    out["peak_rate"] = peak_rates(
        sensor,
        usage[TIME].to_numpy(dtype=np.int64),
        amounts,
        config.window,
        rate_unit(quota_type),
    )
    out["quota"] = sensor_bounds(
        [quota_type] * len(out), list(out["first_user"]), list(out["first_client"]), config
    )
    out["utilization"] = out["peak_rate"] / out["quota"]
    out["quota_type"] = quota_type
    out["entity"] = [
        entity_label(u, c) for u, c in zip(out[SENSOR_USER], out[SENSOR_CLIENT], strict=True)
    ]
    return out[list(SUMMARY_COLUMNS)]
