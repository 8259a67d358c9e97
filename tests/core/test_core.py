"""The compiled API (``kquota._core`` through ``kquota``): behaviour, bad input, threads,
and the batch call against one-at-a-time records."""

from __future__ import annotations

import itertools
import math
import pickle
import re
import threading
import time
from collections.abc import Callable
from functools import partial

import kquota
import numpy as np
import pytest
from delivery import run_all
from kquota.exceptions import (
    InvalidConfigError,
    InvalidQuotaError,
    InvalidUsageError,
    InvalidValueError,
    KquotaError,
)


def test_readme_example() -> None:
    produce = kquota.QuotaManager("produce")
    produce.set_quota(kquota.Entity(user="alice"), 1_048_576)
    assert produce.record(user="alice", client_id="app-1", value=4096, now_ms=0) == 0
    # 4096 B over 10 padded windows is 409.6 B/s.
    assert produce.measure("alice", "app-1", now_ms=0) == 409.6


def test_exception_hierarchy() -> None:
    assert issubclass(InvalidValueError, KquotaError)
    assert issubclass(InvalidValueError, ValueError)
    for cls in (InvalidConfigError, InvalidQuotaError, InvalidUsageError):
        assert issubclass(cls, InvalidValueError)
    assert kquota.KquotaError is KquotaError


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf, -math.inf])
def test_bad_quota_is_rejected_and_changes_nothing(bad: float) -> None:
    m = kquota.QuotaManager("produce")
    m.set_quota(kquota.Entity(user="a"), 100.0)
    with pytest.raises(InvalidQuotaError, match=f"(?i)invalid quota value {re.escape(repr(bad))}"):
        m.set_quota(kquota.Entity(user="a"), bad)
    assert m.quota(kquota.Entity(user="a")) == 100.0
    with pytest.raises(InvalidQuotaError):
        kquota.SampledRate(quota=bad)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_bad_usage_is_rejected_and_changes_nothing(bad: float) -> None:
    m = kquota.QuotaManager("fetch")
    m.set_quota(kquota.Entity(user="a"), 100.0)
    m.record("a", "c", 500.0, now_ms=0)
    for call in (m.record, m.unrecord, m.record_no_throttle):
        with pytest.raises(InvalidUsageError, match="usage value"):
            call("a", "c", bad, now_ms=0)
    assert m.measure("a", "c", now_ms=0) == 50.0


def test_sampled_rate_takes_negative_but_not_nan() -> None:
    r = kquota.SampledRate(num_samples=11, window_ms=1000, quota=100.0)
    r.record_no_check(3000.0, now_ms=0)
    r.record_no_check(-3000.0, now_ms=0)
    assert r.measure(now_ms=0) == 0.0
    with pytest.raises(InvalidUsageError, match=r"(?i)value nan"):
        r.record(math.nan, now_ms=0)
    check = r.record(2000.0, now_ms=0)
    assert (check.violated, check.throttle_ms, check.rate) == (True, 10000, 200.0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"num_samples": 0}, "num_samples 0"),
        ({"window_ms": 0}, "window_ms 0"),
        ({"window_ms": 1500}, "window_ms 1500"),
        ({"sensor_expiry_ms": -1}, "sensor_expiry_ms -1"),
    ],
)
def test_bad_manager_config(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        kquota.QuotaManager("produce", **kwargs)


def test_unknown_quota_type_and_empty_entity() -> None:
    with pytest.raises(InvalidConfigError, match=r"unknown quota type \"bytes\""):
        kquota.QuotaManager("bytes")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="entity"):
        kquota.Entity()


def test_entity_value_semantics() -> None:
    e = kquota.Entity(user="alice", client_id=kquota.DEFAULT)
    assert e == kquota.Entity(user="alice", client_id="<default>")
    assert hash(e) == hash(kquota.Entity(user="alice", client_id="<default>"))
    assert e != kquota.Entity(user="alice")
    assert repr(e) == 'Entity(user="alice", client_id="<default>")'
    assert pickle.loads(pickle.dumps(e)) == e
    assert {e: 1}[kquota.Entity(user="alice", client_id="<default>")] == 1


