"""kquota.ReplayKernel: the core's sequential replay against the back-test's Python kernel
(``replay_open``, ``summarize``) and the closed loop in plain Python (closed_loop_reference.py,
a straightforward ``replay_closed``) on generated traffic, the conformance vectors
replayed through it, and its handling of bad input."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped]
import paths
import pytest
from closed_loop_reference import replay_closed, replay_closed_bounded
from kquota import (
    DEFAULT,
    UNLIMITED,
    Entity,
    InvalidConfigError,
    InvalidUsageError,
    QuotaManager,
    ReplayKernel,
    RequestPath,
)
from kquota._core import double_to_int
from kquota.backtest import frames
from kquota.config import QuotaConfig
from kquota.conformance import Scenario, load_scenario
from sensor_usage import summarized_usage
from test_backtest_kernel import mixed_config, traffic_frame

VECTORS = paths.SHARED_VECTORS
SCALES = (0.5, 1.0, 2.0)
THROTTLES = (
    frames.PRODUCE_THROTTLE,
    frames.FETCH_THROTTLE,
    frames.REQUEST_THROTTLE,
    frames.THROTTLE,
)


def path_of(config: QuotaConfig) -> RequestPath:
    """One scenario: the broker's three managers built from ``config`` (as the job does)."""
    return RequestPath(
        config.manager("produce"), config.manager("fetch"), config.manager("request")
    )


