"""Prometheus metrics (kquota.broker.metrics): real HTTP scrapes parsed with
prometheus_client's parser, values against the core's, the quota-value switch, scrapes
during recording from threads (also while quotas change, sensors expire and channels are
throttled, with exact totals at the end), 100 000 expiring entities, and a port in use.

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
from broker_support import no_thread_left_behind  # noqa: F401 (autouse fixture)
from kquota.broker import (
    CONNECTION_METRIC_NAMES,
    MUTATION_METRIC_NAMES,
    QUOTA_VALUE_METRIC_CONFIG,
    ConnectionQuotaCollector,
    MetricsServerError,
    MutationQuotaCollector,
    PerBrokerQuotaCollector,
    QuotaCollector,
    QuotaPlugin,
    metric_names,
    serve_metrics,
)
from kquota.exceptions import InvalidConfigError, KquotaError
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

Samples = dict[str, dict[tuple[str, str], float]]
Labelled = dict[str, dict[tuple[tuple[str, str], ...], float]]
HANG_S = 60.0  # bounds a wait that would otherwise hang; never a measurement


def scrape(url: str) -> tuple[Samples, int]:
    """GET the endpoint; return {family: {(user, client_id): value}} and the body size."""
    body = _get(url)
    families = {
        name: {
            (dict(labels).get("user", ""), dict(labels).get("client_id", "")): value
            for labels, value in values.items()
        }
        for name, values in _labelled(body).items()
    }
    return families, len(body)


def scrape_labelled(url: str) -> Labelled:
    """GET the endpoint; {family: {sorted label pairs: value}}."""
    return _labelled(_get(url))


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200
        body: str = response.read().decode()
    return body


def _labelled(body: str) -> Labelled:
    families: Labelled = {}
    for family in text_string_to_metric_families(body):
        values = families.setdefault(family.name, {})
        for sample in family.samples:
            values[tuple(sorted(sample.labels.items()))] = sample.value
    return families


def traffic() -> QuotaPlugin:
    """alice (user quota, throttled), bob (user+client quota), carol (no quota at all)."""
    plugin = QuotaPlugin(clock=lambda: 1000)  # simulated: the requests give their times
    plugin.produce.set_quota(kquota.Entity(user="alice"), 100.0)
    plugin.produce.set_quota(kquota.Entity(user="bob", client_id="app"), 1000.0)
    plugin.fetch.set_quota(kquota.Entity(client_id=kquota.DEFAULT), 500.0)
    plugin.request.set_quota(kquota.Entity(user="alice"), 1.0)
    ch = plugin.channels.open()
    plugin.on_produce("alice", "app-1", 2000, 5_000_000_000, channel=ch, now_ms=1000)
    plugin.on_produce("bob", "app", 300, 1000, now_ms=1200)
    plugin.on_produce("carol", "x", 300, 1000, now_ms=1300)
    plugin.on_fetch("bob", "consumer", 400, 1000, now_ms=1400)
    return plugin


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


# -- KIP-599 and KIP-612: the controller-mutation quota and connection-creation rates ------


def ul(user: str, client_id: str) -> tuple[tuple[str, str], ...]:
    return (("client_id", client_id), ("user", user))


def mutations() -> kquota.ControllerMutationQuotaManager:
    """A user quota (a principal that sanitizes), a <default> client-id quota shared by a
    client id with a colon, one throttle with a channel queued."""
    manager = kquota.ControllerMutationQuotaManager()
    manager.set_quota(kquota.Entity(user="CN=a:b"), 2.0)
    manager.set_quota(kquota.Entity(client_id=kquota.DEFAULT), 3.0)
    assert manager.record_strict("CN=a:b", "x", 50, now_ms=1000).accepted
    assert manager.record_strict("bob", "c:1", 5, now_ms=1000).accepted
    refused = manager.record_strict("bob", "c:1", 5, now_ms=1100)
    assert not refused.accepted
    manager.throttle("bob", "c:1", refused.throttle_ms, now_ms=1100, channel=7)
    return manager


def test_mutation_scrape_has_kafkas_names_and_the_cores_values() -> None:
    manager = mutations()
    collector = MutationQuotaCollector(manager, clock=lambda: 2000)
    with serve_metrics(collector) as server:
        got = scrape_labelled(server.url)
    assert (
        set(got)
        == set(MUTATION_METRIC_NAMES)
        == {
            "kafka_server_controllermutation_tokens",
            "kafka_server_controllermutation_mutation_rate",
            "kafka_server_controllermutation_throttle_time",
            "kafka_server_controllermutation_queue_size",
        }
    )
    # mutation-rate: Kafka's Rate over the metrics windows (2 x 30 s): 1 s elapsed since
    # the first record, padded to one full window (31 s); the refused 5 is not counted.
    assert got["kafka_server_controllermutation_mutation_rate"] == {
        ul("CN%3Da%3Ab", ""): 50 / 31.0,
        ul("", "c:1"): 5 / 31.0,
    }
    # TokenBucket: a new bucket fills at quota/s from time 0 up to the burst (11 x 1 s x
    # quota): alice had 2 at 1000 ms, took 50 (-48), refilled 2 by 2000 ms.
    assert got["kafka_server_controllermutation_tokens"] == {
        ul("CN%3Da%3Ab", ""): -46.0,  # the sanitized principal, as Kafka's user tag
        ul("", "c:1"): manager.tokens("", "c:1", now_ms=2000),
    }
    assert got["kafka_server_controllermutation_tokens"][ul("", "c:1")] == pytest.approx(1.0)
    throttle = got["kafka_server_controllermutation_throttle_time"]
    # The refused request's throttle: 3 - 5 + 0.3 = -1.7 tokens at 3/s, round(1.7 / 3 s).
    assert throttle[ul("", "c:1")] == 567.0
    assert math.isnan(throttle[ul("CN%3Da%3Ab", "")])  # no throttle in its window
    assert got["kafka_server_controllermutation_queue_size"] == {(): 1.0}


def test_mutation_sensors_that_expired_or_no_longer_resolve_are_left_out() -> None:
    manager = mutations()
    collector = MutationQuotaCollector(manager, clock=lambda: 2000)
    manager.remove_quota(kquota.Entity(user="CN=a:b"))  # alice now resolves elsewhere
    families = {m.name: m for m in collector.collect()}
    users = {s.labels["user"] for s in families["kafka_server_controllermutation_tokens"].samples}
    assert "CN%3Da%3Ab" not in users
    manager.expire_sensors(now_ms=10_000_000)
    families = {m.name: m for m in collector.collect()}
    assert families["kafka_server_controllermutation_tokens"].samples == []
    assert families["kafka_server_controllermutation_mutation_rate"].samples == []
    assert families["kafka_server_controllermutation_throttle_time"].samples == []


def connections() -> kquota.ConnectionQuotas:
    """Two listeners; a broker-wide limit that delays accepts; a per-IP rate that
    throttles an IPv6 client; an unlimited IPv4 client."""
    quotas = kquota.ConnectionQuotas(max_connection_creation_rate=2)
    quotas.add_listener("PLAINTEXT")
    quotas.add_listener("SSL", 1)
    quotas.set_ip_quota("2001:db8::1", 1)
    for t in range(0, 300, 10):  # 30 per listener in 0.3 s: over every limit
        quotas.on_new_connection("PLAINTEXT", "2001:db8::1", now_ms=1000 + t)
        quotas.on_new_connection("SSL", "10.0.0.1", now_ms=1001 + t)
    return quotas


def test_connection_scrape_has_kafkas_names_and_the_cores_values() -> None:
    quotas = connections()
    now = 1500
    collector = ConnectionQuotaCollector(quotas, clock=lambda: now)
    with serve_metrics(collector) as server:
        got = scrape_labelled(server.url)
    prefix = "kafka_server_socket_server_metrics_"
    assert (
        set(got)
        == set(CONNECTION_METRIC_NAMES)
        == {
            f"{prefix}broker_connection_accept_rate",
            f"{prefix}connection_accept_rate",
            f"{prefix}connection_accept_throttle_time",
            f"{prefix}ip_connection_accept_throttle_time",
        }
    )
    assert got[f"{prefix}broker_connection_accept_rate"] == {(): quotas.broker_rate(now_ms=now)}
    ipv6 = "2001:db8:0:0:0:0:0:1"  # Kafka's tag: InetAddress.getHostAddress()
    assert got[f"{prefix}connection_accept_rate"] == {
        (("ip", ""), ("listener", "PLAINTEXT")): quotas.listener_rate("PLAINTEXT", now_ms=now),
        (("ip", ""), ("listener", "SSL")): quotas.listener_rate("SSL", now_ms=now),
        (("ip", ipv6), ("listener", "")): quotas.ip_rate(ipv6, now_ms=now),
        # 10.0.0.1 has no IP quota: as in Kafka, no per-IP sensor is kept for it.
    }
    assert quotas.ip_rate("10.0.0.1", now_ms=now) is None
    assert all(v > 0 for v in got[f"{prefix}connection_accept_rate"].values())
    for listener in ("PLAINTEXT", "SSL"):
        delay, ip_delay = quotas.listener_throttle_avgs(listener, now_ms=now)
        for name, value in (
            (f"{prefix}connection_accept_throttle_time", delay),
            (f"{prefix}ip_connection_accept_throttle_time", ip_delay),
        ):
            scraped = got[name][(("listener", listener),)]
            assert scraped == value or (math.isnan(scraped) and math.isnan(value))
    # The broker limit delayed accepts, the IP limit throttled the IPv6 client on PLAINTEXT.
    assert got[f"{prefix}connection_accept_throttle_time"][(("listener", "PLAINTEXT"),)] > 0
    assert got[f"{prefix}ip_connection_accept_throttle_time"][(("listener", "PLAINTEXT"),)] > 0
    assert math.isnan(got[f"{prefix}ip_connection_accept_throttle_time"][(("listener", "SSL"),)])


def test_new_collectors_describe_without_reading_and_check_their_argument() -> None:
    registry = CollectorRegistry(auto_describe=True)
    manager, quotas = kquota.ControllerMutationQuotaManager(), kquota.ConnectionQuotas()
    registry.register(MutationQuotaCollector(manager))
    registry.register(ConnectionQuotaCollector(quotas))
    assert manager.sensor_names() == [] and quotas.ip_sensor_names() == []
    with pytest.raises(InvalidConfigError, match="expected a ControllerMutationQuotaManager"):
        MutationQuotaCollector(kquota.QuotaManager("produce"))  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="expected a ConnectionQuotas"):
        ConnectionQuotaCollector(manager)  # type: ignore[arg-type]


def test_scrapes_while_threads_record_mutations_and_connections() -> None:
    """Threads record for 40 clients and 40 IPs while another scrapes over HTTP; every
    scrape parses, and once recording stops a scrape equals the core's reads."""
    manager = kquota.ControllerMutationQuotaManager()
    manager.set_quota(kquota.Entity(user=kquota.DEFAULT), 5.0)
    quotas = kquota.ConnectionQuotas(max_connection_creation_rate=1000)
    quotas.add_listener("PLAINTEXT")
    quotas.set_ip_quota(None, 3)
    clock = itertools.count(10_000)  # simulated ms shared by recorders and scrapes
    scrape_at = [0]
    stop = threading.Event()

    def record(worker: int) -> None:
        for i in itertools.count():
            if stop.is_set():
                return
            t = next(clock)
            manager.record_permissive(f"u{(worker + i) % 40}", "app", 1, now_ms=t)
            quotas.on_new_connection("PLAINTEXT", f"10.1.0.{(worker + i) % 40}", now_ms=t)

    collectors = (
        MutationQuotaCollector(manager, clock=lambda: scrape_at[0]),
        ConnectionQuotaCollector(quotas, clock=lambda: scrape_at[0]),
    )
    with serve_metrics(*collectors) as server:
        threads = [threading.Thread(target=record, args=(w,)) for w in range(4)]
        for thread in threads:
            thread.start()
        try:
            deadline = time.monotonic() + HANG_S
            seen_all = False
            while not seen_all:  # until every client and IP has appeared in a scrape
                assert time.monotonic() < deadline, "not every sensor appeared"
                scrape_at[0] = next(clock)
                during = scrape_labelled(server.url)  # parses while the sensors change
                seen_all = (
                    len(during.get("kafka_server_controllermutation_tokens", {})) == 40
                    and len(during["kafka_server_socket_server_metrics_connection_accept_rate"])
                    == 41
                )
        finally:
            stop.set()
            for thread in threads:
                thread.join(HANG_S)
        now = scrape_at[0] = next(clock)
        got = scrape_labelled(server.url)
    tokens = got["kafka_server_controllermutation_tokens"]
    assert tokens == {ul(f"u{i}", ""): manager.tokens(f"u{i}", "", now_ms=now) for i in range(40)}
    rates = got["kafka_server_socket_server_metrics_connection_accept_rate"]
    assert len(rates) == 41  # the listener and 40 IPs
    for i in range(40):
        ip = f"10.1.0.{i}"
        assert rates[(("ip", ip), ("listener", ""))] == quotas.ip_rate(ip, now_ms=now)


