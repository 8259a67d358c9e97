"""The back-test kernel (kquota.backtest.frames), without Spark.

Every throttle the kernel returns is checked against the core driven one request at a time
(``QuotaManager.record`` and ``unrecord``), and against Kafka's own values on the
conformance scenarios that are plain traffic.
"""

from __future__ import annotations

import math
from typing import Any

import kquota
import numpy as np
import pandas as pd
import paths
import pytest
from kquota import DEFAULT, Entity
from kquota._core import recommend_quotas
from kquota.backtest import frames
from kquota.backtest.synthetic import TrafficSpec, generate
from kquota.config import QuotaConfig, QuotaEntry, Window
from kquota.conformance import Scenario, expand_paths, load_scenario
from recommend_reference import recommend_reference, throttled_fraction
from sensor_usage import recommendation_columns, sensor_usage

CONFORMANCE = paths.SHARED_VECTORS
PROPERTY = {
    "produce": "producer_byte_rate",
    "fetch": "consumer_byte_rate",
    "request": "request_percentage",
}


# -- shared helpers (the Spark tests import them) ---------------------------------------------


def mixed_config(scale: float = 1.0) -> QuotaConfig:
    """Quotas on every entity shape, so the precedence walk and shared sensors matter."""
    q = scale

    def entry(user: str | None, client: str | None, **config: float) -> QuotaEntry:
        return QuotaEntry(Entity(user=user, client_id=client), config)

    return QuotaConfig(
        Window(11, 1000),
        (
            entry(DEFAULT, None, producer_byte_rate=60_000 * q, consumer_byte_rate=40_000 * q),
            entry("tenant-000", None, producer_byte_rate=150_000 * q),
            entry("tenant-001", DEFAULT, consumer_byte_rate=20_000 * q),
            entry(DEFAULT, "consumer-0003", consumer_byte_rate=10_000 * q),
            entry("tenant-002", "producer-0001", producer_byte_rate=5_000 * q),
            entry(None, DEFAULT, request_percentage=0.3 * q),
            entry("analytics", None, consumer_byte_rate=30_000 * q, request_percentage=0.05 * q),
        ),
    )


def traffic_frame(requests: int, seed: int = 7, brokers: int = 4) -> pd.DataFrame:
    """Generated traffic with its input position as the tie-breaker."""
    table = generate(
        TrafficSpec(
            requests=requests, brokers=brokers, users=12, clients=60, hours=1.0, bursts=4, seed=seed
        )
    )
    frame = table.to_pandas()
    frame[frames.SEQ_COLUMNS[0]] = 0
    frame[frames.SEQ_COLUMNS[1]] = np.arange(len(frame), dtype=np.int64)
    return frame


def one_at_a_time(frame: pd.DataFrame, config: QuotaConfig) -> pd.DataFrame:
    """The core driven request by request in time order, as a broker would (open loop)."""
    managers = {t: config.manager(t) for t in frames.QUOTA_TYPES}
    produce, fetch, request = (np.zeros(len(frame), dtype=np.int64) for _ in range(3))
    order = frames.time_order(frame)
    has_thread = frames.THREAD in frame.columns
    for i in order.tolist():
        row = frame.iloc[i]
        user, client, now = row[frames.USER], row[frames.CLIENT], int(row[frames.TS])
        r = 0
        if has_thread and not pd.isna(row[frames.THREAD]):
            r = managers["request"].record(user, client, float(row[frames.THREAD]), now)
        api = str(row[frames.API]).lower()
        if api == "produce":
            produce[i] = managers["produce"].record(user, client, float(row[frames.BYTES]), now)
        elif api == "fetch":
            fetch[i] = managers["fetch"].record(user, client, float(row[frames.BYTES]), now)
            if fetch[i] > 0 or r > 0:
                managers["fetch"].unrecord(user, client, float(row[frames.BYTES]), now)
        request[i] = r
    return pd.DataFrame(
        {
            frames.PRODUCE_THROTTLE: produce,
            frames.FETCH_THROTTLE: fetch,
            frames.REQUEST_THROTTLE: request,
        },
        index=frame.index,
    )


