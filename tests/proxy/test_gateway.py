"""The gateway (``ProxyServer(..., broker_ports=...)``, ``kquota proxy --bootstrap``) in
front of a real three-broker Apache Kafka cluster, with real clients: every broker address
they see is the gateway's, each broker's traffic is measured on sensors of its own (as each
Kafka broker measures only its own), and a broker stopped and restarted mid-run loses and
duplicates nothing."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kquota
import pytest
from callbacks.per_broker_quota import PerBrokerQuota
from kafka_support import kafka_configs
from kafka_wire import read_response
from kquota import QuotaManager
from kquota.config.store import SQLiteStore
from kquota.proxy import ANONYMOUS
from ports import free_port, free_ports
from proxy_support import (
    RecordingPlugin,
    assert_proxy_cli_refuses,
    connection_outcomes,
    metadata_request,
    read_frame,
    run_proxy,
    scrape_flat,
    stopped_by_sigterm,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings(
        # kafka-python 3.0.12 loads its schemas with importlib.resources' legacy API
        "ignore:(open_text|read_text) is deprecated:DeprecationWarning",
    ),
]

NUM_SAMPLES = 11
WINDOW_MS = 1000
MESSAGE = 1000  # payload bytes (plus an 8-byte sequence number)
BATCH = 16_384


def _plugin() -> RecordingPlugin:
    managers = [
        QuotaManager(t, num_samples=NUM_SAMPLES, window_ms=WINDOW_MS)
        for t in ("produce", "fetch", "request")
    ]
    return RecordingPlugin(*managers)


def _gateway(cluster: Any, plugin: RecordingPlugin, ports: tuple[int, int], **kwargs: Any) -> Any:
    host, port = cluster.broker(0).bootstrap.rsplit(":", 1)
    proxy_port = free_port()
    return run_proxy((host, int(port)), proxy_port, plugin, broker_ports=ports, **kwargs)


def _create_topic(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Create ``topic`` through ``bootstrap``; its partitions' leaders once all are known."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(60)
    return _leaders(bootstrap, topic, partitions)


def _leaders(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The leader of each partition of ``topic``, once every one has a leader."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + 60
    while True:
        meta = admin.list_topics(topic, timeout=10).topics[topic]
        leaders = {p.id: p.leader for p in meta.partitions.values()}
        if len(leaders) == partitions and all(leader >= 0 for leader in leaders.values()):
            return leaders
        assert time.monotonic() < deadline, f"leaders of {topic}: {leaders}"
        time.sleep(0.2)


class Producer:
    """A librdkafka producer writing sequence-numbered messages to every partition in
    turn, with always ~128 waiting."""

    def __init__(self, bootstrap: str, topic: str, client_id: str, **conf: Any) -> None:
        from confluent_kafka import Producer as Librdkafka

        self.topic = topic
        self.failures: list[Any] = []
        self.acked: list[tuple[float, int]] = []
        self.sent = 0
        self.producer = Librdkafka(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "batch.size": BATCH,
                "linger.ms": 5,
                "acks": "all",
                **conf,
            }
        )

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failures.append(err)
        else:
            self.acked.append((time.monotonic(), len(msg.value())))

    def run(
        self,
        seconds: float,
        partitions: int,
        stop: threading.Event | None = None,
        only: int | None = None,
    ) -> None:
        """Writes to every partition in turn, or ``only`` to that one."""
        payload = b"x" * MESSAGE
        start = time.monotonic()
        while time.monotonic() - start < seconds and not (stop and stop.is_set()):
            if len(self.producer) < 128:
                value = self.sent.to_bytes(8, "big") + payload
                partition = self.sent % partitions if only is None else only
                self.producer.produce(
                    self.topic, value, partition=partition, on_delivery=self._delivered
                )
                self.sent += 1
            else:
                self.producer.poll(0.005)
            self.producer.poll(0)

    def finish(self, timeout: float = 120) -> None:
        left = self.producer.flush(timeout)
        assert left == 0, f"{left} messages not delivered"


def _produce_per_broker(
    bootstrap: str, topic: str, leaders: dict[int, int], client_id: str, seconds: float
) -> list[Producer]:
    """A producer per partition of ``leaders`` (partition: broker) for ``seconds``, at
    once, so that one broker's throttles hold up only the producer writing to it."""
    producers = [Producer(bootstrap, topic, client_id) for _ in leaders]
    with ThreadPoolExecutor(len(producers)) as pool:
        runs = [
            pool.submit(p.run, seconds, len(leaders), only=partition)
            for p, partition in zip(producers, sorted(leaders), strict=True)
        ]
        for run in runs:
            run.result()
    for p in producers:
        p.finish()
    return producers


def _consume_all(bootstrap: str, topic: str, count: int, group: str) -> list[int]:
    """Every message of ``topic`` read by an aiokafka consumer group through the gateway
    (its coordinator found through it), as sequence numbers."""
    from aiokafka import AIOKafkaConsumer

    async def consume() -> list[int]:
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            client_id="checker",
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        seen: list[int] = []
        try:
            deadline = time.monotonic() + 120
            while len(seen) < count and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    seen.extend(int.from_bytes(r.value[:8], "big") for r in records)
            extra = await consumer.getmany(timeout_ms=1000)
            seen.extend(
                int.from_bytes(r.value[:8], "big") for records in extra.values() for r in records
            )
            await consumer.commit()
        finally:
            await consumer.stop()
        return seen

    return asyncio.run(consume())


