"""``kafka_version``: the managers follow the Kafka release they are told where releases
differ, and refuse a release they cannot name. Kafka's own classes of each release answer
the same operations in ``test_kafka_oracle.py``; these tests pin each difference on its
own, on the public API."""

from __future__ import annotations

import re

import kquota
import numpy as np
import pytest
from kquota import Entity

T0 = 1_700_000_000_000


@pytest.mark.parametrize(("given", "shown"), [(None, "4.1"), ("4.4", "4.4"), ("4.2.0", "4.2")])
def test_the_release_is_given_or_41(given: str | None, shown: str) -> None:
    assert kquota.QuotaManager("produce", kafka_version=given).kafka_version == shown
    assert kquota.ControllerMutationQuotaManager(kafka_version=given).kafka_version == shown


@pytest.mark.parametrize("bad", ["", "4", "four.one", "4.1.x", "3.7", "4.1.0.1"])
def test_a_release_that_is_not_one_is_refused_by_name(bad: str) -> None:
    with pytest.raises(
        kquota.InvalidConfigError, match=re.escape(f'invalid Kafka version "{bad}"')
    ):
        kquota.QuotaManager("produce", kafka_version=bad)
    with pytest.raises(
        kquota.InvalidConfigError, match=re.escape(f'invalid Kafka version "{bad}"')
    ):
        kquota.ControllerMutationQuotaManager(kafka_version=bad)


def test_a_release_that_is_not_text_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="kafka_version"):
        kquota.QuotaManager("produce", kafka_version=4.4)  # type: ignore[arg-type]


# 3,000,000 B on a fresh 11 x 1 s sensor is 300,000 B/s: at 1 B/s Kafka's throttle is
# (300,000 - 1) / 1 * 10,000 ms, beyond 2**31 - 1: its low 32 bits, or 2**31 - 1.
BEYOND = 2_999_990_000


@pytest.mark.parametrize(("release", "throttle"), [("4.1", BEYOND - 2**32), ("4.4", 2**31 - 1)])
def test_a_throttle_past_the_int_range_wraps_before_44_and_saturates_from_44(
    release: str, throttle: int
) -> None:
    m = kquota.QuotaManager("produce", kafka_version=release)
    m.set_quota(Entity(client_id="c1"), 1.0)
    got = m.record("alice", "c1", 3_000_000.0, T0)
    assert got == throttle


def test_a_request_throttle_is_capped_at_a_window_in_every_release() -> None:
    for release in ("4.1", "4.4"):
        m = kquota.QuotaManager("request", kafka_version=release)
        m.set_quota(Entity(client_id="c1"), 0.01)
        assert m.record("alice", "c1", 1e12, T0) == 1000


@pytest.mark.parametrize("release", ["4.1", "4.2", "4.4"])
def test_removing_the_last_quota_turns_its_level_off_from_42(release: str) -> None:
    m = kquota.QuotaManager("produce", kafka_version=release)
    m.set_quota(Entity(user="alice"), 100.0)
    assert m.tags("alice", "c1") == ("alice", "")
    m.remove_quota(Entity(user="alice"))
    tracked = release != "4.1"
    assert m.enabled is not tracked
    # with no level on, clients are tagged by client id (Kafka's "no quotas" tags)
    assert m.tags("alice", "c1") == (("", "c1") if tracked else ("alice", ""))
    assert m.record("alice", "c1", 1e9, T0) == 0
    assert m.sensor_names() == ([] if tracked else ["Produce-alice:", "ProduceThrottleTime-alice:"])


@pytest.mark.parametrize("release", ["4.1", "4.4"])
def test_removing_a_quota_that_does_not_exist_enables_its_level_only_before_42(
    release: str,
) -> None:
    m = kquota.QuotaManager("fetch", kafka_version=release)
    m.remove_quota(Entity(user="alice", client_id="c1"))
    assert m.enabled is (release == "4.1")


@pytest.mark.parametrize(("release", "remaining"), [("4.1", -1), ("4.2", 0)])
def test_a_mutation_throttle_past_the_int_range_is_cast_before_its_clamp_from_42(
    release: str, remaining: int
) -> None:
    m = kquota.ControllerMutationQuotaManager(kafka_version=release)
    m.set_quota(Entity(client_id="c1"), 1e-300)
    quota = m.request_quota("alice", "c1", False, T0)
    check = quota.record(1e300, T0)
    assert check.violated and quota.last_throttle_ms == 2**63 - 1
    assert quota.throttle_time(T0) == remaining


def test_recommendations_take_the_release() -> None:
    times = np.arange(0, 20_000, 100, dtype=np.int64)
    usage = np.full(times.size, 1_000.0)
    runs = np.array([0, times.size], dtype=np.int64)
    entities = np.array([0, 1], dtype=np.int64)
    for release in ("4.1", "4.4"):
        quotas, fractions = kquota._core.recommend_quotas(
            "produce", times, usage, runs, entities, target=0.01, kafka_version=release
        )
        assert quotas.size == 1 and fractions[0] <= 0.01
    with pytest.raises(kquota.InvalidConfigError, match='invalid Kafka version "4"'):
        kquota._core.recommend_quotas(
            "produce", times, usage, runs, entities, target=0.01, kafka_version="4"
        )
