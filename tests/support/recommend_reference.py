"""Recommendations in plain Python, one candidate quota at a time through a fresh
:class:`kquota.QuotaManager` per broker (``record_batch``): a straightforward
``frames.recommend``, the tests' oracle for the core's search
(``kquota._core.recommend_quotas``, which ``kquota.backtest.frames.recommend`` calls).
The results must be equal, number for number."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
from kquota import DEFAULT, Entity, QuotaManager
from kquota.backtest.frames import (
    BROKER,
    RECOMMENDATION_COLUMNS,
    SENSOR_CLIENT,
    SENSOR_USER,
    TS,
    USAGE,
    BoolArray,
    FloatArray,
    Int64Array,
    entity_label,
    time_order,
)
from kquota.backtest.frames.entities import _rate_units
from kquota.config import Window
from kquota.config.model import QuotaType

_PROBE_CLIENT = ("", "probe")
"""The one client a probe manager records for: a ``<default>`` client quota applies to it."""


def throttled_fraction(
    broker_traffic: Sequence[tuple[Int64Array, FloatArray, BoolArray | None]],
    quota_type: QuotaType,
    window: Window,
    quota: float,
) -> float:
    """The fraction of requests throttled when one sensor per broker enforces ``quota``.

    ``broker_traffic`` has, per broker, the sensor's request times (in replay order), usage
    (bytes or thread nanoseconds) and, for fetch, which rows the request quota throttled
    (they are unrecorded too). Replayed through the core's batch call.
    """
    throttled = total = 0
    for times, values, drops in broker_traffic:
        manager = QuotaManager(
            quota_type, num_samples=window.num_samples, window_ms=window.window_ms
        )
        manager.set_quota(Entity(client_id=DEFAULT), quota)
        keys = np.zeros(len(times), dtype=np.int64)
        throttles = manager.record_batch(times, keys, values, [_PROBE_CLIENT], drops)
        throttled += int(np.count_nonzero(throttles > 0))
        total += len(times)
    return throttled / total if total else 0.0


def _round_up(quota_type: QuotaType, value: float) -> float:
    """A quota as one would configure it: whole bytes/s, or hundredths of a percent."""
    if quota_type == "request":
        return math.ceil(value * 100.0) / 100.0
    return float(math.ceil(value))


def _rate_bound(
    traffic: Sequence[tuple[Int64Array, FloatArray, BoolArray | None]],
    quota_type: QuotaType,
    window: Window,
) -> float:
    """A rate no measurement can exceed: a quota this high throttles nothing.

    A sensor's retained samples hold only usage of the last ``(num_samples + 1)`` windows,
    and it divides by at least ``num_samples - 1`` windows, so the largest usage within any
    such span, over that many seconds, bounds every rate it measures.
    """
    if window.num_samples == 1:  # a one-sample rate can be measured over one millisecond
        total = sum(float(_rate_units(quota_type, values).sum()) for _, values, _ in traffic)
        return max(total / 0.001, 1e-6)
    horizon = (window.num_samples + 1) * window.window_ms + 1
    span_s = (window.num_samples - 1) * window.window_ms / 1000.0
    largest = 0.0
    for times, values, _ in traffic:
        running = np.concatenate(([0.0], np.cumsum(_rate_units(quota_type, values))))
        first = np.searchsorted(times, times - horizon, side="right")
        largest = max(largest, float((running[1:] - running[first]).max(initial=0.0)))
    return max(largest / span_s, 1e-6)


def _smallest_quota(
    traffic: Sequence[tuple[Int64Array, FloatArray, BoolArray | None]],
    quota_type: QuotaType,
    window: Window,
    target: float,
) -> tuple[float, float]:
    """Bisection (to 0.1 %) for the smallest quota whose throttled fraction is <= ``target``."""

    def fine(quota: float) -> bool:
        return throttled_fraction(traffic, quota_type, window, quota) <= target

    high = _rate_bound(traffic, quota_type, window) * (1 + 1e-9)
    for _ in range(64):  # the bound is never violated; guard against rounding anyway
        if fine(high):
            break
        high *= 2
    low = high * 1e-4
    while fine(low) and low > 1e-9:
        high, low = low, low * 1e-4
    while high / low > 1 + 1e-3:
        middle = math.sqrt(low * high)
        if fine(middle):
            high = middle
        else:
            low = middle
    # the fraction need not fall monotonically (unrecorded fetches change what later
    # requests see), so the rounded value is checked and raised until it meets the target
    chosen = _round_up(quota_type, high)
    for _ in range(10_000):
        if fine(chosen):
            break
        chosen = _round_up(quota_type, chosen * (1 + 1e-3))
    return chosen, throttled_fraction(traffic, quota_type, window, chosen)


def recommend_reference(
    usage: pd.DataFrame, window: Window, quota_type: QuotaType, target: float
) -> pd.DataFrame:
    """What :func:`kquota.backtest.frames.recommend` answers (the same input, columns and
    rounding), found here one entity at a time: a bisection that replays the entity's
    traffic through the core under each candidate, then checked to meet the target."""
    if not 0.0 <= target < 1.0:
        raise ValueError(f"invalid target {target!r}: expected a fraction in [0, 1)")
    rows = []
    for (user_tag, client_tag), entity in usage.groupby(
        [SENSOR_USER, SENSOR_CLIENT], sort=True, dropna=False, observed=True
    ):
        traffic = []
        for _, part in entity.groupby(BROKER, sort=True, dropna=False, observed=True):
            order = time_order(part)
            drops = (
                part["unrecord_if"].to_numpy(dtype=np.bool_)[order]
                if quota_type == "fetch" and "unrecord_if" in part.columns
                else None
            )
            traffic.append(
                (
                    part[TS].to_numpy(dtype=np.int64)[order],
                    part[USAGE].to_numpy(dtype=np.float64)[order],
                    drops,
                )
            )
        quota, fraction = _smallest_quota(traffic, quota_type, window, target)
        rows.append(
            {
                "quota_type": quota_type,
                SENSOR_USER: user_tag,
                SENSOR_CLIENT: client_tag,
                "entity": entity_label(str(user_tag), str(client_tag)),
                "brokers": len(traffic),
                "requests": len(entity),
                "recommended_quota": quota,
                "throttled_fraction": fraction,
            }
        )
    return pd.DataFrame(rows, columns=list(RECOMMENDATION_COLUMNS))