def test_per_broker_collector_labels_each_brokers_sensors_and_merges_their_families() -> None:
    """Each broker's sensors under QuotaCollector's and MutationQuotaCollector's names with
    a ``broker`` label, one family per name, and a broker listed later in later scrapes."""
    first = traffic()
    later = QuotaPlugin(clock=lambda: 1000)
    later.produce.set_quota(kquota.Entity(user="alice"), 100.0)
    later.on_produce("alice", "app-1", 700, 1000, now_ms=1000)
    mutation = mutations()
    brokers: dict[int, Any] = {-1: first.managers}
    t = 2500
    collector = PerBrokerQuotaCollector(lambda: brokers, clock=lambda: t)
    with serve_metrics(collector) as server:
        alone = scrape_labelled(server.url)
        brokers[0] = (*later.managers, mutation)
        with urllib.request.urlopen(server.url, timeout=30) as response:
            body = response.read().decode()
        both = scrape_labelled(server.url)

    # Broker -1 alone: QuotaCollector's scrape with the label added.
    plain = QuotaCollector(*traffic().managers, clock=lambda: t)
    expected = {
        family.name: {
            tuple(sorted({**s.labels, "broker": "-1"}.items())): s.value for s in family.samples
        }
        for family in plain.collect()
    }
    assert alone.keys() == expected.keys()
    for name, values in expected.items():
        assert alone[name].keys() == values.keys(), name
        for key, value in values.items():
            assert alone[name][key] == value or (math.isnan(value) and math.isnan(alone[name][key]))
    assert alone["kafka_server_produce_queue_size"] == {(("broker", "-1"),): 1.0}

    # Broker 0 joined: its series beside broker -1's, in the same families.
    names = [line.split()[2] for line in body.splitlines() if line.startswith("# TYPE ")]
    assert len(names) == len(set(names)), "one family per name"
    assert set(names) == set(expected) | set(MUTATION_METRIC_NAMES)
    rates = both["kafka_server_produce_byte_rate"]
    assert rates[(("broker", "0"), *ul("alice", ""))] == later.produce.measure(
        "alice", "x", now_ms=t
    )
    assert rates[(("broker", "-1"), *ul("alice", ""))] == first.produce.measure(
        "alice", "x", now_ms=t
    )
    assert both["kafka_server_produce_queue_size"] == {
        (("broker", "-1"),): 1.0,
        (("broker", "0"),): 0.0,
    }
    tokens = both["kafka_server_controllermutation_tokens"]
    assert {dict(k)["broker"] for k in tokens} == {"0"}
    assert tokens[(("broker", "0"), *ul("CN%3Da%3Ab", ""))] == mutation.tokens(
        "CN=a:b", "x", now_ms=t
    )
    assert both["kafka_server_controllermutation_queue_size"] == {(("broker", "0"),): 1.0}


