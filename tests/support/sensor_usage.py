"""The rows a quota-type sensor records, built from a trace and a replay's results the way
the back-test job builds them for its summaries and recommendations."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
from kquota.backtest import kernel
from kquota.config import QuotaConfig


def sensor_usage(
    frame: pd.DataFrame, quota_type: str, config: QuotaConfig, **columns: Any
) -> pd.DataFrame:
    """One row per request a ``quota_type`` sensor of ``config`` records: its tags, its
    :data:`~kernel.USAGE` (handler-thread time for the request quota, bytes for the others)
    and ``columns``."""
    if quota_type == "request":
        rows = frame[kernel.THREAD].notna().to_numpy()
        usage = frame[kernel.THREAD]
    else:
        rows = np.asarray(kernel.kinds(frame[kernel.API]) == quota_type)
        usage = frame[kernel.BYTES]
    tags = kernel.sensor_tags(frame[kernel.USER], frame[kernel.CLIENT], config.manager(quota_type))  # type: ignore[arg-type]
    out = pd.DataFrame(
        {
            kernel.SENSOR_USER: tags[0],
            kernel.SENSOR_CLIENT: tags[1],
            kernel.USAGE: usage.fillna(0).astype(np.int64),
            **columns,
        },
        index=frame.index,
    )
    return out[rows]


def summarized_usage(
    frame: pd.DataFrame,
    result: pd.DataFrame,
    quota_type: str,
    config: QuotaConfig,
    *,
    broker: Any,
    **columns: Any,
) -> pd.DataFrame:
    """:func:`sensor_usage` with the columns :func:`kernel.summarize` reads, from ``result``
    (a replay of ``frame``); ``broker`` is the :data:`~kernel.BROKER` column."""
    recorded = np.ones(len(frame), dtype=bool)
    if quota_type == "fetch":  # a throttled fetch is not recorded
        recorded = ~(
            (result[kernel.FETCH_THROTTLE] > 0) | (result[kernel.REQUEST_THROTTLE] > 0)
        ).to_numpy()
    return sensor_usage(
        frame,
        quota_type,
        config,
        **{
            kernel.BROKER: broker,
            kernel.USER: frame[kernel.USER],
            kernel.CLIENT: frame[kernel.CLIENT],
            kernel.TIME: result.get(kernel.SENT, frame[kernel.TS]),
            kernel.BYTES: frame[kernel.BYTES],
            kernel.RECORDED: recorded,
            kernel.THROTTLE: result[kernel.THROTTLE_OF[quota_type]],  # type: ignore[index]
            kernel.ADDED_LATENCY: result.get(kernel.ADDED_LATENCY, 0),
        },
        **columns,
    )


def recommendation_columns(frame: pd.DataFrame, result: pd.DataFrame) -> dict[str, Any]:
    """The columns the recommend stage reads besides a sensor's usage, ``result`` being an
    open-loop replay of ``frame`` (``unrecord_if``: the request quota throttled it)."""
    return {
        kernel.TS: frame[kernel.TS],
        "unrecord_if": (result[kernel.REQUEST_THROTTLE] > 0).to_numpy(),
        kernel.SEQ_COLUMNS[0]: frame[kernel.SEQ_COLUMNS[0]],
        kernel.SEQ_COLUMNS[1]: frame[kernel.SEQ_COLUMNS[1]],
    }