def convertible(scenario: Scenario) -> bool:
    """Only ``record`` steps, and nothing but reads after the last one."""
    if scenario.quota_type not in PROPERTY:
        return False
    records = [i for i, s in enumerate(scenario.steps) if s.op == "record"]
    if not records:
        return False
    before = scenario.steps[: records[-1] + 1]
    if any(s.op != "record" for s in before):
        return False
    return all(float(s.value or 0).is_integer() for s in before)


def scenario_traffic(scenario: Scenario) -> tuple[pd.DataFrame, QuotaConfig, list[int], str]:
    """A conformance scenario as a traffic table, its quotas, and the expected throttles."""
    quota_type = scenario.quota_type
    steps = [s for s in scenario.steps if s.op == "record"]
    if quota_type == "request":
        api, size, thread = "metadata", [0] * len(steps), [int(s.value or 0) for s in steps]
    else:
        api, size, thread = quota_type, [int(s.value or 0) for s in steps], [None] * len(steps)
    frame = pd.DataFrame(
        {
            frames.TS: [s.t_ms for s in steps],
            frames.BROKER: "broker-0",
            frames.USER: [s.user for s in steps],
            frames.CLIENT: [s.client_id for s in steps],
            frames.API: api,
            frames.BYTES: size,
            frames.THREAD: pd.array(thread, dtype="Int64"),
            frames.SEQ_COLUMNS[0]: 0,
            frames.SEQ_COLUMNS[1]: np.arange(len(steps), dtype=np.int64),
        }
    )
    config = QuotaConfig(
        Window(scenario.num_samples, scenario.window_ms),
        tuple(
            # the vectors' bounds, as a quota manager takes them (not always whole)
            QuotaEntry.bounds(Entity(q.user, q.client_id), {PROPERTY[quota_type]: q.value})
            for q in scenario.quotas
        ),
    )
    expected = [int(s.expect["throttle_ms"]) for s in steps if s.expect is not None]
    assert len(expected) == len(steps), "every record step of a vector has an expected throttle"
    return frame, config, expected, frames.THROTTLE_OF[quota_type]  # type: ignore[index]


def convertible_scenarios() -> list[Scenario]:
    return [s for s in map(load_scenario, expand_paths([CONFORMANCE])) if convertible(s)]


# -- open loop --------------------------------------------------------------------------------


def test_open_loop_equals_the_core_one_request_at_a_time() -> None:
    frame = traffic_frame(40_000)
    config = mixed_config()
    for _, broker in frame.groupby(frames.BROKER):
        got = frames.replay_open(broker, config)
        want = one_at_a_time(broker, config)
        for column in (frames.PRODUCE_THROTTLE, frames.FETCH_THROTTLE, frames.REQUEST_THROTTLE):
            np.testing.assert_array_equal(got[column].to_numpy(), want[column].to_numpy())
        zeros = np.zeros(len(broker), dtype=np.int64)
        applied = np.maximum.reduce([*(want[c].to_numpy() for c in want.columns), zeros])
        np.testing.assert_array_equal(got[frames.THROTTLE].to_numpy(), applied)
    # the trace exercises every quota type, unrecord by either quota included
    every = frames.replay_open(frame, config)
    assert (
        (every[[frames.PRODUCE_THROTTLE, frames.FETCH_THROTTLE, frames.REQUEST_THROTTLE]] > 0)
        .any()
        .all()
    )
    assert (
        (every[frames.FETCH_THROTTLE] <= 0)
        & (every[frames.REQUEST_THROTTLE] > 0)
        & (frame[frames.API] == "fetch")
    ).any()


