"""The back-test report (kquota.backtest.report): from small result tables without Spark,
and its opening sentences on a real back-test of generated traffic."""

from __future__ import annotations

import dataclasses
import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from kquota import Entity
from kquota.backtest import synthetic
from kquota.backtest.frames import ClientLimits
from kquota.backtest.job import run
from kquota.backtest.options import BacktestOptions, BacktestResult, RecommendedFile
from kquota.backtest.report import (
    MAX_POINTS,
    RANKINGS,
    Ranking,
    RatePlot,
    opening,
    opening_paragraphs,
    plot_choice,
    ranked_entities,
    rate_over_time,
    rate_plot,
    read_entities,
    scenario_totals,
    summary_text,
    throttle_histogram,
    write_report,
)
from kquota.backtest.tally import UNSERVED_COLUMNS
from kquota.config import QuotaConfig, QuotaEntry, Window

START = 1_717_372_800  # seconds


def result() -> BacktestResult:
    totals = pd.DataFrame(
        {
            "scenario": ["x1", "x2"],
            "scale": [1.0, 2.0],
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
            "scenario": ["x1"],
            "quota_type": ["produce"],
            "broker": ["b1"],
            "sensor_user": ["alice"],
            "sensor_client_id": [""],
            "entity": ["user=alice"],
            "quota": [1000.0],
            "requests": [400],
            "throttled_requests": [30],
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
                "change": ["raise"],
                "applied_quota": [3240.0],
            }
        ),
        recommended=RecommendedFile(
            config=QuotaConfig(Window()),
            path="/x/recommendations/quotas.json",
            headroom=0.2,
            lower=False,
            add_quotas=False,
            totals=totals.head(1).assign(
                throttled_requests=4, throttled_fraction=0.004, total_throttle_ms=6000
            ),
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
    # quotas in kB/s (the header says so), durations in the unit of the column's largest
    assert "meets target at (kB/s)" in text and " 2.70 " in text and "0.75%" in text
    assert "throttle in all (min)" in text and "longest (s)" in text
    assert "90,000" not in text  # the throttle total in ms


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


# -- the opening sentences -------------------------------------------------------------------


def entity_rows(throttled: dict[tuple[str, str, str], tuple[int, int, int, int]]) -> pd.DataFrame:
    """``DIR/entities/`` rows of the base scenario x1 (and an unthrottled x2): per
    (quota type, broker, user), ``(requests, throttled, total ms, max ms)``."""
    rows = []
    for (quota_type, broker, user), (n, hit, total, longest) in throttled.items():
        for scenario, factor in (("x1", 1), ("x2", 0)):
            rows.append(
                {
                    "scenario": scenario,
                    "quota_type": quota_type,
                    "broker": broker,
                    "sensor_user": user,
                    "sensor_client_id": "",
                    "entity": f"user={user}",
                    "quota": 1000.0,
                    "requests": n,
                    "throttled_requests": hit * factor,
                    "throttled_fraction": hit * factor / n,
                    "total_throttle_ms": total * factor,
                    "p99_throttle_ms": 0,
                    "max_throttle_ms": longest * factor,
                }
            )
    return pd.DataFrame(rows)


ALICE_THROTTLED = {
    ("produce", "b1", "alice"): (400, 30, 90_000, 4000),
    ("produce", "b2", "alice"): (100, 0, 0, 0),
    ("fetch", "b1", "bob"): (200, 0, 0, 0),
}
BOB_THROTTLED = {
    ("produce", "b1", "alice"): (400, 0, 0, 0),
    ("produce", "b2", "alice"): (100, 0, 0, 0),
    ("fetch", "b1", "bob"): (200, 30, 60_000, 2500),
}


def test_opening_says_who_was_throttled_how_long_and_what_the_others_change() -> None:
    sentences = opening(result(), entity_rows(ALICE_THROTTLED))
    assert sentences == [
        "Replayed at their recorded times, as if clients ignored throttles (open loop), 30 of "
        "1,000 requests (3.00%) would have been throttled under these quotas (x1), all from "
        "one entity.",
        "The produce quotas would throttle user=alice (30 requests, 6.00% of its produce "
        "requests, up to 4.0 s).",
        "The brokers would have answered the throttled requests with throttles of 3.0 s on "
        "average; over all requests the p99 throttle is 2.9 s and the longest 4.0 s "
        "(user=alice, produce): this measures how far the recorded demand exceeds the quotas, "
        "not what clients would wait (a closed-loop run, --mode closed, tells that).",
        "Scaled by 2 (x2), the quotas would throttle 0.50% of requests (p99 0 ms, longest 900 ms).",
        "Each entity's recommended quota is the smallest that keeps the share of its "
        "requests throttled at or under the target on this traffic (x1), plus 20% headroom; "
        "a quota is never lowered (--lower allows it) and an entity without a quota gets "
        "none (--add-quotas gives it one).",
        "The recommended quota file (recommendations/quotas.json) raises user=alice's "
        "produce quota from 1 kB/s to 3.24 kB/s (7.50% of its requests throttled).",
        "Back-tested on the same traffic, it throttles 4 requests (0.40%) where the quotas "
        "of x1 throttle 30 (3.00%), 6.0 s of throttle in all against 1.5 min.",
    ]


def test_opening_follows_the_entities_the_quotas_throttle() -> None:
    before = opening(result(), entity_rows(ALICE_THROTTLED))
    after = opening(result(), entity_rows(BOB_THROTTLED))
    assert after[1] == (
        "The fetch quotas would throttle user=bob (30 requests, 15% of its fetch requests, up "
        "to 2.5 s)."
    )
    assert "alice" not in after[1] and "bob" not in before[1]
    both = {**ALICE_THROTTLED, ("fetch", "b1", "bob"): BOB_THROTTLED[("fetch", "b1", "bob")]}
    two = opening(result(), entity_rows(both))
    assert two[0].endswith("under these quotas (x1), from 2 entities.")
    # the type with the most throttle time first
    assert two[1].startswith("The produce quotas would throttle user=alice (30 requests")
    # a sentence per quota type
    assert two[2].startswith("The fetch quotas would throttle user=bob (30 requests")


def _closed_opening(**changes: Any) -> tuple[BacktestResult, list[str]]:
    """A closed-loop result with ``changes`` whose requests went out 1.5 s late on average
    and 95 s at most, and its opening over alice's throttles."""
    closed = dataclasses.replace(result(), mode="closed", **changes)
    closed.totals.loc[0, ["mean_added_latency_ms", "max_added_latency_ms"]] = [1500.0, 95_000]
    return closed, opening(closed, entity_rows(ALICE_THROTTLED))


def test_opening_in_closed_loop_says_how_far_clients_fell_behind() -> None:
    _, sentences = _closed_opening(clients=None)
    assert sentences[0].startswith(
        "Under these quotas (x1), clients that honour throttles (closed loop, as Kafka "
        "clients do) would have had 30 of 1,000 requests (3.00%) throttled"
    )
    assert sentences[2] == (
        "A throttled request was held back 3.0 s on average; over all requests the p99 "
        "throttle is 2.9 s and the longest 4.0 s (user=alice, produce). Waiting, clients fell "
        "behind: their requests went out 1.5 s late on average, at most 1.6 min (unbounded "
        "clients: they hold every request however late)."
    )


def _unserved(*rows: tuple[str, str, str, int, int, int, int]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=list(UNSERVED_COLUMNS))


def test_opening_with_bounded_clients_says_what_was_not_served_and_whose() -> None:
    closed, sentences = _closed_opening(
        clients=ClientLimits(),
        unserved=_unserved(
            ("x1", "alice", "app-1", 40, 12_000_000, 30, 10),
            ("x1", "bob", "", 2, 3_000, 0, 2),
            ("x2", "carol", "c", 9, 9, 0, 9),  # another scenario: not in the opening
        ),
    )
    assert sentences[2].endswith(
        "Clients held what they could not send yet: requests went out 1.5 s late on "
        "average, at most 1.6 min."
    )
    assert sentences[3] == (
        "Within their limits (buffer.memory 33,554,432, delivery.timeout.ms 120,000, "
        "default.api.timeout.ms 60,000), clients could not have sent 42 requests (12 MB): "
        "30 produce requests found the client's buffer full and 12 requests were still "
        "waiting when their timeout ran out. Most of it from user=alice, client-id=app-1 "
        "(40 requests, 12 MB) and user=bob, client-id=(none) (2 requests, 3 kB)."
    )
    served = dataclasses.replace(closed, unserved=_unserved())
    assert opening(served, entity_rows(ALICE_THROTTLED))[3] == (
        "Within their limits (buffer.memory 33,554,432, delivery.timeout.ms 120,000, "
        "default.api.timeout.ms 60,000), clients would have sent every request."
    )


def test_opening_without_the_entities_names_the_most_throttled_sensors() -> None:
    sentences = opening(result())
    assert sentences[0].endswith("under these quotas (x1).")  # no count of entities
    assert sentences[1] == (
        "Among the most throttled sensors, the produce quotas would throttle user=alice (30 "
        "requests, 7.50% of its produce requests, up to 4.0 s)."
    )


def test_opening_when_nothing_is_throttled() -> None:
    quiet = result()
    quiet.totals.loc[:, ["throttled_requests", "throttled_fraction"]] = 0
    quiet.recommendations = None
    sentences = opening(quiet, entity_rows(BOB_THROTTLED))
    assert sentences[0] == (
        "Replayed at their recorded times (open loop), none of the 1,000 requests would have "
        "been throttled under these quotas (x1)."
    )
    assert len(sentences) == 2 and "x2" in sentences[1]


def test_the_report_and_the_summary_open_with_the_sentences(tmp_path: Path) -> None:
    entities = tmp_path / "entities"
    entities.mkdir()
    table = pa.Table.from_pandas(entity_rows(BOB_THROTTLED), preserve_index=False)
    pq.write_table(table, entities / "part-00000.parquet")
    (entities / "_SUCCESS").touch()
    done = dataclasses.replace(result(), out=str(tmp_path))
    sentences = opening(done, read_entities(tmp_path))
    assert "user=bob" in sentences[1]
    page = write_report(done, tmp_path).read_text()
    assert page.index('<p class="opening">Replayed at their recorded times') < page.index(
        "<h2>Scenarios</h2>"
    )
    assert "The fetch quotas would throttle user=bob (30 requests" in page
    text = summary_text(done)
    assert " ".join(text.split()).count(" ".join(sentences)) == 1
    assert text.index("Replayed at their") < text.index("scenario  requests")
    assert read_entities(tmp_path / "nowhere") is None
    assert read_entities("s3a://bucket/out") is None


# -- the rate plots --------------------------------------------------------------------------


def fetch_series(throttled_windows: range, total: int, sparse: bool = False) -> pd.DataFrame:
    """A fetch sensor's usage per window: 30,000 bytes a window, but in
    ``throttled_windows`` only throttled fetches (empty responses, their bytes unrecorded);
    ``sparse``: there, only every other window has a request (the others none)."""
    windows = np.arange(START, START + total)
    stopped = np.isin(windows, np.asarray(throttled_windows) + START)
    series = pd.DataFrame(
        {
            "window": windows,
            "amount": np.where(stopped, 0.0, 30_000.0),
            "throttled": stopped.astype(np.int64),
            "requests": 1,
            "unrecorded": stopped.astype(np.int64),
        }
    )
    if sparse:
        series = series[~stopped | (windows % 2 == 0)].reset_index(drop=True)
    return series


def points_over(plot: RatePlot, windows: pd.Series) -> np.ndarray:
    """Which drawn points stand for one of ``windows`` (a point stands for the windows from
    its own time to the next point's)."""
    seconds = plot.times.astype("datetime64[ms]").astype(np.int64) // 1000
    covered = np.zeros(len(seconds), dtype=np.bool_)
    covered[np.searchsorted(seconds, windows.to_numpy(), side="right") - 1] = True
    return covered


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("points", [MAX_POINTS, 97])
def test_a_throttled_fetch_is_a_gap_not_a_rate_of_zero(points: int, sparse: bool) -> None:
    window = Window()  # 11 windows of 1 s
    stretch = range(600, 1400)  # long enough for the sensor's rate to fall to 0
    series = fetch_series(stretch, 2000, sparse)
    plot = rate_plot(series, window, "fetch", 25_000.0, points)
    assert len(plot.times) <= points
    throttled = series.loc[series["throttled"] > 0, "window"]
    over = points_over(plot, throttled)
    assert over.any() and not (plot.rate[over] == 0).any()
    assert np.isnan(plot.rate[over]).mean() > 0.9  # gaps, but where a point stands for more
    # outside the stretch, the rate the sensor measured (30,000 B/s once 10 windows are full)
    assert np.nanmax(plot.rate) == 30_000.0 and not np.isnan(plot.rate[~over]).any()
    # every throttled fetch is marked on the quota it went over, none at 0
    assert len(plot.mark_times) == len(throttled) and (plot.mark_rates == 25_000.0).all()
    # the sensor's own rate there is 0: without the gap, that is what would be drawn
    _, kept = rate_over_time(series["window"], series["amount"], window.num_samples)
    assert (kept[610:1400] == 0).all()


def test_throttled_produce_is_drawn_at_its_rate() -> None:
    series = fetch_series(range(600, 700), 1000).assign(unrecorded=0)
    plot = rate_plot(series, Window(), "produce", 25_000.0)
    assert not np.isnan(plot.rate).any()
    assert len(plot.mark_times) == 100 and (plot.mark_rates < 30_000.0).all()


# -- the summary's table, the plots' choice and the page -------------------------------------


def test_the_summary_ranks_the_entities_by_throttle_time_and_by_delay() -> None:
    bob = {
        ("fetch", "b1", "bob"): (200, 30, 60_000, 2500),
        ("request", "b1", "bob"): (200, 0, 0, 0),
    }
    rows = entity_rows({**ALICE_THROTTLED, **bob})
    rows["max_added_latency_ms"] = np.where(rows["sensor_user"] == "bob", 9000, 100)
    rows.loc[rows["scenario"] == "x2", "max_added_latency_ms"] = 0
    ranked = ranked_entities(dataclasses.replace(result(), mode="closed"), rows)
    assert [r.title for r, _ in ranked] == ["Most throttled", "Most delayed"]
    throttled, delayed = (frame for _, frame in ranked)
    # across brokers: alice's 30 throttled of 500 produce requests
    assert throttled[["entity", "throttled_requests", "total_throttle_ms"]].values.tolist() == [
        ["user=alice", 30, 90_000],
        ["user=bob", 30, 60_000],
    ]
    assert throttled["throttled_fraction"].tolist() == [30 / 500, 30 / 200]
    # how late an entity's requests went out is the same whatever the sensor: one row each,
    # of the quota type that throttled it
    assert delayed[["entity", "quota_type"]].values.tolist() == [
        ["user=bob", "fetch"],
        ["user=alice", "produce"],
    ]
    # open loop: nothing is delayed, so no such ranking
    assert [r.title for r, _ in ranked_entities(result(), rows)] == ["Most throttled"]


def test_another_ranking_is_one_entry() -> None:
    rows = entity_rows(ALICE_THROTTLED).assign(undelivered_requests=[7, 0, 0, 0, 2, 0])
    undelivered = Ranking("Most undelivered", "undelivered_requests", "undelivered")
    ranked = ranked_entities(result(), rows, (*RANKINGS, undelivered))
    assert ranked[-1][0] is undelivered
    assert ranked[-1][1][["entity", "undelivered_requests"]].values.tolist() == [
        ["user=alice", 7],
        ["user=bob", 2],
    ]
    # a ranking whose column the entities do not have is left out
    assert len(ranked_entities(result(), entity_rows(ALICE_THROTTLED), (undelivered,))) == 0


def candidate(quota_type: str, broker: str, user: str, throttle_ms: int) -> dict[str, Any]:
    return {
        "quota_type": quota_type,
        "broker": broker,
        "sensor_user": user,
        "sensor_client_id": "",
        "entity": f"user={user}",
        "total_throttle_ms": throttle_ms,
    }


def test_the_plots_cover_the_quota_types_and_different_entities() -> None:
    candidates = pd.DataFrame(
        [
            candidate("produce", "b1", "t0", 900),
            candidate("produce", "b2", "t0", 800),
            candidate("produce", "b3", "t0", 700),
            candidate("fetch", "b1", "t0", 600),
            candidate("produce", "b1", "t4", 500),
            candidate("fetch", "b1", "t5", 400),
            candidate("request", "b2", "t6", 10),
            candidate("controller_mutation", "b2", "t7", 5),
        ]
    )
    chosen = plot_choice(candidates, 4)
    # every type present, each of another entity (t0's fetch gives way to t5's)
    assert chosen[["quota_type", "sensor_user"]].values.tolist() == [
        ["produce", "t0"],
        ["fetch", "t5"],
        ["request", "t6"],
        ["controller_mutation", "t7"],
    ]
    # with one type and one entity, its most throttled sensors
    alone = plot_choice(candidates.head(3), 4)
    assert alone["broker"].tolist() == ["b1", "b2", "b3"]
    # two types: one each, then another entity before more of t0
    two = plot_choice(candidates.head(6), 4)
    assert two[["quota_type", "sensor_user"]].values.tolist() == [
        ["produce", "t0"],
        ["fetch", "t5"],
        ["produce", "t4"],
        ["produce", "t0"],
    ]
    # a type of one entity only: the other type's plot is of another entity
    shared = pd.DataFrame(
        [
            candidate("fetch", "b1", "analytics", 900),
            candidate("fetch", "b1", "t2", 800),
            candidate("request", "b1", "analytics", 10),
        ]
    )
    assert plot_choice(shared, 2)[["quota_type", "sensor_user"]].values.tolist() == [
        ["fetch", "t2"],
        ["request", "analytics"],
    ]
    assert plot_choice(candidates.iloc[0:0]).empty


def test_the_page_opens_with_short_paragraphs_and_the_table(tmp_path: Path) -> None:
    done = dataclasses.replace(result(), mode="closed")
    paragraphs = opening_paragraphs(done)
    assert len(paragraphs) >= 4 and all(len(" ".join(p).split()) < 90 for p in paragraphs)
    page = write_report(done, tmp_path).read_text()
    summary = page[page.index('<section class="summary">') : page.index("</section>")]
    assert summary.count("<p") >= 4 and '<table class="ranked">' in summary
    assert ">Most throttled<" in summary and ">longest throttle (s)<" in summary
    assert "<td>user=alice</td><td>produce</td><td>1.00</td>" in summary  # quota in kB/s
    assert ">quota (kB/s)<" in summary
    # a caption under each plot says what its marks mean
    captions = [html.unescape(c) for c in re.findall(r"<figcaption>(.*?)</figcaption>", page)]
    assert len(captions) == 2 and "quota, 1 kB/s on this broker" in captions[0]
    assert "over their 10 s" in captions[0] and "another stretch than the curve's" in captions[0]
    # the provenance block is kept
    assert '<dl class="provenance">' in page and "<dt>span</dt>" in page


# -- on a real back-test ---------------------------------------------------------------------

SPEC = synthetic.TrafficSpec(requests=20_000, brokers=2, users=10, clients=40, hours=1.0, seed=0)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, QuotaConfig]:
    table = synthetic.generate(dataclasses.replace(SPEC, bursts=3))
    folder = tmp_path_factory.mktemp("opening")
    return synthetic.write(table, folder / "traffic.parquet"), synthetic.suggest_quotas(table)


