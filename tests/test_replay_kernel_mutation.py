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
