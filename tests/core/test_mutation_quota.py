"""KIP-599 (controller-mutation token bucket) and KIP-612 (connection-creation rates)
through ``kquota``: Kafka's numbers, bad input, and real threads sharing one object."""

from __future__ import annotations

import threading
from functools import partial

import kquota
import pytest
from delivery import run_all
from kquota.exceptions import InvalidQuotaError, InvalidUsageError, InvalidValueError

T0 = 1_700_000_000_000  # a wall-clock time: a new bucket is full at it


def test_token_bucket_kafka_record_test() -> None:
    """TokenBucketTest.testRecord: quota 5, 10 x 2 s (burst 100)."""
    bucket = kquota.TokenBucket(5.0, num_samples=10, window_ms=2000)
    assert bucket.burst == 100.0
    assert bucket.measure(T0) == 100.0
    bucket.record(60, T0)
    assert bucket.measure(T0) == 40.0
    bucket.record(5, T0 + 2000)
    assert bucket.measure(T0 + 2000) == 45.0
    bucket.record(60, T0 + 4000)
    assert bucket.measure(T0 + 4000) == -5.0
    assert bucket.state == (-5.0, T0 + 4000)
    assert kquota._core.token_bucket_throttle_time(-5.0, 10.0) == 500


def test_strict_request_quota_refuses_once_overdrawn() -> None:
    """StrictControllerMutationQuotaTest: 90, 90 accepted, the third refused with 8000 ms,
    3000 ms left 5 s later."""
    manager = kquota.ControllerMutationQuotaManager(num_samples=10)
    manager.set_quota(kquota.Entity(user="ANONYMOUS", client_id="test-client"), 10.0)
    quota = manager.request_quota("ANONYMOUS", "test-client", True)
    assert quota.record(90, T0).accepted
    assert quota.record(90, T0).accepted
    refused = quota.record(90, T0)
    assert (refused.accepted, refused.violated, refused.throttle_ms) == (False, True, 8000)
    assert quota.is_exceeded
    assert quota.throttle_time(T0 + 5000) == 3000


def test_permissive_request_quota_accepts_and_throttles() -> None:
    manager = kquota.ControllerMutationQuotaManager(num_samples=10)
    manager.set_quota(kquota.Entity(user="ANONYMOUS", client_id="test-client"), 10.0)
    quota = manager.request_quota("ANONYMOUS", "test-client", False)
    throttles = [quota.record(90, T0).throttle_ms for _ in range(3)]
    assert throttles == [0, 8000, 17000]
    assert not quota.is_exceeded
    assert quota.throttle_time(T0 + 5000) == 12000


def test_manager_precedence_versions_and_disabled_state() -> None:
    manager = kquota.ControllerMutationQuotaManager()
    assert not manager.enabled
    assert manager.record("u", "c", 1e9, T0) == 0
    assert manager.sensor_count == 0
    manager.set_quota(kquota.Entity(user=kquota.DEFAULT), 2.0)
    manager.set_quota(kquota.Entity(user="alice"), 5.0)
    assert manager.tags("alice", "app") == ("alice", "")
    assert manager.quota_for("bob", "app") == 2.0
    # Default windows: 11 x 1 s, so alice's bucket holds 55 partitions.
    assert manager.tokens("alice", "app", T0) is None
    assert manager.record_for("create_topics", 6, "alice", "app", 60, T0).accepted
    assert manager.tokens("alice", "app", T0) == -5.0
    refused = manager.record_for("create_topics", 6, "alice", "app", 1, T0)
    assert not refused.accepted and refused.throttle_ms == 1000
    permissive = manager.record_for("create_topics", 5, "alice", "app", 1, T0)
    assert permissive.accepted and permissive.throttle_ms == 1200
    assert kquota.mutation_is_strict("create_partitions", 3)
    assert not kquota.mutation_is_strict("delete_topics", 4)
    assert manager.sensor_names() == [
        "ControllerMutation-alice:",
        "ControllerMutationThrottleTime-alice:",
    ]