def _throttles_on_one_sensor(plugin: RecordingPlugin, client_id: str) -> list[int]:
    """The produce throttles ``client_id``'s requests would have had on one broker's
    sensors: every decision replayed on one set of managers."""
    shared = QuotaManager("produce", num_samples=NUM_SAMPLES, window_ms=WINDOW_MS)
    for entity, value in plugin.produce.quotas():
        shared.set_quota(entity, value)
    throttles = []
    for a in plugin.applied:
        if a.api == "produce" and a.client_id == client_id:
            throttle = shared.record(a.user, a.client_id, a.size, now_ms=a.at_ms)
            if throttle > 0:
                throttles.append(throttle)
    return throttles


def test_clients_see_only_the_gateway_and_each_broker_measures_its_own(
    kafka_cluster: Any,
) -> None:
    quota = 60_000
    run_s = 12
    topic = "gateway-spread"
    plugin = _plugin()
    plugin.produce.set_quota(kquota.Entity(client_id="greedy"), quota)
    ports = free_ports(3)
    first = ports[0]
    with _gateway(kafka_cluster, plugin, ports) as gateway:
        leaders = _create_topic(gateway.address, topic, 3)
        assert set(leaders.values()) == {0, 1, 2}, f"one leader per broker: {leaders}"

        from confluent_kafka.admin import AdminClient

        seen = AdminClient({"bootstrap.servers": gateway.address}).list_topics(timeout=10)
        assert {b.id: (b.host, b.port) for b in seen.brokers.values()} == {
            n: ("127.0.0.1", first + n) for n in range(3)
        }
        served = gateway.server.brokers
        assert sorted(served) == [0, 1, 2]
        for n, broker in served.items():
            assert broker.port == first + n
            assert f"{broker.upstream[0]}:{broker.upstream[1]}" == kafka_cluster.broker(n).bootstrap
        managers = gateway.server.broker_managers()
        assert sorted(managers) == [-1, 0, 1, 2]
        assert managers[-1][:3] == plugin.managers

        producer = Producer(gateway.address, topic, "greedy")
        start = time.monotonic()
        producer.run(run_s, partitions=3)
        producer.finish()
        sequence = _consume_all(gateway.address, topic, producer.sent, "gateway-check")
        # Taken before the producer ran, each broker's managers have its sensor now: they
        # are the ones its port records on, not copies.
        assert all(managers[n].produce.bound(ANONYMOUS, "greedy") == quota for n in range(3))

    assert producer.failures == []
    assert sorted(sequence) == list(range(producer.sent)), "each message read once"
    applied = [a for a in plugin.applied if a.api == "produce" and a.client_id == "greedy"]
    by_broker = {b: [a for a in applied if a.broker == b] for b in (0, 1, 2)}
    assert all(by_broker.values()), f"produce requests per broker: {by_broker.keys()}"
    assert {a.broker for a in applied} == {0, 1, 2}
    # Each broker's sensors replay as a broker of its own; one sensor for all would not.
    assert plugin.replay_mismatches == []
    per_broker = [a.outcome.throttle_time_ms for a in applied if a.outcome.throttled]
    assert per_broker, "the producer was never throttled"
    assert _throttles_on_one_sensor(plugin, "greedy") != per_broker
    # Each broker holds its share to the quota: together up to three quotas' worth.
    acked = sum(size for t, size in producer.acked if t < start + run_s)
    padded = (NUM_SAMPLES - 1) * WINDOW_MS / 1000
    assert acked <= 3 * quota * (run_s + padded) + 3 * BATCH
    assert acked > 1.5 * quota * run_s, "more than one broker's quota went through"
    for broker, decisions in by_broker.items():
        late = [a.rate for a in decisions if a.at_ms >= decisions[0].at_ms + 5000 and a.rate]
        assert late and max(late) <= 1.25 * quota, f"broker {broker}: {max(late, default=0)}"
    print(
        f"gateway, Q={quota} per broker: {len(applied)} produce requests"
        f" ({', '.join(f'broker {b}: {len(d)}' for b, d in by_broker.items())}),"
        f" {len(per_broker)} throttles, acked {acked / run_s / quota:.2f} Q/s in all,"
        f" {producer.sent} messages consumed once"
    )


