"""Back-test throughput, in events (requests) per second.

* ``backtest_kernel_vs_reference``: :func:`kquota.backtest.frames.replay_open` (the core's
  batch call per quota type) on one broker's requests, against the same kernel steps on the
  pure-Python reference model's managers (tests/support/reference_model.py, exact, slow).
* ``backtest_kernel_vs_numpy``: the same kquota kernel against a NumPy/pandas
  implementation of what one would write without kquota: per sensor, a sliding sum over
  ``num_samples - 1`` windows and Kafka's throttle formula, fully vectorized. It is *not*
  Kafka's algorithm (no sample ring, no padding, no fetch unrecord); ``extra_info`` says how
  many of its throttles agree with Kafka's.
* ``backtest_record_batch`` (information only): the core's ``record_batch`` calls alone
  on the same events, to show how much of the kernel time is the core.
* ``backtest_spark_e2e``: ``kquota backtest`` (the job, one scenario, report off) on
  ``local[2]``, from Parquet to Parquet, against a plain row-at-a-time Python UDF doing the
  same replay (RDD ``groupByKey`` per broker, ``QuotaManager.record`` per row).

Every group measures both sides in the same run; ``extra_info["calls"]`` is the number of
events, so the reported value is per event. ``make bench-quick`` (benches/quick.py) runs
fewer rounds, and Spark on 200 000 and 50 000 requests instead of 1 000 000 and 100 000:
its fixed costs (job start, Parquet footers) then weigh more per event.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import reference_model
from kquota.backtest import frames, synthetic
from kquota.backtest.frames import API, BROKER, BYTES, CLIENT, SEQ_COLUMNS, THREAD, TS, USER
from kquota.backtest.frames.replay import _pair_codes
from kquota.backtest.job import run
from kquota.backtest.options import BacktestOptions
from kquota.config import QuotaConfig
from quick import pick

KERNEL_ROWS = 1_200_000  # six brokers: one broker has about 200 000 requests
REFERENCE_ROWS = 20_000
SPARK_ROWS = pick(1_000_000, 200_000)
BASELINE_SPARK_ROWS = pick(100_000, 50_000)
KERNEL_ROUNDS = pick(5, 2)


@pytest.fixture(scope="module")
def broker() -> tuple[pd.DataFrame, QuotaConfig]:
    table = synthetic.generate(synthetic.TrafficSpec(requests=KERNEL_ROWS, seed=5))
    config = synthetic.suggest_quotas(table)
    frame = table.to_pandas()
    one = frame[frame[BROKER] == "broker-1"].reset_index(drop=True)
    one[SEQ_COLUMNS[0]] = 0
    one[SEQ_COLUMNS[1]] = np.arange(len(one), dtype=np.int64)
    return one, config


def reference_replay(frame: pd.DataFrame, config: QuotaConfig) -> None:
    """The kernel's steps with the reference model's managers: request, then produce, fetch."""
    managers = {}
    for quota_type in frames.QUOTA_TYPES:
        manager = reference_model.QuotaManager(
            quota_type, num_samples=config.window.num_samples, window_ms=config.window.window_ms
        )
        for entity, value in config.quotas(quota_type):
            manager.set_quota(reference_model.Entity(entity.user, entity.client_id), value)
        managers[quota_type] = manager
    order = frames.time_order(frame)
    ordered = frame.iloc[order]
    codes, pairs = _pair_codes(ordered[USER], ordered[CLIENT])
    times = ordered[TS].to_numpy(dtype=np.int64)
    known = ordered[THREAD].notna().to_numpy()
    request = np.zeros(len(frame), dtype=np.int32)
    request[known] = managers["request"].record_batch(
        times[known], codes[known], ordered[THREAD].to_numpy(dtype=np.float64)[known], pairs
    )
    kind = frames.kinds(ordered[API])
    size = ordered[BYTES].to_numpy(dtype=np.float64)
    for quota_type in ("produce", "fetch"):
        rows = kind == quota_type
        # Only a fetch is unrecorded when the request quota throttled it.
        unrecord_if = request[rows] > 0 if quota_type == "fetch" else None
        managers[quota_type].record_batch(times[rows], codes[rows], size[rows], pairs, unrecord_if)


def numpy_replay(frame: pd.DataFrame, config: QuotaConfig, tags: dict[str, Any]) -> np.ndarray:
    """A vectorized sliding-window approximation: per sensor, the sum of the last
    ``(num_samples - 1) * window_ms`` over that span, throttled by Kafka's formula."""
    span_ms = max(config.window.num_samples - 1, 1) * config.window.window_ms
    out = np.zeros(len(frame), dtype=np.int64)
    for quota_type, (rows, sensor, bound, values) in tags.items():
        del quota_type
        times = frame[TS].to_numpy(dtype=np.int64)[rows]
        order = np.lexsort((times, sensor))
        s, t, v = sensor[order], times[order], values[order]
        key = s * (1 << 42) + (t - t.min())
        cum = np.cumsum(v)
        start = np.searchsorted(key, key - span_ms, side="right")
        window_sum = cum - np.where(start > 0, cum[start - 1], 0.0)
        rate = window_sum / (span_ms / 1000.0)
        b = bound[order]
        over = rate > b
        throttle = np.zeros(len(order), dtype=np.int64)
        throttle[over] = np.round((rate[over] - b[over]) / b[over] * span_ms)
        result = np.empty(len(order), dtype=np.int64)
        result[order] = throttle
        out[rows] = np.maximum(out[rows], result)
    return out


