"""Custom quota callbacks (KIP-257) through the binding, the plugin and live configs.

The callback is a real module (``tests/support/callbacks/half_user_quota.py``): every user's
``<user>`` quota divided by 2. Each check compares against kquota's built-in precedence
configured with the halved quotas, computed in the same test.
"""

from __future__ import annotations

import math
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kquota
import numpy as np
import paths
import pytest
from callbacks.half_user_quota import HalfUserQuota
from kquota import Entity, QuotaManager
from kquota.broker import QuotaPlugin
from kquota.config import QuotaConfig
from kquota.config.live import LiveQuotas
from kquota.config.store import ChangeSet, SQLiteStore

SPEC = "callbacks.half_user_quota:HalfUserQuota"
TESTS = paths.SUPPORT
USERS = {"alice": 40_000.0, "bob": 90_000.0, "User:CN=c d": 20_000.0}


def trace(seed: int = 7, n: int = 3000) -> list[tuple[str, str, str, float, int]]:
    """(api, user, client, bytes, now_ms) with users that have quotas and one that has
    none, several clients each."""
    rng = np.random.default_rng(seed)
    users = [*USERS, "nobody"]
    out = []
    now = 0
    for _ in range(n):
        now += int(rng.integers(0, 12))
        user = users[int(rng.integers(0, len(users)))]
        client = f"c{int(rng.integers(0, 3))}"
        api = "produce" if rng.random() < 0.6 else "fetch"
        out.append((api, user, client, float(rng.integers(100, 4000)), now))
    return out


def halved_builtin(quota_type: str) -> QuotaManager:
    manager = QuotaManager(quota_type)
    for user, quota in USERS.items():
        manager.set_quota(Entity(user=user), quota / 2)
    return manager


def with_callback(quota_type: str, callback: Any) -> QuotaManager:
    manager = QuotaManager(quota_type, callback=callback)
    for user, quota in USERS.items():
        manager.set_quota(Entity(user=user), quota)
    return manager


def test_a_manager_with_the_callback_throttles_as_the_halved_builtin_quota() -> None:
    callback = HalfUserQuota()
    custom = with_callback("produce", callback)
    builtin = halved_builtin("produce")
    got = [custom.record(u, c, b, now_ms=t) for _, u, c, b, t in trace()]
    want = [builtin.record(u, c, b, now_ms=t) for _, u, c, b, t in trace()]
    assert got == want
    assert any(t > 0 for t in got)
    assert custom.sensor_names() == builtin.sensor_names()
    for user in USERS:
        assert custom.bound(user, "c0") == builtin.bound(user, "c0")
        assert custom.quota_for(user, "c9") == builtin.quota_for(user, "c9")
        assert custom.tags(user, "c9") == builtin.tags(user, "c9")
    assert custom.callback is callback
    assert custom.enabled


def test_records_of_resolved_clients_never_call_python() -> None:
    callback = HalfUserQuota()
    manager = with_callback("fetch", callback)
    clients = [(u, f"c{i}") for u in USERS for i in range(3)]
    for u, c in clients:
        manager.record(u, c, 1.0, now_ms=0)
    asked = dict(callback.calls)
    assert asked["quota_metric_tags"] == len(clients)
    assert asked["quota_limit"] == len(USERS)
    for t in range(2000):
        u, c = clients[t % len(clients)]
        manager.record(u, c, 10.0, now_ms=t)
        manager.unrecord(u, c, 5.0, now_ms=t)
        manager.max_value_in_quota_window(u, c, now_ms=t)
        manager.throttle(u, c, 3, now_ms=t)
    keys = list(clients)
    index = np.arange(3000, dtype=np.int64) % len(keys)
    manager.record_batch(np.full(3000, 2000, dtype=np.int64), index, np.ones(3000), keys)
    assert dict(callback.calls) == asked


def test_the_plugin_honours_the_callback() -> None:
    """QuotaPlugin(quota_callback=...) decides every request as a plugin whose managers
    hold the halved quotas; also given as 'module:factory'."""
    builtin = QuotaPlugin(
        halved_builtin("produce"), halved_builtin("fetch"), QuotaManager("request"), clock=int
    )
    callback = HalfUserQuota()
    by_object = QuotaPlugin(quota_callback=callback, clock=int)
    by_spec = QuotaPlugin(quota_callback=SPEC, clock=int)
    for plugin in (by_object, by_spec):
        for manager in (plugin.produce, plugin.fetch):
            for user, quota in USERS.items():
                manager.set_quota(Entity(user=user), quota)
    throttled = 0
    for api, user, client, size, now in trace(seed=11):
        outcomes = []
        for plugin in (builtin, by_object, by_spec):
            call = plugin.on_produce if api == "produce" else plugin.on_fetch
            outcomes.append(call(user, client, size, 0, now_ms=now))
        assert outcomes[1] == outcomes[0] == outcomes[2], (api, user, client, now)
        throttled += outcomes[0].throttled
    assert throttled > 0
    assert by_object.quota_callback is callback
    spec_callback = by_spec.quota_callback
    for plugin in (builtin, by_object, by_spec):
        plugin.close()
    assert callback.closed and spec_callback.closed
    assert by_object.quota_callback is None