def test_open_loop_does_not_depend_on_row_order_or_batching() -> None:
    frame = traffic_frame(20_000, seed=3)
    config = mixed_config()
    base = frames.replay_open(frame, config)
    shuffled = frame.sample(frac=1.0, random_state=1)
    again = frames.replay_open(shuffled, config).loc[frame.index]
    pd.testing.assert_frame_equal(again, base)
    # streaming: the sorted rows in uneven batches, managers kept across batches
    order = frames.time_order(frame)
    ordered = frame.iloc[order]
    loop = frames.SplitReplay([config, config.scaled(2.0)])
    pieces: list[list[np.ndarray]] = [[], [], [], []]
    for start, stop in [(0, 1), (1, 777), (777, 5000), (5000, len(ordered))]:
        part = ordered.iloc[start:stop]
        requests = loop.request_throttles(part)
        (p0, f0), (p1, _f1) = loop.byte_throttles(part, requests)
        for bucket, values in zip(pieces, (p0, f0, requests[0], p1), strict=True):
            bucket.append(values)
    np.testing.assert_array_equal(
        np.concatenate(pieces[0]), base[frames.PRODUCE_THROTTLE].to_numpy()[order]
    )
    np.testing.assert_array_equal(
        np.concatenate(pieces[1]), base[frames.FETCH_THROTTLE].to_numpy()[order]
    )
    np.testing.assert_array_equal(
        np.concatenate(pieces[2]), base[frames.REQUEST_THROTTLE].to_numpy()[order]
    )
    doubled = frames.replay_open(frame, config.scaled(2.0))[frames.PRODUCE_THROTTLE].to_numpy()[
        order
    ]
    np.testing.assert_array_equal(np.concatenate(pieces[3]), doubled)


def test_ties_in_time_are_replayed_in_input_order() -> None:
    config = QuotaConfig(Window(), (QuotaEntry(Entity(user="u"), {"producer_byte_rate": 250.0}),))
    frame = pd.DataFrame(
        {
            frames.TS: [5, 5, 5],
            frames.USER: "u",
            frames.CLIENT: "c",
            frames.API: "produce",
            frames.BYTES: [500, 2000, 10],
            frames.SEQ_COLUMNS[0]: 0,
            frames.SEQ_COLUMNS[1]: [2, 0, 1],
        }
    )
    got = frames.replay_open(frame, config)[frames.PRODUCE_THROTTLE].tolist()
    manager = config.manager("produce")
    want = {i: manager.record("u", "c", float(frame[frames.BYTES][i]), 5) for i in (1, 2, 0)}
    assert got == [want[0], want[1], want[2]]
    assert got[0] > 0 and got[1] == got[2] == 0  # in row order, row 2 would be throttled


def test_requests_without_thread_time_are_not_request_throttled() -> None:
    config = QuotaConfig(
        Window(), (QuotaEntry(Entity(user=DEFAULT), {"request_percentage": 0.01}),)
    )
    frame = pd.DataFrame(
        {
            frames.TS: [0, 1, 2, 3],
            frames.USER: "u",
            frames.CLIENT: "c",
            frames.API: "metadata",
            frames.BYTES: 0,
            frames.THREAD: pd.array([50_000_000, None, 50_000_000, None], dtype="Int64"),
        }
    )
    got = frames.replay_open(frame, config)[frames.REQUEST_THROTTLE].tolist()
    assert got[1] == got[3] == 0
    assert got[0] > 0 and got[2] > 0
    without = frames.replay_open(frame.drop(columns=[frames.THREAD]), config)
    assert (without[frames.THROTTLE] == 0).all()


def test_a_wrapped_negative_throttle_is_not_applied() -> None:
    tiny = QuotaConfig(Window(), (QuotaEntry(Entity(user="u"), {"producer_byte_rate": 1e-300}),))
    frame = pd.DataFrame(
        {
            frames.TS: [0],
            frames.USER: "u",
            frames.CLIENT: "c",
            frames.API: "produce",
            frames.BYTES: [10**9],
        }
    )
    got = frames.replay_open(frame, tiny)
    assert got[frames.PRODUCE_THROTTLE].iloc[0] == tiny.manager("produce").record("u", "c", 1e9, 0)
    assert got[frames.PRODUCE_THROTTLE].iloc[0] < 0
    assert got[frames.THROTTLE].iloc[0] == 0