def test_per_broker_collector_reads_each_brokers_connection_rates() -> None:
    """Sibling connection quotas (one configuration, sensors apart, as a gateway's ports
    have them) scraped with a ``broker`` label: each broker's values are its own."""
    first = connections()
    second = first.sibling()
    for t in range(0, 50, 10):  # 5 connections on broker 1 only
        second.on_new_connection("PLAINTEXT", "2001:db8::1", now_ms=1000 + t)
    now = 1500
    brokers = {0: (first,), 1: (second,)}
    collector = PerBrokerQuotaCollector(lambda: brokers, clock=lambda: now)
    with serve_metrics(collector) as server:
        got = scrape_labelled(server.url)
    prefix = "kafka_server_socket_server_metrics_"
    assert got[f"{prefix}broker_connection_accept_rate"] == {
        (("broker", "0"),): first.broker_rate(now_ms=now),
        (("broker", "1"),): second.broker_rate(now_ms=now),
    }
    ipv6 = "2001:db8:0:0:0:0:0:1"
    rates = got[f"{prefix}connection_accept_rate"]
    for broker, quotas in (("0", first), ("1", second)):
        for listener in ("PLAINTEXT", "SSL"):
            key = (("broker", broker), ("ip", ""), ("listener", listener))
            assert rates[key] == quotas.listener_rate(listener, now_ms=now)
        key = (("broker", broker), ("ip", ipv6), ("listener", ""))
        assert rates[key] == quotas.ip_rate(ipv6, now_ms=now)
        delay, _ = quotas.listener_throttle_avgs("PLAINTEXT", now_ms=now)
        key = (("broker", broker), ("listener", "PLAINTEXT"))
        scraped = got[f"{prefix}connection_accept_throttle_time"][key]
        assert scraped == delay or (math.isnan(scraped) and math.isnan(delay))
    # Broker 1 counted only its own 5 connections; broker 0 its 30 of each listener.
    assert second.listener_rate("SSL", now_ms=now) == 0.0
    assert (
        0
        < second.listener_rate("PLAINTEXT", now_ms=now)
        < first.listener_rate("PLAINTEXT", now_ms=now)
    )
    assert second.ip_quota("2001:db8::1") == 1  # the configuration is the first's


