"""The quota-value metric costs nothing per request: ``QuotaManager.record`` with a
registered collector that has ``quota_value_metric`` on ("kquota") against the same with
it off ("baseline"), 10 000 entities; the ratio should be 1. A second group measures what
the switch does cost: one scrape (collect and text exposition) of 10 000 entities (no
ratio is reported for it).

Each timed round of ``record`` makes ``CALLS`` calls over a list of argument tuples built
before the round (the loop shape of benches/test_record.py), so timer overhead is
amortized and the loop adds little.
"""

from __future__ import annotations

from typing import Any

import kquota
import pytest
from kquota.broker import QuotaCollector
from prometheus_client import CollectorRegistry, generate_latest
from quick import pick

KEYS = 10_000
CALLS = 10_000
ENABLED = {"kquota": True, "baseline": False}


def make_manager() -> tuple[kquota.QuotaManager, list[str]]:
    manager = kquota.QuotaManager("produce")
    manager.set_quota(kquota.Entity(client_id=kquota.DEFAULT), 1e12)
    clients = [f"client-{i}" for i in range(KEYS)]
    for c in clients:  # every sensor exists before timing starts
        manager.record("alice", c, 100.0, 0)
    return manager, clients


def registry_for(manager: kquota.QuotaManager, role: str) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(QuotaCollector(manager, quota_value_metric=ENABLED[role], clock=lambda: 0))
    return registry


@pytest.mark.parametrize("role", ["kquota", "baseline"])
def test_record_with_quota_value_metric(benchmark: Any, role: str) -> None:
    benchmark.group = "record_quota_value_metric_on_vs_off"
    benchmark.extra_info["role"] = role
    benchmark.extra_info["calls"] = CALLS
    manager, clients = make_manager()
    registry = registry_for(manager, role)
    assert generate_latest(registry)  # the collector is live and has been scraped once
    starts = iter(range(0, 10**12, CALLS))

    def setup() -> tuple[tuple[list[tuple[str, str, float, int]]], dict[str, Any]]:
        start = next(starts)
        args = [("alice", clients[k % KEYS], 100.0, k // 64) for k in range(start, start + CALLS)]
        return (args,), {}

    def run(args: list[tuple[str, str, float, int]]) -> None:
        record = manager.record
        for u, c, v, t in args:
            record(u, c, v, t)

    benchmark.pedantic(run, setup=setup, rounds=pick(100, 20), warmup_rounds=pick(2, 1))


@pytest.mark.parametrize("role", ["kquota", "baseline"])
def test_scrape_with_quota_value_metric(benchmark: Any, role: str) -> None:
    # No "role": this group is information (what the switch costs per scrape), not a
    # kquota-against-baseline ratio for the README table.
    benchmark.group = "scrape_10k_entities_quota_value_on_vs_off"
    benchmark.extra_info["quota_value_metric"] = ENABLED[role]
    manager, _ = make_manager()
    registry = registry_for(manager, role)
    body = benchmark.pedantic(
        generate_latest, args=(registry,), rounds=pick(10, 3), warmup_rounds=1
    )
    assert body.count(b"kafka_server_produce_quota_value{") == (KEYS if ENABLED[role] else 0)