def _kafka_python_producer(bootstrap: str, topic: str, seconds: float) -> int:
    """kafka-python writes to each partition in turn for ``seconds``; returns how many."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, client_id="kafka-python", batch_size=BATCH, linger_ms=5
    )
    payload = b"k" * MESSAGE
    sent = 0
    start = time.monotonic()
    try:
        pending = []
        while time.monotonic() - start < seconds:
            pending.append(
                producer.send(topic, sent.to_bytes(8, "big") + payload, partition=sent % 3)
            )
            sent += 1
            if len(pending) >= 256:
                for future in pending:
                    future.get(60)
                pending.clear()
        for future in pending:
            future.get(60)
    finally:
        producer.close(30)
    return sent


def _aiokafka_producer(bootstrap: str, topic: str, seconds: float) -> int:
    """aiokafka does the same."""
    from aiokafka import AIOKafkaProducer

    async def produce() -> int:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, client_id="aiokafka", max_batch_size=BATCH, linger_ms=5
        )
        await producer.start()
        payload = b"a" * MESSAGE
        sent = 0
        start = time.monotonic()
        try:
            pending = []
            while time.monotonic() - start < seconds:
                value = sent.to_bytes(8, "big") + payload
                pending.append(await producer.send(topic, value, partition=sent % 3))
                sent += 1
                if len(pending) >= 256:
                    await asyncio.gather(*pending)
                    pending.clear()
            await asyncio.gather(*pending)
        finally:
            await producer.stop()
        return sent

    return asyncio.run(produce())


def test_kafka_python_and_aiokafka_producers_are_held_per_broker(kafka_cluster: Any) -> None:
    quota = 40_000
    run_s = 10
    topic = "gateway-python-clients"
    plugin = _plugin()
    for client_id in ("kafka-python", "aiokafka"):
        plugin.produce.set_quota(kquota.Entity(client_id=client_id), quota)
    with _gateway(kafka_cluster, plugin, free_ports(3)) as gateway:
        _create_topic(gateway.address, topic, 3)
        with ThreadPoolExecutor(2) as pool:
            running = {
                name: pool.submit(run, gateway.address, topic, run_s)
                for name, run in (
                    ("kafka-python", _kafka_python_producer),
                    ("aiokafka", _aiokafka_producer),
                )
            }
            sent = {name: future.result(180) for name, future in running.items()}
        total = sum(sent.values())
        sequence = _consume_all(gateway.address, topic, total, "gateway-python-check")

    assert len(sequence) == total, f"{len(sequence)} read of {total} sent"
    assert plugin.replay_mismatches == []
    padded = (NUM_SAMPLES - 1) * WINDOW_MS / 1000
    for client_id in ("kafka-python", "aiokafka"):
        applied = [a for a in plugin.applied if a.api == "produce" and a.client_id == client_id]
        throttled = {a.broker for a in applied if a.outcome.throttled}
        assert throttled == {0, 1, 2}, f"{client_id} throttled by brokers {throttled}"
        size = sum(a.size for a in applied)
        assert size <= 3 * quota * (run_s + padded) + 3 * BATCH, client_id
        assert size > 1.5 * quota * run_s, f"{client_id}: {size / run_s / quota:.2f} Q/s"
        print(
            f"{client_id} through the gateway, Q={quota} per broker:"
            f" {size / run_s / quota:.2f} Q/s in all, {sent[client_id]} messages"
        )


def test_a_broker_restarted_mid_run_loses_and_duplicates_nothing(kafka_cluster: Any) -> None:
    topic = "gateway-restart"
    plugin = _plugin()
    ports = free_ports(3)
    with _gateway(kafka_cluster, plugin, ports) as gateway:
        leaders = _create_topic(gateway.address, topic, 3)
        producer = Producer(
            gateway.address,
            topic,
            "steady",
            **{"enable.idempotence": True, "message.timeout.ms": 120_000},
        )
        stop = threading.Event()
        writer = threading.Thread(target=producer.run, args=(120, 3, stop))
        writer.start()
        try:
            time.sleep(3)
            kafka_cluster.stop_broker(1)
            time.sleep(3)
            kafka_cluster.start_broker(1)
            time.sleep(3)
        finally:
            stop.set()
            writer.join(60)
        producer.finish()
        moved = _leaders(gateway.address, topic, 3)
        sequence = _consume_all(gateway.address, topic, producer.sent, "gateway-restart-check")
        decisions = {a.broker for a in plugin.applied if a.api == "produce"}

    assert producer.failures == []
    assert len(sequence) == producer.sent, "nothing lost or duplicated"
    assert sorted(sequence) == list(range(producer.sent))
    assert decisions == {0, 1, 2}
    print(
        f"broker 1 stopped and restarted mid-run: {producer.sent} messages consumed once;"
        f" leaders before {leaders}, after {moved}"
    )


def test_each_port_counts_its_own_connections_as_each_broker_does(kafka_cluster: Any) -> None:
    """KIP-612 in a gateway: each Kafka broker counts only the connections it accepts, so
    an IP over its ``connection_creation_rate`` on one broker's port is still admitted on
    the others, and the bootstrap port counts its own. The connections to the four ports
    come at once, interleaved; each port admits what one broker alone admits."""
    from kquota import ConnectionQuotas, monotonic_ms
    from kquota.broker import serve_metrics

    listener, count = "PLAINTEXT", 12
    # 2 windows of 10 s: a test's connections all fall in the first window of their
    # IP's sensor, so what is admitted does not depend on when each one came.
    quotas = ConnectionQuotas(num_samples=2, window_ms=10_000)
    reference = ConnectionQuotas(num_samples=2, window_ms=10_000)
    reference.add_listener(listener)
    for q in (quotas, reference):
        q.set_ip_quota("127.0.0.1", 1)
    # What one broker alone admits of count + 1 connections in its first window.
    decisions = [
        reference.on_new_connection(listener, "127.0.0.1", now_ms=10**12).ip_throttle_ms == 0
        for _ in range(count + 1)
    ]
    expected = decisions[:count]
    admitted = sum(expected)
    assert 0 < admitted < count
    with _gateway(
        kafka_cluster, _plugin(), free_ports(3), connection_quotas=quotas, listener=listener
    ) as gateway:
        host, port = gateway.address.rsplit(":", 1)
        # The gateway learns the brokers from a Metadata response (this connection is
        # the bootstrap port's first, and within its rate).
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(metadata_request(0, "learn"))
            assert read_frame(sock) is not None
        served = gateway.server.brokers
        assert sorted(served) == [0, 1, 2]
        doors = {-1: int(port), **{n: b.port for n, b in served.items()}}
        with ThreadPoolExecutor(len(doors)) as pool:
            outcomes = dict(
                zip(
                    doors,
                    pool.map(lambda p: connection_outcomes(p, count), doors.values()),
                    strict=True,
                )
            )
        per_broker = gateway.server.broker_managers()
        with serve_metrics(*gateway.server.metrics_collectors(clock=monotonic_ms)) as metrics:
            scraped = scrape_flat(metrics.url)
        throttled = gateway.server.ip_throttled_connections

    # The bootstrap port counted its first connection too: its next ones are the 2nd on.
    assert outcomes[-1] == decisions[1:], outcomes[-1]
    for broker in (0, 1, 2):
        assert outcomes[broker] == expected, f"broker {broker}: {outcomes[broker]}"
    assert throttled == 4 * (count - admitted) + 1
    # Each broker's sensors are its own, on one shared configuration.
    assert per_broker[-1].connections is quotas
    prefix = "kafka_server_socket_server_metrics"
    for broker in (-1, 0, 1, 2):
        connections = per_broker[broker].connections
        assert connections is not None
        assert connections.ip_quota("127.0.0.1") == 1
        assert connections.ip_sensor_names() == ["Connection-Accept-Rate-127.0.0.1"]
        labels = f'broker="{broker}"'
        ip_rate = f'{prefix}_connection_accept_rate{{{labels},ip="127.0.0.1",listener=""}}'
        throttle = f'{prefix}_ip_connection_accept_throttle_time{{{labels},listener="{listener}"}}'
        assert scraped[ip_rate] > 0, ip_rate
        assert scraped[throttle] > 0, throttle
    print(
        f"gateway, connection_creation_rate 1/s: of {count} connections per port,"
        f" {admitted} admitted on each broker's port ({sum(outcomes[-1])} on the bootstrap"
        f" port after its first), {throttled} closed unread in all"
    )


def test_each_broker_has_a_quota_callback_instance_of_its_own(kafka_cluster: Any) -> None:
    # Each Kafka broker has its own callback, told every quota and the cluster metadata as
    # that broker; PerBrokerQuota's limits differ per broker, so each broker's sensors
    # show which instance they asked.
    quota = 60_000
    topic = "gateway-callbacks"
    made: list[PerBrokerQuota] = []

    def factory() -> PerBrokerQuota:
        made.append(PerBrokerQuota())
        return made[-1]

    bootstrap = factory()
    managers = [
        QuotaManager(t, num_samples=NUM_SAMPLES, window_ms=WINDOW_MS, callback=bootstrap)
        for t in ("produce", "fetch", "request")
    ]
    plugin = RecordingPlugin(*managers, quota_callback=bootstrap)
    # Set before the gateway knows any broker: each broker's instance is told at its start.
    plugin.produce.set_quota(kquota.Entity(user=ANONYMOUS), quota)
    for n in range(3):
        # The replay: managers with broker n's own callback, as broker n would have.
        own = PerBrokerQuota(broker=n)
        plugin.replay_broker_on(
            n,
            kquota.RequestPath(
                *(
                    QuotaManager(t, num_samples=NUM_SAMPLES, window_ms=WINDOW_MS, callback=own)
                    for t in ("produce", "fetch", "request")
                )
            ),
        )
    with _gateway(kafka_cluster, plugin, free_ports(3), callback_factory=factory) as gateway:
        leaders = _create_topic(gateway.address, topic, 3)
        assert set(leaders.values()) == {0, 1, 2}, f"one leader per broker: {leaders}"
        first = _produce_per_broker(gateway.address, topic, leaders, "scaled", 4)
        per_broker = gateway.server.broker_managers()
        assert len(made) == 4, "one instance for the bootstrap and one per broker"
        by_broker = {cb.broker: cb for cb in made[1:]}
        assert sorted(by_broker) == [0, 1, 2]
        assert bootstrap.broker is None
        for n, cb in by_broker.items():
            assert cb.quotas == {("produce", ANONYMOUS): quota}
            assert {m.local_broker for m in cb.metadata} == {n}
            assert per_broker[n].produce.callback is cb
            assert per_broker[n].produce.bound(ANONYMOUS, "scaled") == quota / 2 * (n + 1)
        plugin.pull()
        # A change made while clients run reaches every broker's instance.
        plugin.produce.set_quota(kquota.Entity(user=ANONYMOUS), 2 * quota)
        assert all(cb.quotas == {("produce", ANONYMOUS): 2 * quota} for cb in made)
        again = _produce_per_broker(gateway.address, topic, leaders, "scaled", 2)
        for n in range(3):
            assert per_broker[n].produce.bound(ANONYMOUS, "scaled") == quota * (n + 1)
        plugin.pull()

    assert all(cb.closed for cb in made)
    assert all(p.failures == [] for p in first + again)
    applied = [a for a in plugin.applied if a.api == "produce" and a.client_id == "scaled"]
    throttled = {a.broker for a in applied if a.outcome.throttled}
    assert throttled == {0, 1, 2}, f"throttled on brokers {throttled}"
    # Each broker throttled exactly as a broker with its own callback instance would.
    assert plugin.replay_mismatches == []


def test_cli_rejects_bad_gateway_options_with_status_2(tmp_path: Any) -> None:
    gateway = ["--listen", "127.0.0.1:0", "--bootstrap", "127.0.0.1:9,127.0.0.1:10"]
    cases = [
        (gateway, "--bootstrap needs --broker-ports FIRST-LAST"),
        ([*gateway, "--broker-ports", "9300"], "invalid --broker-ports '9300'"),
        (
            [*gateway, "--broker-ports", "9400-9300"],
            "invalid --broker-ports (9400, 9300): the last port is below the first",
        ),
        (
            [*gateway, "--broker-ports", "0-10"],
            "invalid --broker-ports (0, 10): expected ports from 1 to 65535",
        ),
        (
            ["--listen", "0.0.0.0:0", "--bootstrap", "h:9", "--broker-ports", "1-2"],
            'invalid --listen "0.0.0.0:0": a gateway on every interface needs'
            " --advertised-host, the host clients reach it at",
        ),
        (
            [*gateway, "--broker-ports", "1-2", "--advertised-host", "a b"],
            'invalid --advertised-host "a b": expected a host name or IP',
        ),
        (
            [*gateway, "--broker-ports", "9300-9310", "--quota-callback", "m:f"],
            "invalid quota callback 'm:f': cannot import module 'm'",
        ),
        (
            ["--listen", "127.0.0.1:0", "--upstream", "h:9", "--broker-ports", "9300-9310"],
            "--broker-ports needs --bootstrap",
        ),
        (
            ["--listen", "127.0.0.1:0", "--upstream", "h:9,h:10"],
            "invalid --upstream 'h:9,h:10': one broker",
        ),
        (
            ["--listen", "127.0.0.1:0", "--bootstrap", "h:9,nowhere", "--broker-ports", "1-2"],
            "invalid --bootstrap 'nowhere'",
        ),
        (
            ["--listen", "127.0.0.1:0", "--upstream", "h:9", "--quota-admins", "User:ops"],
            "--quota-admins needs --bootstrap",
        ),
        (
            [*gateway, "--broker-ports", "9300-9310", "--quota-admins", "cluster,ops"],
            "invalid principal 'ops' in --quota-admins 'cluster,ops': expected User:NAME",
        ),
        (
            [*gateway, "--broker-ports", "9300-9310", "--quota-admins", "nobody,User:ops"],
            "invalid --quota-admins 'nobody,User:ops': nobody stands alone",
        ),
    ]
    assert_proxy_cli_refuses(cases, tmp_path / "q.db")


def test_bad_gateway_settings_are_named() -> None:
    from kquota._core import ProxyDataPath
    from kquota.broker import QuotaPlugin
    from kquota.exceptions import InvalidConfigError
    from kquota.proxy import ProxyServer

    with QuotaPlugin() as plugin:
        for upstream, kwargs, message in (
            (("h", 9), {"broker_ports": (9300,)}, r"invalid broker_ports \(9300,\)"),
            (("h", 9), {"broker_ports": (9400, 9300)}, "the last port is below the first"),
            (("h", 9), {"broker_ports": (0, 10)}, r"invalid broker_ports \(0, 10\)"),
            ([("h", 9), ("g", 9)], {}, "a sidecar has one broker"),
            (("h", 9), {"advertised_host": "gw"}, r'advertised_host "gw".*needs broker_ports'),
            ([("h", 0)], {"broker_ports": (1, 2)}, 'invalid upstream "h:0"'),
        ):
            with pytest.raises(InvalidConfigError, match=message):
                ProxyServer(upstream, plugin, **kwargs)  # type: ignore[arg-type]
        managers = plugin.managers
        for args, kwargs, message in (
            (
                ("127.0.0.1:9,nowhere",),
                {"broker_ports": (1, 2)},
                'invalid upstream "nowhere"',
            ),
            (("127.0.0.1:9",), {"broker_ports": (2, 1)}, "the last port is below the first"),
            (("127.0.0.1:9",), {"broker_ports": (1, 70000)}, "expected ports from 1 to 65535"),
            (
                ("127.0.0.1:9",),
                {"broker_ports": (1, 2), "listen": "0.0.0.0:0"},
                "a gateway on every interface needs advertised_host",
            ),
            (
                ("127.0.0.1:9",),
                {"broker_ports": (1, 2), "advertised_host": " "},
                "invalid advertised_host",
            ),
        ):
            with pytest.raises(InvalidConfigError, match=message):
                ProxyDataPath(*args, *managers, **kwargs)

    class NoQuotas(kquota.QuotaCallback):
        def quota_metric_tags(self, quota_type: str, user: str, client_id: str) -> Any:
            return {"user": user, "client-id": ""}

        def quota_limit(self, quota_type: str, tags: Any) -> float | None:
            return None

    callback = NoQuotas()
    with_callback = [QuotaManager(t, callback=callback) for t in ("produce", "fetch", "request")]
    with pytest.raises(InvalidConfigError, match="each broker has a callback instance of its own"):
        ProxyDataPath("127.0.0.1:9", *with_callback, broker_ports=(1, 2))
    with pytest.raises(InvalidConfigError, match="invalid callback_factory 42"):
        ProxyDataPath("127.0.0.1:9", *with_callback, broker_ports=(1, 2), callback_factory=42)
    plugin = QuotaPlugin(*with_callback, quota_callback=callback)
    for upstream, kwargs, message in (
        (("h", 9), {"broker_ports": (1, 2)}, "needs callback_factory"),
        (("h", 9), {"callback_factory": NoQuotas}, "callback_factory needs broker_ports"),
        (
            ("h", 9),
            {"broker_ports": (1, 2), "callback_factory": 42},
            "invalid callback_factory 42",
        ),
    ):
        with pytest.raises(InvalidConfigError, match=message):
            ProxyServer(upstream, plugin, **kwargs)  # type: ignore[arg-type]


@dataclass
class CliGateway:
    """A ``kquota proxy --bootstrap`` process (see :func:`_cli_gateway`)."""

    bootstrap: str
    line: str
    """The line it printed once listening."""
    store: Path
    capture: Path
    stderr: str = ""
    """What it wrote on stderr, once stopped."""


@contextlib.contextmanager
def _cli_gateway(
    cluster: Any,
    tmp_path: Path,
    entity: tuple[str, ...],
    config: str,
    *options: str,
    env: dict[str, str] | None = None,
) -> Iterator[CliGateway]:
    """``kquota configs --alter ENTITY --add-config CONFIG`` into a new store, then
    ``kquota proxy --bootstrap`` in front of ``cluster`` with that store, a capture and
    ``options``, as a user runs it; stopped with SIGTERM at the end (status 0)."""
    store = tmp_path / "quotas.sqlite"
    subprocess.run(
        [
            *(sys.executable, "-m", "kquota", "configs", "--store", str(store), "--alter"),
            *entity,
            *("--add-config", config),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    first, last = free_ports(3)
    listen = free_port()
    capture = tmp_path / "capture"
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "kquota", "proxy", "--listen", f"127.0.0.1:{listen}"),
            *("--bootstrap", cluster.bootstrap, "--broker-ports", f"{first}-{last}"),
            *("--store", str(store), "--capture", str(capture), *options),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    with stopped_by_sigterm(process) as ended:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith(
            f"kquota proxy: gateway listening on 127.0.0.1:{listen}, brokers on ports"
            f" {first}-{last}, bootstrap {cluster.bootstrap}"
        ), (line, process.stderr.read() if process.stderr else "")
        gateway = CliGateway(f"127.0.0.1:{listen}", line, store, capture)
        yield gateway
    gateway.stderr = ended.stderr


def test_the_cli_gateway_captures_each_broker_and_applies_the_store(
    kafka_cluster: Any, tmp_path: Any
) -> None:
    """``kquota proxy --bootstrap``, as a user runs it: a quota set with ``kquota configs``
    throttles a producer on each broker, the capture's broker column is the node id, a
    scrape of ``--metrics-port`` shows each broker's sensor as that broker's decisions
    left it, and ``kafka-configs.sh --bootstrap-server <gateway>`` changes the gateway's
    store."""
    import pyarrow.parquet as pq

    quota = 30_000
    with _cli_gateway(
        kafka_cluster,
        tmp_path,
        ("--entity-type", "clients", "--entity-name", "capped"),
        f"producer_byte_rate={quota}",
        "--metrics-port",
        "0",
    ) as gateway:
        metrics_url = f"http://127.0.0.1:{int(gateway.line.rsplit(':', 1)[1])}/metrics"
        bootstrap = gateway.bootstrap
        _create_topic(bootstrap, "gateway-cli", 3)
        producer = Producer(bootstrap, "gateway-cli", "capped")
        producer.run(6, partitions=3)
        producer.finish()
        scraped = _scrape(metrics_url)
        # Kafka's own tool administers the gateway's store (KIP-546), not the cluster's.
        capped = ("--entity-type", "clients", "--entity-name", "capped")
        kafka_configs(bootstrap, "--alter", "--add-config", "consumer_byte_rate=45000", *capped)
        described = kafka_configs(bootstrap, "--describe", *capped)
        assert "producer_byte_rate=30000.0" in described, described
        assert "consumer_byte_rate=45000.0" in described, described
        assert "capped" not in kafka_configs(kafka_cluster.bootstrap, "--describe", *capped)
    store, capture, stderr = gateway.store, gateway.capture, gateway.stderr
    assert producer.failures == []
    stored = SQLiteStore(store).read().config.by_entity()[kquota.Entity(client_id="capped")]
    assert stored == {"producer_byte_rate": 30_000, "consumer_byte_rate": 45_000}
    rows = [r for f in sorted(capture.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    produced = [r for r in rows if r["api"] == "produce" and r["client_id"] == "capped"]
    assert {r["broker"] for r in produced} == {"0", "1", "2"}, stderr
    throttled = {r["broker"] for r in produced if r["kafka_throttle_ms"] > 0}
    assert throttled == {"0", "1", "2"}, f"throttled on {throttled}"
    assert {r["broker"] for r in rows} <= {"-1", "0", "1", "2"}

    # The scrape: every series has a broker label, each broker's sensor is its own.
    assert {broker for _, broker, _ in scraped} == {"-1", "0", "1", "2"}
    for name in ("produce", "fetch", "request"):
        assert all((f"kafka_server_{name}_queue_size", b, ()) in scraped for b in "012")
    # Each port's connection rates too (the CLI applies them in gateway mode).
    accepted = "kafka_server_socket_server_metrics_broker_connection_accept_rate"
    assert all((accepted, b, ()) in scraped for b in ("-1", "0", "1", "2")), scraped.keys()
    read_at, last = {}, {}
    for broker in ("0", "1", "2"):
        series = ("", "capped")
        rate = scraped["kafka_server_produce_byte_rate", broker, series]
        throttle = scraped["kafka_server_produce_throttle_time", broker, series]
        assert scraped["kafka_server_produce_utilization", broker, series] == rate / quota
        assert rate > 0 and throttle > 0, (broker, rate, throttle)
        # The sensor as this broker's decisions (and only they) left it, read at the scrape.
        replay = QuotaManager("produce", num_samples=NUM_SAMPLES, window_ms=WINDOW_MS)
        replay.set_quota(kquota.Entity(client_id="capped"), quota)
        mine = [r for r in produced if r["broker"] == broker]
        for r in mine:
            replay.record(r["user"], "capped", r["bytes"], now_ms=r["ts_ms"])
            if r["kafka_throttle_ms"] > 0:
                replay.throttle(r["user"], "capped", r["kafka_throttle_ms"], now_ms=r["ts_ms"])
        last[broker] = max(r["ts_ms"] for r in mine)
        read_at[broker] = _read_alike(replay, mine[-1]["user"], last[broker], rate, throttle)
    # ... and all three were read at one time: the scrape's.
    assert len(set(read_at.values())) == 1 and None not in read_at.values(), (read_at, last)
    at = read_at["0"]
    rates = {b: scraped["kafka_server_produce_byte_rate", b, ("", "capped")] for b in read_at}
    print(
        "gateway metrics: each broker's scraped sensor is its decisions' sensor read at"
        f" one time, {at - max(last.values())} ms after the last decision: "
        + ", ".join(f"broker {b} {rates[b] / quota:.2f} Q" for b in sorted(rates))
    )


def test_the_cli_gateway_gives_each_broker_its_own_quota_callback(
    kafka_cluster: Any, tmp_path: Any
) -> None:
    """``kquota proxy --bootstrap ... --quota-callback module:factory``: each broker's
    decisions, as the capture keeps them, are those of a broker with its own instance of
    the callback (whose limits depend on the broker it serves)."""
    import paths
    import pyarrow.parquet as pq

    quota = 40_000
    support = os.pathsep.join(p for p in (str(paths.SUPPORT), os.environ.get("PYTHONPATH")) if p)
    with _cli_gateway(
        kafka_cluster,
        tmp_path,
        ("--user", ANONYMOUS),
        f"producer_byte_rate={quota}",
        *("--quota-callback", "callbacks.per_broker_quota:PerBrokerQuota"),
        env={"PYTHONPATH": support},
    ) as gateway:
        leaders = _create_topic(gateway.bootstrap, "gateway-cli-callback", 3)
        assert set(leaders.values()) == {0, 1, 2}, f"one leader per broker: {leaders}"
        producers = _produce_per_broker(gateway.bootstrap, "gateway-cli-callback", leaders, "cb", 4)
    capture, stderr = gateway.capture, gateway.stderr
    assert all(p.failures == [] for p in producers)
    rows = [r for f in sorted(capture.glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    produced = [r for r in rows if r["api"] == "produce" and r["client_id"] == "cb"]
    throttled = {r["broker"] for r in produced if r["kafka_throttle_ms"] > 0}
    assert throttled == {"0", "1", "2"}, (throttled, stderr)
    for broker in (0, 1, 2):
        own = PerBrokerQuota(broker=broker)
        replay = QuotaManager("produce", num_samples=NUM_SAMPLES, window_ms=WINDOW_MS, callback=own)
        replay.set_quota(kquota.Entity(user=ANONYMOUS), quota)
        mine = [r for r in produced if r["broker"] == str(broker)]
        want = [max(0, replay.record(r["user"], "cb", r["bytes"], now_ms=r["ts_ms"])) for r in mine]
        assert [r["kafka_throttle_ms"] for r in mine] == want, f"broker {broker}"
        assert replay.bound(ANONYMOUS, "cb") == quota / 2 * (broker + 1)


def _scrape(url: str) -> dict[tuple[str, str, tuple[str, ...]], float]:
    """One HTTP scrape: ``{(family, broker, (user, client_id) or ()): value}``; every
    family once, every sample with a ``broker`` label."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=30) as response:
        body = response.read().decode()
    values = {}
    names = []
    for family in text_string_to_metric_families(body):
        names.append(family.name)
        for sample in family.samples:
            labels = dict(sample.labels)
            broker = labels.pop("broker")
            series = tuple(labels[k] for k in ("user", "client_id") if k in labels)
            values[family.name, broker, series] = sample.value
    assert len(names) == len(set(names)), names
    return values