def test_quotas_listing_and_removal() -> None:
    m = kquota.QuotaManager("request")
    assert not m.enabled
    m.set_quota(kquota.Entity(user="u", client_id="c"), 50.0)
    m.set_quota(kquota.Entity(client_id=kquota.DEFAULT), 25.0)
    assert sorted(m.quotas(), key=lambda q: q[1]) == [
        (kquota.Entity(client_id="<default>"), 25.0),
        (kquota.Entity(user="u", client_id="c"), 50.0),
    ]
    m.remove_quota(kquota.Entity(user="u", client_id="c"))
    assert m.quota(kquota.Entity(user="u", client_id="c")) is None
    assert m.enabled


def test_sanitized_user_tags() -> None:
    m = kquota.QuotaManager("produce")
    m.set_quota(kquota.Entity(user="CN=a b"), 10.0)
    assert kquota.sanitize_user("CN=a b") == "CN%3Da%20b"
    assert m.tags("CN=a b", "x") == ("CN%3Da%20b", "")
    assert m.quota_for("CN=a b", "x") == 10.0


def test_request_quota_is_capped_at_one_window() -> None:
    m = kquota.QuotaManager("request")
    m.set_quota(kquota.Entity(user="u"), 1.0)
    # 5 s of handler time in one request: 50 % over the 10 s window, far above 1 %.
    assert m.record("u", "c", 5e9, now_ms=0) == 1000


def test_throttle_delay_queue_and_average() -> None:
    m = kquota.QuotaManager("produce")
    m.set_quota(kquota.Entity(user="u"), 100.0)
    # 2000 B over 10 padded seconds is 200 B/s: (200 - 100) / 100 * 10 000 ms.
    t = m.record("u", "c", 2000.0, now_ms=0)
    assert t == 10_000
    assert m.throttle("u", "c", t, now_ms=0, channel=7) == 10_000
    assert m.queue_size() == 1
    assert m.expired_channels(now_ms=9_999) == []
    assert m.expired_channels(now_ms=10_000) == [7]
    assert m.queue_size() == 0
    assert m.throttle_time_avg("u", "c", now_ms=10_000) == 10_000.0
    with pytest.raises(InvalidUsageError, match="throttle_ms 0"):
        m.throttle("u", "c", 0, now_ms=0)


def test_sensor_expiry_names() -> None:
    m = kquota.QuotaManager("fetch", sensor_expiry_ms=10)
    m.set_quota(kquota.Entity(client_id=kquota.DEFAULT), 100.0)
    m.record("u", "c1", 1.0, now_ms=0)
    assert m.sensor_names() == ["Fetch-:c1", "FetchThrottleTime-:c1"]
    assert m.expire_sensors(now_ms=10) == []
    assert m.expire_sensors(now_ms=11) == ["Fetch-:c1", "FetchThrottleTime-:c1"]
    assert m.sensor_names() == []
    assert m.measure("u", "c1", now_ms=11) is None


def test_clock_is_used_when_no_time_is_given() -> None:
    before = kquota.monotonic_ms()
    m = kquota.QuotaManager("produce")
    m.set_quota(kquota.Entity(user="u"), 1e9)
    assert m.record("u", "c", 1.0) == 0
    rate = m.measure("u", "c")
    assert rate is not None and rate > 0
    assert kquota.monotonic_ms() >= before


def _trace(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple[str, str]]]:
    rng = np.random.default_rng(seed)
    keys = [(f"user-{i % 7}", f"client-{i}") for i in range(40)]
    now = np.cumsum(rng.poisson(3, n)).astype(np.int64)
    key_index = rng.integers(0, len(keys), n).astype(np.int64)
    values = (rng.pareto(1.5, n) * 300).astype(np.float64)
    return now, key_index, values, keys


