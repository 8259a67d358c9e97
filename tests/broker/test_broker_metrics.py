"""Prometheus metrics (kquota.broker.metrics): real HTTP scrapes parsed with
prometheus_client's parser, values against the core's, the quota-value switch, scrapes
during recording from threads (also while quotas change, sensors expire and channels are
throttled, with exact totals at the end), 100 000 expiring entities, and a port in use.
The controller-mutation and connection-creation collectors are
``test_broker_metrics_mutations_connections.py``.

Loops that run alongside other threads stop on what they must have seen, not after a
time budget; a deadline only bounds a hang."""

from __future__ import annotations

import errno
import itertools
import math
import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import kquota
import numpy as np
import pytest
from broker_support import (
    HANG_S,
    no_thread_left_behind,  # noqa: F401 (autouse fixture)
    traffic,
)
from kquota.broker import (
    QUOTA_VALUE_METRIC_CONFIG,
    MetricsServerError,
    QuotaCollector,
    QuotaPlugin,
    metric_names,
    serve_metrics,
)
from kquota.exceptions import InvalidConfigError, KquotaError
from prometheus_client.registry import CollectorRegistry
from scrapes import scrape


@pytest.mark.parametrize("quota_value", [False, True])
def test_http_scrape_equals_the_core(quota_value: bool) -> None:
    plugin = traffic()
    t = 2500
    collector = QuotaCollector(*plugin.managers, quota_value_metric=quota_value, clock=lambda: t)
    with serve_metrics(collector) as server:
        assert server.host == "127.0.0.1"
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        got, _ = scrape(server.url)

    produce, fetch, request = plugin.managers
    # The scrape measured at t, which purged; measuring again at t gives the same value.
    rates = got["kafka_server_produce_byte_rate"]
    assert set(rates) == {("alice", ""), ("bob", "app"), ("", "x")}
    assert rates[("alice", "")] == produce.measure("alice", "app-1", now_ms=t) == 2000 / 10.5
    assert rates[("bob", "app")] == produce.measure("bob", "app", now_ms=t)
    assert rates[("", "x")] == produce.measure("carol", "x", now_ms=t)
    assert got["kafka_server_fetch_byte_rate"] == {
        ("", "consumer"): fetch.measure("bob", "consumer", now_ms=t)
    }
    assert got["kafka_server_request_request_time"][("alice", "")] == request.measure(
        "alice", "app-1", now_ms=t
    )

    # alice was throttled by the produce quota (10 s beats the request quota's 1 s), so
    # her produce throttle time is 10 000 ms; no one else was throttled: NaN, as in Kafka.
    produce_throttle = got["kafka_server_produce_throttle_time"]
    assert set(produce_throttle) == set(rates)
    assert produce_throttle[("alice", "")] == 10_000.0
    assert produce_throttle[("alice", "")] == produce.throttle_time_avg("alice", "x", now_ms=t)
    assert math.isnan(produce_throttle[("bob", "app")])
    request_throttle = got["kafka_server_request_throttle_time"]
    assert request_throttle.keys() == got["kafka_server_request_request_time"].keys()
    assert all(math.isnan(v) for v in request_throttle.values())
    assert got["kafka_server_produce_queue_size"] == {("", ""): 1.0}
    assert got["kafka_server_request_queue_size"] == {("", ""): 0.0}

    # Utilization = rate / quota, for sensors with a quota only (carol has none).
    util = got["kafka_server_produce_utilization"]
    assert util == {
        ("alice", ""): rates[("alice", "")] / 100.0,
        ("bob", "app"): rates[("bob", "app")] / 1000.0,
    }
    if quota_value:
        assert got["kafka_server_produce_quota_value"] == {
            ("alice", ""): 100.0,
            ("bob", "app"): 1000.0,
        }
        assert got["kafka_server_fetch_quota_value"] == {("", "consumer"): 500.0}
        assert got["kafka_server_request_quota_value"] == {("alice", ""): 1.0}
    else:
        assert not any(name.endswith("_quota_value") for name in got)


def test_every_family_is_named_as_documented() -> None:
    plugin = traffic()
    collector = QuotaCollector(*plugin.managers, quota_value_metric=True, clock=lambda: 2500)
    with serve_metrics(collector) as server:
        got, _ = scrape(server.url)
    expected = {
        name
        for t in ("produce", "fetch", "request")
        for name in metric_names(t, quota_value_metric=True)
    }
    assert set(got) == expected
    assert {
        "kafka_server_produce_byte_rate",
        "kafka_server_fetch_byte_rate",
        "kafka_server_produce_throttle_time",
        "kafka_server_fetch_throttle_time",
        "kafka_server_request_request_time",
        "kafka_server_request_throttle_time",
        "kafka_server_produce_queue_size",
        "kafka_server_fetch_quota_value",
        "kafka_server_request_utilization",
    } <= expected
    with pytest.raises(InvalidConfigError, match="unknown quota type 'bytes'"):
        metric_names("bytes")