def back_test(spark: Any, path: Path, config: QuotaConfig, out: Path) -> list[str]:
    options = BacktestOptions(
        traffic=str(path), quotas=config, out=str(out), mode="closed", scales=(0.5, 1.0, 2.0)
    )
    done = run(spark, options)
    assert done.report is not None and '<p class="opening">' in done.report.read_text()
    return opening(done, read_entities(out))


@pytest.mark.slow
def test_the_opening_names_who_the_quotas_throttle_and_changes_with_them(
    spark: Any, generated: tuple[Path, QuotaConfig], tmp_path: Path
) -> None:
    path, config = generated
    sentences = back_test(spark, path, config, tmp_path / "as-given")
    # the generated consumer that resets its offsets catches up at three times its quota
    (fetch,) = [s for s in sentences if s.startswith("The fetch quotas")]
    assert "user=analytics (" in fetch
    # with a quota it never comes near, it is not named; the rest of the words follow
    analytics = Entity(user=synthetic.BOOTSTRAP_USER)
    roomy = QuotaConfig(
        config.window,
        tuple(
            QuotaEntry(e.entity, {**e.config, "consumer_byte_rate": 1e12})
            if e.entity == analytics
            else e
            for e in config.entries
        ),
    )
    raised = back_test(spark, path, roomy, tmp_path / "raised")
    assert "analytics" not in " ".join(raised)
    assert raised[0] != sentences[0] and raised[1] != sentences[1]


