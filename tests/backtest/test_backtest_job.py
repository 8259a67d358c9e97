"""The back-test on Spark (kquota.backtest.job) against a single-process replay.

All tests share the session-scoped ``spark`` fixture (local[2]). The main trace has 10^5+
requests over four brokers and sixty clients with quotas on every entity shape; the Spark
results must equal, request by request, the kernel run in this process on each broker's
requests (which the kernel tests check against the core one request at a time).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from kquota.backtest import frames, inputs, outputs, report, summaries
from kquota.backtest.job import run
from kquota.backtest.options import RESULT_COLUMNS, BacktestOptions, BacktestResult
from kquota.backtest.synthetic import TrafficSpec, generate
from kquota.cli import main
from kquota.config import QuotaConfig
from kquota.config.model import PROPERTY_OF
from kquota.conformance import load_scenario
from kquota.exceptions import TrafficError
from recommend_reference import recommend_reference
from sensor_usage import recommendation_columns, summarized_usage
from test_backtest_kernel import CONFORMANCE, mixed_config, scenario_traffic

pytestmark = pytest.mark.slow

THROTTLES = [
    frames.PRODUCE_THROTTLE,
    frames.FETCH_THROTTLE,
    frames.REQUEST_THROTTLE,
    frames.THROTTLE,
]
SCALES = (0.5, 1.0)
Trace = tuple[Path, pd.DataFrame]
"""The main trace: its Parquet folder, and its requests with their input positions."""
Run = tuple[BacktestResult, Path]
"""A back-test of the main trace: its result and its output folder."""


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Trace:
    """120 000 requests in two Parquet files, with extra columns to carry through."""
    table = generate(
        TrafficSpec(requests=120_000, brokers=4, users=12, clients=60, hours=1.0, bursts=4, seed=21)
    )
    frame = table.to_pandas()
    frame["note"] = "r" + (frame["request_id"] % 97).astype(str)
    frame["weight"] = frame["request_id"] * 0.25
    folder = tmp_path_factory.mktemp("trace")
    half = len(frame) // 2
    for name, part in (("a.parquet", frame.iloc[:half]), ("b.parquet", frame.iloc[half:])):
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False), folder / name)
    # the input position, as the job numbers it: files in path order, rows in file order
    frame[frames.SEQ_COLUMNS[0]] = 0
    frame[frames.SEQ_COLUMNS[1]] = np.arange(len(frame), dtype=np.int64)
    return folder, frame


def replay(
    frame: pd.DataFrame,
    config: QuotaConfig,
    closed: bool = False,
    clients: frames.ClientLimits | None = None,
) -> pd.DataFrame:
    """The single-process reference: the kernel on each broker's requests."""
    parts = [
        frames.replay_closed(part, config, clients) if closed else frames.replay_open(part, config)
        for _, part in frame.groupby(frames.BROKER, sort=False)
    ]
    return pd.concat(parts).loc[frame.index]