def test_labels_are_user_and_client_id_with_empty_tags_empty() -> None:
    plugin = QuotaPlugin(clock=lambda: 0)
    plugin.produce.set_quota(kquota.Entity(user="CN=a b"), 100.0)
    plugin.on_produce("CN=a b", "app", 10, 0, now_ms=0)
    registry = CollectorRegistry()
    registry.register(QuotaCollector(plugin.produce, clock=lambda: 0))
    samples = [
        s
        for m in registry.collect()
        if m.name == "kafka_server_produce_byte_rate"
        for s in m.samples
    ]
    assert [s.labels for s in samples] == [{"user": "CN%3Da%20b", "client_id": ""}]


def test_registering_reads_no_sensor() -> None:
    """describe() names the families, so registering does not scrape (scrapes purge)."""
    m = kquota.QuotaManager("produce")
    m.set_quota(kquota.Entity(user="u"), 100.0)
    collector = QuotaCollector(m, quota_value_metric=True)
    described = list(collector.describe())
    assert [f.name for f in described] == metric_names("produce", quota_value_metric=True)
    assert all(f.samples == [] for f in described)
    CollectorRegistry().register(collector)


def test_quota_value_switch_from_kafka_config() -> None:
    m = kquota.QuotaManager("produce")
    assert not QuotaCollector.from_config(m, config={}).quota_value_metric
    for on in ("true", "TRUE", " True ", True):
        assert QuotaCollector.from_config(m, config={QUOTA_VALUE_METRIC_CONFIG: on}).managers
        assert QuotaCollector.from_config(
            m, config={QUOTA_VALUE_METRIC_CONFIG: on}
        ).quota_value_metric
    for off in ("false", "False", False):
        collector = QuotaCollector.from_config(m, config={QUOTA_VALUE_METRIC_CONFIG: off})
        assert not collector.quota_value_metric
    with pytest.raises(InvalidConfigError, match=f"invalid {QUOTA_VALUE_METRIC_CONFIG} 'yes'"):
        QuotaCollector.from_config(m, config={QUOTA_VALUE_METRIC_CONFIG: "yes"})


def test_two_managers_of_one_type_are_rejected() -> None:
    with pytest.raises(InvalidConfigError, match="two 'fetch' managers"):
        QuotaCollector(kquota.QuotaManager("fetch"), kquota.QuotaManager("fetch"))


def test_port_in_use_is_a_clear_error() -> None:
    collector = QuotaCollector(kquota.QuotaManager("produce"))
    with serve_metrics(collector) as server:
        registry = CollectorRegistry()
        with pytest.raises(MetricsServerError, match=f"127.0.0.1:{server.port}.*in use") as info:
            serve_metrics(collector, port=server.port, registry=registry)
        assert info.value.errno == errno.EADDRINUSE
        assert isinstance(info.value, KquotaError) and isinstance(info.value, OSError)
        assert list(registry.collect()) == []  # nothing left registered
        scrape(server.url)  # the first endpoint still works
    # After close() the port is free again and a new endpoint can bind it.
    with serve_metrics(collector, port=server.port) as again:
        assert again.port == server.port


def test_port_taken_by_another_socket() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(MetricsServerError, match="address already in use"):
            serve_metrics(QuotaCollector(), port=port)


@pytest.mark.parametrize("bad", [-1, 65536, "9404", 1.5, True])
def test_bad_port_is_rejected(bad: Any) -> None:
    with pytest.raises(InvalidConfigError, match=f"invalid metrics port {bad!r}"):
        serve_metrics(QuotaCollector(), port=bad)


def test_close_twice_is_harmless_and_frees_the_port() -> None:
    server = serve_metrics(QuotaCollector())
    server.close()
    server.close()
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", server.port))