# -- the report in a real browser ------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"  # Debian's (make tools); Playwright's own browsers are not used
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDE, NARROW, FOLD = 1280, 768, 900
"""The widths the page is laid out at, and the height of the first screen."""
BIG_NUMBER = re.compile(r"(?<![\w.,])\d{1,3}(?:,\d{3}){1,}(?:\.\d+)?(?![\w,])|(?<![\w.,])\d{6,}")


@pytest.fixture(scope="module")
def real_report(
    spark: Any, generated: tuple[Path, QuotaConfig], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """One closed-loop back-test of the generated traffic, with recommendations: its
    report.html."""
    path, config = generated
    out = tmp_path_factory.mktemp("report") / "backtest"
    options = BacktestOptions(
        traffic=str(path),
        quotas=config,
        out=str(out),
        mode="closed",
        scales=(0.5, 1.0, 2.0),
        recommend=True,
    )
    done = run(spark, options)
    assert done.report is not None
    return done.report


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import Error, sync_playwright

    if not Path(CHROMIUM).is_file():
        pytest.fail(f"no {CHROMIUM}: `make tools` installs Debian's chromium package")
    with sync_playwright() as playwright:
        try:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        except Error as error:
            pytest.fail(f"Chromium ({CHROMIUM}) did not start: {error}")
        yield chromium
        chromium.close()


def layout(browser: Any, report: Path, width: int, shot: Path) -> dict[str, Any]:
    """The page at ``width`` x :data:`FOLD`: a screenshot, and what the checks read."""
    page = browser.new_page(viewport={"width": width, "height": FOLD})
    try:
        page.goto(report.as_uri(), wait_until="load")
        page.screenshot(path=str(shot), full_page=True)
        facts: dict[str, Any] = page.evaluate(
            """() => {
              const box = (e) => { const r = e.getBoundingClientRect();
                return {top: r.top + scrollY, bottom: r.bottom + scrollY,
                        left: r.left, right: r.right}; };
              const summary = document.querySelector('section.summary');
              const ranked = document.querySelector('table.ranked');
              return {
                viewport: innerWidth,
                scrollWidth: document.documentElement.scrollWidth,
                summary: summary && box(summary),
                ranked: ranked && box(ranked),
                images: [...document.images].map(i => ({
                  src: i.getAttribute('src'), complete: i.complete, width: i.naturalWidth,
                  shown: i.getBoundingClientRect().width})),
                wider: [...document.querySelectorAll('body *')]
                  .filter(e => e.getBoundingClientRect().right > innerWidth + 0.5)
                  .map(e => e.tagName + (e.className ? '.' + e.className : '')),
                tables: [...document.querySelectorAll('table')].map(t => ({
                  headers: [...t.querySelectorAll('th')].map(h => h.innerText),
                  rows: [...t.querySelectorAll('tbody tr')].map(
                    r => [...r.querySelectorAll('td')].map(c => c.innerText)),
                  box: box(t)})),
                captions: [...document.querySelectorAll('figure')].map(f => ({
                  img: !!f.querySelector('img'),
                  text: (f.querySelector('figcaption') || {}).innerText || ''})),
                text: document.body.innerText,
              };
            }"""
        )
    finally:
        page.close()
    return facts


@pytest.mark.slow
@pytest.mark.parametrize("width", [WIDE, NARROW])
def test_the_report_reads_well_in_a_browser(
    browser: Any, real_report: Path, width: int, tmp_path: Path
) -> None:
    shot = tmp_path / f"report-{width}.png"
    page = layout(browser, real_report, width, shot)
    assert shot.read_bytes().startswith(b"\x89PNG") and shot.stat().st_size > 20_000
    assert page["viewport"] == width
    # no horizontal scroll: nothing wider than the window, tables within the page
    assert page["scrollWidth"] <= width, page["wider"]
    assert page["wider"] == []
    assert len(page["tables"]) >= 4
    for table in page["tables"]:
        assert table["box"]["left"] >= 0 and table["box"]["right"] <= width
    # the summary opens the page, its table of the entities that matter with it
    assert page["summary"] is not None and page["ranked"] is not None
    assert page["summary"]["top"] < 150
    if width == WIDE:
        assert page["ranked"]["bottom"] <= FOLD, "the summary's table is below the fold"
    # every image loaded and is shown whole (scaled down to the page when narrow)
    images = page["images"]
    assert len(images) >= 3
    for image in images:
        assert image["complete"] and image["width"] > 0, image["src"]
        assert 0 < image["shown"] <= width
    # each rate plot has a caption saying what its marks mean
    rate_figures = [f for f in page["captions"] if "rate this plot computes" in f["text"]]
    assert len(rate_figures) == sum("rate_" in i["src"] for i in images) >= 2
    assert all(f["img"] and "quota" in f["text"] for f in rate_figures)
    text = page["text"]
    # units: kB/s (or MB/s) for rates and quotas, times with theirs, percentages with %
    assert re.search(r"\((kB/s|MB/s)\)", text) and "%" in text
    headers = [h for t in page["tables"] for h in t["headers"]]
    assert any(re.search(r"\((ms|s|min|h)\)$", h) for h in headers), headers
    assert not any(h.endswith(" ms") for h in headers)
    # no bare huge numbers: a rate in bytes/s or a sum of milliseconds would be one (the
    # traffic has 20,000 requests, so no count reaches 100,000)
    huge = [n for n in BIG_NUMBER.findall(text) if float(n.replace(",", "")) >= 100_000]
    assert huge == [], huge
    ranked = next(t for t in page["tables"] if "Most throttled" in t["headers"])
    rows = [r for r in ranked["rows"] if r]  # a ranking's title and header rows have no td
    assert rows and all(len(r) == len(rows[0]) for r in rows)
    assert "Most delayed" in ranked["headers"]  # closed loop: the clients' added latency