def numpy_inputs(frame: pd.DataFrame, config: QuotaConfig) -> dict[str, Any]:
    """Sensor codes and bounds per quota type, from the core (not timed)."""
    kind = frames.kinds(frame[API])
    inputs = {}
    for quota_type in frames.QUOTA_TYPES:
        rows = frame[THREAD].notna().to_numpy() if quota_type == "request" else kind == quota_type
        manager = config.manager(quota_type)
        part = frame[rows]
        users, clients = frames.sensor_tags(part[USER], part[CLIENT], manager)
        sensor, _ = pd.factorize(pd.Series(users + "\0" + clients))
        bounds = np.array(
            [
                manager.quota_for(u, c) or np.inf
                for u, c in zip(part[USER], part[CLIENT], strict=True)
            ]
        )
        values = (
            part[THREAD].to_numpy(dtype=np.float64) * frames.NANOS_TO_PERCENT
            if quota_type == "request"
            else part[BYTES].to_numpy(dtype=np.float64)
        )
        inputs[quota_type] = (rows, sensor.astype(np.int64), bounds, values)
    return inputs


@pytest.mark.parametrize("role", ["kquota", "baseline"])
def test_kernel_vs_reference(
    benchmark: Any, broker: tuple[pd.DataFrame, QuotaConfig], role: str
) -> None:
    frame, config = broker
    benchmark.group = "backtest_kernel_vs_reference"
    benchmark.extra_info["role"] = role
    if role == "kquota":
        benchmark.extra_info["calls"] = len(frame)
        benchmark.pedantic(
            frames.replay_open, (frame, config), rounds=KERNEL_ROUNDS, warmup_rounds=1
        )
    else:
        part = frame.iloc[:REFERENCE_ROWS]
        benchmark.extra_info["calls"] = len(part)
        benchmark.pedantic(reference_replay, (part, config), rounds=2, warmup_rounds=0)


@pytest.mark.parametrize("role", ["kquota", "baseline"])
def test_kernel_vs_numpy(
    benchmark: Any, broker: tuple[pd.DataFrame, QuotaConfig], role: str
) -> None:
    frame, config = broker
    benchmark.group = "backtest_kernel_vs_numpy"
    benchmark.extra_info["role"] = role
    benchmark.extra_info["calls"] = len(frame)
    if role == "kquota":
        benchmark.pedantic(
            frames.replay_open, (frame, config), rounds=KERNEL_ROUNDS, warmup_rounds=1
        )
        return
    inputs = numpy_inputs(frame, config)
    approximate = benchmark.pedantic(
        numpy_replay, (frame, config, inputs), rounds=KERNEL_ROUNDS, warmup_rounds=1
    )
    exact = frames.replay_open(frame, config)["throttle_ms"].to_numpy()
    benchmark.extra_info["agrees_with_kafka"] = float(np.mean(approximate == exact))
    benchmark.extra_info["throttled_kafka"] = int((exact > 0).sum())
    benchmark.extra_info["throttled_numpy"] = int((approximate > 0).sum())