def test_the_plugin_refuses_managers_built_with_another_callback() -> None:
    with pytest.raises(kquota.InvalidConfigError, match="built with callback None"):
        QuotaPlugin(QuotaManager("produce"), quota_callback=HalfUserQuota())


def test_cluster_metadata_reaches_the_callback_once_for_three_managers() -> None:
    class SplitByBrokers(HalfUserQuota):
        """The user quota split evenly over the brokers of the cluster."""

        brokers = 2

        def quota_limit(self, quota_type: str, tags: Mapping[str, str]) -> float | None:
            quota = self.quotas.get((quota_type, tags["user"]))
            return None if quota is None else quota / self.brokers

        def update_cluster_metadata(self, metadata: kquota.ClusterMetadata) -> bool:
            super().update_cluster_metadata(metadata)
            changed = len(metadata.brokers) != self.brokers
            self.brokers = len(metadata.brokers)
            return changed

    callback = SplitByBrokers()
    plugin = QuotaPlugin(quota_callback=callback, clock=int)
    plugin.produce.set_quota(Entity(user="alice"), 60_000)
    plugin.on_produce("alice", "c", 100, 0, now_ms=0)
    assert plugin.produce.bound("alice", "c") == 30_000
    metadata = kquota.ClusterMetadata(
        [kquota.BrokerNode(i, "127.0.0.1", 9092 + i) for i in range(3)],
        [kquota.PartitionLeader("t", 0, 1), kquota.PartitionLeader("t", 1, None)],
        cluster_id="kq",
        local_broker=1,
    )
    assert plugin.update_cluster_metadata(metadata)
    assert callback.calls["update_cluster_metadata"] == 1
    seen = callback.metadata[0]
    assert [b.node_id for b in seen.brokers] == [0, 1, 2]
    assert [(p.topic, p.partition, p.leader) for p in seen.partitions] == [
        ("t", 0, 1),
        ("t", 1, None),
    ]
    assert (seen.cluster_id, seen.local_broker) == ("kq", 1)
    assert plugin.produce.bound("alice", "c") == 20_000
    assert not plugin.update_cluster_metadata(metadata)
    assert not kquota.update_cluster_metadata(metadata, QuotaManager("produce"))
    plugin.close()


def test_live_config_changes_go_to_update_and_remove_quota(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "quotas.sqlite")
    alice = Entity(user="alice")
    store.replace(QuotaConfig.from_entities({alice: {"producer_byte_rate": 8000}}))
    callback = HalfUserQuota()
    manager = QuotaManager("produce", callback=callback)
    live = LiveQuotas(store, manager)
    live.refresh()
    assert callback.calls["update_quota"] == 1
    manager.record("alice", "c", 1, now_ms=0)
    assert manager.bound("alice", "c") == 4000
    store.apply(
        ChangeSet.replacing(QuotaConfig.from_entities({alice: {"producer_byte_rate": 2000}}))
    )
    live.refresh()
    assert manager.bound("alice", "c") == 1000
    store.apply(ChangeSet.replacing(QuotaConfig()))
    live.refresh()
    assert callback.calls["remove_quota"] == 1
    assert manager.bound("alice", "c") == kquota.UNLIMITED


def test_a_reset_required_refreshes_every_limit() -> None:
    class External(HalfUserQuota):
        reset = False

        def quota_reset_required(self, quota_type: str) -> bool:
            super().quota_reset_required(quota_type)
            reset, self.reset = self.reset, False
            return reset

    callback = External()
    manager = with_callback("produce", callback)
    manager.record("alice", "c", 1, now_ms=0)
    callback.quotas[("produce", "alice")] = 10_000
    callback.reset = True
    assert manager.reset_if_required()
    assert manager.bound("alice", "c") == 5_000
    assert not manager.reset_if_required()


# -- bad callbacks ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("callbacks.no_such_module:Factory", "cannot import module 'callbacks.no_such_module'"),
        ("callbacks.half_user_quota:Missing", "has no attribute 'Missing'"),
        ("callbacks.half_user_quota:NOT_CALLABLE", "'NOT_CALLABLE' is a int, not a factory"),
        ("no-colon", "expected 'module:factory'"),
        (":Factory", "expected 'module:factory'"),
    ],
)
def test_a_callback_that_cannot_be_loaded_is_named(spec: str, message: str) -> None:
    with pytest.raises(kquota.InvalidConfigError, match=message) as info:
        kquota.load_callback(spec)
    assert repr(spec) in str(info.value)


