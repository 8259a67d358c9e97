"""The rows a quota-type sensor records, built from a trace and a replay's results the way
the back-test job builds them for its summaries and recommendations."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
from kquota.backtest import frames
from kquota.config import QuotaConfig


def sensor_usage(
    frame: pd.DataFrame, quota_type: str, config: QuotaConfig, **columns: Any
) -> pd.DataFrame:
    """One row per request a ``quota_type`` sensor of ``config`` records: its tags, its
    :data:`~frames.USAGE` (handler-thread time for the request quota, bytes for the others)
    and ``columns``."""
    if quota_type == "request":
        rows = frame[frames.THREAD].notna().to_numpy()
        usage = frame[frames.THREAD]
    else:
        rows = np.asarray(frames.kinds(frame[frames.API]) == quota_type)
        usage = frame[frames.BYTES]
    tags = frames.sensor_tags(frame[frames.USER], frame[frames.CLIENT], config.manager(quota_type))  # type: ignore[arg-type]
    out = pd.DataFrame(
        {
            frames.SENSOR_USER: tags[0],
            frames.SENSOR_CLIENT: tags[1],
            frames.USAGE: usage.fillna(0).astype(np.int64),
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
    """:func:`sensor_usage` with the columns :func:`frames.summarize` reads, from ``result``
    (a replay of ``frame``); ``broker`` is the :data:`~frames.BROKER` column."""
    recorded = np.ones(len(frame), dtype=bool)
    if quota_type == "fetch":  # a throttled fetch is not recorded
        recorded = ~(
            (result[frames.FETCH_THROTTLE] > 0) | (result[frames.REQUEST_THROTTLE] > 0)
        ).to_numpy()
    return sensor_usage(
        frame,
        quota_type,
        config,
        **{
            frames.BROKER: broker,
            frames.USER: frame[frames.USER],
            frames.CLIENT: frame[frames.CLIENT],
            frames.TIME: result.get(frames.SENT, frame[frames.TS]),
            frames.BYTES: frame[frames.BYTES],
            frames.RECORDED: recorded,
            frames.THROTTLE: result[frames.THROTTLE_OF[quota_type]],  # type: ignore[index]
            frames.ADDED_LATENCY: result.get(frames.ADDED_LATENCY, 0),
        },
        **columns,
    )


def recommendation_columns(frame: pd.DataFrame, result: pd.DataFrame) -> dict[str, Any]:
    """The columns the recommend stage reads besides a sensor's usage, ``result`` being an
    open-loop replay of ``frame`` (``unrecord_if``: the request quota throttled it)."""
    return {
        frames.TS: frame[frames.TS],
        "unrecord_if": (result[frames.REQUEST_THROTTLE] > 0).to_numpy(),
        frames.SEQ_COLUMNS[0]: frame[frames.SEQ_COLUMNS[0]],
        frames.SEQ_COLUMNS[1]: frame[frames.SEQ_COLUMNS[1]],
    }
