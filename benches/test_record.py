"""Python ``QuotaManager.record``: kquota against the pure-Python reference model of the
same semantics (tests/reference_model.py), one entity and 10 000 entities.

Each timed round makes ``CALLS`` calls in a plain loop, so timer overhead is amortized;
the loop's own cost is in both numbers and lowers the ratio a little.
"""

from __future__ import annotations

from typing import Any

import kquota
import pytest
import reference_model

KEYS = 10_000
CALLS = 1000
BACKENDS = {"kquota": kquota, "baseline": reference_model}


def make_manager(backend: Any) -> Any:
    manager = backend.QuotaManager("produce")
    manager.set_quota(backend.Entity(client_id=backend.DEFAULT), 1e12)
    return manager


def run_benchmark(benchmark: Any, group: str, role: str, clients: list[str]) -> None:
    benchmark.group = group
    benchmark.extra_info["role"] = role
    benchmark.extra_info["calls"] = CALLS
    manager = make_manager(BACKENDS[role])
    for c in clients:  # every sensor exists before timing starts
        manager.record("alice", c, 100.0, 0)
    record = manager.record
    rounds = iter(range(10**9))

    def run() -> None:
        base = next(rounds) * CALLS
        for i in range(base, base + CALLS):
            record("alice", clients[i % len(clients)], 100.0, i // 64)

    benchmark.pedantic(run, rounds=300 if role == "kquota" else 30, warmup_rounds=3)


@pytest.mark.parametrize("role", ["kquota", "baseline"])
def test_record_one_entity(benchmark: Any, role: str) -> None:
    run_benchmark(benchmark, "record_one_entity", role, ["app-1"])


@pytest.mark.parametrize("role", ["kquota", "baseline"])
def test_record_10k_entities(benchmark: Any, role: str) -> None:
    run_benchmark(benchmark, "record_10k_entities", role, [f"client-{i}" for i in range(KEYS)])
