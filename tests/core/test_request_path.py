"""kquota.RequestPath, the core's Kafka request path, through the binding.

The property test replays random request traces (produce, fetch and other requests,
``acks`` 0/1/-1, unknown thread times, channels or none, quota churn, times that repeat)
through the core's path and, on a second set of kquota managers, through the plain
composition of per-manager calls (``reference_model.RequestPath``); every outcome and the
managers' observable state must agree.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, Literal

import kquota
import numpy as np
import pytest
import reference_model as model
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from kquota import Entity, QuotaManager, RequestPath
from kquota._core import applied_throttles, double_to_int

CI: Final = settings(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    max_examples=200,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

QuotaType = Literal["produce", "fetch", "request"]
QUOTA_TYPES: Final[tuple[QuotaType, ...]] = ("produce", "fetch", "request")
USERS: Final = ("u", "v", "")
CLIENTS: Final = ("c", "d", "")


def managers(num_samples: int = 11, window_ms: int = 1000) -> list[QuotaManager]:
    return [QuotaManager(t, num_samples=num_samples, window_ms=window_ms) for t in QUOTA_TYPES]


def fields(outcome: Any) -> tuple[object, ...]:
    return (
        outcome.produce_throttle_ms,
        outcome.fetch_throttle_ms,
        outcome.request_throttle_ms,
        outcome.throttle_ms,
        outcome.throttled_by,
        outcome.unrecorded,
        outcome.muted_until_ms,
    )


# -- hand-computed cases ---------------------------------------------------------------------


def test_produce_by_hand() -> None:
    produce, fetch, request = managers()
    produce.set_quota(Entity(user="u"), 1000)
    path = RequestPath(produce, fetch, request)
    # 15 000 B on a fresh 11 x 1 s sensor: 1500 B/s over 10 s, (1500 - 1000) / 1000 * 10 s
    out = path.handle("u", "c", "produce", 15_000, 1_000_000, now_ms=0, channel=4)
    assert fields(out) == (5000, 0, 0, 5000, "produce", False, 5000)
    assert out.throttled
    assert produce.expired_channels(5000) == [4]
    assert path.manager("produce") is produce and path.fetch is fetch
    assert "throttled_by='produce'" in repr(out)


def test_a_fetch_throttled_by_the_request_quota_is_unrecorded() -> None:
    produce, fetch, request = managers()
    fetch.set_quota(Entity(user="u"), 1e9)
    request.set_quota(Entity(user="u"), 1.0)
    path = RequestPath(produce, fetch, request)
    out = path.record("u", "c", "fetch", 5000, 5e9, now_ms=0)
    assert fields(out) == (0, 0, 1000, 1000, "request", True, None)
    assert fetch.measure("u", "c", 0) == 0.0
    assert math.isnan(request.throttle_time_avg("u", "c", 0) or 0.0)  # record accounts none


def test_acks_0_and_unknown_thread_time_skip_the_request_quota() -> None:
    produce, fetch, request = managers()
    request.set_quota(Entity(user="u"), 1.0)
    path = RequestPath(produce, fetch, request)
    assert not path.record("u", "c", "produce", 10, 5e9, acks=0, now_ms=0).throttled
    assert not path.record("u", "c", "other", 0, None, now_ms=0).throttled
    assert request.measure("u", "c", 0) is None
    assert path.record("u", "c", "produce", 10, 5e9, acks=1, now_ms=0).throttle_ms == 1000


def test_fetch_max_bytes_and_javas_cast() -> None:
    produce, fetch, request = managers()
    path = RequestPath(produce, fetch, request)
    assert path.fetch_max_bytes("u", "c", 2**40, now_ms=0) == 2**31 - 1
    fetch.set_quota(Entity(user="u"), 1000)
    assert path.fetch_max_bytes("u", "c", 52_428_800, now_ms=0) == 10_000
    assert double_to_int(float("nan")) == 0
    assert double_to_int(-3e12) == -(2**31)
    assert double_to_int(999.9) == 999
    p = np.array([5, 0, -7], dtype=np.int32)
    f = np.array([0, 9, 0], dtype=np.int32)
    r = np.array([3, 9, -1], dtype=np.int32)
    assert applied_throttles(p, f, r).tolist() == [5, 9, 0]


def test_bad_input_names_the_value_and_records_nothing() -> None:
    produce, fetch, request = managers()
    produce.set_quota(Entity(user="u"), 100)
    path = RequestPath(produce, fetch, request)
    with pytest.raises(kquota.InvalidConfigError, match='its quota type is "fetch"'):
        RequestPath(fetch, fetch, request)
    with pytest.raises(TypeError, match=r"argument request: expected a kquota\.QuotaManager"):
        RequestPath(produce, fetch, "request")  # type: ignore[arg-type]
    with pytest.raises(kquota.InvalidUsageError, match='invalid kind "bytes"'):
        path.record("u", "c", "bytes", 1)  # type: ignore[arg-type]
    with pytest.raises(kquota.InvalidUsageError, match="thread_time_ns: invalid usage value NaN"):
        path.record("u", "c", "produce", 1, float("nan"))
    with pytest.raises(kquota.InvalidValueError, match="invalid acks 40000"):
        path.record("u", "c", "produce", 1, 1, acks=40000)
    with pytest.raises(kquota.InvalidUsageError, match="throttle arrays differ in length"):
        applied_throttles(np.zeros(1, np.int32), np.zeros(2, np.int32), np.zeros(1, np.int32))
    assert produce.measure("u", "c", 0) is None


# -- the property: the core's path is the per-manager calls ----------------------------------


@dataclass(frozen=True)
class Req:
    dt: int
    user: str
    client: str
    kind: Literal["produce", "fetch", "other"]
    size: float
    thread: float | None
    acks: int
    channel: int | None
    handle: bool


@dataclass(frozen=True)
class Churn:
    dt: int
    quota_type: QuotaType
    user: str | None
    client: str | None
    value: float | None  # None removes


entities = st.sampled_from(
    [("u", None), ("v", None), (None, "c"), ("u", "c"), (None, kquota.DEFAULT), ("", None)]
)
quota_values = st.sampled_from([1e-6, 1.0, 50.0, 500.0, 5000.0, 1e5, 1e9])
gaps = st.sampled_from([0, 0, 0, 1, 7, 100, 499, 1000, 2500, 20_000])
requests = st.builds(
    Req,
    dt=gaps,
    user=st.sampled_from(USERS),
    client=st.sampled_from(CLIENTS),
    kind=st.sampled_from(["produce", "fetch", "other"]),
    size=st.sampled_from([0.0, 1.0, 700.0, 4096.0, 1e5, 1e7, 1e12]),
    thread=st.one_of(st.none(), st.sampled_from([0.0, 1e5, 2e6, 5e7, 5e9])),
    acks=st.sampled_from([-1, 0, 1]),
    channel=st.one_of(st.none(), st.integers(0, 5)),
    handle=st.booleans(),
)


@st.composite
def churns(draw: st.DrawFn) -> Churn:
    user, client = draw(entities)
    value = draw(st.one_of(st.none(), quota_values))
    return Churn(draw(gaps), draw(st.sampled_from(QUOTA_TYPES)), user, client, value)


@st.composite
def traces(draw: st.DrawFn) -> tuple[int, int, list[Churn], list[Req | Churn]]:
    num_samples = draw(st.sampled_from([2, 3, 11]))
    window_ms = draw(st.sampled_from([1000, 2000]))
    initial = draw(st.lists(churns(), min_size=1, max_size=6))
    steps = draw(st.lists(st.one_of(requests, requests, requests, churns()), max_size=60))
    return num_samples, window_ms, initial, steps


def apply_churn(ms: list[QuotaManager], churn: Churn) -> None:
    manager = ms[QUOTA_TYPES.index(churn.quota_type)]
    entity = Entity(user=churn.user, client_id=churn.client)
    if churn.value is None:
        manager.remove_quota(entity)
    else:
        manager.set_quota(entity, churn.value)


def state(ms: list[QuotaManager], now: int) -> object:
    return [
        (
            m.queue_size(),
            m.expired_channels(now),
            m.sensor_names(),
            [
                (m.measure(u, c, now), m.throttle_time_avg(u, c, now))
                for u in USERS
                for c in CLIENTS
            ],
        )
        for m in ms
    ]


def same(a: object, b: object) -> bool:
    return repr(a) == repr(b)  # NaN equal to NaN, floats to the last digit


@CI
@given(traces())
def test_core_request_path_equals_the_per_manager_calls(
    trace: tuple[int, int, list[Churn], list[Req | Churn]],
) -> None:
    num_samples, window_ms, initial, steps = trace
    core_ms, composed_ms = managers(num_samples, window_ms), managers(num_samples, window_ms)
    for churn in initial:
        apply_churn(core_ms, churn)
        apply_churn(composed_ms, churn)
    core = RequestPath(*core_ms)
    composed = model.RequestPath(*composed_ms)  # type: ignore[arg-type]
    now = 0
    for step in steps:
        now += step.dt
        note(f"t={now} {step}")
        if isinstance(step, Churn):
            apply_churn(core_ms, step)
            apply_churn(composed_ms, step)
            continue
        args = (step.user, step.client, step.kind, step.size, step.thread)
        if step.handle:
            got = core.handle(*args, acks=step.acks, now_ms=now, channel=step.channel)
            want = composed.handle(*args, acks=step.acks, now_ms=now, channel=step.channel)
        else:
            got = core.record(*args, acks=step.acks, now_ms=now)
            want = composed.record(*args, acks=step.acks, now_ms=now)
        note(f"  -> {fields(got)}")
        event(f"{step.kind} throttled by {got.throttled_by}, unrecorded={got.unrecorded}")
        if min(got.produce_throttle_ms, got.fetch_throttle_ms, got.request_throttle_ms) < 0:
            event("a throttle wrapped negative")
        assert fields(got) == fields(want)
        assert same(state(core_ms, now), state(composed_ms, now))
