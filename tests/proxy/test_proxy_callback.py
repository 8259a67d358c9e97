"""A custom quota callback (KIP-257) that divides a user quota by 2, honoured by the proxy
and by the back-test, with a real librdkafka client through ``kquota proxy`` in front of
Tansu.

The round trip: ``kquota proxy --quota-callback ... --capture DIR`` holds a producer to
half of its user's quota; every produce request it captured is then replayed through a
built-in manager configured with the halved quota (same throttles, request for request),
and ``kquota backtest --quota-callback ...`` over the capture gives the throttles the
proxy applied, while the same back-test without the callback does not.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import kquota
import paths
import pyarrow.dataset as ds
import pytest
from callbacks.half_user_quota import HalfUserQuota
from kquota import Entity, QuotaManager
from kquota.backtest.outputs import read_requests
from kquota.proxy import ANONYMOUS
from proxy_support import RecordingPlugin, create_topic, produce_greedily, run_proxy

pytestmark = pytest.mark.slow

SPEC = "callbacks.half_user_quota:HalfUserQuota"
TESTS = paths.SUPPORT
QUOTA = 300_000  # producer_byte_rate of the user; the callback makes it 150 000


def _kquota(*args: str) -> list[str]:
    return [sys.executable, "-m", "kquota", *args]


def _env() -> dict[str, str]:
    """This environment with ``tests/`` importable (where the callback module lives)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), env.get("PYTHONPATH")) if p)
    return env


def _produce(bootstrap: str, topic: str, seconds: float) -> list[int]:
    """A greedy producer for ``seconds``; the throttles it was told, in ms."""
    return produce_greedily(bootstrap, topic, seconds, "halved")[1]


def test_proxy_and_backtest_honour_a_callback_that_halves_a_user_quota(
    tansu: Any, tmp_path: Path
) -> None:
    store = tmp_path / "quotas.sqlite"
    subprocess.run(
        _kquota(
            *("configs", "--store", str(store), "--alter"),
            *("--user", ANONYMOUS, "--add-config", f"producer_byte_rate={QUOTA}"),
        ),
        check=True,
        capture_output=True,
        timeout=60,
    )
    capture = tmp_path / "capture"
    proxy = subprocess.Popen(
        _kquota(
            *("proxy", "--listen", f"127.0.0.1:{tansu.proxy_port}", "--store", str(store)),
            *("--upstream", f"127.0.0.1:{tansu.port}", "--quota-callback", SPEC),
            *("--capture", str(capture), "--capture-broker", "1", "--log-level", "WARNING"),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    bootstrap = f"127.0.0.1:{tansu.proxy_port}"
    try:
        assert proxy.stdout is not None
        assert proxy.stdout.readline().startswith("kquota proxy: listening")
        create_topic(bootstrap, "callback-halved")
        client_throttles = _produce(bootstrap, "callback-halved", 12)
    finally:
        proxy.send_signal(signal.SIGTERM)
        _, stderr = proxy.communicate(timeout=60)
    assert proxy.returncode == 0, stderr

    live = ds.dataset(capture).to_table().to_pandas().sort_values(["ts_ms"], kind="stable")
    produce = live[live["api"] == "produce"]
    assert (produce["kafka_throttle_ms"] > 0).any(), "the producer must be throttled"
    assert client_throttles == [t for t in produce["kafka_throttle_ms"] if t > 0]

    # The proxy decided every produce request as a manager holding the halved quota.
    halved = QuotaManager("produce")
    halved.set_quota(Entity(user=ANONYMOUS), QUOTA / 2)
    full = QuotaManager("produce")
    full.set_quota(Entity(user=ANONYMOUS), QUOTA)
    want, unhalved = [], []
    for row in produce.itertuples():
        want.append(max(0, halved.record(row.user, row.client_id, row.bytes, now_ms=row.ts_ms)))
        unhalved.append(max(0, full.record(row.user, row.client_id, row.bytes, now_ms=row.ts_ms)))
    assert list(produce["kafka_throttle_ms"]) == want
    assert want != unhalved

    def backtest(out: Path, *extra: str) -> Any:
        done = subprocess.run(
            _kquota(
                *("backtest", "--traffic", str(capture), "--store", str(store)),
                *("--out", str(out), "--quiet", *extra),
            ),
            capture_output=True,
            text=True,
            timeout=600,
            env=_env(),
        )
        assert done.returncode == 0, done.stderr
        replayed = read_requests(out / "requests")
        key = ["connection", "correlation_id"]
        return live.merge(replayed, on=key, suffixes=("", "_replayed"), validate="one_to_one")

    with_callback = backtest(tmp_path / "with", "--quota-callback", SPEC)
    assert len(with_callback) == len(live) > 0
    mismatched = with_callback[with_callback["kafka_throttle_ms"] != with_callback["throttle_ms"]]
    assert mismatched.empty, mismatched[["api", "kafka_throttle_ms", "throttle_ms"]]
    without = backtest(tmp_path / "without")
    assert (without["kafka_throttle_ms"] != without["throttle_ms"]).any()


def test_the_proxy_tells_the_callback_about_brokers_and_leaders(tansu: Any) -> None:
    callback = HalfUserQuota()
    managers = [QuotaManager(t, callback=callback) for t in ("produce", "fetch", "request")]
    plugin = RecordingPlugin(*managers, quota_callback=callback)
    plugin.produce.set_quota(Entity(user=ANONYMOUS), QUOTA)
    topic = "callback-metadata"
    with run_proxy(tansu.upstream, tansu.proxy_port, plugin) as proxy:
        create_topic(proxy.address, topic, partitions=3)
        _produce(proxy.address, topic, 1)
        assert plugin.produce.bound(ANONYMOUS, "halved") == QUOTA / 2
    assert callback.closed
    seen = callback.metadata
    assert seen, "no Metadata response reached the callback"
    # Told only when the facts changed, not on every metadata refresh.
    facts = [
        (m.local_broker, [(p.topic, p.partition, p.leader) for p in m.partitions]) for m in seen
    ]
    assert all(a != b for a, b in itertools.pairwise(facts))
    last = seen[-1]
    nodes = {b.node_id for b in last.brokers}
    assert [(b.host, b.port) for b in last.brokers] == [("127.0.0.1", tansu.proxy_port)]
    assert last.local_broker in nodes
    leaders = {p.partition: p.leader for p in last.partitions if p.topic == topic}
    assert sorted(leaders) == [0, 1, 2]
    assert set(leaders.values()) <= nodes
    assert isinstance(last, kquota.ClusterMetadata)
