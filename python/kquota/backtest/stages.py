"""What runs on the executors: the functions Spark's ``mapInArrow`` and Arrow UDFs call,
each a thin adapter from Arrow batches to a plain function of
:mod:`kquota.backtest.frames` (the by-sensor streaming replay, the sensors' peaks and
bounds, the recommendations). The by-broker replay through the core's
:class:`~kquota.ReplayKernel` is :mod:`kquota.backtest.broker_replay`; what the
executors count for the driver, :mod:`kquota.backtest.tally`.

They are module-level functions with the configuration passed as JSON (parsed once per
executor and cached), so Spark ships them by name: the executors need ``kquota`` installed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]

from kquota import QuotaManager
from kquota.backtest import frames, outputs
from kquota.backtest.options import REQUEST_SENSOR_CLIENT, REQUEST_SENSOR_USER
from kquota.backtest.tally import worker_peak_rss
from kquota.config import QuotaConfig
from kquota.quota_types import QuotaType

__all__ = [
    "KIND",
    "TAGS",
    "StreamPlan",
    "label_batches",
    "pair_batches",
    "parsed_config",
    "parsed_managers",
    "peak_batches",
    "recommend_partition",
    "request_column",
    "resolve_arrays",
    "stream",
]

KIND: Final = "_kq_kind"
"""By-sensor replay: a request's kind (:func:`resolve_arrays`), for the byte-rate pass."""


@functools.lru_cache(maxsize=16)
def parsed_config(text: str) -> QuotaConfig:
    """The configuration a task is given as JSON, parsed once per executor: kquota's own
    texts, scaled ones among them, read as bounds (a scaled byte rate need not be whole)."""
    return QuotaConfig.from_json(json.loads(text), bounds=True)


@functools.lru_cache(maxsize=16)
def parsed_managers(text: str) -> dict[QuotaType, QuotaManager]:
    """The managers of the quota types the configuration ``text`` sets, made once per
    executor."""
    config = parsed_config(text)
    return {t: config.manager(t) for t in frames.QUOTA_TYPES if config.quotas(t)}


def _frame(table: pa.Table | pa.RecordBatch, names: Sequence[str]) -> pd.DataFrame:
    """The kernel's columns of ``table`` as pandas (strings as categoricals: cheap)."""
    present = [n for n in names if n in table.schema.names]
    return table.select(present).to_pandas(strings_to_categorical=True)


def _categorical(values: pa.Array | pa.ChunkedArray) -> pd.Series:
    """A string column as a pandas categorical, encoded by Arrow (fast for repeated values)."""
    return values.dictionary_encode().to_pandas()


def _string_column(values: pd.Categorical) -> pa.Array:
    return pa.array(values).cast(pa.string())


TAGS: Final = (
    (frames.SENSOR_USER, "byte_user"),
    (frames.SENSOR_CLIENT, "byte_client"),
    (REQUEST_SENSOR_USER, "request_user"),
    (REQUEST_SENSOR_CLIENT, "request_client"),
)
"""Output columns of the sensor tags and their :func:`frames.resolve_sensors` keys."""


def resolve_arrays(
    config_json: str, users: pa.Array, clients: pa.Array, apis: pa.Array
) -> pa.Array:
    """Scalar Arrow UDF: each request's kind and sensor tags, as a struct."""
    frame = pd.DataFrame(
        {
            frames.USER: _categorical(users),
            frames.CLIENT: _categorical(clients),
            frames.API: _categorical(apis),
        }
    )
    resolved = frames.resolve_sensors(frame, parsed_managers(config_json))
    fields = [(KIND, "kind"), *TAGS]
    return pa.StructArray.from_arrays(
        [_string_column(resolved[key]) for _, key in fields], names=[name for name, _ in fields]
    )


def request_column(index: int) -> str:
    return f"_kq_r{index}"


@dataclass(frozen=True)
class StreamPlan:
    """What one streaming pass over a time-sorted partition does."""

    configs: tuple[str, ...]
    labels: tuple[str, ...]
    base: str
    resolve: bool
    request: bool
    replay_bytes: bool
    final: bool


_KERNEL_COLUMNS: Final = (
    frames.BROKER,
    frames.TS,
    frames.USER,
    frames.CLIENT,
    frames.API,
    frames.BYTES,
    frames.THREAD,
)


