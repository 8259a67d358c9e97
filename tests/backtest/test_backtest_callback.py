"""The back-test with a custom quota callback (KIP-257): the callback that divides every
user quota by 2 gives, request for request, the throttles of the same quotas halved in the
configuration, on a local SparkSession (the callback's module shipped to the workers) and
in the single-process replay; and every scale of a what-if is halved too.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kquota import Entity
from kquota.backtest import frames
from kquota.backtest.frames import SENSOR_CLIENT, SENSOR_USER, USER
from kquota.backtest.job import run
from kquota.backtest.options import BacktestOptions
from kquota.backtest.outputs import read_requests
from kquota.backtest.synthetic import TrafficSpec, generate
from kquota.config import QuotaConfig
from kquota.config.model import QuotaEntry, Window

pytestmark = pytest.mark.slow

SPEC = "callbacks.half_user_quota:HalfUserQuota"
THROTTLES = ["produce_throttle_ms", "fetch_throttle_ms", "request_throttle_ms", "throttle_ms"]
SCALES = (0.5, 1.0)


def configs() -> tuple[QuotaConfig, QuotaConfig]:
    """User quotas through the callback, and the same quotas halved without it (users of
    the generated traffic, quotas it exceeds once halved)."""
    values = {
        "tenant-000": {"producer_byte_rate": 120_000.0, "consumer_byte_rate": 40_000.0},
        "analytics": {"consumer_byte_rate": 60_000.0, "request_percentage": 0.02},
        "tenant-001": {"producer_byte_rate": 30_000.0},
    }

    def config(factor: float) -> QuotaConfig:
        return QuotaConfig(
            Window(11, 1000),
            tuple(
                QuotaEntry(Entity(user=u), {k: v * factor for k, v in c.items()})
                for u, c in values.items()
            ),
        )

    return dataclasses.replace(config(1.0), quota_callback=SPEC), config(0.5)


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame]:
    table = generate(
        TrafficSpec(requests=30_000, brokers=2, users=5, clients=15, hours=0.5, bursts=3, seed=5)
    )
    folder = tmp_path_factory.mktemp("callback-traffic")
    pq.write_table(table, folder / "t.parquet")
    return folder, table.to_pandas()


def requests_of(out: Path) -> pd.DataFrame:
    requests = read_requests(out / "requests")
    requests["scenario"] = requests["scenario"].astype(str)
    return requests.sort_values(["scenario", "request_id"]).reset_index(drop=True)


def test_the_backtest_honours_a_callback_that_halves_user_quotas(
    spark: Any, traffic: tuple[Path, pd.DataFrame], tmp_path: Path
) -> None:
    folder, frame = traffic
    assert {"tenant-000", "tenant-001", "analytics"} <= set(frame[USER])
    with_callback, halved = configs()
    runs = {}
    for name, config in (("callback", with_callback), ("halved", halved)):
        options = BacktestOptions(
            traffic=str(folder), quotas=config, out=str(tmp_path / name), scales=SCALES
        )
        result = run(spark, options)
        runs[name] = (result, requests_of(tmp_path / name))
    got, want = runs["callback"][1], runs["halved"][1]
    assert len(got) == len(want) == len(SCALES) * len(frame)
    for column in [*THROTTLES, SENSOR_USER, SENSOR_CLIENT]:
        np.testing.assert_array_equal(got[column].to_numpy(), want[column].to_numpy(), column)
    for column in THROTTLES[:3]:
        assert (got[column] > 0).any(), f"nothing throttled in {column}"
    # the entities' quotas are the callback's limits
    entities = {
        name: pd.read_parquet(tmp_path / name / "entities")
        .astype({"scenario": str})
        .sort_values(["scenario", "quota_type", "broker", SENSOR_USER, SENSOR_CLIENT])
        .reset_index(drop=True)
        for name in runs
    }
    assert len(entities["callback"]) == len(entities["halved"]) > 0
    np.testing.assert_array_equal(
        entities["callback"]["quota"].to_numpy(), entities["halved"]["quota"].to_numpy()
    )


def test_the_single_process_replay_honours_it_too(traffic: tuple[Path, pd.DataFrame]) -> None:
    _, frame = traffic
    assert {"tenant-000", "tenant-001", "analytics"} <= set(frame[USER])
    with_callback, halved = configs()
    part = frame[frame["broker"] == frame["broker"].iloc[0]]
    got = frames.replay_open(part, with_callback)
    want = frames.replay_open(part, halved)
    for column in THROTTLES:
        np.testing.assert_array_equal(got[column].to_numpy(), want[column].to_numpy(), column)
    assert (want["throttle_ms"] > 0).any()
    assert isinstance(pa.Table.from_pandas(got), pa.Table)