def test_a_factory_that_raises_or_returns_no_callback_is_named() -> None:
    with pytest.raises(kquota.QuotaCallbackError, match="raised RuntimeError: no configuration"):
        kquota.load_callback("callbacks.half_user_quota:raising_factory")
    with pytest.raises(kquota.QuotaCallbackError, match="returned None, which has no method"):
        kquota.load_callback("callbacks.half_user_quota:not_a_factory")
    with pytest.raises(kquota.InvalidConfigError, match="it has no method quota_limit"):
        QuotaManager(
            "produce",
            callback=type(
                "NoLimit",
                (),
                {
                    n: (lambda self, *a: None)
                    for n in (
                        "quota_metric_tags",
                        "update_quota",
                        "remove_quota",
                        "quota_reset_required",
                        "update_cluster_metadata",
                        "close",
                    )
                },
            )(),
        )


class Returning(HalfUserQuota):
    """Returns ``value`` from ``method`` (or raises it, if it is an exception)."""

    def __init__(self, method: str, value: Any) -> None:
        super().__init__()
        self.method, self.value = method, value

    def __getattribute__(self, name: str) -> Any:
        if name != "method" and name == object.__getattribute__(self, "method"):
            value = object.__getattribute__(self, "value")

            def bad(*args: Any) -> Any:
                if isinstance(value, Exception):
                    raise value
                return value

            return bad
        return object.__getattribute__(self, name)

    def __repr__(self) -> str:
        return f"Returning({self.method})"


@pytest.mark.parametrize(
    ("method", "value", "shown"),
    [
        ("quota_metric_tags", ("alice", ""), "it returned ('alice', '')"),
        ("quota_metric_tags", {"user": "alice", "broker": "1"}, "'broker': '1'"),
        ("quota_metric_tags", {"user": 7}, "{'user': 7}"),
        ("quota_metric_tags", KeyError("tenant"), "it raised KeyError: 'tenant'"),
        ("quota_limit", "1000", "it returned '1000'"),
        ("quota_limit", True, "it returned True"),
        ("quota_limit", -5.0, "it returned -5.0"),
        ("quota_limit", math.nan, "it returned NaN"),
        ("quota_limit", ZeroDivisionError("division by zero"), "ZeroDivisionError"),
        ("quota_reset_required", 1, "it returned 1: expected a bool"),
        ("quota_reset_required", RuntimeError("down"), "it raised RuntimeError: down"),
    ],
)
def test_a_bad_answer_is_a_clear_error_and_leaves_no_sensor(
    method: str, value: Any, shown: str
) -> None:
    manager = QuotaManager("produce", callback=Returning(method, value))
    with pytest.raises(kquota.QuotaCallbackError) as info:
        manager.record("alice", "c", 100, now_ms=0)
    text = str(info.value)
    assert f"Returning({method}).{method}" in text or method in text
    assert shown in text
    assert manager.sensor_count() == 0
    assert manager.sensor_names() == []
    keys = [("alice", "c")]
    with pytest.raises(kquota.QuotaCallbackError):
        manager.record_batch(
            np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), np.ones(1), keys
        )
    assert manager.sensor_count() == 0


def test_a_raising_quota_update_changes_nothing() -> None:
    manager = QuotaManager("produce", callback=Returning("update_quota", ValueError("read-only")))
    with pytest.raises(
        kquota.QuotaCallbackError, match="update_quota failed: it raised ValueError"
    ):
        manager.set_quota(Entity(user="alice"), 1000)
    assert manager.quotas() == []


def test_a_callback_that_raises_while_another_thread_records_in_a_batch() -> None:
    """record_batch runs without the GIL: the callback takes it back for resolution, while
    another Python thread keeps running; the error reaches the batch's caller."""
    callback = HalfUserQuota()
    manager = with_callback("produce", callback)
    keys = [(u, f"k{i}") for u in USERS for i in range(50)]
    n = 20_000
    index = np.arange(n, dtype=np.int64) % len(keys)
    stop = threading.Event()
    spins = 0

    def spin() -> None:
        nonlocal spins
        while not stop.is_set():
            spins += 1

    thread = threading.Thread(target=spin)
    thread.start()
    try:
        out = manager.record_batch(np.arange(n, dtype=np.int64), index, np.full(n, 50.0), keys)
    finally:
        stop.set()
        thread.join()
    builtin = halved_builtin("produce")
    want = builtin.record_batch(np.arange(n, dtype=np.int64), index, np.full(n, 50.0), keys)
    assert list(out) == list(want)
    assert callback.calls["quota_metric_tags"] == len(keys)


def test_kquota_backtest_refuses_a_bad_callback_before_spark(tmp_path: Path) -> None:
    quotas = tmp_path / "q.json"
    quotas.write_text(QuotaConfig().dumps())
    env_path = f"{TESTS}"
    done = subprocess.run(
        [
            sys.executable,
            *("-m", "kquota", "backtest", "--traffic", str(tmp_path)),
            *("--quotas", str(quotas), "--out", str(tmp_path / "out")),
            *("--quota-callback", "callbacks.half_user_quota:Missing"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2, done.stderr
    assert "has no attribute 'Missing'" in done.stderr
    assert "Traceback" not in done.stderr
