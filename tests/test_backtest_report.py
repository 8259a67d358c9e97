"""The back-test report (kquota.backtest.report) from small result tables, without Spark."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from kquota.backtest.options import BacktestResult
from kquota.backtest.report import (
    rate_over_time,
    scenario_totals,
    summary_text,
    throttle_histogram,
    write_report,
)
from kquota.config import QuotaConfig, Window

START = 1_717_372_800  # seconds


def result() -> BacktestResult:
    totals = pd.DataFrame(
        {
            "scenario": ["x1", "x2"],
            "requests": [1000, 1000],
            "throttled_requests": [30, 5],
            "throttled_fraction": [0.03, 0.005],
            "produce_throttled": [30, 5],
            "fetch_throttled": [0, 0],
            "request_throttled": [0, 0],
            "total_throttle_ms": [90_000, 4_000],
            "p99_throttle_ms": [2900, 0],
            "max_throttle_ms": [4000, 900],
            "mean_added_latency_ms": [0.0, 0.0],
            "max_added_latency_ms": [0, 0],
        }
    )
    top = pd.DataFrame(
        {
            "quota_type": ["produce"],
            "broker": ["b1"],
            "sensor_user": ["alice"],
            "sensor_client_id": [""],
            "entity": ["user=alice"],
            "quota": [1000.0],
            "requests": [400],
            "throttled_fraction": [0.075],
            "total_throttle_ms": [90_000],
            "p99_throttle_ms": [2900],
            "max_throttle_ms": [4000],
            "peak_rate": [2500.0],
            "utilization": [2.5],
        }
    )
    windows = np.arange(START, START + 3600)
    amounts = np.where((windows > START + 1800) & (windows < START + 1900), 3000.0, 500.0)
    series = pd.DataFrame(
        {"window": windows, "amount": amounts, "throttled": (amounts > 1000).astype(int)}
    )
    return BacktestResult(
        rows_read=1002,
        rows_valid=1000,
        quarantined={"bytes negative": 2},
        out="/x",
        mode="open",
        scenarios=["x1", "x2"],
        base_scenario="x1",
        totals=totals,
        top_entities=top,
        comparison=pd.concat([top.assign(scenario="x1"), top.assign(scenario="x2")]),
        histogram=pd.DataFrame(
            {"scenario": ["x1", "x1", "x2"], "bin": [9, 11, 9], "count": [10, 20, 5]}
        ),
        rate_series={"produce|b1|alice|": series},
        recommendations=pd.DataFrame(
            {
                "quota_type": ["produce"],
                "entity": ["user=alice"],
                "brokers": [1],
                "requests": [400],
                "current_quota": [1000.0],
                "current_throttled_fraction": [0.075],
                "recommended_quota": [2700.0],
                "recommended_throttled_fraction": [0.0075],
            }
        ),
        config=QuotaConfig(Window()),
        seconds=12.5,
        notes=["a note"],
    )


def test_rate_over_time_is_the_windowed_rate() -> None:
    windows, rate = rate_over_time([10, 12, 30], [100.0, 50.0, 20.0], num_samples=3)
    assert windows.tolist() == list(range(10, 31))
    # two windows: [9,10], [10,11], [11,12], [12,13], ... (per window, not per second)
    assert rate[:4].tolist() == [50.0, 50.0, 25.0, 25.0]
    assert rate[-1] == 10.0 and rate[5] == 0.0
    assert rate_over_time([], [], 11)[0].size == 0


def test_terminal_summary() -> None:
    text = summary_text(result())
    assert (
        text.splitlines()[0]
        == "1,002 requests read, 1,000 replayed, 2 quarantined; open loop; 12.5 s"
    )
    assert "quarantined: 2 bytes negative" in text and "note: a note" in text
    assert "x1     1,000         30     3.00%" in text
    assert "Most throttled sensors (x1):" in text and "user=alice" in text
    assert "2,700" in text and "0.75%" in text


def test_html_report_with_plots(tmp_path: Path) -> None:
    page_path = write_report(result(), tmp_path)
    page = page_path.read_text()
    assert page_path == tmp_path / "report.html"
    assert '<img src="report/rate_1.png"' in page and "throttle_histogram.png" in page
    assert "What-if" in page and "Recommended quotas" in page and "2 bytes negative" in page
    for name in ("rate_1.png", "throttle_histogram.png"):
        png = (tmp_path / "report" / name).read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_totals_and_histogram_from_throttle_counts() -> None:
    rng = np.random.default_rng(3)
    requests = pd.DataFrame(
        {
            "scenario": rng.choice(["x1", "x2"], 5000),
            "throttle_ms": np.where(rng.random(5000) < 0.1, rng.integers(1, 5000, 5000), 0),
            "produce_throttle_ms": rng.integers(-1, 2, 5000),
            "fetch_throttle_ms": 0,
            "request_throttle_ms": rng.integers(0, 2, 5000),
            "added_latency_ms": rng.integers(0, 100, 5000),
        }
    )
    counts = (
        requests.groupby(["scenario", "throttle_ms"])
        .agg(
            requests=("throttle_ms", "size"),
            produce_throttled=("produce_throttle_ms", lambda v: int((v > 0).sum())),
            fetch_throttled=("fetch_throttle_ms", lambda v: int((v > 0).sum())),
            request_throttled=("request_throttle_ms", lambda v: int((v > 0).sum())),
            added_latency_ms=("added_latency_ms", "sum"),
            max_added_latency_ms=("added_latency_ms", "max"),
        )
        .reset_index()
    )
    totals = scenario_totals(counts, ["x1", "x2"], [1.0, 2.0]).set_index("scenario")
    for scenario, part in requests.groupby("scenario"):
        row = totals.loc[scenario]
        throttles = np.sort(part["throttle_ms"].to_numpy())
        assert row["requests"] == len(part)
        assert row["throttled_requests"] == (throttles > 0).sum()
        assert row["total_throttle_ms"] == throttles.sum()
        assert row["p99_throttle_ms"] == throttles[(99 * len(part) + 99) // 100 - 1]
        assert row["max_throttle_ms"] == throttles.max()
        assert row["produce_throttled"] == (part["produce_throttle_ms"] > 0).sum()
        assert row["mean_added_latency_ms"] == part["added_latency_ms"].sum() / len(part)
    histogram = throttle_histogram(counts)
    assert histogram["count"].sum() == (requests["throttle_ms"] > 0).sum()
    assert set(histogram["bin"]) <= set(range(13))
