"""The pure-Python reference model on the spec's worked examples and edge cases."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import numpy as np
import pytest
import reference_model as model


def test_fresh_sensor_pads_to_ten_windows() -> None:
    rate = model.SampledRate()
    rate.record_no_check(600.0, now_ms=0)
    assert rate.measure(now_ms=0) == 60.0

    manager = model.QuotaManager("produce")
    manager.set_quota(model.Entity(user="alice"), 1024.0)
    assert manager.record("alice", "app1", 600.0, now_ms=0) == 0
    assert manager.measure("alice", "app1", now_ms=0) == 60.0
    assert manager.tags("alice", "app1") == ("alice", "")


def test_kafka_unit_test_example_throttles_2100_ms() -> None:
    manager = model.QuotaManager("produce")
    manager.set_quota(model.Entity(client_id=model.DEFAULT), 500.0)
    for second in range(10):
        assert manager.record("ANONYMOUS", "unknown", 400.0, now_ms=second * 1000) == 0
    assert manager.record("ANONYMOUS", "unknown", 2300.0, now_ms=10_500) == 2100
    assert manager.measure("ANONYMOUS", "unknown", now_ms=10_500) == 600.0


def test_kip13_example_throttles_3000_ms() -> None:
    mib = 1024.0 * 1024.0
    manager = model.QuotaManager("produce")
    manager.set_quota(model.Entity(user="u"), 5 * mib)
    for tick in range(100):
        assert manager.record("u", "c", mib / 2, now_ms=tick * 100) == 0
    assert manager.record("u", "c", 15 * mib, now_ms=10_000) == 3000
    assert manager.measure("u", "c", now_ms=10_000) == 6.5 * mib


def test_clock_going_backwards_truncates_the_window_count() -> None:
    rate = model.SampledRate()
    rate.record_no_check(100.0, now_ms=5000)
    # elapsed = -2500 ms: Java's division gives -2 whole windows (flooring would give -3),
    # so the window is (11 - 1) * 1000 - 500 = 9500 ms.
    assert rate.measure(now_ms=2500) == 100.0 / 9.5


def test_throttle_rounds_ties_toward_positive_infinity() -> None:
    # 17 B/s against 16 B/s over a 1000 ms window: (1/16) * 1000 = 62.5 exactly.
    check = model.SampledRate(num_samples=2, window_ms=1000, quota=16.0).record(17.0, now_ms=0)
    assert (check.violated, check.rate) == (True, 17.0)
    assert check.throttle_ms == 63  # Java's Math.round; Python's round() would give 62


def test_throttle_saturates_at_long_max() -> None:
    check = model.SampledRate(num_samples=2, window_ms=1000, quota=1.0).record(1.7e308, 0)
    assert check.violated
    assert check.throttle_ms == 2**63 - 1


def test_nan_rate_is_a_violation_with_zero_throttle() -> None:
    rate = model.SampledRate(num_samples=2, window_ms=1000, quota=1.0)
    for value, now_ms in [(1.7e308, 0), (1.7e308, 0), (-1.7e308, 1000), (-1.7e308, 1000)]:
        rate.record_no_check(value, now_ms)  # the first sample overflows to +inf, the next to -inf
    check = rate.record(0.0, now_ms=1000)
    assert check.rate is not None
    assert math.isnan(check.rate)
    assert (check.violated, check.throttle_ms) == (True, 0)


def test_produce_throttle_wraps_to_32_bits() -> None:
    manager = model.QuotaManager("produce")
    manager.set_quota(model.Entity(user="tiny"), 0.001)
    rate = model.SampledRate(quota=0.001)
    assert manager.record("tiny", "c", 1.0, now_ms=2) == rate.record(1.0, 2).throttle_ms == 990_000
    long_throttle = rate.record(1e6, 3).throttle_ms
    assert long_throttle > 2**31
    assert manager.record("tiny", "c", 1e6, now_ms=3) == -726_389_969
    assert (long_throttle + 2**31) % 2**32 - 2**31 == -726_389_969


def test_request_throttle_is_capped_at_one_window() -> None:
    manager = model.QuotaManager("request")
    manager.set_quota(model.Entity(user="u", client_id="c"), 1.0)
    assert manager.record("u", "c", 500_000_000, now_ms=0) == 1000  # 5 % of a thread, uncapped 40 s
    assert manager.measure("u", "c", now_ms=0) == 5.0


def test_sensor_expiry_is_strict() -> None:
    manager = model.QuotaManager("produce")
    manager.set_quota(model.Entity(user="u"), 1000.0)
    for value, now_ms in [(20_000.0, 0), (100.0, 500)]:
        throttle = manager.record("u", "c", value, now_ms)
        manager.throttle("u", "c", throttle, now_ms)
    assert manager.expire_sensors(now_ms=3_600_500) == []
    assert manager.expire_sensors(now_ms=3_600_501) == ["Produce-u:", "ProduceThrottleTime-u:"]
    assert manager.sensor_names() == []


def test_delay_queue_releases_by_end_time_then_insertion() -> None:
    manager = model.QuotaManager("fetch")
    manager.set_quota(model.Entity(user="u"), 1.0)
    assert manager.throttle("u", "c", 100, now_ms=0, channel=1) == 100
    assert manager.throttle("u", "c", 50, now_ms=50, channel=2) == 100
    assert manager.throttle("u", "c", 40, now_ms=50, channel=3) == 90
    assert manager.queue_size() == 3
    assert manager.expired_channels(now_ms=89) == []
    assert manager.expired_channels(now_ms=100) == [3, 1, 2]
    assert manager.queue_size() == 0


def test_sanitize_user_follows_java_url_encoding() -> None:
    assert model.sanitize_user("alice smith*") == "alice%20smith%2A"
    assert model.sanitize_user("<default>") == "%3Cdefault%3E"
    assert model.sanitize_user("a+b~é.-_") == "a%2Bb%7E%C3%A9.-_"


def test_nothing_is_recorded_until_a_quota_is_touched() -> None:
    manager = model.QuotaManager("produce")
    assert manager.record("u", "c", 1e9, now_ms=0) == 0
    assert manager.max_value_in_quota_window("u", "c", now_ms=0) == sys.float_info.max
    assert manager.sensor_names() == []
    manager.remove_quota(model.Entity(user="nobody"))  # removing an absent quota enables
    assert manager.enabled
    assert manager.tags("u", "c") == ("u", "")
    assert manager.record("u", "c", 100.0, now_ms=0) == 0
    assert manager.bound("u", "c") == model.UNLIMITED


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf])
def test_bad_quota_is_rejected_and_changes_nothing(bad: float) -> None:
    manager = model.QuotaManager("produce")
    with pytest.raises(model.InvalidQuotaError, match="quota"):
        manager.set_quota(model.Entity(user="u"), bad)
    assert not manager.enabled
    assert manager.quotas() == []
    with pytest.raises(model.InvalidQuotaError):
        model.SampledRate(quota=bad)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_bad_usage_is_rejected_and_changes_nothing(bad: float) -> None:
    manager = model.QuotaManager("produce")
    manager.set_quota(model.Entity(user="u"), 100.0)
    for call in (manager.record, manager.unrecord, manager.record_no_throttle):
        with pytest.raises(model.InvalidUsageError, match="usage"):
            call("u", "c", bad, 0)
    assert manager.sensor_names() == []
    with pytest.raises(model.InvalidUsageError, match="throttle_ms"):
        manager.throttle("u", "c", 0, now_ms=0)
    assert manager.queue_size() == 0


def test_sampled_rate_takes_negative_but_not_nonfinite_values() -> None:
    rate = model.SampledRate()
    rate.record_no_check(-100.0, now_ms=0)
    assert rate.measure(now_ms=0) == -10.0
    with pytest.raises(model.InvalidUsageError):
        rate.record(math.nan, now_ms=0)


@pytest.mark.parametrize(
    "make",
    [
        model.Entity,
        lambda: model.SampledRate(num_samples=0),
        lambda: model.SampledRate(window_ms=0),
        lambda: model.QuotaManager("produce", window_ms=1500),
        lambda: model.QuotaManager("produce", sensor_expiry_ms=-1),
        lambda: model.QuotaManager("bytes"),  # type: ignore[arg-type]
    ],
)
def test_bad_configuration_is_rejected(make: Callable[[], object]) -> None:
    with pytest.raises(model.InvalidConfigError):
        make()


def test_record_batch_equals_one_record_at_a_time() -> None:
    keys = [("u", "a"), ("u", "b"), ("v", "a")]
    rng = np.random.default_rng(7)
    times = np.cumsum(rng.integers(0, 40, size=400)).astype(np.int64)
    index = rng.integers(0, len(keys), size=400).astype(np.int64)
    values = rng.pareto(1.5, size=400) * 500.0
    drop = rng.random(400) < 0.1

    def manager() -> model.QuotaManager:
        fetch = model.QuotaManager("fetch")
        fetch.set_quota(model.Entity(user=model.DEFAULT), 20_000.0)
        return fetch

    batch = manager()
    throttles = batch.record_batch(times, index, values, keys, drop)
    single = manager()
    expected = []
    for now, key, value, unrecord in zip(times, index, values, drop, strict=True):
        user, client = keys[key]
        throttle = single.record(user, client, value, int(now))
        if throttle > 0 or unrecord:
            single.unrecord(user, client, value, int(now))
        expected.append(throttle)
    assert throttles.dtype == np.int32
    assert throttles.tolist() == expected
    assert any(expected)
    for user, client in keys:
        assert batch.measure(user, client, 20_000) == single.measure(user, client, 20_000)
