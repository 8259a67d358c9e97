"""kquota.ReplayKernel's controller mutations (kind 3) through the binding: the throttles and
refusals equal a ControllerMutationQuotaManager fed the same sequence, the mutation columns
are optional, and bad mutation columns are refused naming the value."""

from __future__ import annotations

import numpy as np
import pytest
from kquota import (
    DEFAULT,
    ControllerMutationQuotaManager,
    Entity,
    InvalidUsageError,
    QuotaManager,
    ReplayKernel,
    RequestPath,
)

T0 = 1_700_000_000_000
PAIRS = [("alice", "app"), ("bob", "app")]


def _path() -> RequestPath:
    return RequestPath(QuotaManager("produce"), QuotaManager("fetch"), QuotaManager("request"))


def _kernel(manager: ControllerMutationQuotaManager) -> ReplayKernel:
    k = ReplayKernel(PAIRS, [_path()], expiry_task_ms=None)
    k.set_mutation_manager(0, manager)
    return k


def test_mutations_equal_the_manager() -> None:
    def manager() -> ControllerMutationQuotaManager:
        m = ControllerMutationQuotaManager()
        m.set_quota(Entity(user=DEFAULT), 3.0)
        return m

    # a deterministic sequence: bursts that overdraw, strict and permissive, two clients
    times = np.array([T0 + 250 * (i // 2) for i in range(40)], dtype=np.int64)
    pair = np.array([i % 2 for i in range(40)], dtype=np.int32)
    partitions = np.array([(7 * i) % 23 for i in range(40)], dtype=np.int32)
    strict = np.array([i % 3 != 0 for i in range(40)], dtype=np.bool_)
    n = len(times)
    out = _kernel(manager()).feed(
        times,
        pair,
        np.full(n, 3, dtype=np.int8),
        np.zeros(n),
        np.full(n, np.nan),
        np.full(n, -1, dtype=np.int16),
        partitions,
        strict,
    )
    reference = manager()
    expected_throttle, expected_refused = [], []
    for t, p, parts, s in zip(times, pair, partitions, strict, strict=True):
        user, client = PAIRS[p]
        record = reference.record_strict if s else reference.record_permissive
        check = record(user, client, float(parts), now_ms=int(t))
        expected_throttle.append(check.throttle_ms if check.violated else 0)
        expected_refused.append(0 if check.accepted else int(parts))
    assert out["mutation_throttle_ms"].tolist() == expected_throttle
    assert out["refused_partitions"].tolist() == expected_refused
    assert out["throttle_ms"].tolist() == expected_throttle
    by = [3 if t > 0 else -1 for t in expected_throttle]
    assert out["throttled_by"].tolist() == by
    assert sum(r > 0 for r in expected_refused) >= 3
    assert sum(t > 0 for t, s in zip(expected_throttle, strict, strict=True) if not s) >= 3


def test_mutation_columns_are_optional_and_checked() -> None:
    m = ControllerMutationQuotaManager()
    m.set_quota(Entity(user="alice"), 1.0)
    k = _kernel(m)
    one = dict(
        time_ms=np.array([T0], dtype=np.int64),
        pair=np.array([0], dtype=np.int32),
        bytes=np.zeros(1),
        thread_ns=np.full(1, np.nan),
        acks=np.full(1, -1, dtype=np.int16),
    )
    out = k.feed(kind=np.array([2], dtype=np.int8), **one)
    assert out["mutation_throttle_ms"].tolist() == [0]
    with pytest.raises(InvalidUsageError, match="no partitions and strict columns"):
        k.feed(kind=np.array([3], dtype=np.int8), **one)
    with pytest.raises(InvalidUsageError, match="invalid partitions -2 at row 0"):
        k.feed(
            kind=np.array([3], dtype=np.int8),
            partitions=np.array([-2], dtype=np.int32),
            strict=np.array([True]),
            **one,
        )
    assert k.mutation_tokens(0, 0, T0) is None
    out = k.feed(
        kind=np.array([3], dtype=np.int8),
        partitions=np.array([20], dtype=np.int32),
        strict=np.array([False]),
        **one,
    )
    assert out["mutation_throttle_ms"].tolist() == [9000]  # 20 - 11 tokens at 1/s
    assert k.mutation_tokens(0, 0, T0) == -9.0


def test_topics_are_recorded_one_by_one_as_a_request_quota_does() -> None:
    """Per-topic counts: a strict request's later topics are refused once an earlier one
    overdrew the bucket; the expected values come from MutationRequestQuota, the path the
    proxy takes, fed topic by topic."""

    def manager() -> ControllerMutationQuotaManager:
        m = ControllerMutationQuotaManager()
        m.set_quota(Entity(user=DEFAULT), 2.0)  # a burst of 22 partitions
        return m

    requests = [  # (dt, pair, topics, strict)
        (0, 0, [10, 15, 4, 1], True),  # the 2nd topic overdraws: 4 and 1 refused
        (0, 1, [5, 5], False),
        (300, 0, [3], True),  # still overdrawn: refused
        (0, 1, [30, 2, 2], False),  # permissive: recorded whole, throttled
        (9000, 0, [6, 0, 7], True),
        (0, 0, [], True),
    ]
    times, topics_of, offsets, flat = [], [], [0], []
    t = T0
    for dt, _, topics, _ in requests:
        t += dt
        times.append(t)
        topics_of.append(topics)
        flat.extend(topics)
        offsets.append(len(flat))
    n = len(requests)
    out = _kernel(manager()).feed(
        np.array(times, dtype=np.int64),
        np.array([r[1] for r in requests], dtype=np.int32),
        np.full(n, 3, dtype=np.int8),
        np.zeros(n),
        np.full(n, np.nan),
        np.full(n, -1, dtype=np.int16),
        np.array([sum(r[2]) for r in requests], dtype=np.int32),
        np.array([r[3] for r in requests], dtype=np.bool_),
        topic_offsets=np.array(offsets, dtype=np.int32),
        topic_partitions=np.array(flat, dtype=np.int32),
    )
    reference = manager()
    expected_throttle, expected_refused = [], []
    for now, (_, p, topics, strict) in zip(times, requests, strict=True):
        quota = reference.request_quota(*PAIRS[p], strict)
        refused = 0
        for permits in topics or [0]:
            if not quota.record(float(permits), now_ms=now).accepted:
                refused += permits
        expected_throttle.append(quota.throttle_time(now_ms=now))
        expected_refused.append(refused)
    assert out["refused_partitions"].tolist() == expected_refused
    assert out["mutation_throttle_ms"].tolist() == expected_throttle
    assert expected_refused[0] == 5 and expected_refused[2] == 3
    assert expected_throttle[3] > 0
    with pytest.raises(InvalidUsageError, match="sum to 1, not its partitions 2"):
        _kernel(manager()).feed(
            np.array([T0], dtype=np.int64),
            np.zeros(1, dtype=np.int32),
            np.full(1, 3, dtype=np.int8),
            np.zeros(1),
            np.full(1, np.nan),
            np.full(1, -1, dtype=np.int16),
            np.array([2], dtype=np.int32),
            np.array([True]),
            topic_offsets=np.array([0, 1], dtype=np.int32),
            topic_partitions=np.array([1], dtype=np.int32),
        )