def test_scrape_during_heavy_recording_from_threads() -> None:
    manager = kquota.QuotaManager("produce")
    manager.set_quota(kquota.Entity(client_id=kquota.DEFAULT), 1e6)
    keys = [(f"user-{k % 7}", f"client-{k}") for k in range(500)]
    n = 100_000
    stop = threading.Event()
    errors: list[BaseException] = []

    def record(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(500):  # bounded
                if stop.is_set():
                    return
                # Events spread over the next 10 ms of the core's clock, in order.
                now = kquota.monotonic_ms() + np.sort(rng.integers(0, 10, n))
                index = rng.integers(0, len(keys), n).astype(np.int64)
                manager.record_batch(now.astype(np.int64), index, np.full(n, 100.0), keys)
        except BaseException as e:
            errors.append(e)

    collector = QuotaCollector(manager, quota_value_metric=True)  # the core's clock
    threads = [threading.Thread(target=record, args=(s,)) for s in range(4)]
    for th in threads:
        th.start()
    scrapes, busiest = 0, 0.0
    try:
        with serve_metrics(collector) as server:
            # Until the recorders have shown up in a few scrapes (the deadline bounds a hang).
            deadline = time.monotonic() + HANG_S
            while (scrapes < 3 or busiest == 0) and time.monotonic() < deadline:
                got, _ = scrape(server.url)
                scrapes += 1
                rates = got["kafka_server_produce_byte_rate"]
                assert len(rates) <= len(keys)
                assert all(math.isfinite(v) and v >= 0 for v in rates.values())
                assert set(got["kafka_server_produce_quota_value"].values()) <= {1e6}
                util = got["kafka_server_produce_utilization"]
                assert util.keys() == rates.keys()
                busiest = max(busiest, *rates.values(), 0.0)
    finally:
        stop.set()
        for th in threads:
            th.join(timeout=60)
    assert not errors
    assert scrapes >= 3
    assert busiest > 0
    assert manager.sensor_count() == len(keys)
    with serve_metrics(collector) as server:
        got, _ = scrape(server.url)
    assert len(got["kafka_server_produce_byte_rate"]) == len(keys)


@pytest.mark.slow
def test_expired_sensors_leave_the_metrics_100k_entities() -> None:
    entities = 100_000
    manager = kquota.QuotaManager("produce", sensor_expiry_ms=60_000)
    manager.set_quota(kquota.Entity(client_id=kquota.DEFAULT), 1000.0)
    keys = [("", f"client-{k}") for k in range(entities)]
    index = np.arange(entities, dtype=np.int64)
    # Everyone records at t=0 (over quota, so the throttle-time sensors exist as well).
    throttles = manager.record_batch(
        np.zeros(entities, np.int64), index, np.full(entities, 20_000.0), keys
    )
    assert (throttles > 0).all()
    for channel, (u, c) in enumerate(keys[:100], start=1):
        manager.throttle(u, c, 10, now_ms=0, channel=channel)
    assert manager.sensor_count() == entities

    now = {"t": 1000}
    collector = QuotaCollector(manager, quota_value_metric=True, clock=lambda: now["t"])
    with serve_metrics(collector) as server:
        # The full scrape is counted line by line: the pure-Python parser alone would take
        # longer than the scrape (the small one below is parsed).
        with urllib.request.urlopen(server.url, timeout=120) as response:
            body = response.read().decode()
        full_size = len(body)
        for family in ("byte_rate", "quota_value", "throttle_time", "utilization"):
            assert body.count(f"\nkafka_server_produce_{family}{{") == entities

        # A handful keep recording; the rest expire.
        for u, c in keys[:10]:
            manager.record(u, c, 1.0, now_ms=50_000)
        removed = manager.expire_sensors(now_ms=60_001)
        # Quota sensors of the idle clients, and every throttle-time sensor (they only
        # record on a throttle, so they expire on their own clock).
        assert len(removed) == 2 * entities - 10
        assert manager.expired_channels(now_ms=60_001) != []
        now["t"] = 60_001
        small, small_size = scrape(server.url)
    live = {("", c) for _, c in keys[:10]}
    assert small["kafka_server_produce_throttle_time"] == {}
    for family in (
        "kafka_server_produce_byte_rate",
        "kafka_server_produce_utilization",
        "kafka_server_produce_quota_value",
    ):
        assert set(small[family]) == live
    assert small["kafka_server_produce_queue_size"] == {("", ""): 0.0}
    assert small_size < 5_000 < full_size


def test_scrapes_under_load_parse_and_stay_consistent() -> None:
    """Two scrapers hit the endpoint while threads record (GIL-free batches), quotas change,
    idle sensors are created and expired and channels are throttled. Every scrape parses
    and agrees with itself; at a fixed scrape time the rates only grow, and at the end they
    are exactly what was recorded. The server stays up throughout."""
    t_scrape = 1_000_000  # every record lies in the 5 s before the scrape time
    manager = kquota.QuotaManager("produce", sensor_expiry_ms=10_000)
    manager.set_quota(kquota.Entity(client_id=kquota.DEFAULT), 1e12)
    manager.set_quota(kquota.Entity(user="churn"), 1000.0)
    recorders, batches, per_batch = 3, 30, 2000
    busy = [("", f"busy-{k}") for k in range(recorders)] + [("", "shared")]
    for user, client in busy:  # the busy sensors exist before the first scrape
        manager.record(user, client, 1.0, now_ms=t_scrape - 5000)
    manager.record("churn", "c", 1.0, now_ms=t_scrape - 1000)
    manager.throttle("thr", "thr-c", 250, now_ms=t_scrape - 1000, channel=0)
    stop = threading.Event()
    errors: list[BaseException] = []

    def guarded(work: Callable[..., None]) -> Callable[..., None]:
        def run(*args: Any) -> None:
            try:
                work(*args)
            except BaseException as e:  # reported by the main thread
                errors.append(e)

        return run

    @guarded
    def record(k: int) -> None:
        keys = [("", f"busy-{k}"), ("", "shared")]
        for b in range(batches):
            i = np.arange(b * per_batch, (b + 1) * per_batch, dtype=np.int64)
            now = t_scrape - 5000 + i * 5000 // (batches * per_batch)
            manager.record_batch(now, i % 2, np.ones(per_batch), keys)
            time.sleep(0.02)

    @guarded
    def churn() -> None:
        flips = 0
        while not stop.is_set():
            manager.set_quota(kquota.Entity(user="churn"), 2000.0 if flips % 2 else 1000.0)
            flips += 1
            time.sleep(0.001)

    expired: list[str] = []

    @guarded
    def expire() -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            manager.record("", f"idle-{i}", 1.0, now_ms=t_scrape - 20_000)  # idle for 20 s
            expired.extend(manager.expire_sensors(now_ms=t_scrape))
            time.sleep(0.002)

    throttles = [1]  # one throttle above; the queue is never drained

    @guarded
    def throttle() -> None:
        while not stop.is_set():
            throttles[0] += 1  # counted first: a scrape never sees more than this
            manager.throttle("thr", "thr-c", 250, now_ms=t_scrape - 500, channel=throttles[0])
            time.sleep(0.005)

    scrapes: list[int] = [0, 0]

    def check_scrapes(url: str, slot: int) -> None:
        last_rates = dict.fromkeys(busy, 0.0)
        last_queue = 0.0
        while not stop.is_set():
            got, _ = scrape(url)
            scrapes[slot] += 1
            rates = got["kafka_server_produce_byte_rate"]
            quotas = got["kafka_server_produce_quota_value"]
            utilization = got["kafka_server_produce_utilization"]
            for key in busy:  # never expired, and only growing at a fixed scrape time
                assert rates[key] >= last_rates[key], key
                last_rates[key] = rates[key]
                assert quotas[key] == 1e12
            assert quotas[("churn", "")] in (1000.0, 2000.0)
            assert utilization.keys() == quotas.keys()
            for key, bound in quotas.items():
                assert utilization[key] == rates[key] / bound
            for (user, client), rate in rates.items():
                assert math.isfinite(rate) and rate >= 0
                if client.startswith("idle-"):  # recorded 20 s ago: all purged
                    assert rate == 0.0 and user == ""
            assert got["kafka_server_produce_throttle_time"][("", "thr-c")] == 250.0
            queue = got["kafka_server_produce_queue_size"][("", "")]
            assert last_queue <= queue <= throttles[0]
            last_queue = queue

    def stop_when_recorded(workers: list[threading.Thread]) -> None:
        """Once recorded, and every concurrent activity was seen at least once or thrice."""
        for worker in workers:
            worker.join()
        deadline = time.monotonic() + HANG_S
        while time.monotonic() < deadline and not errors:
            if min(scrapes) >= 3 and expired and throttles[0] >= 3:
                break
            time.sleep(0.005)
        stop.set()

    collector = QuotaCollector(manager, quota_value_metric=True, clock=lambda: t_scrape)
    with serve_metrics(collector) as server:
        workers = [threading.Thread(target=record, args=(k,)) for k in range(recorders)]
        churners = [threading.Thread(target=f) for f in (churn, expire, throttle)]
        scraper = threading.Thread(target=guarded(check_scrapes), args=(server.url, 1))
        for th in [*workers, *churners, scraper]:
            th.start()
        try:
            watcher = threading.Thread(target=stop_when_recorded, args=(workers,))
            watcher.start()
            guarded(check_scrapes)(server.url, 0)
            watcher.join()
        finally:
            stop.set()
            for th in [*workers, *churners, scraper]:
                th.join(timeout=60)
        assert errors == []
        assert min(scrapes) >= 3, scrapes
        assert expired, "idle sensors must have expired while scraping"

        # The endpoint still serves, and the rates are exactly what was recorded: at the
        # scrape time the padded window is 10 s, so a rate is its total / 10.
        final, _ = scrape(server.url)
    rates = final["kafka_server_produce_byte_rate"]
    per_key = batches * per_batch // 2
    for k in range(recorders):
        assert rates[("", f"busy-{k}")] * 10 == 1 + per_key
        assert rates[("", f"busy-{k}")] == manager.measure("x", f"busy-{k}", now_ms=t_scrape)
    assert rates[("", "shared")] * 10 == 1 + recorders * per_key
    assert final["kafka_server_produce_queue_size"] == {("", ""): float(throttles[0])}