def stream(plan: StreamPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition sorted by time (whole sensors in it): open-loop replay.

    With ``plan.final``, every row comes out with every scenario's results; without
    it, the rows come out once with one request-throttle column per scenario (the first of
    two passes).
    """
    loop = frames.SplitReplay([parsed_config(c) for c in plan.configs])
    managers = parsed_managers(plan.base)
    for batch in batches:
        n = batch.num_rows
        names = batch.schema.names
        frame = _frame(batch, _KERNEL_COLUMNS)
        if plan.request:
            requests = loop.request_throttles(frame)
        else:
            requests = [
                batch.column(names.index(request_column(i))).to_numpy(zero_copy_only=False)
                if request_column(i) in names
                else np.zeros(n, dtype=np.int32)
                for i in range(len(plan.configs))
            ]
        if not plan.final:
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, *(pa.array(r, pa.int32()) for r in requests)],
                names=[*names, *(request_column(i) for i in range(len(requests)))],
            )
            continue
        kept = [i for i, name in enumerate(names) if not name.startswith("_kq_r")]
        base = [batch.column(i) for i in kept]
        base_names = [names[i] for i in kept]
        if plan.resolve:
            resolved = frames.resolve_sensors(frame, managers)
            base += [_string_column(resolved[key]) for _, key in TAGS]
            base_names += [name for name, _ in TAGS]
        if plan.replay_bytes:
            byte_results = loop.byte_throttles(frame, requests)
        else:
            zeros = np.zeros(n, dtype=np.int32)
            byte_results = [(zeros, zeros)] * len(plan.configs)
        ts = batch.column(names.index(frames.TS)).to_numpy(zero_copy_only=False).astype(np.int64)
        no_latency = np.zeros(n, dtype=np.int64)
        per = [
            {
                frames.PRODUCE_THROTTLE: produce,
                frames.FETCH_THROTTLE: fetch,
                frames.REQUEST_THROTTLE: request,
                frames.THROTTLE: frames.applied_throttle(produce, fetch, request),
                frames.SENT: ts,
                frames.ADDED_LATENCY: no_latency,
                frames.UNSERVED: np.zeros(n, dtype=np.int32),
            }
            for request, (produce, fetch) in zip(requests, byte_results, strict=True)
        ]
        column = outputs.wide_results(pa.array(plan.labels, pa.string()), per, False)
        yield pa.RecordBatch.from_arrays([*base, column], names=[*base_names, outputs.RESULTS])


def peak_batches(window_json: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition holding whole sensors: peak usage and p99 throttle."""
    table = pa.Table.from_batches(list(batches))
    if not table.num_rows:
        return
    ids, peaks, p99 = frames.sensor_peaks(
        table.column("_sid").to_numpy(),
        table.column(frames.TIME).to_numpy(),
        table.column("_amount").to_numpy(),
        table.column(frames.THROTTLE).to_numpy(),
        parsed_config(window_json).window,
    )
    yield pa.RecordBatch.from_arrays(
        [pa.array(ids), pa.array(peaks), pa.array(p99)],
        names=["_sid", "_peak", "p99_throttle_ms"],
    )


def pair_batches(base_json: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over distinct (user, client_id) pairs: their sensors and bounds."""
    managers = parsed_managers(base_json)
    for batch in batches:
        frame = _frame(batch, (frames.USER, frames.CLIENT))
        out = frames.pair_sensors(frame[frames.USER], frame[frames.CLIENT], managers)
        yield pa.RecordBatch.from_pandas(out, preserve_index=False)


def label_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over entity rows: the entity as Kafka names it."""
    for batch in batches:
        users = batch.column(batch.schema.names.index(frames.SENSOR_USER)).to_pylist()
        clients = batch.column(batch.schema.names.index(frames.SENSOR_CLIENT)).to_pylist()
        labels = [
            frames.entity_label(u or "", c or "") for u, c in zip(users, clients, strict=True)
        ]
        index = batch.schema.names.index("entity")
        yield batch.set_column(index, "entity", pa.array(labels, pa.string()))


def recommend_partition(
    base_json: str,
    target: float,
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
    peak_rss: Any = None,
) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition holding whole entities: their recommendations, each
    entity by its number (``_kq_entity``; ``_kq_type``: the index of its quota type), one
    search per quota type in it (``peak_rss``: a
    :class:`~kquota.backtest.tally.PeakSink` accumulator, told the worker's peak RSS)."""
    held = list(batches)
    if not any(b.num_rows for b in held):
        return
    table = pa.Table.from_batches(held)
    names = table.schema.names
    types = table.column("_kq_type").to_numpy()
    for code in np.unique(types).tolist():
        rows = table.filter(pa.array(types == code))
        frame = pd.DataFrame(
            {
                frames.SENSOR_USER: rows.column("_kq_entity").to_numpy(),
                frames.SENSOR_CLIENT: np.zeros(rows.num_rows, dtype=np.int64),
                frames.BROKER: _categorical(rows.column(frames.BROKER)),
                **{
                    name: rows.column(name).to_numpy()
                    for name in (frames.TS, frames.USAGE, "unrecord_if", *frames.SEQ_COLUMNS)
                    if name in names
                },
            }
        )
        config = parsed_config(base_json)
        out = frames.recommend(
            frame, config.window, frames.QUOTA_TYPES[code], target, config.kafka_version
        )
        result = out.drop(columns=["quota_type", frames.SENSOR_CLIENT, "entity"]).rename(
            columns={frames.SENSOR_USER: "_kq_entity"}
        )
        yield pa.RecordBatch.from_pandas(result, schema=schema, preserve_index=False)
    if peak_rss is not None:
        peak_rss.add(worker_peak_rss())