def _read_alike(
    replay: QuotaManager, user: str, last_ms: int, rate: float, throttle: float
) -> int | None:
    """The first time from ``last_ms`` (its last record) at which ``replay``'s sensor
    reads exactly ``rate`` and ``throttle``, if it does within two minutes."""
    for t in range(last_ms, last_ms + 120_000):
        if replay.measure(user, "capped", now_ms=t) == rate and (
            replay.throttle_time_avg(user, "capped", now_ms=t) == throttle
        ):
            return t
    return None


def test_a_broker_without_a_port_keeps_its_address_and_is_logged_once(
    kafka_cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Two ports for three brokers: broker 2 has none, so clients are told its own address
    (the gateway cannot serve it), and the gateway says so once, not on every response.

    The Metadata requests go to the gateway's bootstrap port on one connection: a client
    library would send some to broker 2 itself, whose answer no gateway rewrote."""
    from kio.schema.metadata.v12.response import MetadataResponse

    first, last = free_ports(2)
    with (
        caplog.at_level("WARNING", logger="kquota.proxy"),
        _gateway(kafka_cluster, _plugin(), (first, last)) as gateway,
    ):
        host, port = gateway.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            for correlation_id in range(3):
                sock.sendall(metadata_request(correlation_id, "no-port"))
                frame = read_frame(sock)
                assert frame is not None, "the gateway closed the connection"
                seen = read_response(frame, MetadataResponse.__api_key__, 12)
        brokers = {int(b.node_id): f"{b.host}:{b.port}" for b in seen.brokers}
        served = sorted(gateway.server.brokers)
    assert brokers == {
        0: f"127.0.0.1:{first}",
        1: f"127.0.0.1:{last}",
        2: kafka_cluster.broker(2).bootstrap,
    }
    assert served == [0, 1]
    warned = [r.getMessage() for r in caplog.records if "has no port" in r.getMessage()]
    assert len(warned) == 1, warned
    assert warned[0].startswith(f"broker 2 at {kafka_cluster.broker(2).bootstrap} has no port")


STORM_S = 20.0
"""A Metadata storm's run: Kafka's first burst, its trough and its second burst (at ~11 s)."""


def test_a_metadata_storm_makes_about_as_many_requests_through_the_gateway(
    kafka_cluster: Any, tmp_path: Path
) -> None:
    """The Metadata storm of tests/proxy/test_kafka_side_by_side.py (one connection asking
    as fast as it is answered, throttles ignored) under ``request_percentage=1``, on broker
    0: straight to it under Kafka's own quota, then through the gateway's bootstrap port
    (which reaches broker 0) under the same quota in the gateway's store, judged as there
    by the requests made and the throttles seen in all (``storm_totals``), each after an
    unthrottled storm of its own on the same side (``metadata_storm``'s warm-up). Measured
    (requests in 20 s, Kafka / the gateway, the machine otherwise quiet): 6657 / 6939,
    x1.04."""
    from side_by_side_runs import Run, storm_report, storm_totals
    from side_by_side_support import Side, metadata_storm, set_kafka_quota

    storm = metadata_storm(STORM_S, warm_up_s=3.0)
    broker = kafka_cluster.broker(0)
    quota = "request_percentage=1"
    kafka = Run("kafka", "gateway-storm-kafka", 1.0)
    set_kafka_quota(broker, kafka.client_id, quota)
    try:
        storm(Side("kafka", broker.bootstrap, kafka.client_id), kafka)
    finally:
        entity = ("--entity-type", "clients", "--entity-name", kafka.client_id)
        kafka_configs(broker.bootstrap, "--alter", "--delete-config", "request_percentage", *entity)
    gateway = Run("kquota", "gateway-storm-kquota", 1.0)
    entity = ("--entity-type", "clients", "--entity-name", gateway.client_id)
    with _cli_gateway(kafka_cluster, tmp_path, entity, quota) as cli:
        storm(Side("kquota", cli.bootstrap, gateway.client_id), gateway)
    print(f"\n{storm_report(kafka, gateway)}")
    assert kafka.failures == gateway.failures == [], (kafka.failures, gateway.failures)
    assert storm_totals(kafka, gateway) == []
