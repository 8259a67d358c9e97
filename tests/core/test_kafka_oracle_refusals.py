"""Where kquota refuses what Apache Kafka's quota classes take: values Kafka's controller
and broker never hand the quota managers (section 4.1 of the spec). Kafka's classes take
them and answer something; kquota raises and changes nothing. Each test shows both answers
(the ``oracle`` fixture is in ``tests/core/conftest.py``)."""

from __future__ import annotations

import math
from typing import Any, Final

import kquota
import pytest
from kafka_oracle import KafkaOracle, from_bits, release
from oracle_traces import DEFAULT, Trace

T0: Final = 1_700_000_000_000


def _kafka(
    oracle: KafkaOracle, family: str, config: dict[str, Any], ops: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    (answers,) = oracle.run([Trace(family, config, T0, ops).wire()])
    assert not [a for a in answers if "err" in a], answers
    return answers


@pytest.mark.parametrize(
    ("quota", "kafka_throttle"),
    [
        # (60 - 0) / 0 * 10000 = inf: Math.round gives Long.MAX, the int -1 from 3.8 (the
        # oldest release kquota follows); from 4.4 capped at Integer.MAX first
        (0.0, {(3, 8): -1, (4, 4): 2**31 - 1}),
        (-0.0, 0),  # -inf: Long.MIN, the int 0
        (-1.0, -610_000),  # 60 > -1: (60 + 1) / -1 * 10000
        (math.nan, 0),  # never acceptable; Math.round(NaN) is 0
        (math.inf, 0),  # always acceptable
        (-math.inf, 0),  # violated; (60 + inf) / -inf is NaN
    ],
)
def test_kafka_takes_quotas_kquota_refuses(
    oracle: KafkaOracle, quota: float, kafka_throttle: int | dict[tuple[int, int], int]
) -> None:
    """A quota <= 0, NaN or infinite: Kafka's manager enforces it (600 B on a fresh
    11 x 1 s sensor measures 60 B/s); kquota's set_quota raises InvalidQuotaError."""
    ops = [
        {"op": "set", "t": T0, "m": "produce", "eu": None, "ec": "D", "q": quota},
        {"op": "record", "t": T0, "m": "produce", "u": "alice", "c": "app1", "v": 600.0},
        {"op": "read", "t": T0, "m": "produce", "u": "alice", "c": "app1", "fields": ["rate"]},
    ]
    answers = _kafka(oracle, "client", {"samples": 11, "window_s": 1}, ops)
    if isinstance(kafka_throttle, dict):
        since = max(r for r in kafka_throttle if r <= release(oracle.version))
        kafka_throttle = kafka_throttle[since]
    assert answers[1] == {"th": kafka_throttle}
    assert from_bits(answers[2]["rate"]) == 60.0
    manager = kquota.QuotaManager("produce", kafka_version=oracle.version)
    with pytest.raises(kquota.InvalidQuotaError):
        manager.set_quota(kquota.Entity(client_id=DEFAULT), quota)
    assert not manager.enabled and manager.quotas() == []


def test_kafka_takes_negative_usage_kquota_refuses(oracle: KafkaOracle) -> None:
    """A negative usage: Kafka records it (the rate goes negative); kquota's record raises
    InvalidUsageError (a negative value is unrecord's, which takes it without a check)."""
    ops = [
        {"op": "set", "t": T0, "m": "produce", "eu": None, "ec": "D", "q": 100.0},
        {"op": "record", "t": T0, "m": "produce", "u": "alice", "c": "app1", "v": -600.0},
        {"op": "read", "t": T0, "m": "produce", "u": "alice", "c": "app1", "fields": ["rate"]},
    ]
    answers = _kafka(oracle, "client", {"samples": 11, "window_s": 1}, ops)
    assert answers[1] == {"th": 0}
    assert from_bits(answers[2]["rate"]) == -60.0
    manager = kquota.QuotaManager("produce")
    manager.set_quota(kquota.Entity(client_id=DEFAULT), 100.0)
    with pytest.raises(kquota.InvalidUsageError):
        manager.record("alice", "app1", -600.0, T0)
    assert manager.measure("alice", "app1", T0) is None


@pytest.mark.parametrize("throttle_ms", [0, -5])
def test_kafka_ignores_throttles_kquota_refuses(oracle: KafkaOracle, throttle_ms: int) -> None:
    """A throttle <= 0: Kafka's throttle does nothing (no sensor, nothing queued); kquota's
    raises InvalidUsageError and does nothing."""
    ops = [
        {"op": "set", "t": T0, "m": "produce", "eu": None, "ec": "D", "q": 100.0},
        {
            "op": "throttle",
            "t": T0,
            "m": "produce",
            "u": "alice",
            "c": "app1",
            "ms": throttle_ms,
            "ch": 1,
        },
        {"op": "qsize", "t": T0, "m": "produce"},
        {"op": "sensors", "t": T0},
    ]
    answers = _kafka(oracle, "client", {"samples": 11, "window_s": 1}, ops)
    assert answers[2:] == [{"n": 0.0}, {"names": []}]
    manager = kquota.QuotaManager("produce")
    manager.set_quota(kquota.Entity(client_id=DEFAULT), 100.0)
    with pytest.raises(kquota.InvalidUsageError):
        manager.throttle("alice", "app1", throttle_ms, T0, channel=1)
    assert manager.queue_size() == 0 and manager.sensor_names() == []


@pytest.mark.parametrize("kind", ["unrecord", "nothrottle"])
def test_unrecord_before_any_quota_is_ignored(oracle: KafkaOracle, kind: str) -> None:
    """Before any quota is set, Kafka's unrecordQuotaSensor and recordNoThrottle create the
    client's sensors and record (its broker never calls them then: a fetch is unrecorded
    only when throttled, network time is recorded only with quotas on); kquota's unrecord
    and record_no_throttle do nothing until quotas are enabled, as its README says."""
    ops = [
        {"op": kind, "t": T0, "m": "fetch", "u": "alice", "c": "app1", "v": 600.0},
        {"op": "sensors", "t": T0},
        {
            "op": "read",
            "t": T0,
            "m": "fetch",
            "u": "alice",
            "c": "app1",
            "fields": ["tags", "rate"],
        },
    ]
    answers = _kafka(oracle, "client", {"samples": 11, "window_s": 1}, ops)
    assert answers[1] == {"names": ["Fetch-:app1", "FetchThrottleTime-:app1"]}
    assert from_bits(answers[2]["rate"]) == (-60.0 if kind == "unrecord" else 60.0)
    manager = kquota.QuotaManager("fetch", kafka_version=oracle.version)
    getattr(manager, "unrecord" if kind == "unrecord" else "record_no_throttle")(
        "alice", "app1", 600.0, T0
    )
    assert manager.sensor_names() == [] and manager.measure("alice", "app1", T0) is None


def test_exempt_request_time_is_kept_by_kafka_only(oracle: KafkaOracle) -> None:
    """Requests exempt from throttling (cluster-internal APIs) go to Kafka's untagged
    exempt-request-time rate, handler and network time alike, once request quotas are on;
    kquota keeps no such metric, and no client's sensor sees them in either."""
    ops = [
        {"op": "set", "t": T0, "m": "request", "eu": "N:alice", "ec": None, "q": 50.0},
        {
            "op": "exempt",
            "t": T0,
            "m": "request",
            "u": "alice",
            "c": "app1",
            "ns": 600_000_000,
            "rid": 0,
        },
        {"op": "network", "t": T0, "m": "request", "rid": 0, "ns": 400_000_000},
        {"op": "exempt_rate", "t": T0},
        {"op": "sensors", "t": T0},
    ]
    answers = _kafka(oracle, "client", {"samples": 11, "window_s": 1}, ops)
    assert answers[2] == {"cb": True}
    # 60 + 40 percent of a thread over the broker's metric windows (2 x 30 s, padded to 30 s).
    assert from_bits(answers[3]["rate"]) == 100.0 / 30.0
    assert answers[4] == {"names": []}
    manager = kquota.QuotaManager("request")
    manager.set_quota(kquota.Entity(user="alice"), 50.0)
    assert manager.sensor_names() == []