@pytest.mark.parametrize("scenario", convertible_scenarios(), ids=lambda s: s.name)
def test_conformance_scenarios_as_traffic(scenario: Scenario) -> None:
    frame, config, expected, column = scenario_traffic(scenario)
    got = frames.replay_open(frame, config)
    assert got[column].tolist() == expected


def test_enough_conformance_scenarios_are_traffic() -> None:
    names = {s.name: s.quota_type for s in convertible_scenarios()}
    assert "random_produce_poisson_pareto_seed101" in names
    assert {"produce", "fetch", "request"} <= set(names.values())


# -- closed loop ------------------------------------------------------------------------------


def test_closed_loop_without_throttles_is_the_open_loop() -> None:
    frame = traffic_frame(5_000, seed=5)
    generous = mixed_config(scale=1e9)
    closed = frames.replay_closed(frame, generous)
    assert (closed[frames.THROTTLE] == 0).all()
    assert (closed[frames.ADDED_LATENCY] == 0).all()
    np.testing.assert_array_equal(closed[frames.SENT].to_numpy(), frame[frames.TS].to_numpy())


def test_closed_loop_delays_a_throttled_client_and_shifts_its_timeline() -> None:
    config = QuotaConfig(Window(), (QuotaEntry(Entity(user="a"), {"producer_byte_rate": 1000.0}),))
    frame = pd.DataFrame(
        {
            frames.TS: [0, 100, 200, 5000, 100, 300],
            frames.USER: ["a", "a", "a", "a", "b", "b"],
            frames.CLIENT: ["c", "c", "c", "c", "d", "d"],
            frames.API: "produce",
            frames.BYTES: [50_000, 100, 100, 100, 100, 100],
        }
    )
    closed = frames.replay_closed(frame, config)
    first = closed[frames.PRODUCE_THROTTLE].iloc[0]
    manager = config.manager("produce")
    assert first == manager.record("a", "c", 50_000.0, 0) > 0
    # a's next request waits until the mute ends; the later ones keep their spacing
    assert closed[frames.SENT].iloc[1] == first
    assert closed[frames.SENT].iloc[2] == first + 100
    assert closed[frames.SENT].iloc[3] == 5000 + first - 100
    assert closed[frames.ADDED_LATENCY].tolist()[:4] == [0, first - 100, first - 100, first - 100]
    # another user is not delayed
    assert closed[frames.ADDED_LATENCY].tolist()[4:] == [0, 0]


def test_closed_loop_throttles_are_the_core_on_the_shifted_timeline() -> None:
    frame = traffic_frame(30_000, seed=11, brokers=2)
    config = mixed_config(scale=0.5)
    for _, broker in frame.groupby(frames.BROKER):
        closed = frames.replay_closed(broker, config)
        assert (closed[frames.ADDED_LATENCY] > 0).any()
        assert (closed[frames.SENT] >= broker[frames.TS]).all()
        # replaying the timeline the clients followed gives the same throttles
        shifted = broker.assign(**{frames.TS: closed[frames.SENT].to_numpy()})
        shifted[frames.SEQ_COLUMNS[0]] = 0
        shifted[frames.SEQ_COLUMNS[1]] = frames.time_order(
            broker
        ).argsort()  # original rank breaks ties
        want = one_at_a_time(shifted, config)
        for column in (frames.PRODUCE_THROTTLE, frames.FETCH_THROTTLE, frames.REQUEST_THROTTLE):
            np.testing.assert_array_equal(closed[column].to_numpy(), want[column].to_numpy())
        # and a client never sends before the mute of its previous throttled request ends
        for _, client in closed.assign(u=broker[frames.USER], c=broker[frames.CLIENT]).groupby(
            ["u", "c"]
        ):
            ordered = client.sort_values(frames.SENT, kind="stable")
            ends = (ordered[frames.SENT] + ordered[frames.THROTTLE]).cummax().shift(1).fillna(-1)
            assert (ordered[frames.SENT].to_numpy() >= ends.to_numpy()).all()
            assert ordered[frames.ADDED_LATENCY].is_monotonic_increasing


