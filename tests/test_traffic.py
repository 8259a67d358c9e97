"""Generated demo traffic (kquota.backtest.traffic) and ``kquota gen-traffic``."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kquota.backtest import kernel, traffic
from kquota.backtest.traffic import BOOTSTRAP_CLIENT, BOOTSTRAP_USER, TrafficSpec
from kquota.cli import main
from kquota.config import QuotaConfig
from kquota.exceptions import TrafficError

DAY = TrafficSpec(requests=300_000, seed=1)


@pytest.fixture(scope="module")
def day() -> pd.DataFrame:
    return traffic.generate(DAY).to_pandas()


def test_schema_order_and_size(day: pd.DataFrame) -> None:
    table = traffic.generate(TrafficSpec(requests=1000, seed=1))
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
    again = traffic.generate(DAY).to_pandas()
    pd.testing.assert_frame_equal(again, day)
    other = traffic.generate(TrafficSpec(requests=DAY.requests, seed=2)).to_pandas()
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
    config = traffic.suggest_quotas(pa.Table.from_pandas(day, preserve_index=False))
    assert QuotaConfig.from_json(config.to_json()).dumps() == config.dumps()
    assert config.quotas("produce") and config.quotas("fetch") and config.quotas("request")
    broker = day[day["broker"] == "broker-1"]
    throttled = (kernel.replay_open(broker, config)["throttle_ms"] > 0).mean()
    assert 0.001 < throttled < 0.2


def test_invalid_specs() -> None:
    with pytest.raises(TrafficError, match="requests"):
        TrafficSpec(requests=0)
    with pytest.raises(TrafficError, match="clients"):
        TrafficSpec(clients=1)


@pytest.mark.slow
def test_three_million_rows_well_under_a_minute(tmp_path: Path) -> None:
    started = time.monotonic()
    table = traffic.generate(TrafficSpec(requests=3_000_000))
    traffic.write(table, tmp_path / "t.parquet")
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
    QuotaConfig.load(quotas)
    assert main(["gen-traffic", "--out", str(out), "--requests", "-5"]) == 2
    assert "invalid requests -5" in capsys.readouterr().err
    assert np.all(np.diff(table.column("ts_ms").to_numpy()) >= 0)