class Columns:
    """A traffic frame in replay order, as the kernel's columns."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.order = frames.time_order(frame)
        ordered = frame.iloc[self.order]
        keys = pd.Series(
            list(zip(ordered[frames.USER], ordered[frames.CLIENT], strict=True)), dtype=object
        )
        codes, uniques = pd.factorize(keys, sort=False)
        self.pairs: list[tuple[str, str]] = [(str(u), str(c)) for u, c in uniques]
        self.pair = codes.astype(np.int32)
        self.time_ms = ordered[frames.TS].to_numpy(dtype=np.int64)
        self.kind = frames.kind_codes(ordered[frames.API])
        self.bytes = ordered[frames.BYTES].to_numpy(dtype=np.float64)
        self.thread_ns = ordered[frames.THREAD].to_numpy(dtype=np.float64, na_value=np.nan)
        self.acks = np.full(len(frame), -1, dtype=np.int16)

    def __len__(self) -> int:
        return len(self.time_ms)

    def batch(self, start: int, stop: int) -> tuple[npt.NDArray[Any], ...]:
        return tuple(
            c[start:stop]
            for c in (self.time_ms, self.pair, self.kind, self.bytes, self.thread_ns, self.acks)
        )


def replay(
    frame: pd.DataFrame,
    configs: Sequence[QuotaConfig],
    *,
    closed_loop: bool = False,
    batch: int = 997,
    clients: frames.ClientLimits | None = None,
) -> tuple[list[pd.DataFrame], ReplayKernel]:
    """The kernel's rows per scenario, in the frame's own row order (fed in batches)."""
    cols = Columns(frame)
    k = ReplayKernel(
        cols.pairs,
        [path_of(c) for c in configs],
        closed_loop=closed_loop,
        expiry_task_ms=None,
        client_limits=None if clients is None else clients.as_tuple(),
    )
    parts = [k.feed(*cols.batch(i, i + batch)) for i in range(0, len(cols), batch)]
    parts.append(k.finish())
    assert k.pending == 0
    rows = pd.concat([pd.DataFrame(p) for p in parts], ignore_index=True)
    out = []
    for s in range(len(configs)):
        mine = rows[rows["scenario"] == s].sort_values("seq")
        assert mine["seq"].tolist() == list(range(len(frame)))
        result = pd.DataFrame(index=frame.index)
        position = cols.order[mine["seq"].to_numpy()]
        for name in (
            *THROTTLES,
            frames.SENT,
            frames.ADDED_LATENCY,
            frames.UNSERVED,
            "throttled_by",
        ):
            column = np.empty(len(frame), dtype=mine[name].dtype)
            column[position] = mine[name].to_numpy()
            result[name] = column
        out.append(result)
    return out, k


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    return traffic_frame(12_000, seed=11, brokers=1)


def test_open_loop_equals_replay_open(frame: pd.DataFrame) -> None:
    configs = [mixed_config().scaled(s) for s in SCALES]
    got, _ = replay(frame, configs)
    for config, result in zip(configs, got, strict=True):
        want = frames.replay_open(frame, config)
        for name in THROTTLES:
            np.testing.assert_array_equal(result[name].to_numpy(), want[name].to_numpy(), name)
        np.testing.assert_array_equal(result[frames.SENT].to_numpy(), frame[frames.TS].to_numpy())
        assert (result[frames.ADDED_LATENCY] == 0).all()
    # the trace throttles through every quota, less as the quotas grow
    assert (
        (got[0][[frames.PRODUCE_THROTTLE, frames.FETCH_THROTTLE, frames.REQUEST_THROTTLE]] > 0)
        .any()
        .all()
    )
    counts = [int((g[frames.THROTTLE] > 0).sum()) for g in got]
    assert counts[0] > counts[1] > counts[2]


def test_throttled_by_names_the_quota_that_applied(frame: pd.DataFrame) -> None:
    (result,), _ = replay(frame, [mixed_config()])
    by = result["throttled_by"].to_numpy()
    assert ((by >= 0) == (result[frames.THROTTLE] > 0)).all()
    for code, name in enumerate(
        (frames.PRODUCE_THROTTLE, frames.FETCH_THROTTLE, frames.REQUEST_THROTTLE)
    ):
        rows = by == code
        assert rows.any()
        np.testing.assert_array_equal(result[name][rows], result[frames.THROTTLE][rows])


def test_closed_loop_equals_replay_closed(frame: pd.DataFrame) -> None:
    configs = [mixed_config().scaled(s) for s in (0.5, 1.0)]
    got, _ = replay(frame, configs, closed_loop=True, batch=613)
    for config, result in zip(configs, got, strict=True):
        want = replay_closed(frame, config)
        for name in (*THROTTLES, frames.SENT, frames.ADDED_LATENCY):
            np.testing.assert_array_equal(result[name].to_numpy(), want[name].to_numpy(), name)
        assert (result[frames.ADDED_LATENCY] > 0).any()


def test_batching_does_not_change_the_closed_loop(frame: pd.DataFrame) -> None:
    configs = [mixed_config()]
    one, _ = replay(frame, configs, closed_loop=True, batch=len(frame))
    many, _ = replay(frame, configs, closed_loop=True, batch=101)
    pd.testing.assert_frame_equal(one[0], many[0])


TIGHT = frames.ClientLimits(buffer_bytes=400_000, delivery_timeout_ms=4_000, api_timeout_ms=3_000)
"""Client limits small enough for the generated traffic to fill buffers and time out."""


@pytest.mark.parametrize("limits", [TIGHT, frames.ClientLimits()], ids=["tight", "kafka"])
def test_bounded_closed_loop_equals_the_reference(
    frame: pd.DataFrame, limits: frames.ClientLimits
) -> None:
    configs = [mixed_config().scaled(s) for s in (0.25, 1.0)]
    got, _ = replay(frame, configs, closed_loop=True, batch=613, clients=limits)
    for config, result in zip(configs, got, strict=True):
        want = replay_closed_bounded(frame, config, limits)
        for name in (*THROTTLES, frames.SENT, frames.ADDED_LATENCY, frames.UNSERVED):
            np.testing.assert_array_equal(result[name].to_numpy(), want[name].to_numpy(), name)
        # the pandas entry point is the same kernel
        pandas = frames.replay_closed(frame, config, limits)
        for name in (*THROTTLES, frames.SENT, frames.UNSERVED):
            np.testing.assert_array_equal(pandas[name].to_numpy(), want[name].to_numpy(), name)
    codes = set(got[0][frames.UNSERVED].tolist())
    if limits == TIGHT:
        assert codes == {frames.SERVED, frames.UNSERVED_BUFFER_FULL, frames.UNSERVED_TIMED_OUT}
    else:  # Kafka's limits hold this traffic's clients
        assert (got[0][frames.ADDED_LATENCY] > 0).any()
    # what was not served carries no throttle, is never later than its timeout, and is
    # never a fetch
    gone = got[0][got[0][frames.UNSERVED] > 0]
    assert (gone[THROTTLES[-1]] == 0).all()
    assert (gone[frames.ADDED_LATENCY] <= limits.delivery_timeout_ms).all()
    assert not (frames.kinds(frame.loc[gone.index, frames.API]) == "fetch").any()


def test_bounded_clients_catch_up_where_unbounded_ones_stay_behind(frame: pd.DataFrame) -> None:
    config = mixed_config().scaled(0.5)
    unbounded = frames.replay_closed(frame, config)
    bounded = frames.replay_closed(frame, config, frames.ClientLimits())
    # the same throttled traffic, but bounded producers and other clients are never later
    # than their timeout; consumers fall behind (a fetch is never given up)
    fetch = np.asarray(frames.kinds(frame[frames.API]) == "fetch")
    limit = frames.ClientLimits().delivery_timeout_ms
    assert unbounded[frames.ADDED_LATENCY][~fetch].max() > limit
    assert bounded[frames.ADDED_LATENCY][~fetch].max() <= limit
    assert (bounded[frames.UNSERVED][fetch] == frames.SERVED).all()
    assert bounded[frames.ADDED_LATENCY].mean() < unbounded[frames.ADDED_LATENCY].mean()
    assert (unbounded[frames.UNSERVED] == frames.SERVED).all()


def test_bounded_batching_does_not_change_the_closed_loop(frame: pd.DataFrame) -> None:
    configs = [mixed_config().scaled(0.25)]
    one, _ = replay(frame, configs, closed_loop=True, batch=len(frame), clients=TIGHT)
    many, _ = replay(frame, configs, closed_loop=True, batch=101, clients=TIGHT)
    pd.testing.assert_frame_equal(one[0], many[0])


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ((0, 1, 1), "buffer_bytes 0"),
        ((1, -5, 1), "delivery_timeout_ms -5"),
        ((1, 1, 0), "api_timeout_ms 0"),
    ],
)
def test_bad_client_limits_are_refused_naming_the_value(
    limits: tuple[int, int, int], message: str
) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        ReplayKernel([], [path_of(mixed_config())], closed_loop=True, client_limits=limits)
    name = message.split()[0]
    with pytest.raises(ValueError, match=message):
        frames.ClientLimits(**{name: int(message.split()[1])})
    with pytest.raises(InvalidConfigError, match="closed_loop"):
        ReplayKernel([], [path_of(mixed_config())], client_limits=(1, 1, 1))
    with pytest.raises(TypeError, match="client_limits"):
        ReplayKernel([], [path_of(mixed_config())], closed_loop=True, client_limits=(1, 2))


def usage_of(frame: pd.DataFrame, result: pd.DataFrame, quota_type: str) -> pd.DataFrame:
    """One row per request recorded by a ``quota_type`` sensor (as the job builds it)."""
    return summarized_usage(frame, result, quota_type, mixed_config(), broker="")


SUMMARY = frames.SUMMARY_COLUMNS[frames.SUMMARY_COLUMNS.index("quota") :]
"""The per-sensor numbers of a summary (the columns after the sensor's names)."""


@pytest.mark.parametrize("closed_loop", [False, True], ids=["open", "closed"])
def test_summaries_equal_summarize(frame: pd.DataFrame, closed_loop: bool) -> None:
    configs = [mixed_config().scaled(s) for s in (0.5, 1.0)]
    got, k = replay(frame, configs, closed_loop=closed_loop)
    summaries = pd.DataFrame(k.summaries())
    for s, (config, result) in enumerate(zip(configs, got, strict=True)):
        for quota_type in frames.QUOTA_TYPES:
            want = frames.summarize(usage_of(frame, result, quota_type), config, quota_type)
            mine = summaries[(summaries["scenario"] == s) & (summaries["quota_type"] == quota_type)]
            assert len(mine) == len(want) > 0
            for name in (frames.SENSOR_USER, frames.SENSOR_CLIENT):
                assert mine[name].tolist() == want[name].tolist()
            for name in SUMMARY:
                np.testing.assert_array_equal(
                    mine[name].to_numpy(), want[name].to_numpy(), f"{quota_type} {name}"
                )
            assert (mine["p50_throttle_ms"] <= mine["p99_throttle_ms"]).all()
    assert (summaries["throttled_requests"] > 0).any()


# -- the conformance vectors through the kernel ------------------------------------------------

VECTOR_FILES = sorted(VECTORS.glob("*.json")) if VECTORS.is_dir() else []
KIND = {"produce": 0, "fetch": 1, "request": 2}
NOT_REPLAYED: set[str] = set()
"""Every op has a counterpart. The fetch-size cap does not create sensors in the kernel (an
empty sensor created earlier is the same as one created at its first record, for every
throttle); ``metrics`` steps are checked for their rate, quota and tags only (the kernel
keeps no throttle-time sensors or delay queue)."""


def replay_vector(scenario: Scenario) -> int:
    """Replays ``scenario`` through a one-scenario kernel; returns how many values it checked."""
    sensor = scenario.quota_type == "sensor"
    quota_type = "produce" if sensor else scenario.quota_type
    managers = {
        t: QuotaManager(t, num_samples=scenario.num_samples, window_ms=scenario.window_ms)
        for t in KIND
    }

    def entity(user: str | None, client_id: str | None) -> Entity:
        # a bare sensor is one client's sensor under a <default> client quota
        return Entity(client_id=DEFAULT) if sensor else Entity(user=user, client_id=client_id)

    for q in scenario.quotas:
        managers[quota_type].set_quota(entity(q.user, q.client_id), q.value)

    def client(user: str | None, client_id: str | None) -> tuple[str, str] | None:
        return None if user is None or client_id is None else (user, client_id)

    pairs: list[tuple[str, str]] = [("", "client")] if sensor else []
    for step in scenario.steps:
        named = client(step.user, step.client_id)
        if named is not None and named not in pairs:
            pairs.append(named)
    k = ReplayKernel(
        pairs or [("", "")],
        [RequestPath(managers["produce"], managers["fetch"], managers["request"])],
        expiry_task_ms=None,
    )
    checked = 0
    for step in scenario.steps:
        t = step.t_ms
        named = client(step.user, step.client_id)
        pair = 0 if sensor else -1 if named is None else pairs.index(named)
        expect = step.expect or {}
        where = f"{scenario.name} step {step.index} ({step.op} at {t})"
        if step.op in ("record", "record_raw"):
            assert not (step.op == "record_raw" and quota_type == "fetch"), where
            value = float(step.value or 0.0)
            request = quota_type == "request"
            out = k.feed(
                np.array([t], dtype=np.int64),
                np.array([pair], dtype=np.int32),
                np.array([KIND[quota_type]], dtype=np.int8),
                np.array([0.0 if request else value]),
                np.array([value if request else math.nan]),
                np.array([-1], dtype=np.int16),
            )
            if "throttle_ms" in expect:
                got = int(out[f"{quota_type}_throttle_ms"][0])
                assert got == expect["throttle_ms"], where
                checked += 1
        elif step.op in ("set_quota", "remove_quota"):
            target = entity(step.user, step.client_id)
            if step.op == "set_quota":
                k.set_quota(0, quota_type, target, float(step.value or 0.0), t)
            else:
                k.remove_quota(0, quota_type, target, t)
        elif step.op == "expire_sensors":
            k.expire_sensors(t)
        elif step.op == "record_no_throttle":
            k.record_no_throttle(pair, float(step.value or 0.0), t)
        elif step.op == "max_value_in_quota_window":
            cap = k.max_value_in_quota_window(0, quota_type, pair)
            assert cap == expect["value"], where
            assert double_to_int(cap) == expect["as_int"], where
            checked += 2
        elif step.op in ("measure", "metrics"):
            k.measure(0, quota_type, pair, t)  # purges, as Kafka's read does
        elif step.op not in NOT_REPLAYED:
            raise AssertionError(f"{where}: op not replayed through the kernel")
        if pair >= 0 and step.op not in NOT_REPLAYED and {"rate", "quota", "tags"} & set(expect):
            rate = k.measure(0, quota_type, pair, t)  # at the same time: changes nothing
            if "rate" in expect:
                want = expect["rate"]
                assert (rate is None and want is None) or (
                    rate is not None and want is not None and float(want) == rate
                ), f"{where}: rate {rate} != {want}"
                checked += 1
            if "quota" in expect and not sensor:
                bound = k.quota_for(0, quota_type, pair)
                quota = None if rate is None else UNLIMITED if bound is None else bound
                assert quota == expect["quota"], where
                checked += 1
            if "tags" in expect and not sensor:
                tags = expect["tags"]
                assert k.tags(0, quota_type, pair) == (tags["user"], tags["client-id"]), where
                checked += 1
    return checked


@pytest.mark.parametrize(
    "path", [pytest.param(p, id=p.stem) for p in VECTOR_FILES] or [pytest.param(None, id="none")]
)
def test_conformance_vector_through_the_kernel(path: Path | None) -> None:
    assert path is not None, f"no conformance vectors in {VECTORS}"
    assert replay_vector(load_scenario(path)) > 0


# -- bad input -------------------------------------------------------------------------------


def small_kernel() -> ReplayKernel:
    config = mixed_config()
    return ReplayKernel([("tenant-000", "a"), ("analytics", "b")], [path_of(config)])


def events(n: int = 4, **changes: Any) -> list[npt.NDArray[Any]]:
    cols = {
        "time_ms": np.arange(n, dtype=np.int64) * 100,
        "pair": np.array([i % 2 for i in range(n)], dtype=np.int32),
        "kind": np.array([i % 3 for i in range(n)], dtype=np.int8),
        "bytes": np.full(n, 90_000.0),
        "thread_ns": np.full(n, 3e6),
        "acks": np.full(n, -1, dtype=np.int16),
    }
    cols.update(changes)
    return list(cols.values())


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"pair": np.zeros(3, dtype=np.int32)}, "differ in length: time_ms 4, pair 3"),
        ({"kind": np.array([0, 1, 7, 2], dtype=np.int8)}, "invalid kind 7 at row 2"),
        ({"pair": np.array([0, 1, 2, 0], dtype=np.int32)}, "invalid pair 2 at row 2"),
        ({"pair": np.array([0, -1, 0, 0], dtype=np.int32)}, "invalid pair -1 at row 1"),
        ({"bytes": np.array([1.0, math.nan, 1.0, 1.0])}, "bytes at row 1: invalid usage value NaN"),
        ({"bytes": np.array([1.0, 1.0, 1.0, -5.0])}, "bytes at row 3: invalid usage value -5.0"),
        ({"thread_ns": np.array([1.0, -1.0, 1.0, 1.0])}, "thread_ns at row 1"),
        ({"thread_ns": np.array([1.0, 1.0, math.inf, 1.0])}, "thread_ns at row 2"),
        (
            {"time_ms": np.array([0, 200, 100, 300], dtype=np.int64)},
            "time_ms[2] = 1100 is before time_ms[1] = 1200",
        ),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(changes: dict[str, Any], message: str) -> None:
    k, fresh = small_kernel(), small_kernel()
    first = events()
    k.feed(*first)
    fresh.feed(*first)
    later = [c.copy() for c in events(**changes)]
    later[0] = later[0] + 1000
    with pytest.raises(InvalidUsageError, match=re.escape(message)):
        k.feed(*later)
    good = events()
    good[0] = good[0] + 1000
    a, b = k.feed(*good), fresh.feed(*good)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], name)
    pd.testing.assert_frame_equal(pd.DataFrame(k.summaries()), pd.DataFrame(fresh.summaries()))