# -- summaries --------------------------------------------------------------------------------


def usage_frame(**columns: Any) -> pd.DataFrame:
    n = len(columns[frames.TIME])
    base = {
        frames.BROKER: "b",
        frames.SENSOR_USER: "u",
        frames.SENSOR_CLIENT: "",
        frames.USER: "u",
        frames.CLIENT: "c",
        frames.BYTES: columns.get(frames.USAGE, [0] * n),
        frames.RECORDED: True,
        frames.ADDED_LATENCY: 0,
    }
    base.update(columns)
    return pd.DataFrame(base)


def test_summary_of_one_sensor_by_hand() -> None:
    config = QuotaConfig(
        Window(11, 1000), (QuotaEntry(Entity(user="u"), {"producer_byte_rate": 1000.0}),)
    )
    throttles = [0] * 98 + [500, -7]  # the wrapped negative counts as 0
    usage = usage_frame(
        **{
            frames.TIME: list(range(0, 100_000, 1000)),
            frames.USAGE: [100] * 99 + [20_000],
            frames.THROTTLE: throttles,
            frames.ADDED_LATENCY: [0] * 99 + [40],
        }
    )
    row = frames.summarize(usage, config, "produce").iloc[0]
    assert row["requests"] == 100 and row[frames.BYTES] == 99 * 100 + 20_000
    assert row["throttled_requests"] == 1 and row["throttled_fraction"] == 0.01
    assert row["total_throttle_ms"] == 500 and row["max_throttle_ms"] == 500
    assert row["mean_throttle_ms"] == 5.0
    assert row["p99_throttle_ms"] == 0  # nearest rank: the 99th of 100 values
    # ten windows: the last one holds 20000 plus nine of 100 -> 20900 B over 10 s
    assert row["peak_rate"] == 2090.0
    assert row["quota"] == 1000.0 and row["utilization"] == 2.09
    assert row["entity"] == "user=u"
    assert row["mean_added_latency_ms"] == 0.4 and row["max_added_latency_ms"] == 40


def test_summary_leaves_unrecorded_fetches_out_of_the_rate_and_reads_bounds() -> None:
    config = mixed_config()
    usage = usage_frame(
        **{
            frames.TIME: [0, 10, 20],
            frames.USAGE: [1000, 5000, 1000],
            frames.RECORDED: [True, False, True],
            frames.THROTTLE: [0, 30, 0],
            frames.SENSOR_USER: "tenant-009",
            frames.USER: "tenant-009",
        }
    )
    row = frames.summarize(usage, config, "fetch").iloc[0]
    assert row["peak_rate"] == 200.0
    assert row["quota"] == config.manager("fetch").quota_for("tenant-009", "c") == 40_000
    unlimited = frames.summarize(
        usage.assign(**{frames.SENSOR_USER: "", frames.USER: ""}), config, "request"
    )
    assert math.isnan(unlimited["quota"].iloc[0]) or unlimited["quota"].iloc[0] > 0
    assert frames.summarize(usage.iloc[:0], config, "fetch").empty


def test_sensor_peaks_agree_with_the_summary() -> None:
    rng = np.random.default_rng(2)
    n = 20_000
    sensor = rng.integers(0, 40, n)
    times = np.sort(rng.integers(0, 600_000, n))
    amounts = rng.integers(0, 100_000, n)
    throttles = np.where(rng.random(n) < 0.05, rng.integers(-5, 3000, n), 0)
    ids, peaks, p99 = frames.sensor_peaks(sensor * 1_000_003, times, amounts, throttles, Window())
    assert ids.tolist() == sorted({int(s) * 1_000_003 for s in sensor})
    window = Window()
    rates = frames.peak_rates(sensor, times, amounts, window)
    np.testing.assert_array_equal(peaks.astype(float) / frames.rate_span_seconds(window), rates)
    for s in range(40):
        assert p99[s] == frames.nearest_rank(np.maximum(throttles[sensor == s], 0), 99)