def test_constant_labels_and_bad_brokers_are_named() -> None:
    manager = kquota.QuotaManager("produce")
    manager.set_quota(kquota.Entity(user="u"), 100.0)
    manager.record("u", "c", 10, now_ms=0)
    collector = QuotaCollector(manager, clock=lambda: 0, labels={"dc": "east", "broker": "7"})
    assert collector.labels == {"dc": "east", "broker": "7"}
    families = {f.name: f for f in collector.collect()}
    assert [s.labels for s in families["kafka_server_produce_byte_rate"].samples] == [
        {"user": "u", "client_id": "", "dc": "east", "broker": "7"}
    ]
    assert [s.labels for s in families["kafka_server_produce_queue_size"].samples] == [
        {"dc": "east", "broker": "7"}
    ]
    for labels, message in (
        ({"user": "x"}, "invalid label name 'user'"),
        ({"client_id": "x"}, "invalid label name 'client_id'"),
        ({"9dc": "x"}, "invalid label name '9dc'"),
        ({"__name": "x"}, "invalid label name '__name'"),
        ({"dc": 1}, "invalid value 1 of label 'dc': expected a str"),
        ("dc", "invalid labels 'dc'"),
    ):
        with pytest.raises(InvalidConfigError, match=message):
            QuotaCollector(manager, labels=labels)  # type: ignore[arg-type]
        with pytest.raises(InvalidConfigError, match=message):
            MutationQuotaCollector(
                kquota.ControllerMutationQuotaManager(),
                labels=labels,  # type: ignore[arg-type]
            )
    # A connection collector's own labels are listener and ip.
    for labels, message in (
        ({"listener": "x"}, "invalid label name 'listener'.* other than 'listener' and 'ip'"),
        ({"ip": "x"}, "invalid label name 'ip'"),
        ({"dc": 1}, "invalid value 1 of label 'dc'"),
    ):
        with pytest.raises(InvalidConfigError, match=message):
            ConnectionQuotaCollector(connections(), labels=labels)  # type: ignore[arg-type]
    with pytest.raises(InvalidConfigError, match="invalid brokers 'b'"):
        PerBrokerQuotaCollector("b")  # type: ignore[arg-type]
    mutation = kquota.ControllerMutationQuotaManager()
    bad: list[tuple[Any, str]] = [
        ([manager], r"invalid brokers \[QuotaManager"),
        ({"0": [manager]}, "invalid broker node id '0': expected an int"),
        ({True: [manager]}, "invalid broker node id True"),
        ({3: [manager, "fetch"]}, "invalid managers of broker 3"),
        ({3: [mutation, mutation]}, "invalid managers of broker 3"),
        ({3: [connections(), connections()]}, "at most one ConnectionQuotas"),
    ]
    for brokers, message in bad:
        per_broker = PerBrokerQuotaCollector(lambda listed=brokers: listed)  # type: ignore[misc]
        with pytest.raises(InvalidConfigError, match=message):
            list(per_broker.collect())
    # None entries (a broker without a mutation manager) are skipped.
    without_mutation = {0: (manager, None)}
    described = PerBrokerQuotaCollector(lambda: without_mutation).describe()
    assert [f.name for f in described] == metric_names("produce")