def test_bad_input_names_the_value_and_changes_nothing() -> None:
    manager = kquota.ControllerMutationQuotaManager()
    entity = kquota.Entity(user="u")
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidQuotaError):
            manager.set_quota(entity, bad)
    assert not manager.enabled
    manager.set_quota(entity, 10.0)
    manager.record_strict("u", "c", 3, T0)
    before = manager.tokens("u", "c", T0)
    for permits in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InvalidUsageError, match="permits"):
            manager.record_strict("u", "c", permits, T0)
        with pytest.raises(InvalidUsageError, match="permits"):
            manager.record_permissive("u", "c", permits, T0)
    with pytest.raises(InvalidUsageError, match="alter_topics"):
        manager.record_for("alter_topics", 1, "u", "c", 1, T0)  # type: ignore[arg-type]
    assert manager.tokens("u", "c", T0) == before == 107.0
    with pytest.raises(TypeError, match="permits"):
        manager.record("u", "c", "3", T0)  # type: ignore[arg-type]

    quotas = kquota.ConnectionQuotas(num_samples=2)
    quotas.add_listener("EXTERNAL")
    for ip, rate in (("not-an-ip", 5), ("300.1.1.1", 5), ("10.0.0.1", 0), ("10.0.0.1", -3)):
        with pytest.raises(InvalidUsageError) as info:
            quotas.set_ip_quota(ip, rate)
        assert str(rate) in str(info.value) or ip in str(info.value)
    with pytest.raises(InvalidUsageError, match="NOPE"):
        quotas.on_new_connection("NOPE", "10.0.0.1", T0)
    with pytest.raises(InvalidValueError):
        quotas.set_broker_max_rate(2**40)
    assert quotas.ip_quotas() == ([], None)
    assert quotas.broker_rate(T0) == 0.0


def test_connection_ip_quota_kafka_enforced_update() -> None:
    """ConnectionQuotasTest.testEnforcedIpConnectionRateQuotaUpdate, on a frozen clock."""
    quotas = kquota.ConnectionQuotas(num_samples=2, inter_broker_listener="REPLICATION")
    for listener in ("EXTERNAL", "REPLICATION", "ADMIN"):
        quotas.add_listener(listener)
    quotas.set_ip_quota("192.168.1.1", 20)

    def accepted() -> int:
        n = 0
        while n < 40:
            if quotas.on_new_connection("EXTERNAL", "192.168.1.1", T0).ip_throttle_ms:
                break
            n += 1
        return n

    assert accepted() == 20
    decision = quotas.on_new_connection("EXTERNAL", "192.168.1.1", T0)
    assert (decision.accept_delay_ms, decision.ip_throttle_ms) == (0, 50)
    quotas.set_ip_quota("192.168.1.1", 30)
    assert accepted() == 10
    quotas.set_ip_quota("192.168.1.1", None)
    assert accepted() == 40
    assert quotas.ip_quota("192.168.1.1") == kquota.UNLIMITED_CONNECTION_RATE
    assert quotas.ip_rate("192.168.1.1", T0) == 30.0


def test_broker_limit_delays_acceptors_except_the_protected_listener() -> None:
    quotas = kquota.ConnectionQuotas(
        num_samples=2, max_connection_creation_rate=2, inter_broker_listener="REPLICATION"
    )
    quotas.add_listener("EXTERNAL")
    quotas.add_listener("REPLICATION")
    delays = [quotas.accept_delay("EXTERNAL", T0) for _ in range(3)]
    assert delays == [0, 0, 500]
    assert quotas.accept_delay("REPLICATION", T0) == 0
    assert quotas.listener_throttle_avgs("EXTERNAL", T0)[0] == 500.0


def test_threads_share_a_bucket_and_connection_quotas() -> None:
    """Eight threads on one manager and one ConnectionQuotas at a frozen instant: a full
    bucket of 100 accepts exactly 101 strict permits, and an IP quota of 20 admits exactly
    20 connections, whatever the interleaving."""
    manager = kquota.ControllerMutationQuotaManager(num_samples=10)
    manager.set_quota(kquota.Entity(user="u"), 10.0)
    quotas = kquota.ConnectionQuotas(num_samples=2)
    quotas.add_listener("EXTERNAL")
    quotas.set_ip_quota("10.0.0.1", 20)
    accepted: list[int] = []
    admitted: list[int] = []
    start = threading.Barrier(8)

    def work(k: int) -> None:
        start.wait()
        ok = sum(manager.record_strict("u", f"c{k}", 1, T0).accepted for _ in range(200))
        ip = sum(
            quotas.on_new_connection("EXTERNAL", "10.0.0.1", T0).ip_throttle_ms == 0
            for _ in range(200)
        )
        accepted.append(ok)
        admitted.append(ip)

    assert run_all(partial(work, k) for k in range(8)) == []
    assert sum(accepted) == 101
    assert manager.tokens("u", "x", T0) == -1.0
    assert sum(admitted) == 20
    assert quotas.broker_rate(T0) == 20.0