def test_nearest_rank() -> None:
    assert frames.nearest_rank(np.arange(1, 101), 99) == 99
    assert frames.nearest_rank(np.arange(1, 102), 99) == 100
    assert frames.nearest_rank(np.array([7]), 99) == 7
    assert frames.nearest_rank(np.array([], dtype=np.int64), 99) == 0


# -- sensors and bounds -----------------------------------------------------------------------


def test_sensor_tags_and_bounds_come_from_the_core() -> None:
    config = mixed_config()
    frame = traffic_frame(3_000, seed=9)
    managers = {t: config.manager(t) for t in frames.QUOTA_TYPES}
    resolved = frames.resolve_sensors(frame, managers)
    kinds = frames.kinds(frame[frames.API])
    for i in range(0, len(frame), 37):
        user, client = frame[frames.USER].iloc[i], frame[frames.CLIENT].iloc[i]
        request = managers["request"].tags(user, client)
        assert (resolved["request_user"][i], resolved["request_client"][i]) == request
        if kinds[i] in ("produce", "fetch"):
            tags = managers[kinds[i]].tags(user, client)
            assert (resolved["byte_user"][i], resolved["byte_client"][i]) == tags
        else:
            assert pd.isna(resolved["byte_user"][i])
    pairs = frames.pair_sensors(frame[frames.USER], frame[frames.CLIENT], managers)
    for row in pairs.sample(50, random_state=0).itertuples():
        assert row.quota_type in frames.QUOTA_TYPES
    bounds = pairs.groupby(["quota_type", frames.SENSOR_USER, frames.SENSOR_CLIENT])[
        "quota"
    ].nunique(dropna=False)
    assert (bounds == 1).all()  # a sensor's clients all see one bound
    assert frames.kinds(pd.Series(["Produce", "FETCH", "metadata", None])).tolist() == [
        "produce",
        "fetch",
        "other",
        "other",
    ]


def test_entity_label() -> None:
    assert frames.entity_label("alice", "") == "user=alice"
    assert frames.entity_label("", "app") == "client-id=app"
    assert frames.entity_label("a", "b") == "user=a, client-id=b"
    assert frames.entity_label("", "") == "(empty user and client id)"


# -- recommendations --------------------------------------------------------------------------


def test_recommendation_is_the_smallest_quota_under_the_target() -> None:
    frame = traffic_frame(30_000, seed=4, brokers=3)
    config = mixed_config()
    produce = frame[frames.kinds(frame[frames.API]) == "produce"]
    tags = frames.sensor_tags(
        produce[frames.USER], produce[frames.CLIENT], config.manager("produce")
    )
    usage = produce.assign(
        **{
            frames.SENSOR_USER: tags[0],
            frames.SENSOR_CLIENT: tags[1],
            frames.USAGE: produce[frames.BYTES],
        }
    )
    heavy = usage[usage[frames.SENSOR_USER] == usage[frames.SENSOR_USER].value_counts().index[0]]
    target = 0.02
    out = frames.recommend(heavy, config.window, "produce", target)
    assert len(out) == 1
    row = out.iloc[0]
    traffic = []
    for _, part in heavy.groupby(frames.BROKER):
        order = frames.time_order(part)
        traffic.append(
            (
                part[frames.TS].to_numpy()[order],
                part[frames.USAGE].to_numpy(dtype=float)[order],
                None,
            )
        )
    quota = row["recommended_quota"]
    assert row["brokers"] == 3 and row["requests"] == len(heavy)
    assert throttled_fraction(traffic, "produce", config.window, quota) <= target
    assert row["throttled_fraction"] == throttled_fraction(traffic, "produce", config.window, quota)
    assert throttled_fraction(traffic, "produce", config.window, quota * 0.995) > target
    with pytest.raises(ValueError, match="target"):
        frames.recommend(heavy, config.window, "produce", 1.5)


