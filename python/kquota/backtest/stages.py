"""What runs on the executors: the functions Spark's ``mapInArrow`` and ``applyInArrow``
call, each a thin adapter from Arrow batches to a plain function of
:mod:`kquota.backtest.kernel`.

They are module-level functions with the configuration passed as JSON (parsed once per
executor and cached), so Spark ships them by name: the executors need ``kquota`` installed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]

from kquota import QuotaManager
from kquota.backtest import kernel
from kquota.backtest.kernel import (
    ADDED_LATENCY,
    API,
    BROKER,
    BYTES,
    CLIENT,
    FETCH_THROTTLE,
    PRODUCE_THROTTLE,
    REQUEST_THROTTLE,
    SENSOR_CLIENT,
    SENSOR_USER,
    SENT,
    SEQ_COLUMNS,
    THREAD,
    THROTTLE,
    TIME,
    TS,
    USAGE,
    USER,
)
from kquota.backtest.options import REQUEST_SENSOR_CLIENT, REQUEST_SENSOR_USER, RESULT_COLUMNS
from kquota.config import QuotaConfig
from kquota.config.model import QuotaType

__all__ = [
    "KIND",
    "SCENARIO_INDEX",
    "TAGS",
    "StreamPlan",
    "closed_stage",
    "label_batches",
    "pair_batches",
    "peak_batches",
    "recommend_stage",
    "request_column",
    "resolve_arrays",
    "stream",
]

SCENARIO_INDEX: Final = "_kq_scn"
"""Closed loop: the index of a row's scenario in the list of configurations."""
KIND: Final = "_kq_kind"
"""By-sensor replay: a request's kind (:func:`resolve_arrays`), for the byte-rate pass."""


@functools.lru_cache(maxsize=16)
def _config(text: str) -> QuotaConfig:
    return QuotaConfig.from_json(json.loads(text))


@functools.lru_cache(maxsize=16)
def _managers(text: str) -> dict[QuotaType, QuotaManager]:
    config = _config(text)
    return {t: config.manager(t) for t in kernel.QUOTA_TYPES if config.quotas(t)}


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
    (SENSOR_USER, "byte_user"),
    (SENSOR_CLIENT, "byte_client"),
    (REQUEST_SENSOR_USER, "request_user"),
    (REQUEST_SENSOR_CLIENT, "request_client"),
)
"""Output columns of the sensor tags and their :func:`kernel.resolve_sensors` keys."""


def resolve_arrays(
    config_json: str, users: pa.Array, clients: pa.Array, apis: pa.Array
) -> pa.Array:
    """Scalar Arrow UDF: each request's kind and sensor tags, as a struct."""
    frame = pd.DataFrame(
        {USER: _categorical(users), CLIENT: _categorical(clients), API: _categorical(apis)}
    )
    resolved = kernel.resolve_sensors(frame, _managers(config_json))
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


_KERNEL_COLUMNS: Final = (BROKER, TS, USER, CLIENT, API, BYTES, THREAD)


def stream(plan: StreamPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition sorted by time (whole sensors in it): open-loop replay.

    With ``plan.final``, every row comes out once per scenario with its throttles; without
    it, the rows come out once with one request-throttle column per scenario (the first of
    two passes).
    """
    loop = kernel.OpenLoop([_config(c) for c in plan.configs])
    managers = _managers(plan.base)
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
            resolved = kernel.resolve_sensors(frame, managers)
            base += [_string_column(resolved[key]) for _, key in TAGS]
            base_names += [name for name, _ in TAGS]
        if plan.replay_bytes:
            byte_results = loop.byte_throttles(frame, requests)
        else:
            zeros = np.zeros(n, dtype=np.int32)
            byte_results = [(zeros, zeros)] * len(plan.configs)
        ts = batch.column(names.index(TS))
        no_latency = pa.array(np.zeros(n, dtype=np.int64))
        for label, request, (produce, fetch) in zip(
            plan.labels, requests, byte_results, strict=True
        ):
            yield pa.RecordBatch.from_arrays(
                [
                    *base,
                    pa.repeat(pa.scalar(label, pa.string()), n),
                    pa.array(produce, pa.int32()),
                    pa.array(fetch, pa.int32()),
                    pa.array(request, pa.int32()),
                    pa.array(kernel.applied_throttle(produce, fetch, request), pa.int32()),
                    ts,
                    no_latency,
                ],
                names=[*base_names, *RESULT_COLUMNS],
            )


def closed_stage(configs: Sequence[str], base_json: str, table: pa.Table) -> pa.Table:
    """applyInArrow: the closed-loop replay of one (scenario, broker) group."""
    frame = _frame(table, (*_KERNEL_COLUMNS, *SEQ_COLUMNS))
    result = kernel.replay_closed(frame, _config(configs[table.column(SCENARIO_INDEX)[0].as_py()]))
    resolved = kernel.resolve_sensors(frame, _managers(base_json))
    for name, key in TAGS:
        table = table.append_column(name, _string_column(resolved[key]))
    for name, kind in (
        (PRODUCE_THROTTLE, pa.int32()),
        (FETCH_THROTTLE, pa.int32()),
        (REQUEST_THROTTLE, pa.int32()),
        (THROTTLE, pa.int32()),
        (SENT, pa.int64()),
        (ADDED_LATENCY, pa.int64()),
    ):
        table = table.append_column(name, pa.array(result[name].to_numpy(), kind))
    return table


def peak_batches(window_json: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition holding whole sensors: peak usage and p99 throttle."""
    table = pa.Table.from_batches(list(batches))
    if not table.num_rows:
        return
    ids, peaks, p99 = kernel.sensor_peaks(
        table.column("_sid").to_numpy(),
        table.column(TIME).to_numpy(),
        table.column("_amount").to_numpy(),
        table.column(THROTTLE).to_numpy(),
        _config(window_json).window,
    )
    yield pa.RecordBatch.from_arrays(
        [pa.array(ids), pa.array(peaks), pa.array(p99)],
        names=["_sid", "_peak", "p99_throttle_ms"],
    )


def pair_batches(base_json: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over distinct (user, client_id) pairs: their sensors and bounds."""
    managers = _managers(base_json)
    for batch in batches:
        frame = _frame(batch, (USER, CLIENT))
        out = kernel.pair_sensors(frame[USER], frame[CLIENT], managers)
        yield pa.RecordBatch.from_pandas(out, preserve_index=False)


def label_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over entity rows: the entity as Kafka names it."""
    for batch in batches:
        users = batch.column(batch.schema.names.index(SENSOR_USER)).to_pylist()
        clients = batch.column(batch.schema.names.index(SENSOR_CLIENT)).to_pylist()
        labels = [
            kernel.entity_label(u or "", c or "") for u, c in zip(users, clients, strict=True)
        ]
        index = batch.schema.names.index("entity")
        yield batch.set_column(index, "entity", pa.array(labels, pa.string()))


def recommend_stage(base_json: str, target: float, schema: pa.Schema, table: pa.Table) -> pa.Table:
    """applyInArrow: recommendations for the entities of one (quota type, bucket) group."""
    quota_type = kernel.QUOTA_TYPES[kernel.QUOTA_TYPES.index(table.column("quota_type")[0].as_py())]
    frame = _frame(
        table, (BROKER, SENSOR_USER, SENSOR_CLIENT, TS, USAGE, "unrecord_if", *SEQ_COLUMNS)
    )
    out = kernel.recommend(frame, _config(base_json).window, quota_type, target)
    return pa.Table.from_pandas(out, schema=schema, preserve_index=False)
