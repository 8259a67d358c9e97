"""Generated demo traffic (kquota.backtest.synthetic) and ``kquota gen-traffic``: its shape,
and the what-if its suggested quotas give (x0.5, x1, x2 throttle clearly differently)."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kquota import DEFAULT
from kquota.backtest import frames, synthetic
from kquota.backtest.frames import BROKER, FETCH_THROTTLE, PRODUCE_THROTTLE, SEQ_COLUMNS, THROTTLE
from kquota.backtest.job import run
from kquota.backtest.options import BacktestOptions
from kquota.backtest.synthetic import BOOTSTRAP_CLIENT, BOOTSTRAP_USER, TrafficSpec
from kquota.cli import main
from kquota.config import QuotaConfig
from kquota.exceptions import TrafficError

DAY = TrafficSpec(requests=300_000, seed=1)


@pytest.fixture(scope="module")
def day() -> pd.DataFrame:
    return synthetic.generate(DAY).to_pandas()


@pytest.fixture(scope="module")
def planned() -> QuotaConfig:
    """The quotas ``kquota gen-traffic --quotas-out`` writes for :data:`DAY`."""
    return synthetic.planned_quotas(synthetic.generate(DAY))


def test_schema_order_and_size(day: pd.DataFrame) -> None:
    table = synthetic.generate(TrafficSpec(requests=1000, seed=1))
    assert table.schema == pa.schema(
        [
            ("ts_ms", pa.int64()),
            ("broker", pa.string()),
            ("user", pa.string()),
            ("client_id", pa.string()),
            ("api", pa.string()),
            ("bytes", pa.int64()),
            ("thread_time_ns", pa.int64()),
            ("request_id", pa.int64()),
        ]
    )
    assert len(day) == DAY.requests
    assert day["ts_ms"].is_monotonic_increasing
    assert day["ts_ms"].min() >= DAY.start_ms
    assert day["ts_ms"].max() < DAY.start_ms + 24 * 3_600_000
    assert (day["bytes"] >= 0).all() and (day["thread_time_ns"] > 0).all()
    assert day["broker"].nunique() == DAY.brokers
    assert (day["user"] == "").any()  # anonymous clients


def test_seeded(day: pd.DataFrame) -> None:
    again = synthetic.generate(DAY).to_pandas()
    pd.testing.assert_frame_equal(again, day)
    other = synthetic.generate(TrafficSpec(requests=DAY.requests, seed=2)).to_pandas()
    assert not other["client_id"].equals(day["client_id"])


def test_heavy_tailed_clients(day: pd.DataFrame) -> None:
    per_client = day["client_id"].value_counts()
    top = per_client.head(len(per_client) // 10).sum()
    assert top > 0.5 * len(day)  # the top tenth of clients send most requests
    assert per_client.iloc[-1] < per_client.median() < per_client.iloc[0] / 10


def test_daily_pattern(day: pd.DataFrame) -> None:
    hours = ((day["ts_ms"] - DAY.start_ms) // 3_600_000).value_counts()
    assert hours.max() > 2.5 * hours.min()
    assert hours.idxmax() in range(13, 20) and hours.idxmin() in range(1, 8)


def test_bursts_and_the_bootstrapping_consumer(day: pd.DataFrame) -> None:
    producers = day[day["api"] == "produce"]
    per_minute = producers.groupby(["client_id", producers["ts_ms"] // 60_000]).size()
    assert per_minute.max() > 20 * per_minute.median()
    boot = day[(day["user"] == BOOTSTRAP_USER) & (day["client_id"] == BOOTSTRAP_CLIENT)]
    assert (boot["api"] == "fetch").mean() > 0.9
    minutes = boot.groupby(boot["ts_ms"] // 60_000).size()
    assert len(minutes[minutes > 100 * minutes.median()]) >= 9  # ten minutes of catching up
    assert boot["broker"].nunique() == DAY.brokers


def test_suggested_quotas_throttle_some_traffic(day: pd.DataFrame) -> None:
    config = synthetic.suggest_quotas(pa.Table.from_pandas(day, preserve_index=False))
    assert QuotaConfig.from_json(config.to_json()).dumps() == config.dumps()
    assert config.quotas("produce") and config.quotas("fetch") and config.quotas("request")
    broker = day[day["broker"] == "broker-1"]
    throttled = (frames.replay_open(broker, config)["throttle_ms"] > 0).mean()
    assert 0.001 < throttled < 0.2


def test_bursts_and_the_catch_up_are_a_few_times_their_quota(
    day: pd.DataFrame, planned: QuotaConfig
) -> None:
    config = planned
    produce = day[day["api"] == "produce"]
    minute = produce["ts_ms"] // 60_000
    per_minute = produce.groupby(["client_id", minute]).size()
    usual = per_minute.groupby(level=0).median()
    bursting = per_minute[
        per_minute > 20 * usual.reindex(per_minute.index.get_level_values(0)).to_numpy()
    ]
    in_burst = pd.MultiIndex.from_arrays([produce["client_id"], minute]).isin(bursting.index)
    burst = produce[in_burst]
    # where a burst sends (10 s windows of at least 10 of its requests), against its quota
    cells = burst.groupby(["user", "client_id", BROKER, burst["ts_ms"] // 10_000])["bytes"]
    busy = cells.agg(["sum", "size"]).reset_index()
    busy = busy[busy["size"] >= 10]
    manager = config.manager("produce")
    quota = [manager.quota_for(u, c) for u, c in zip(busy["user"], busy["client_id"], strict=True)]
    times = (
        (busy["sum"] / 10.0 / np.asarray(quota, dtype=float)).groupby(busy["client_id"]).median()
    )
    assert len(times) >= DAY.bursts // 2
    assert times.between(1.5, 5.0).all(), times  # a few times the quota, not 40-50 times
    assert times.max() - times.min() > 0.5  # bursts of different sizes
    # the consumer that resets its offsets catches up at about three times its fetch quota
    boot = day[(day["user"] == BOOTSTRAP_USER) & (day["api"] == "fetch")]
    minutes = boot.groupby(boot["ts_ms"] // 60_000)["bytes"].agg(["sum", "size"])
    catching_up = minutes[minutes["size"] > 100 * minutes["size"].median()]
    rate = catching_up["sum"].sum() / (60.0 * len(catching_up)) / DAY.brokers
    fetch_quota = config.manager("fetch").quota_for(BOOTSTRAP_USER, BOOTSTRAP_CLIENT)
    assert fetch_quota is not None and 2.0 < rate / fetch_quota < 4.0


def replayed(frame: pd.DataFrame, config: QuotaConfig, closed: bool) -> pd.DataFrame:
    """Every broker's requests replayed through the kernel, in the frame's row order."""
    frame = frame.assign(**{SEQ_COLUMNS[0]: 0, SEQ_COLUMNS[1]: np.arange(len(frame))})
    replay = frames.replay_closed if closed else frames.replay_open
    return pd.concat(replay(part, config) for _, part in frame.groupby(BROKER)).loc[frame.index]


@pytest.mark.parametrize("measured", [False, True], ids=["planned", "suggested"])
def test_some_tenants_run_just_over_their_quota_and_some_just_under(
    day: pd.DataFrame, planned: QuotaConfig, measured: bool
) -> None:
    table = pa.Table.from_pandas(day, preserve_index=False)
    config = synthetic.suggest_quotas(table) if measured else planned
    own = {
        (entry.entity.user, "produce" if name.startswith("producer") else "fetch")
        for entry in config.entries
        if entry.entity.user not in (DEFAULT, BOOTSTRAP_USER)
        for name in entry.config
        if name.endswith("_byte_rate")
    }
    assert len(own) >= 4
    shares = {}
    for scale in (0.5, 1.0, 2.0):
        results = replayed(day, config.scaled(scale), closed=True)
        for user, api in own:
            mine = (day["user"] == user) & (day["api"] == api)
            column = PRODUCE_THROTTLE if api == "produce" else FETCH_THROTTLE
            shares[user, api, scale] = float((results.loc[mine, column] > 0).mean())
    # just over: throttled at its peak (x1), much less with twice the quota
    over = [
        (user, api)
        for user, api in own
        if shares[user, api, 1.0] > 0.03 and shares[user, api, 2.0] < shares[user, api, 1.0] / 3
    ]
    # just under: hardly throttled (x1), much more with half the quota
    under = [
        (user, api)
        for user, api in own
        if shares[user, api, 1.0] < 0.01 and shares[user, api, 0.5] > 3 * shares[user, api, 1.0]
    ]
    assert over and under, shares


SMALL = TrafficSpec(requests=20_000, brokers=2, users=10, clients=40, hours=1.0, bursts=3)


def throttled_per_scale(results: dict[float, pd.DataFrame]) -> list[tuple[int, int]]:
    return [
        (int((r[THROTTLE] > 0).sum()), int(r[THROTTLE].clip(lower=0).sum()))
        for _, r in sorted(results.items())
    ]


def assert_clearly_fewer(per_scale: list[tuple[int, int]]) -> None:
    """From x0.5 to x1 to x2: a fifth fewer throttled requests at least each time, and at
    most half the throttle time; some still throttled at x2 (the bursts)."""
    (half, half_ms), (one, one_ms), (two, two_ms) = per_scale
    assert half > 1.2 * one and one > 1.2 * two > 0, per_scale
    assert half_ms > 2 * one_ms and one_ms > 2 * two_ms > 0, per_scale


@pytest.mark.parametrize("closed", [True, False], ids=["closed", "open"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_planned_quotas_scaled_throttle_clearly_differently(seed: int, closed: bool) -> None:
    table = synthetic.generate(dataclasses.replace(SMALL, seed=seed))
    config = synthetic.planned_quotas(table)
    frame = table.to_pandas()
    results = {s: replayed(frame, config.scaled(s), closed) for s in (0.5, 1.0, 2.0)}
    assert_clearly_fewer(throttled_per_scale(results))


@pytest.mark.slow
def test_the_what_if_of_gen_traffic_on_spark(spark: Any, tmp_path: Path) -> None:
    path, quotas = tmp_path / "t.parquet", tmp_path / "q.json"
    args = ["--requests", str(SMALL.requests), "--brokers", str(SMALL.brokers), "--hours", "1"]
    args += ["--users", str(SMALL.users), "--clients", str(SMALL.clients), "--bursts", "3"]
    assert main(["gen-traffic", "--out", str(path), *args, "--quotas-out", str(quotas)]) == 0
    for mode in ("closed", "open"):
        options = BacktestOptions(
            traffic=str(path),
            quotas=QuotaConfig.load(quotas),
            out=str(tmp_path / mode),
            mode=mode,
            scales=(0.5, 1.0, 2.0),
        )
        totals = run(spark, options).totals
        assert list(totals["scenario"]) == ["x0.5", "x1", "x2"]
        per_scale = list(
            zip(totals["throttled_requests"], totals["total_throttle_ms"], strict=True)
        )
        assert_clearly_fewer(per_scale)
        assert totals["p99_throttle_ms"].is_monotonic_decreasing


def test_planned_quotas_of_other_traffic_are_the_suggested_ones(day: pd.DataFrame) -> None:
    table = pa.Table.from_pandas(day, preserve_index=False).replace_schema_metadata(None)
    assert synthetic.planned_quotas(table).dumps() == synthetic.suggest_quotas(table).dumps()


def test_invalid_specs() -> None:
    with pytest.raises(TrafficError, match="requests"):
        TrafficSpec(requests=0)
    with pytest.raises(TrafficError, match="clients"):
        TrafficSpec(clients=1)


@pytest.mark.slow
def test_three_million_rows_well_under_a_minute(tmp_path: Path) -> None:
    started = time.monotonic()
    table = synthetic.generate(TrafficSpec(requests=3_000_000))
    synthetic.write(table, tmp_path / "t.parquet")
    elapsed = time.monotonic() - started
    assert table.num_rows == 3_000_000
    assert elapsed < 30, f"{elapsed:.1f} s"


def test_gen_traffic_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "traffic"
    quotas = tmp_path / "q.json"
    args = ["gen-traffic", "--out", str(out), "--requests", "5000", "--quotas-out", str(quotas)]
    assert main([*args, "--seed", "3", "--no-bootstrap"]) == 0
    printed = capsys.readouterr().out
    assert "wrote 5,000 requests to" in printed and str(quotas) in printed
    table = pq.read_table(out / "part-00000.parquet")
    assert table.num_rows == 5000
    assert BOOTSTRAP_USER not in set(table.column("user").to_pylist())
    # the quotas the traffic was planned against, which the Parquet file also carries
    spec = TrafficSpec(requests=5000, seed=3, bootstrap=False)
    want = synthetic.planned_quotas(synthetic.generate(spec)).dumps()
    assert QuotaConfig.load(quotas).dumps() == want == synthetic.planned_quotas(table).dumps()
    assert main(["gen-traffic", "--out", str(out), "--requests", "-5"]) == 2
    assert "invalid requests -5" in capsys.readouterr().err
    assert np.all(np.diff(table.column("ts_ms").to_numpy()) >= 0)