def recommendation_usage(frame: pd.DataFrame, quota_type: str) -> pd.DataFrame:
    """The rows a ``quota_type`` sensor records in an open-loop replay, as the job's
    recommend stage receives them."""
    config = mixed_config()
    result = pd.concat(
        frames.replay_open(part, config) for _, part in frame.groupby(frames.BROKER, sort=False)
    ).loc[frame.index]
    return sensor_usage(
        frame,
        quota_type,
        config,
        **{frames.BROKER: frame[frames.BROKER]},
        **recommendation_columns(frame, result),
    )


@pytest.mark.parametrize("quota_type", frames.QUOTA_TYPES)
@pytest.mark.parametrize(
    ("window", "target"),
    [(Window(11, 1000), 0.02), (Window(2, 2000), 0.0), (Window(1, 1000), 0.1)],
    ids=["11x1s", "2x2s-target0", "1x1s"],
)
def test_recommendations_equal_the_per_candidate_managers(
    quota_type: str, window: Window, target: float
) -> None:
    # every entity of a mixed trace (several brokers each, repeated times), searched in one
    # core call, against the plain search: one QuotaManager per broker and candidate
    frame = traffic_frame(12_000, seed=11, brokers=3)
    frame[frames.TS] = frame[frames.TS] - frame[frames.TS] % 7  # times that repeat
    usage = recommendation_usage(frame, quota_type)
    assert usage[frames.SENSOR_USER].nunique() + usage[frames.SENSOR_CLIENT].nunique() > 4
    got = frames.recommend(usage, window, quota_type, target)  # type: ignore[arg-type]
    want = recommend_reference(usage, window, quota_type, target)  # type: ignore[arg-type]
    assert len(got) == len(want) > 3
    assert (got["brokers"] > 1).any()
    pd.testing.assert_frame_equal(got, want, check_dtype=False, check_exact=True)


def test_recommendations_of_an_empty_group_and_bad_usage() -> None:
    frame = traffic_frame(2_000, seed=3, brokers=2)
    usage = recommendation_usage(frame, "produce")
    empty = frames.recommend(usage.iloc[:0], Window(), "produce", 0.02)
    assert empty.empty and list(empty.columns) == list(frames.RECOMMENDATION_COLUMNS)
    bad = usage.copy()
    bad[frames.USAGE] = bad[frames.USAGE].astype(float)
    bad.iloc[5, bad.columns.get_loc(frames.USAGE)] = -12.5
    with pytest.raises(kquota.InvalidUsageError, match=r"-12\.5"):
        frames.recommend(bad, Window(), "produce", 0.02)


def test_recommend_quotas_names_bad_offsets() -> None:
    times = np.array([1, 2, 3], dtype=np.int64)
    usage = np.array([1.0, 2.0, 3.0])
    with pytest.raises(kquota.InvalidUsageError, match="run offsets"):
        recommend_quotas("produce", times, usage, np.array([0, 2]), np.array([0, 1]), target=0.1)
    with pytest.raises(kquota.InvalidUsageError, match="offset -1"):
        recommend_quotas("produce", times, usage, np.array([-1, 3]), np.array([0, 1]), target=0.1)
    with pytest.raises(kquota.InvalidUsageError, match="unrecord_if"):
        recommend_quotas(
            "produce",
            times,
            usage,
            np.array([0, 3]),
            np.array([0, 1]),
            target=0.1,
            unrecord_if=np.zeros(3, dtype=bool),
        )
    quotas, fractions = recommend_quotas(
        "fetch", times, usage, np.array([0, 3]), np.array([0, 1]), target=0.0
    )
    assert len(quotas) == len(fractions) == 1 and fractions[0] == 0.0


def test_throttled_fraction_uses_the_core_formula() -> None:
    times = np.array([0, 500, 10_500], dtype=np.int64)
    values = np.array([400.0, 400.0, 2300.0])
    manager = kquota.QuotaManager("produce")
    manager.set_quota(Entity(client_id=DEFAULT), 100.0)
    want = [manager.record("", "x", v, int(t)) > 0 for t, v in zip(times, values, strict=True)]
    got = throttled_fraction([(times, values, None)], "produce", Window(), 100.0)
    assert got == sum(want) / 3