def test_record_batch_alone(benchmark: Any, broker: tuple[pd.DataFrame, QuotaConfig]) -> None:
    """The core's batch calls of one replay_open, nothing else (information only)."""
    frame, config = broker
    order = frames.time_order(frame)
    ordered = frame.iloc[order]
    codes, pairs = _pair_codes(ordered[USER], ordered[CLIENT])
    times = ordered[TS].to_numpy(dtype=np.int64)
    kind = frames.kinds(ordered[API])
    thread = ordered[THREAD].to_numpy(dtype=np.float64)
    size = ordered[BYTES].to_numpy(dtype=np.float64)
    produce, fetch = kind == "produce", kind == "fetch"

    def calls() -> None:
        config.manager("request").record_batch(times, codes, thread, pairs)
        config.manager("produce").record_batch(times[produce], codes[produce], size[produce], pairs)
        config.manager("fetch").record_batch(times[fetch], codes[fetch], size[fetch], pairs)

    benchmark.group = "backtest_record_batch"
    benchmark.extra_info["calls"] = len(frame)
    benchmark.extra_info["records"] = int(len(frame) + produce.sum() + fetch.sum())
    benchmark.extra_info["keys"] = len(pairs)
    benchmark.pedantic(calls, rounds=KERNEL_ROUNDS, warmup_rounds=1)


# -- Spark end to end -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, QuotaConfig]:
    folder = tmp_path_factory.mktemp("spark")
    table = synthetic.generate(synthetic.TrafficSpec(requests=SPARK_ROWS, seed=6))
    config = synthetic.suggest_quotas(table)
    big = synthetic.write(table, folder / "big.parquet")
    small = synthetic.write(table.slice(0, BASELINE_SPARK_ROWS), folder / "small.parquet")
    return big, small, config


@pytest.mark.parametrize("role", ["kquota", "baseline"])
def test_spark_end_to_end(
    benchmark: Any, spark: Any, traces: tuple[Path, Path, QuotaConfig], tmp_path: Path, role: str
) -> None:
    big, small, config = traces
    benchmark.group = "backtest_spark_e2e"
    benchmark.extra_info["role"] = role
    if role == "kquota":
        options = BacktestOptions(
            traffic=str(big), quotas=config, out=str(tmp_path / "out"), report=False
        )
        benchmark.extra_info["calls"] = SPARK_ROWS
        benchmark.pedantic(run, (spark, options), rounds=pick(2, 1), warmup_rounds=1)
        return

    # nested, so that Spark pickles it by value (this module is not on the workers)
    def row_at_a_time(rows: Any, config_json: str) -> Iterator[tuple[Any, ...]]:
        """One broker's rows, replayed one request at a time with the core's single calls."""
        config = QuotaConfig.from_json(json.loads(config_json))
        managers = {t: config.manager(t) for t in frames.QUOTA_TYPES}
        for row in sorted(rows, key=lambda r: (r.ts_ms, r.request_id)):
            r = managers["request"].record(
                row.user, row.client_id, float(row.thread_time_ns), row.ts_ms
            )
            p = f = 0
            if row.api == "produce":
                p = managers["produce"].record(row.user, row.client_id, float(row.bytes), row.ts_ms)
            elif row.api == "fetch":
                f = managers["fetch"].record(row.user, row.client_id, float(row.bytes), row.ts_ms)
                if f > 0 or r > 0:
                    managers["fetch"].unrecord(row.user, row.client_id, float(row.bytes), row.ts_ms)
            yield (*row, p, f, r, max(p, f, r, 0))

    config_json = config.dumps()
    schema = (
        spark.read.parquet(str(small)).schema.simpleString()[len("struct<") : -1]
        + ",produce_throttle_ms:int,fetch_throttle_ms:int,request_throttle_ms:int,throttle_ms:int"
    )

    def baseline() -> None:
        rows = spark.read.parquet(str(small)).rdd.map(lambda row: (row.broker, row))
        replayed = rows.groupByKey().flatMap(lambda kv: row_at_a_time(kv[1], config_json))
        spark.createDataFrame(replayed, schema.replace(":", " ")).write.mode("overwrite").parquet(
            str(tmp_path / "baseline")
        )

    benchmark.extra_info["calls"] = BASELINE_SPARK_ROWS
    benchmark.pedantic(baseline, rounds=pick(2, 1), warmup_rounds=1)
    got = pq.read_table(tmp_path / "baseline").to_pandas().sort_values("request_id")
    assert len(got) == BASELINE_SPARK_ROWS and (got["throttle_ms"] >= 0).all()
