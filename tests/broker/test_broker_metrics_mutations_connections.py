"""Prometheus metrics (kquota.broker.metrics) of KIP-599 and KIP-612: the collectors of the
controller-mutation quota and of the connection-creation rates, with Kafka's names and the
core's values, scraped while threads record, and the per-broker collector that labels and
merges several brokers' sensors.

Loops that run alongside other threads stop on what they must have seen, not after a
time budget; a deadline only bounds a hang."""

from __future__ import annotations

import itertools
import math
import threading
import time
import urllib.request
from typing import Any

import kquota
import pytest
from broker_support import (
    HANG_S,
    no_thread_left_behind,  # noqa: F401 (autouse fixture)
    traffic,
)
from kquota.broker import (
    CONNECTION_METRIC_NAMES,
    MUTATION_METRIC_NAMES,
    ConnectionQuotaCollector,
    MutationQuotaCollector,
    PerBrokerQuotaCollector,
    QuotaCollector,
    QuotaPlugin,
    metric_names,
    serve_metrics,
)
from kquota.exceptions import InvalidConfigError
from prometheus_client.registry import CollectorRegistry
from scrapes import scrape_labelled


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
    second = first.for_another_broker()
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