@pytest.mark.parametrize("quota_type", ["produce", "fetch", "request"])
def test_batch_equals_one_at_a_time(quota_type: str) -> None:
    now, key_index, values, keys = _trace(20_000, seed=7)
    if quota_type == "request":
        values = values * 1e4  # nanoseconds

    def configured() -> kquota.QuotaManager:
        m = kquota.QuotaManager(quota_type)  # type: ignore[arg-type]
        m.set_quota(kquota.Entity(user=kquota.DEFAULT), 3000.0 if quota_type != "request" else 20)
        m.set_quota(kquota.Entity(user="user-3", client_id="client-3"), 500.0)
        m.set_quota(kquota.Entity(client_id=kquota.DEFAULT), 800.0)
        return m

    batch = configured().record_batch(now, key_index, values, keys)
    assert batch.dtype == np.int32 and batch.shape == now.shape
    single = configured()
    expected = []
    for t, k, v in zip(now.tolist(), key_index.tolist(), values.tolist(), strict=True):
        throttle = single.record(*keys[k], v, now_ms=t)
        if quota_type == "fetch" and throttle > 0:
            single.unrecord(*keys[k], v, now_ms=t)
        expected.append(throttle)
    assert batch.tolist() == expected
    assert (batch > 0).sum() > 100, "the trace must throttle often"


def test_batch_rejects_bad_input_before_recording() -> None:
    m = kquota.QuotaManager("produce")
    m.set_quota(kquota.Entity(user="u"), 100.0)
    keys = [("u", "c")]
    now = np.array([0, 1], dtype=np.int64)
    with pytest.raises(InvalidUsageError, match="key_index 5"):
        m.record_batch(now, np.array([0, 5]), np.array([1.0, 1.0]), keys)
    with pytest.raises(InvalidUsageError, match="event 1"):
        m.record_batch(now, np.array([0, 0]), np.array([1.0, -1.0]), keys)
    with pytest.raises(InvalidUsageError, match="differ in length"):
        m.record_batch(now, np.array([0]), np.array([1.0, 1.0]), keys)
    assert m.measure("u", "c", now_ms=1) is None


def test_threads_record_exact_totals() -> None:
    """Eight threads record into shared and distinct entities through the GIL-free batch
    call; with every record inside the horizon, the measured totals are exact."""
    m = kquota.QuotaManager("produce", num_samples=11, window_ms=1000)
    m.set_quota(kquota.Entity(client_id=kquota.DEFAULT), 1e15)
    n = 50_000

    def worker(k: int) -> None:
        keys = [("u", "shared"), ("u", f"own-{k}")]
        now = np.arange(n, dtype=np.int64) // 10  # 0..4999 ms: all inside the horizon
        key_index = (np.arange(n) % 2).astype(np.int64)
        m.record_batch(now, key_index, np.ones(n), keys)

    assert run_all(partial(worker, k) for k in range(8)) == []
    # At 5000 ms the padded window is exactly 10 s: the total is rate * 10.
    shared = m.measure("u", "shared", now_ms=5000)
    assert shared is not None and shared * 10 == pytest.approx(8 * n / 2, rel=0, abs=1e-6)
    for k in range(8):
        own = m.measure("u", f"own-{k}", now_ms=5000)
        assert own is not None and own * 10 == pytest.approx(n / 2, rel=0, abs=1e-6)