def test_an_event_before_the_last_batch_is_refused() -> None:
    k = small_kernel()
    k.feed(*events())
    with pytest.raises(InvalidUsageError, match=r"time_ms\[0\] = 0 is before the last time"):
        k.feed(*events())
    with pytest.raises(InvalidUsageError, match="invalid now_ms 5"):
        k.expire_sensors(5)


def test_wrong_types_and_options() -> None:
    k = small_kernel()
    cols = events()
    cols[1] = cols[1].astype(np.int64)
    with pytest.raises(
        TypeError, match="argument pair: expected a one-dimensional numpy array of int32"
    ):
        k.feed(*cols)
    with pytest.raises(InvalidConfigError, match="invalid expiry_task_ms 0"):
        ReplayKernel([("u", "c")], [path_of(mixed_config())], expiry_task_ms=0)
    with pytest.raises(TypeError, match="scenarios"):
        ReplayKernel([("u", "c")], [mixed_config()])  # type: ignore[list-item]
    with pytest.raises(InvalidUsageError, match="invalid scenario 3"):
        k.measure(3, "produce", 0, 10_000)
    assert "2 pairs, 1 scenarios" in repr(k)


def test_an_idle_sensor_starts_over() -> None:
    """After an hour and more without a record (removed by the expiry task, or only purged
    with ``expiry_task_ms=None``) the next record is measured alone. The exact expiry rule
    against the managers' is the core's property test (tests/replay.rs)."""
    one = [("tenant-002", "producer-0001")]
    for task in (30_000, None):
        k = ReplayKernel(one, [path_of(mixed_config())], expiry_task_ms=task)
        times = np.array([0, 0, 3_600_000 + 30_000 + 1], dtype=np.int64)
        out = k.feed(
            times,
            np.zeros(3, dtype=np.int32),
            np.zeros(3, dtype=np.int8),
            np.array([200_000.0, 200_000.0, 10.0]),
            np.full(3, math.nan),
            np.full(3, -1, dtype=np.int16),
        )
        assert out["throttle_ms"].tolist()[1] > 0
        assert out["throttle_ms"].tolist()[2] == 0
        assert k.measure(0, "produce", 0, int(times[-1])) == 1.0  # 10 B over 10 s


def test_add_pairs_and_quota_changes() -> None:
    config = mixed_config()
    k = ReplayKernel([("tenant-000", "a")], [path_of(config)])
    assert k.add_pairs([("tenant-002", "producer-0001")]) == 1
    assert k.pair_count == 2
    assert k.tags(0, "produce", 1) == ("tenant-002", "producer-0001")
    assert k.quota_for(0, "produce", 1) == 5_000.0
    k.remove_quota(0, "produce", Entity(user="tenant-002", client_id="producer-0001"), 0)
    assert k.tags(0, "produce", 1) == ("tenant-002", "")
    assert k.quota_for(0, "produce", 1) == 60_000.0
    k.set_quota(0, "produce", Entity(user="tenant-002"), 1.0, 0)
    assert k.quota_for(0, "produce", 1) == 1.0