def read_requests(out: Path) -> pd.DataFrame:
    requests = outputs.read_requests(out / "requests")
    requests["scenario"] = requests["scenario"].astype(str)
    return requests.sort_values(["scenario", "request_id"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def open_run(spark: Any, trace: Trace, tmp_path_factory: pytest.TempPathFactory) -> Run:
    out = tmp_path_factory.mktemp("open")
    options = BacktestOptions(
        traffic=str(trace[0]),
        quotas=mixed_config(),
        out=str(out),
        scales=SCALES,
        recommend=True,
        target=0.02,
    )
    return run(spark, options), out


def test_open_loop_equals_the_single_process_replay(open_run: Run, trace: Trace) -> None:
    result, out = open_run
    _, frame = trace
    requests = read_requests(out)
    assert len(requests) == len(SCALES) * len(frame)
    assert result.rows_read == result.rows_valid == len(frame)
    for scale, label in zip(SCALES, result.scenarios, strict=True):
        got = requests[requests["scenario"] == label].set_index("request_id")
        want = replay(frame, mixed_config().scaled(scale)).set_index(frame["request_id"])
        for column in THROTTLES:
            np.testing.assert_array_equal(got[column].to_numpy(), want[column].to_numpy())
        np.testing.assert_array_equal(got[frames.SENT].to_numpy(), frame[frames.TS].to_numpy())
        assert (got[frames.ADDED_LATENCY] == 0).all()
        assert (
            (got[[frames.PRODUCE_THROTTLE, frames.FETCH_THROTTLE, frames.REQUEST_THROTTLE]] > 0)
            .any()
            .all()
        )
    # every input column comes through unchanged
    first = requests[requests["scenario"] == result.scenarios[0]].set_index("request_id")
    for column in [*inputs.STANDARD, "note", "weight"]:
        np.testing.assert_array_equal(
            first[column].to_numpy(), frame.set_index("request_id")[column].to_numpy()
        )


def test_requests_hold_each_request_once_with_every_scenario(
    spark: Any, open_run: Run, trace: Trace
) -> None:
    """``DIR/requests/``: one row per request (its input columns once), every scenario's
    results in ``--scale`` order; Spark's and pandas' per-scenario views agree."""
    result, out = open_run
    _, frame = trace
    table = pq.read_table(out / "requests")
    assert table.num_rows == len(frame)
    assert table.column_names.count("request_id") == 1 and "scenario" not in table.column_names
    labels = pc.struct_field(pc.list_flatten(table.column(outputs.RESULTS)), "scenario")
    assert labels.to_pylist() == result.scenarios * len(frame)
    rows = outputs.scenario_rows(spark.read.parquet(str(out / "requests"))).toPandas()
    pandas_rows = outputs.read_requests(out / "requests")
    assert list(rows.columns) == list(pandas_rows.columns)
    assert list(rows.columns[-len(RESULT_COLUMNS) :]) == list(RESULT_COLUMNS)
    order = ["scenario", "request_id"]
    pd.testing.assert_frame_equal(
        rows.sort_values(order).reset_index(drop=True),
        pandas_rows.sort_values(order).reset_index(drop=True),
        check_dtype=False,  # Spark gives its own null-free dtypes
    )
    base = outputs.scenario_rows(spark.read.parquet(str(out / "requests")), 1).toPandas()
    want = pandas_rows[pandas_rows["scenario"] == result.scenarios[1]]
    pd.testing.assert_frame_equal(
        base.sort_values("request_id").reset_index(drop=True),
        want.sort_values("request_id").reset_index(drop=True),
        check_dtype=False,
    )
    one = outputs.read_requests(out / "requests", scenario=result.scenarios[1])
    pd.testing.assert_frame_equal(one, want.reset_index(drop=True))
    none = outputs.read_requests(out / "requests", scenario="no such label")
    assert none.empty and list(none.columns) == list(pandas_rows.columns)


def test_sensor_tags_are_the_cores(open_run: Run, trace: Trace) -> None:
    _, out = open_run
    _, frame = trace
    requests = read_requests(out)
    got = requests[requests["scenario"] == "x1"].set_index("request_id").loc[frame["request_id"]]
    config = mixed_config()
    managers = {t: config.manager(t) for t in frames.QUOTA_TYPES}
    want = frames.resolve_sensors(frame, managers)
    for column, key in (
        (frames.SENSOR_USER, "byte_user"),
        (frames.SENSOR_CLIENT, "byte_client"),
        ("request_sensor_user", "request_user"),
        ("request_sensor_client_id", "request_client"),
    ):
        expected = pd.Series(np.asarray(want[key], dtype=object)).fillna("<none>").to_numpy()
        np.testing.assert_array_equal(got[column].fillna("<none>").to_numpy(), expected)


def usage_of(frame: pd.DataFrame, result: pd.DataFrame, quota_type: str) -> pd.DataFrame:
    """One row per request recorded by a ``quota_type`` sensor, from a reference replay."""
    return summarized_usage(
        frame,
        result,
        quota_type,
        mixed_config(),
        broker=frame[frames.BROKER],
        **recommendation_columns(frame, result),
    )


def test_entities_equal_the_kernel_summaries(open_run: Run, trace: Trace) -> None:
    _, out = open_run
    _, frame = trace
    entities = pd.read_parquet(out / "entities")
    keys = ["scenario", "quota_type", frames.BROKER, frames.SENSOR_USER, frames.SENSOR_CLIENT]
    wanted = []
    for scale, label in zip(SCALES, ("x0.5", "x1"), strict=True):
        config = mixed_config().scaled(scale)
        result = replay(frame, config)
        for quota_type in frames.QUOTA_TYPES:
            summary = frames.summarize(usage_of(frame, result, quota_type), config, quota_type)
            wanted.append(summary.assign(scenario=label))
    want = pd.concat(wanted).sort_values(keys).reset_index(drop=True)
    got = entities.sort_values(keys).reset_index(drop=True)[want.columns]
    assert len(got) == len(want) > 100
    for column in want.columns:
        left, right = got[column].to_numpy(), want[column].to_numpy()
        if column in ("quota", "utilization"):
            left = np.where(pd.isna(left), np.nan, left).astype(float)
            right = right.astype(float)
        np.testing.assert_array_equal(left, right, err_msg=column)


def test_recommendations_equal_the_kernel(open_run: Run, trace: Trace) -> None:
    result, out = open_run
    _, frame = trace
    got = pd.read_parquet(out / "recommendations" / "entities")
    assert result.recommendations is not None and len(result.recommendations) == len(got)
    reference = replay(frame, mixed_config())
    for quota_type in frames.QUOTA_TYPES:
        usage = usage_of(frame, reference, quota_type)
        want = recommend_reference(usage, mixed_config().window, quota_type, 0.02)  # type: ignore[arg-type]
        mine = got[got["quota_type"] == quota_type].sort_values(
            [frames.SENSOR_USER, frames.SENSOR_CLIENT]
        )
        np.testing.assert_array_equal(
            mine["recommended_quota"].to_numpy(), want["recommended_quota"].to_numpy()
        )
        assert (mine["recommended_throttled_fraction"] <= 0.02).all()
    throttled = got[got["current_throttled_fraction"] > 0.02]
    assert len(throttled) and (throttled["recommended_quota"] > throttled["current_quota"]).all()


def test_the_recommended_quota_file_raises_only_and_is_back_tested(
    open_run: Run, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file is the configuration the recommendations were found under (x1) with the
    raised quotas set; nothing lowered or added without asking; its own back-test (one
    scenario) throttles fewer requests than x1; ``kquota configs --import`` takes it."""
    result, out = open_run
    file = result.recommended
    rows = result.recommendations
    assert file is not None and rows is not None
    assert file.path == f"{out}/recommendations/quotas.json"
    config = QuotaConfig.load(file.path)
    assert config.by_entity() == file.config.by_entity()
    assert config.window == mixed_config().window
    assert set(rows["change"]) <= {"raise", "keep", "none"}
    raised = rows[rows["change"] == "raise"]
    assert len(raised) > 0
    assert (raised["applied_quota"] > raised["current_quota"]).all()
    assert (raised["applied_quota"] >= raised["recommended_quota"] * 1.2 - 1).all()
    kept = rows[rows["change"] != "raise"]
    assert kept["applied_quota"].isna().all()
    for record in raised.to_dict("records"):
        entity = frames.recommendation._entity(
            record[frames.SENSOR_USER], record[frames.SENSOR_CLIENT]
        )
        prop = PROPERTY_OF[record["quota_type"]]
        assert config.by_entity()[entity][prop] == record["applied_quota"]
    # every quota of the base configuration is still there, none lower
    before = mixed_config().by_entity()
    after = config.by_entity()
    for entity, properties in before.items():
        for prop, value in properties.items():
            assert after[entity][prop] >= value, (entity, prop)
    (tested,) = file.totals.to_dict("records")
    x1 = result.totals.set_index("scenario").loc["x1"]
    assert tested["requests"] == x1["requests"]
    assert 0 <= tested["throttled_requests"] < x1["throttled_requests"]
    assert (out / "recommendations" / "backtest" / "requests").is_dir()
    page = (out / "report.html").read_text()
    assert "recommendations/quotas.json" in page and "20% headroom" in page
    store = out.parent / f"{out.name}-store.sqlite"
    assert main(["configs", "--store", str(store), "--import", file.path]) == 0
    assert "Imported" in capsys.readouterr().out


def test_report(open_run: Run) -> None:
    result, out = open_run
    assert result.report == out / "report.html"
    page = result.report.read_text()
    for name in ["throttle_histogram.png", "rate_1.png", "Recommended quotas", "What-if"]:
        assert name in page
    # where it comes from: the traffic, its span in UTC, the rules, the target
    frame = pd.read_parquet(result.traffic)
    assert result.span_ms == (int(frame["ts_ms"].min()), int(frame["ts_ms"].max()))
    assert result.target == 0.02
    for text in ("What was back-tested", result.traffic, " UTC to ", "Kafka 4.1, the default"):
        assert text in page, text
    assert (out / "report" / "rate_1.png").stat().st_size > 5000
    assert list(result.totals["scenario"]) == ["x0.5", "x1"]
    halves = result.totals.set_index("scenario")["throttled_requests"]
    assert halves["x0.5"] > halves["x1"] > 0
    assert not result.top_entities.empty and result.rate_series
    # the plots cover every quota type throttled, as many entities as there are plots
    entities = pd.read_parquet(out / "entities")
    throttled = entities[(entities["scenario"] == "x1") & (entities["throttled_requests"] > 0)]
    plotted = result.plotted
    assert plotted is not None and len(plotted) == min(report.PLOTTED_ENTITIES, len(throttled))
    assert set(plotted["quota_type"]) == set(throttled["quota_type"])
    many = min(len(plotted), throttled["entity"].nunique())
    assert plotted["entity"].nunique() == many
    assert len(result.rate_series) == len(plotted)
    # each plotted sensor's usage per window, as the written rows of the base scenario say
    requests = read_requests(out)
    requests = requests[requests["scenario"] == result.base_scenario]
    window = mixed_config().window.window_ms
    for key, series in result.rate_series.items():
        quota_type, broker, user, client = key.split("|")
        if quota_type == "request":
            mine = requests[
                (requests["request_sensor_user"] == user)
                & (requests["request_sensor_client_id"] == client)
                & requests[frames.THREAD].notna()
            ]
            amount = mine[frames.THREAD].astype(float) * frames.NANOS_TO_PERCENT
        else:
            mine = requests[
                (requests[frames.SENSOR_USER] == user)
                & (requests[frames.SENSOR_CLIENT] == client)
                & (requests[frames.API].str.lower() == quota_type)
            ]
            recorded = (mine[frames.FETCH_THROTTLE] <= 0) & (mine[frames.REQUEST_THROTTLE] <= 0)
            amount = mine[frames.BYTES].where(recorded | (quota_type != "fetch"), 0).astype(float)
        mine = mine[mine[frames.BROKER] == broker]
        want = amount.loc[mine.index].groupby(mine[frames.SENT] // window).sum()
        np.testing.assert_array_equal(series["window"].to_numpy(), want.index.to_numpy())
        np.testing.assert_allclose(series["amount"].to_numpy(), want.to_numpy(), rtol=1e-12)


def _spark_totals(spark: Any, out: Path, result: BacktestResult) -> pd.DataFrame:
    """The report's totals as Spark aggregates them from ``DIR/requests/``."""
    counts = summaries.throttle_counts(spark.read.parquet(str(out / "requests")))
    return report.scenario_totals(counts, result.scenarios, result.totals["scale"].tolist())


def test_report_counts_are_sparks_aggregates_of_the_requests(spark: Any, open_run: Run) -> None:
    """The job counts the report's totals while the rows go out (no pass over
    ``DIR/requests/``): they equal what Spark aggregates from the written rows."""
    result, out = open_run
    pd.testing.assert_frame_equal(result.totals, _spark_totals(spark, out, result))
    counts = summaries.throttle_counts(spark.read.parquet(str(out / "requests")))
    pd.testing.assert_frame_equal(
        result.histogram.reset_index(drop=True),
        report.throttle_histogram(counts).reset_index(drop=True),
        check_dtype=False,
    )
    # the top entities and the what-if table, from the kernels' rows on the driver: as
    # Spark selects them from DIR/entities/
    entities = spark.read.parquet(str(out / "entities"))
    top = summaries.top_entities(entities, result.base_scenario, report.TOP_ENTITIES)
    assert len(top) == report.TOP_ENTITIES
    pd.testing.assert_frame_equal(result.top_entities, top, check_dtype=False)
    keys = ["quota_type", "broker", "sensor_user", "sensor_client_id", "scenario"]
    pd.testing.assert_frame_equal(
        result.comparison.sort_values(keys).reset_index(drop=True),
        summaries.comparison(entities, top).sort_values(keys).reset_index(drop=True),
        check_dtype=False,
    )


def test_what_the_broker_did_is_reported_beside_the_replay(
    spark: Any, trace: Trace, tmp_path: Path
) -> None:
    """Traffic that says which throttle each request got (``kafka_throttle_ms``, as an
    imported request log or a proxy capture has it): the report counts both, per scenario."""
    _, frame = trace
    config = mixed_config()
    reference = replay(frame, config)[frames.THROTTLE].to_numpy()
    rng = np.random.default_rng(7)
    # the broker agreed on two thirds of the requests, and throttled others at random
    broker = np.where(
        rng.random(len(frame)) < 2 / 3, reference, rng.integers(0, 3, len(frame)) * 40
    )
    traffic = frame.drop(columns=list(frames.SEQ_COLUMNS)).assign(
        kafka_throttle_ms=broker.astype("int32")
    )
    pq.write_table(pa.Table.from_pandas(traffic, preserve_index=False), tmp_path / "in.parquet")
    options = BacktestOptions(
        traffic=str(tmp_path / "in.parquet"), quotas=config, out=str(tmp_path / "out")
    )
    result = run(spark, options)
    assert result.broker is not None
    (row,) = result.broker.to_dict("records")
    live, replayed = broker > 0, reference > 0
    assert row == {
        "scenario": "x1",
        "requests": len(frame),
        "broker_throttled": int(live.sum()),
        "replay_throttled": int(replayed.sum()),
        "both_throttled": int((live & replayed).sum()),
        "agree": int((live == replayed).sum()),
        "broker_throttle_ms": int(broker.sum()),
        "replay_throttle_ms": int(reference.sum()),
    }
    assert 0 < row["both_throttled"] < row["broker_throttled"]
    requests = spark.read.parquet(str(tmp_path / "out" / "requests"))
    pd.testing.assert_frame_equal(result.broker, summaries.broker_comparison(requests))
    assert result.report is not None and "What the broker did" in result.report.read_text()


def test_what_the_broker_did_as_text_is_compared_by_spark(
    spark: Any, trace: Trace, tmp_path: Path
) -> None:
    """A CSV traffic's ``kafka_throttle_ms`` is text (here with a blank, a fraction and a
    word among the numbers): the comparison is Spark's, and the job does not fail on it
    (it did: the text was cast to a number with Spark's ANSI cast)."""
    _, frame = trace
    part = frame.drop(columns=list(frames.SEQ_COLUMNS)).head(3000).copy()
    live = np.where(np.arange(len(part)) % 3 == 0, "40", "0").astype(object)
    live[1], live[2], live[4] = "", "12.5", "n/a"
    part["kafka_throttle_ms"] = live
    part.to_csv(tmp_path / "in.csv", index=False)
    options = BacktestOptions(
        traffic=str(tmp_path / "in.csv"), quotas=mixed_config(), out=str(tmp_path / "out")
    )
    result = run(spark, options)
    requests = spark.read.parquet(str(tmp_path / "out" / "requests"))
    assert result.broker is not None
    pd.testing.assert_frame_equal(result.broker, summaries.broker_comparison(requests))
    # every third row said 40 ms; the blank, the fraction and the word count as none
    (row,) = result.broker.to_dict("records")
    assert (row["requests"], row["broker_throttled"], row["broker_throttle_ms"]) == (
        3000,
        1000,
        40_000,
    )


def test_partition_by_sensor_gives_the_same_throttles(
    spark: Any,
    trace: Trace,
    open_run: Run,
    tmp_path: Path,
) -> None:
    options = BacktestOptions(
        traffic=str(trace[0]),
        quotas=mixed_config(),
        out=str(tmp_path),
        partition="sensor",
        report=False,
    )
    run(spark, options)
    by_sensor = read_requests(tmp_path)
    by_broker = read_requests(open_run[1])
    by_broker = by_broker[by_broker["scenario"] == "x1"].reset_index(drop=True)
    pd.testing.assert_frame_equal(by_sensor[by_broker.columns], by_broker)


TIGHT_CLIENTS = frames.ClientLimits(
    buffer_bytes=400_000, delivery_timeout_ms=4_000, api_timeout_ms=3_000
)
"""Limits small enough for the trace's clients to fill their buffers and time out."""


@pytest.mark.parametrize(
    "clients",
    [frames.ClientLimits(), TIGHT_CLIENTS, None],
    ids=["kafka-clients", "tight-clients", "unbounded"],
)
def test_closed_loop_equals_the_single_process_replay(
    spark: Any,
    trace: Trace,
    tmp_path: Path,
    clients: frames.ClientLimits | None,
) -> None:
    _, frame = trace
    config = mixed_config(scale=0.5)
    options = BacktestOptions(
        traffic=str(trace[0]),
        quotas=config,
        out=str(tmp_path),
        mode="closed",
        report=False,
        clients=clients,
    )
    result = run(spark, options)
    got = read_requests(tmp_path).set_index("request_id")
    want = replay(frame, config, closed=True, clients=clients).set_index(frame["request_id"])
    for column in [*THROTTLES, frames.SENT, frames.ADDED_LATENCY, frames.UNSERVED]:
        np.testing.assert_array_equal(got[column].to_numpy(), want[column].to_numpy(), column)
    assert (got[frames.ADDED_LATENCY] > 0).any()
    assert result.totals["mean_added_latency_ms"].iloc[0] > 0
    pd.testing.assert_frame_equal(result.totals, _spark_totals(spark, tmp_path, result))
    # the per-client table of what was not served, against the rows
    gone = want[want[frames.UNSERVED] > 0].join(frame.set_index("request_id"))
    if clients is None:
        assert result.unserved is None
        return
    assert result.unserved is not None
    expected = (
        gone.groupby([frames.USER, frames.CLIENT])
        .agg(requests=(frames.BYTES, "size"), bytes=(frames.BYTES, "sum"))
        .reset_index()
    )
    table = result.unserved.set_index(["user", "client_id"])
    assert len(table) == len(expected)
    for row in expected.itertuples(index=False):
        mine = table.loc[(row[0], row[1])]
        assert (mine["requests"], mine["bytes"]) == (row.requests, int(row.bytes))
    assert (table["buffer_full"] + table["timed_out"] == table["requests"]).all()
    if clients == TIGHT_CLIENTS:
        assert table["buffer_full"].sum() > 0 and table["timed_out"].sum() > 0


def test_a_conformance_scenario_as_csv_traffic(spark: Any, tmp_path: Path) -> None:
    scenario = load_scenario(CONFORMANCE / "random_produce_poisson_pareto_seed101.json")
    frame, config, expected, column = scenario_traffic(scenario)
    frame.drop(columns=list(frames.SEQ_COLUMNS)).to_csv(tmp_path / "traffic.csv", index=False)
    options = BacktestOptions(
        traffic=str(tmp_path / "traffic.csv"),
        quotas=config,
        out=str(tmp_path / "out"),
        report=False,
    )
    result = run(spark, options)
    assert result.rows_valid == len(expected) and not result.quarantined
    got = outputs.read_requests(tmp_path / "out" / "requests").sort_values(
        [frames.TS, frames.SEQ_COLUMNS[1]]
    )
    assert got[column].tolist() == expected
    assert (got[frames.THROTTLE] > 0).sum() == sum(1 for t in expected if t > 0)


BAD_CSV = """ts_ms,broker,user,client_id,api,bytes,thread_time_ns,tag
1000,b1,alice,app,produce,100,5000,ok-1
1001,b1,alice,app,produce,,5000,missing-bytes
1002,b1,alice,app,produce,-5,5000,negative-bytes
yesterday,b1,alice,app,produce,100,5000,bad-time
1004,b1,alice,app,produce,12.5,5000,fractional-bytes
1005,b1,alice,app,fetch,100,-1,negative-thread
1006,b1,alice,app,,100,5000,missing-api
2024-06-03T00:00:01Z,b1,alice,,fetch,300,,iso-time
1008,,,app,metadata,0,7000,ok-2
"""


def test_bad_rows_are_quarantined_or_refused(spark: Any, tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text(BAD_CSV)
    config = mixed_config()
    options = BacktestOptions(
        traffic=str(tmp_path / "t.csv"), quotas=config, out=str(tmp_path / "out"), report=False
    )
    result = run(spark, options)
    assert result.rows_read == 9 and result.rows_valid == 3
    assert result.quarantined == {
        "api missing": 1,
        "bytes missing": 1,
        "bytes negative": 1,
        "bytes not a whole number": 1,
        "thread_time_ns negative": 1,
        "ts_ms unparsable": 1,
    }
    quarantine = pd.read_parquet(tmp_path / "out" / "quarantine")
    assert sorted(quarantine["tag"]) == sorted(
        [
            "missing-bytes",
            "negative-bytes",
            "bad-time",
            "fractional-bytes",
            "negative-thread",
            "missing-api",
        ]
    )
    assert quarantine.set_index("tag").loc["bad-time", "reason"] == "ts_ms unparsable"
    requests = outputs.read_requests(tmp_path / "out" / "requests").set_index("tag")
    assert requests.loc["iso-time", frames.TS] == 1_717_372_801_000
    assert requests.loc["ok-2", frames.BROKER] == "" and requests.loc["ok-2", frames.USER] == ""
    assert pd.isna(requests.loc["iso-time", frames.THREAD])
    strict = BacktestOptions(
        traffic=str(tmp_path / "t.csv"), quotas=config, out=str(tmp_path / "out2"), strict=True
    )
    with pytest.raises(TrafficError, match=r"--strict: 6 bad row\(s\).*1 ts_ms unparsable"):
        run(spark, strict)


def test_empty_and_missing_input(spark: Any, tmp_path: Path) -> None:
    config = mixed_config()
    empty = tmp_path / "empty.parquet"
    schema = pa.schema(
        [
            (frames.TS, pa.int64()),
            (frames.CLIENT, pa.string()),
            (frames.API, pa.string()),
            (frames.BYTES, pa.int64()),
        ]
    )
    pq.write_table(schema.empty_table(), empty)
    with pytest.raises(TrafficError, match="has no rows"):
        run(spark, BacktestOptions(traffic=str(empty), quotas=config, out=str(tmp_path / "o")))
    with pytest.raises(TrafficError, match="does not exist"):
        run(
            spark,
            BacktestOptions(traffic=str(tmp_path / "nope"), quotas=config, out=str(tmp_path / "o")),
        )
    (tmp_path / "header.csv").write_text("ts_ms,client_id,api,bytes\n")
    with pytest.raises(TrafficError, match="has no rows"):
        run(
            spark,
            BacktestOptions(
                traffic=str(tmp_path / "header.csv"), quotas=config, out=str(tmp_path / "o")
            ),
        )
    (tmp_path / "few.csv").write_text("ts_ms,api\n1,produce\n")
    with pytest.raises(TrafficError, match=r"no column\(s\) \['client_id', 'bytes'\]"):
        run(
            spark,
            BacktestOptions(
                traffic=str(tmp_path / "few.csv"), quotas=config, out=str(tmp_path / "o")
            ),
        )


def test_ties_across_files_follow_path_then_row_order(spark: Any, tmp_path: Path) -> None:
    config = QuotaConfig.from_json(
        {"quotas": [{"entity": {"user": "u"}, "config": {"producer_byte_rate": 250}}]}
    )
    folder = tmp_path / "in put"  # a space: file names are compared URL-encoded
    folder.mkdir()

    def part(sizes: list[int], ids: list[str]) -> pa.Table:
        n = len(sizes)
        return pa.table(
            {
                frames.TS: [5] * n,
                frames.USER: ["u"] * n,
                frames.CLIENT: ["c"] * n,
                frames.API: ["produce"] * n,
                frames.BYTES: sizes,
                "id": ids,
            }
        )

    # all at the same millisecond on one sensor: only the input order decides
    pq.write_table(part([2000, 10], ["a0", "a1"]), folder / "a file.parquet")
    pq.write_table(part([500], ["b0"]), folder / "b file.parquet")
    run(
        spark,
        BacktestOptions(traffic=str(folder), quotas=config, out=str(tmp_path / "o"), report=False),
    )
    got = outputs.read_requests(tmp_path / "o" / "requests").set_index("id")
    manager = config.manager("produce")
    want = {
        i: manager.record("u", "c", float(b), 5) for i, b in (("a0", 2000), ("a1", 10), ("b0", 500))
    }
    assert got[frames.PRODUCE_THROTTLE].to_dict() == want
    assert want["b0"] > 0 and want["a0"] == want["a1"] == 0
    assert got[frames.SEQ_COLUMNS[0]]["b0"] > got[frames.SEQ_COLUMNS[0]]["a1"] >= 0