def test_threads_keep_exact_totals_while_quotas_change_and_sensors_expire() -> None:
    """OS threads record on shared and distinct entities, through the GIL-free batch call
    and one call at a time, while one thread keeps changing quotas and another keeps
    creating idle sensors and expiring them; more threads share one SampledRate. Every
    value stays inside the horizon, so each sensor's total is exactly what was recorded."""
    m = kquota.QuotaManager("produce", num_samples=11, window_ms=1000, sensor_expiry_ms=60_000)
    default_client = kquota.Entity(client_id=kquota.DEFAULT)
    other = kquota.Entity(user="someone-else")
    # Both levels are enabled before any record, so the churn never moves a client's tags.
    m.set_quota(default_client, 1e15)
    m.set_quota(other, 1e12)
    rate = kquota.SampledRate(11, 1000, quota=1e15)
    batch_threads, call_threads, rate_threads = 4, 2, 2
    n_batch, n_call = 40_000, 10_000
    recorded: dict[str, float] = {}
    rate_total = [0.0]
    lock = threading.Lock()
    done = threading.Event()
    errors: list[BaseException] = []
    start = threading.Barrier(batch_threads + call_threads + rate_threads + 2)

    def account(client: str, values: np.ndarray, mask: np.ndarray) -> None:
        with lock:
            recorded[client] = recorded.get(client, 0.0) + float(values[mask].sum())

    def batches(k: int) -> None:
        rng = np.random.default_rng(k)
        keys = [("u", "shared"), ("u", f"batch-{k}")]
        now = np.arange(n_batch, dtype=np.int64) * 5000 // n_batch  # 0..4999 ms
        index = rng.integers(0, 2, n_batch).astype(np.int64)
        values = rng.integers(0, 1000, n_batch).astype(np.float64)
        start.wait()
        for chunk in np.array_split(np.arange(n_batch), 20):
            throttles = m.record_batch(now[chunk], index[chunk], values[chunk], keys)
            assert (throttles == 0).all()
        account("shared", values, index == 0)
        account(f"batch-{k}", values, index == 1)

    def calls(k: int) -> None:
        rng = np.random.default_rng(100 + k)
        values = rng.integers(0, 1000, n_call).astype(np.float64)
        shared = rng.random(n_call) < 0.5
        start.wait()
        for i, (v, s) in enumerate(zip(values.tolist(), shared.tolist(), strict=True)):
            client = "shared" if s else f"call-{k}"
            if i % 2:
                assert m.record("u", client, v, now_ms=i * 5000 // n_call) == 0
            else:
                m.record_no_throttle("u", client, v, now_ms=i * 5000 // n_call)
        account("shared", values, shared)
        account(f"call-{k}", values, ~shared)

    def rate_records(k: int) -> None:
        values = np.random.default_rng(200 + k).integers(-1000, 1000, n_call).astype(np.float64)
        start.wait()
        for i, v in enumerate(values.tolist()):
            if i % 2:
                rate.record_no_check(v, now_ms=i * 5000 // n_call)
            else:
                assert not rate.record(v, now_ms=i * 5000 // n_call).violated
        with lock:
            rate_total[0] += float(values.sum())

    changes, expired = [0], [0]

    def churn() -> None:
        start.wait()
        while not done.is_set():
            # Bounds far above every rate: no record may depend on them.
            m.set_quota(default_client, 1e15 + changes[0] % 7)
            if changes[0] % 2:
                m.remove_quota(other)
            else:
                m.set_quota(other, 1e12)
            rate.set_quota(1e15 + changes[0] % 5)
            changes[0] += 1

    def expiry() -> None:
        start.wait()
        for i in itertools.count():
            if done.is_set():
                return
            m.record("idle", f"c{i}", 1.0, now_ms=-100_000)  # idle for over a minute
            expired[0] += len(m.expire_sensors(now_ms=0))

    def guarded(target: Callable[..., None], *args: int) -> threading.Thread:
        def run() -> None:
            try:
                target(*args)
            except BaseException as e:  # reported below
                errors.append(e)

        return threading.Thread(target=run)

    writers = [
        *(guarded(batches, k) for k in range(batch_threads)),
        *(guarded(calls, k) for k in range(call_threads)),
        *(guarded(rate_records, k) for k in range(rate_threads)),
    ]
    background = [guarded(churn), guarded(expiry)]
    for th in writers + background:
        th.start()
    for th in writers:
        th.join()
    done.set()
    for th in background:
        th.join()
    assert errors == []
    assert changes[0] > 10 and expired[0] > 0, "the churn must overlap the writers"

    # At 5000 ms the padded window is exactly 10 s: a rate is its total / 10.
    m.set_quota(default_client, 1e15)
    readings = {(r.user, r.client_id): r for r in m.snapshot(now_ms=5000)}
    assert readings.keys() == {("", client) for client in recorded}  # idle ones all expired
    for client, total in recorded.items():
        assert m.measure("u", client, now_ms=5000) == total / 10.0, client
        assert readings[("", client)].rate == total / 10.0
        assert readings[("", client)].bound == 1e15
    assert rate.measure(now_ms=5000) == rate_total[0] / 10.0


def _manager_with_a_sensor() -> kquota.QuotaManager:
    m = kquota.QuotaManager("produce")
    m.set_quota(kquota.Entity(user="u"), 100.0)
    m.record("u", "c", 10.0, now_ms=0)
    return m


@pytest.mark.parametrize(
    ("call", "shows"),
    [
        (lambda m: m.record("u", "c", 1.0, now_ms=2**63), "now_ms"),
        (lambda m: m.expire_sensors(now_ms=-(2**63) - 1), "now_ms"),
        (lambda m: m.throttle("u", "c", 2**63, now_ms=0), "throttle_ms"),
        (lambda m: m.throttle("u", "c", 10, now_ms=0, channel=-1), "channel"),
        (lambda m: kquota.SampledRate(11, 2**63), "window_ms"),
        (lambda m: m.record("u\ud800", "c", 1.0, now_ms=0), "user"),
        (lambda m: m.set_quota(kquota.Entity(client_id="\udfff"), 1.0), "client_id"),
        (
            lambda m: m.record_batch(
                np.array([0]), np.array([0]), np.array([1.0]), [("u", "c", "x")]
            ),
            "keys",
        ),
    ],
    ids=[
        "now_ms=2**63",
        "now_ms=-2**63-1",
        "throttle_ms=2**63",
        "channel=-1",
        "window_ms=2**63",
        "user-surrogate",
        "client_id-surrogate",
        "batch-key-3-tuple",
    ],
)
def test_readme_contract_for_out_of_range_and_unencodable_arguments(
    call: Callable[[kquota.QuotaManager], object], shows: str
) -> None:
    """The README: bad input raises a KquotaError that is a ValueError, names the
    parameter and the value, and changes nothing (PyO3's own conversions would raise
    OverflowError / UnicodeEncodeError naming neither; the binding converts every
    argument itself)."""
    m = _manager_with_a_sensor()
    with pytest.raises(KquotaError) as info:
        call(m)
    assert m.measure("u", "c", now_ms=0) == 1.0 and m.queue_size() == 0  # nothing changed
    assert isinstance(info.value, ValueError)
    assert shows in str(info.value)


@pytest.mark.parametrize(
    ("call", "parameter", "shown"),
    [
        (lambda m: m.record("u", "c", "1", now_ms=0), "value", "'1'"),
        (lambda m: m.record("u", "c", True, now_ms=0), "value", "True"),
        (lambda m: m.record("u", "c", None, now_ms=0), "value", "None"),
        (lambda m: m.unrecord("u", "c", b"1", now_ms=0), "value", "b'1'"),
        (lambda m: m.record_no_throttle("u", "c", [1], now_ms=0), "value", "[1]"),
        (lambda m: m.set_quota(kquota.Entity(user="u"), "10"), "value", "'10'"),
        (lambda m: m.set_quota("alice", 10), "entity", "'alice'"),
        (lambda m: m.remove_quota(("u", None)), "entity", "('u', None)"),
        (lambda m: m.quota("u"), "entity", "'u'"),
        (lambda m: kquota.SampledRate(11, 1000, "5"), "quota", "'5'"),
        (lambda m: kquota.SampledRate(11, 1000).set_quota(False), "quota", "False"),
        (lambda m: kquota.SampledRate(11, 1000).record("2", now_ms=0), "value", "'2'"),
    ],
    ids=[
        "record-str",
        "record-bool",
        "record-None",
        "unrecord-bytes",
        "record_no_throttle-list",
        "set_quota-str",
        "set_quota-entity-str",
        "remove_quota-tuple",
        "quota-str",
        "SampledRate-quota-str",
        "SampledRate.set_quota-bool",
        "SampledRate.record-str",
    ],
)
def test_wrong_types_name_the_parameter_and_the_value(
    call: Callable[[kquota.QuotaManager], object], parameter: str, shown: str
) -> None:
    """Every argument goes through the binding's own converters: a wrong type is a
    TypeError that names the parameter and shows the value, and nothing changes."""
    m = _manager_with_a_sensor()
    with pytest.raises(TypeError) as info:
        call(m)
    message = str(info.value)
    assert f"argument {parameter}:" in message and shown in message, message
    assert m.measure("u", "c", now_ms=0) == 1.0 and m.quota(kquota.Entity(user="u")) == 100.0


def test_numbers_of_any_numeric_type_are_accepted() -> None:
    """ints, floats and NumPy scalars are values and quotas; an int too large for a float
    is an InvalidValueError naming the parameter."""
    m = kquota.QuotaManager("produce")
    m.set_quota(kquota.Entity(user="u"), np.int64(100))
    assert m.quota(kquota.Entity(user="u")) == 100.0
    for value in (10, 10.0, np.float32(10), np.int32(10), np.float64(10)):
        m.record("u", "c", value, now_ms=0)
    assert m.measure("u", "c", now_ms=0) == 5.0
    with pytest.raises(kquota.InvalidValueError, match=r"invalid value 1000000000"):
        m.record("u", "c", 10**400, now_ms=0)
    assert m.measure("u", "c", now_ms=0) == 5.0


def test_throttle_without_a_channel_is_not_queued() -> None:
    """A throttle with no channel is accounted in the throttle-time sensor only: nothing
    would ever drain a queue entry for it."""
    m = _manager_with_a_sensor()
    assert m.throttle("u", "c", 500, now_ms=0) == 500
    assert m.queue_size() == 0
    assert m.throttle_time_avg("u", "c", now_ms=0) == 500.0
    assert m.throttle("u", "c", 300, now_ms=0, channel=3) == 300
    assert m.queue_size() == 1
    assert m.expired_channels(now_ms=300) == [3]


@pytest.mark.parametrize("quota_type", ["produce", "request"])
def test_unrecord_if_is_refused_where_nothing_is_unrecorded(quota_type: str) -> None:
    m = kquota.QuotaManager(quota_type)
    m.set_quota(kquota.Entity(user="u"), 100.0)
    with pytest.raises(kquota.InvalidUsageError, match=f"unrecord_if given to a {quota_type}"):
        m.record_batch(
            np.array([0]), np.array([0]), np.array([1.0]), [("u", "c")], np.array([True])
        )
    assert m.sensor_count() == 0


def test_default_clock_is_kafkas_epoch_clock_so_a_new_mutation_bucket_is_full() -> None:
    # Kafka's brokers read wall-clock milliseconds; the core's default clock has the same
    # origin (then advances monotonically), so a client's first mutations see a full bucket.
    assert abs(kquota.monotonic_ms() - time.time_ns() // 1_000_000) < 60_000
    m = kquota.ControllerMutationQuotaManager()
    m.set_quota(kquota.Entity(user="u"), 10.0)
    assert m.record("u", "c", 1.0) == 0
    tokens = m.tokens("u", "c")
    # 11 samples x 1 s x 10 partitions/s, less the one recorded, plus what refilled since
    # (at most back to the burst); a clock that started with the process would give about -1.
    assert tokens is not None and 109.0 <= tokens <= 110.0
