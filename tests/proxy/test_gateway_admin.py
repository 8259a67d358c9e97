"""Kafka's quota administration (KIP-546) through the gateway: ``kafka-configs.sh
--bootstrap-server <gateway>`` changes the quotas the gateway enforces, and every
AlterClientQuotas and DescribeClientQuotas request is answered as a real Kafka cluster
answers it, bad input included (the cluster is the oracle: the same requests go to both).
Several gateways share one configuration on a compacted topic of the cluster."""

from __future__ import annotations

import importlib
import logging
import math
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import kquota
import pytest
from kafka_support import KafkaToolFailed, kafka_configs
from kafka_wire import encode_request, read_response
from kquota import QuotaManager
from kquota.config.backends import open_store
from kquota.config.kafka_store import KafkaTopicStore
from kquota.config.live import LiveQuotas
from kquota.config.model import IpEntity, QuotaConfig, Window
from kquota.config.store import (
    Alteration,
    ChangeSet,
    MemoryStore,
    SQLiteStore,
    StoreSnapshot,
)
from kquota.exceptions import QuotaFileError, StoreError
from kquota.proxy import AdminAccess, StoreAdmin
from ports import free_port, free_ports
from proxy_support import RecordingPlugin, read_frame, run_proxy

pytestmark = pytest.mark.slow

NUM_SAMPLES = 11
WINDOW_MS = 1000


def _gateway(cluster: Any, plugin: RecordingPlugin, admin: StoreAdmin) -> Any:
    host, port = cluster.broker(0).bootstrap.rsplit(":", 1)
    return run_proxy(
        (host, int(port)), free_port(), plugin, broker_ports=free_ports(3), admin=admin
    )


def _plugin() -> RecordingPlugin:
    return RecordingPlugin(
        *(
            QuotaManager(t, num_samples=NUM_SAMPLES, window_ms=WINDOW_MS)
            for t in ("produce", "fetch", "request")
        )
    )


def _described(bootstrap: str, *entity: str) -> list[str]:
    """``kafka-configs --describe`` of ``entity``, its lines sorted (Kafka lists entities
    in no fixed order)."""
    return sorted(kafka_configs(bootstrap, "--describe", *entity).splitlines())


# -- kafka-configs.sh: the Admin API's alterClientQuotas / describeClientQuotas ----------

ENTITIES = [
    ("--entity-type", "users", "--entity-name", "alice"),
    (
        "--entity-type",
        "users",
        "--entity-name",
        "alice",
        "--entity-type",
        "clients",
        "--entity-default",
    ),
    ("--entity-type", "clients", "--entity-name", "batch-loader"),
    ("--entity-type", "ips", "--entity-name", "10.1.2.3"),
]
ENTITY_PARTS: list[list[tuple[str, str | None]]] = [
    [("user", "alice")],
    [("user", "alice"), ("client-id", None)],
    [("client-id", "batch-loader")],
    [("ip", "10.1.2.3")],
]
CONFIGS = [
    "producer_byte_rate=50000,consumer_byte_rate=80000",
    "request_percentage=25.5",
    "producer_byte_rate=1048576,controller_mutation_rate=12.5",
    "connection_creation_rate=40",
]


def test_kafka_configs_administers_the_gateway_as_it_does_a_cluster(
    kafka_cluster: Any, tmp_path: Any
) -> None:
    """The same ``kafka-configs`` commands go to the gateway and to the cluster; each
    describes the same quotas afterwards (every user, client id and IP entity), the
    gateway's are in its store, and a change is applied to the gateway's managers when the
    command returns."""
    store = SQLiteStore(tmp_path / "quotas.sqlite")
    store.replace(QuotaConfig())
    plugin = _plugin()
    # A follower that never polls on its own: only the gateway's writes refresh it.
    live = LiveQuotas(store, plugin.produce, plugin.fetch, plugin.request, interval=3600)
    live.start()
    cluster = kafka_cluster.bootstrap
    try:
        with _gateway(kafka_cluster, plugin, StoreAdmin(store, on_change=live.refresh)) as gw:
            for entity, config in zip(ENTITIES, CONFIGS, strict=True):
                for bootstrap in (gw.address, cluster):
                    kafka_configs(bootstrap, "--alter", "--add-config", config, *entity)
            # Applied by the time kafka-configs returned, with no poll of the store.
            alice = kquota.Entity(user="alice")
            assert plugin.produce.quota(alice) == 50_000
            assert plugin.fetch.quota(alice) == 80_000
            assert (
                plugin.request.quota(kquota.Entity(user="alice", client_id=kquota.DEFAULT)) == 25.5
            )
            assert plugin.produce.quota_for("bob", "batch-loader") == 1_048_576
            for kind in ("users", "clients", "ips"):
                listed = _described(gw.address, "--entity-type", kind)
                assert listed == _described(cluster, "--entity-type", kind), kind
                assert listed, kind

            # A removal.
            for bootstrap in (gw.address, cluster):
                kafka_configs(
                    bootstrap, "--alter", "--delete-config", "consumer_byte_rate", *ENTITIES[0]
                )
            assert plugin.fetch.quota(alice) is None
            assert plugin.produce.quota(alice) == 50_000
            assert _described(gw.address, *ENTITIES[0]) == _described(cluster, *ENTITIES[0])
            stored = store.read().config.by_entity()
            assert stored[alice] == {"producer_byte_rate": 50_000}
            assert stored[IpEntity("10.1.2.3")] == {"connection_creation_rate": 40}
    finally:
        live.stop()
        # The cluster as it was: later tests compare what it describes with the gateway.
        removals = [
            (parts, [(kv.split("=")[0], None) for kv in config.split(",")])
            for parts, config in zip(ENTITY_PARTS, CONFIGS, strict=True)
        ]
        _ask(kafka_cluster.broker(0).bootstrap, _alter(1, removals, validate_only=False))
        deadline = time.monotonic() + 30
        for node in kafka_cluster.brokers:  # each broker's metadata has the removal
            while _describe_result(_ask(node.bootstrap, _describe(1, []))) != (0, "", []):
                assert time.monotonic() < deadline, f"quotas left on broker {node.node_id}"
                time.sleep(0.1)


# -- the wire: the same requests to a broker and to the gateway ---------------------------


# kio writes no NaN: a request carries this value instead, and its bytes are replaced.
NAN_STAND_IN = 12345.678


def _ask(address: str, body: Any) -> Any:
    host, port = address.rsplit(":", 1)
    frame = encode_request(body, 7, "kquota-admin-test")
    frame = frame.replace(struct.pack(">d", NAN_STAND_IN), struct.pack(">d", math.nan))
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(frame)
        frame = read_frame(sock)
    assert frame is not None, f"{address} closed the connection"
    return read_response(frame, body.__api_key__, body.__version__)


def _alter(
    version: int,
    entries: list[tuple[list[tuple[str, str | None]], list[tuple[str, float | None]]]],
    validate_only: bool = True,
) -> Any:
    from kio.static.primitive import f64

    schema = importlib.import_module(f"kio.schema.alter_client_quotas.v{version}.request")
    return schema.AlterClientQuotasRequest(
        entries=tuple(
            schema.EntryData(
                entity=tuple(schema.EntityData(entity_type=t, entity_name=n) for t, n in entity),
                ops=tuple(
                    schema.OpData(key=k, value=f64(0.0 if v is None else v), remove=v is None)
                    for k, v in ops
                ),
            )
            for entity, ops in entries
        ),
        validate_only=validate_only,
    )


def _describe(
    version: int, components: list[tuple[str, int, str | None]], strict: bool = False
) -> Any:
    from kio.static.primitive import i8

    schema = importlib.import_module(f"kio.schema.describe_client_quotas.v{version}.request")
    return schema.DescribeClientQuotasRequest(
        components=tuple(
            schema.ComponentData(entity_type=t, match_type=i8(m), match=n) for t, m, n in components
        ),
        strict=strict,
    )


def _alter_results(response: Any) -> set[tuple[frozenset[tuple[str, str | None]], int, str | None]]:
    return {
        (
            frozenset((e.entity_type, e.entity_name) for e in entry.entity),
            int(entry.error_code),
            entry.error_message,
        )
        for entry in response.entries
    }


def _describe_result(response: Any) -> tuple[int, str | None, Any]:
    entries = None
    if response.entries is not None:
        entries = sorted(
            (
                sorted((e.entity_type, e.entity_name) for e in entry.entity),
                sorted((v.key, float(v.value)) for v in entry.values),
            )
            for entry in response.entries
        )
    return int(response.error_code), response.error_message, entries


USER = [("user", "u1")]
BAD_ALTERATIONS: list[Any] = [
    [([], [("producer_byte_rate", 1.0)])],
    [([("group", "g")], [("producer_byte_rate", 1.0)])],
    [([("user", "")], [("producer_byte_rate", 1.0)])],
    [([("client-id", "")], [])],
    [([("ip", "10.0.0.1"), ("user", "u")], [("producer_byte_rate", 1.0)])],
    [([("ip", "10.0.0.1"), ("client-id", None)], [])],
    [([("ip", "not a host")], [("connection_creation_rate", 1.0)])],
    [(USER, [("bogus", 1.0)])],
    [(USER, [("connection_creation_rate", 5.0)])],
    [([("ip", None)], [("producer_byte_rate", 5.0)])],
    [(USER, [("producer_byte_rate", 0.0)])],
    [(USER, [("consumer_byte_rate", -5.0)])],
    [(USER, [("request_percentage", -0.5)])],
    [(USER, [("producer_byte_rate", 1.5)])],
    [(USER, [("producer_byte_rate", 1e19)])],
    [([("ip", "10.0.0.1")], [("connection_creation_rate", 3e9)])],
    [([("ip", "10.0.0.1")], [("connection_creation_rate", 2.25)])],
    [(USER, [("producer_byte_rate", 1.0), ("producer_byte_rate", 2.0)])],
    [(USER, [("request_percentage", 1.0), ("producer_byte_rate", 0.5), ("bogus", 1.0)])],
    [
        ([("user", "u"), ("client-id", "c")], [("producer_byte_rate", 5.0)]),
        ([("client-id", "c"), ("user", "u")], [("consumer_byte_rate", 5.0)]),
    ],
    # valid ones, beside invalid ones in the same request
    [
        (USER, [("producer_byte_rate", 1024.0), ("request_percentage", 2.5)]),
        ([("client-id", None)], [("controller_mutation_rate", 0.5)]),
        ([("ip", None)], [("connection_creation_rate", 7.0)]),
        ([("user", None), ("client-id", "c")], [("consumer_byte_rate", None)]),
        ([("user", "x")], [("producer_byte_rate", 2.5)]),
        ([("user", "a"), ("user", "b")], [("producer_byte_rate", 5.0)]),
    ],
]
BAD_FILTERS: list[Any] = [
    ([("group", 2, None)], False),
    ([("", 2, None)], False),
    ([("user", 0, None)], False),
    ([("user", 1, "alice")], False),
    ([("user", 2, "alice")], False),
    ([("user", 7, None)], False),
    ([("user", 2, None), ("user", 1, None)], False),
    ([("ip", 2, None), ("user", 2, None)], False),
    ([("client-id", 0, "c"), ("ip", 1, None)], True),
    # valid: nothing is stored on either side
    ([("user", 2, None)], True),
    ([], False),
]


@pytest.mark.parametrize("version", [0, 1])
def test_admin_requests_are_answered_as_a_kafka_cluster_answers_them(
    kafka_cluster: Any, version: int
) -> None:
    broker = kafka_cluster.broker(1).bootstrap
    with _gateway(kafka_cluster, _plugin(), StoreAdmin(MemoryStore())) as gateway:
        for entries in BAD_ALTERATIONS:
            request = _alter(version, entries)
            expected = _alter_results(_ask(broker, request))
            assert _alter_results(_ask(gateway.address, request)) == expected, entries
            assert any(code != 0 for _, code, _ in expected) or len(entries) > 1
        for components, strict in BAD_FILTERS:
            request = _describe(version, components, strict)
            expected = _describe_result(_ask(broker, request))
            assert _describe_result(_ask(gateway.address, request)) == expected, components


def test_a_fractional_byte_rate_is_refused_with_kafkas_message(
    kafka_cluster: Any, tmp_path: Any
) -> None:
    """``kafka-configs --add-config consumer_byte_rate=2.5``: the cluster and the gateway
    refuse it with the same message (the one the quota file, ``kquota configs`` and the
    Python API give, from the core's rule), and the gateway's store is unchanged."""
    store = SQLiteStore(tmp_path / "quotas.sqlite")
    store.replace(QuotaConfig())
    before = store.read()
    add = ("--alter", "--add-config", "consumer_byte_rate=2.5", "--entity-type", "users")
    message = "consumer_byte_rate cannot be a fractional value."
    # not asking the cluster first: the gateway's own check answers
    admin = StoreAdmin(store, access=AdminAccess(ask_cluster=False))
    with _gateway(kafka_cluster, _plugin(), admin) as gateway:
        for bootstrap in (kafka_cluster.bootstrap, gateway.address):
            with pytest.raises(KafkaToolFailed, match=re.escape(message)):
                kafka_configs(bootstrap, *add, "--entity-name", "frac")
        # a whole rate is taken
        kafka_configs(
            gateway.address,
            "--alter",
            "--add-config",
            "consumer_byte_rate=2",
            "--entity-type",
            "users",
            "--entity-name",
            "whole",
        )
    assert store.read().version == before.version + 1
    assert store.read().config.by_entity() == {
        kquota.Entity(user="whole"): {"consumer_byte_rate": 2}
    }
    with pytest.raises(QuotaFileError, match=f"^{re.escape(message)}"):
        Alteration(kquota.Entity(user="frac"), {"consumer_byte_rate": 2.5})


def test_what_kquota_cannot_keep_is_refused_with_its_reason(kafka_cluster: Any) -> None:
    """Kafka takes these; kquota's store cannot hold them faithfully, so the gateway
    refuses each (the other entities of the request are still written)."""
    entries: Any = [
        (USER, [("request_percentage", NAN_STAND_IN)]),
        ([("user", "<default>")], [("producer_byte_rate", 10.0)]),
        ([("ip", "localhost")], [("connection_creation_rate", 10.0)]),
        ([("user", "kept")], [("producer_byte_rate", 10.0)]),
    ]
    kafka = _alter_results(_ask(kafka_cluster.broker(0).bootstrap, _alter(1, entries)))
    assert {code for _, code, _ in kafka} == {0}, kafka
    store = MemoryStore()
    with _gateway(kafka_cluster, _plugin(), StoreAdmin(store)) as gateway:
        response = _ask(gateway.address, _alter(1, entries, validate_only=False))
    results = {
        dict(entity).get("user", dict(entity).get("ip")): (code, message)
        for entity, code, message in _alter_results(response)
    }
    assert results["kept"] == (0, None)
    assert results["u1"][0] == 42 and "request_percentage" in results["u1"][1]
    assert results["<default>"][0] == 42 and "'<default>'" in results["<default>"][1]
    assert (
        results["localhost"][0] == 42 and "host names are not resolved" in results["localhost"][1]
    )
    assert store.read().config.by_entity() == {
        kquota.Entity(user="kept"): {"producer_byte_rate": 10}
    }


# -- one configuration for several gateways: a store on a compacted topic ----------------


def _topic() -> str:
    return f"kquota-quotas-{uuid.uuid4().hex[:8]}"


def test_a_kafka_topic_store_shares_one_configuration(kafka_cluster: Any) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    bootstrap, topic = kafka_cluster.bootstrap, _topic()
    first = open_store(f"kafka://{bootstrap}/{topic}")
    second = KafkaTopicStore(bootstrap, topic)
    assert isinstance(first, KafkaTopicStore) and first.topic == topic
    with pytest.raises(StoreError, match=f"Kafka topic store '{topic}' .* does not exist"):
        first.read()
    alice = kquota.Entity(user="alice")
    version = first.apply(ChangeSet((Alteration(alice, {"producer_byte_rate": 1000.0}),)))
    assert second.read() == StoreSnapshot(version, first.read().config)
    assert second.read().config.by_entity() == {alice: {"producer_byte_rate": 1000}}

    # Writers in two threads, each altering properties of its own: nothing is lost.
    def write(store: KafkaTopicStore, user: str) -> None:
        for i in range(10):
            store.apply(
                ChangeSet((Alteration(kquota.Entity(user=user), {"request_percentage": i + 1.0}),))
            )

    writers = [
        threading.Thread(target=write, args=(store, user))
        for store, user in ((first, "w1"), (second, "w2"))
    ]
    for t in writers:
        t.start()
    for t in writers:
        t.join(120)
    quotas = first.read().config.by_entity()
    assert (
        quotas[kquota.Entity(user="w1")]
        == quotas[kquota.Entity(user="w2")]
        == {"request_percentage": 10}
    )
    # A change that does not apply writes nothing.
    before = second.version()
    with pytest.raises(QuotaFileError, match="cannot delete consumer_byte_rate"):
        second.apply(ChangeSet((Alteration(alice, delete={"consumer_byte_rate"}),)))
    assert first.version() == before
    # The window and a whole replacement travel too.
    config = QuotaConfig.from_entities(
        {IpEntity("10.0.0.9"): {"connection_creation_rate": 5}}, Window(5, 2000)
    )
    second.replace(config)
    assert first.read().config == config
    # kquota configs --store kafka://... writes and describes it too.
    spec = f"kafka://{bootstrap}/{topic}"
    configs = [sys.executable, "-m", "kquota", "configs", "--store", spec]
    users = ("--entity-type", "users", "--entity-name", "cli")
    alter = [*configs, "--alter", "--add-config", "producer_byte_rate=777", *users]
    subprocess.run(alter, check=True, capture_output=True, timeout=120)
    assert first.read().config.by_entity()[kquota.Entity(user="cli")] == {"producer_byte_rate": 777}
    shown = subprocess.run(
        [*configs, "--describe", *users], check=True, capture_output=True, text=True, timeout=120
    )
    assert "producer_byte_rate=777" in shown.stdout, shown

    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_configs([ConfigResource("topic", topic)])
    settings = next(iter(described.values())).result(30)
    assert settings["cleanup.policy"].value == "compact"
    for bad in ("kafka://", "kafka://host/", "kafka://host:x/t", "kafka://h:1/bad topic"):
        with pytest.raises(StoreError, match="invalid Kafka"):
            open_store(bad)
    first.close()
    second.close()


def test_a_kafka_topic_store_takes_librdkafka_settings(kafka_cluster: Any, tmp_path: Path) -> None:
    """Settings after the topic and in a ``config=`` file reach the store's clients: TLS
    against the cluster's plaintext listener cannot reach it, the same file with
    ``security.protocol=PLAINTEXT`` in the address can; mistakes are named at open."""
    bootstrap, topic = kafka_cluster.bootstrap, _topic()
    settings = tmp_path / "store.properties"
    settings.write_text(
        "# the store's clients\n\nclient.id = kquota-store\nsecurity.protocol=SSL\n"
    )
    spec = f"kafka://{bootstrap}/{topic}?config={settings}"
    alice = ChangeSet((Alteration(kquota.Entity(user="alice"), {"producer_byte_rate": 10.0}),))
    tls = open_store(spec, timeout=3)
    with pytest.raises(StoreError, match="cannot be reached"):
        tls.apply(alice)
    tls.close()
    plain = open_store(f"{spec}&security.protocol=PLAINTEXT", timeout=30)
    plain.apply(alice)
    assert KafkaTopicStore(bootstrap, topic).read().config == plain.read().config
    plain.close()

    here = f"kafka://{bootstrap}/{topic}"
    refused = {
        "?socket.timeout=5": 'No such configuration property: "socket.timeout"',
        "?security.protocol=bogus": 'Invalid value "bogus"',
        "?group.id=mine": "'group.id' is the store's own",
        "?bootstrap.servers=elsewhere:9092": "'bootstrap.servers' is the store's own",
        "?client.id=a&client.id=b": "'client.id' given twice",
        "?client.id": "invalid settings 'client.id'",
        f"?config={tmp_path / 'missing.properties'}": "cannot read Kafka store settings",
    }
    for query, reason in refused.items():
        with pytest.raises(StoreError, match=re.escape(reason)):
            open_store(here + query)
    settings.write_text("client.id=kquota\nsasl.password\n")
    with pytest.raises(
        StoreError, match=re.escape("line 2: expected NAME=VALUE, got 'sasl.password'")
    ):
        open_store(spec)
    with pytest.raises(StoreError, match="expected text for both"):
        KafkaTopicStore(bootstrap, topic, config={"socket.timeout.ms": 5})  # type: ignore[dict-item]


def test_a_kafka_store_address_keeps_a_plus_and_decodes_percent_escapes(tmp_path: Path) -> None:
    """A ``+`` in a setting or a ``config=`` path is itself (a path or a password may hold
    one), and ``%XX`` is decoded: librdkafka's refusal shows the value as it got it."""
    here = "kafka://127.0.0.1:9/quotas"
    settings = tmp_path / "a+b.properties"
    settings.write_text("socket.timeout=5\n")
    for query, reason in {
        f"?config={settings}": 'No such configuration property: "socket.timeout"',
        "?security.protocol=a+b": 'Invalid value "a+b"',
        "?security.protocol=a%2Bb%26c": 'Invalid value "a+b&c"',
        "?client.id=x&&security.protocol=a": "invalid settings 'client.id=x&&security",
        "?=x": "invalid settings '=x'",
    }.items():
        with pytest.raises(StoreError, match=re.escape(reason)):
            open_store(here + query)


def _instance(cluster: Any, store: KafkaTopicStore, ports: tuple[int, int]) -> Any:
    """A gateway as ``kquota proxy --bootstrap --store kafka://...`` runs one."""
    plugin = _plugin()
    live = LiveQuotas(store, plugin.produce, plugin.fetch, plugin.request).start()
    host, port = cluster.broker(0).bootstrap.rsplit(":", 1)
    running = run_proxy(
        (host, int(port)),
        free_port(),
        plugin,
        broker_ports=ports,
        admin=StoreAdmin(store, on_change=live.refresh),
    )
    return plugin, live, running


def test_two_gateways_share_what_kafka_configs_sets_while_clients_run(
    kafka_cluster: Any,
) -> None:
    """kafka-configs changes a quota through gateway A while a producer writes through
    gateway B: B applies it within its follow interval and throttles the producer."""
    from test_gateway import Producer, _create_topic

    topic = _topic()
    KafkaTopicStore(kafka_cluster.bootstrap, topic).apply(ChangeSet(window=Window(NUM_SAMPLES)))
    plugin_a, live_a, running_a = _instance(
        kafka_cluster, KafkaTopicStore(kafka_cluster.bootstrap, topic), free_ports(3)
    )
    plugin_b, live_b, running_b = _instance(
        kafka_cluster, KafkaTopicStore(kafka_cluster.bootstrap, topic), free_ports(3)
    )
    shared = kquota.Entity(client_id="shared")
    stop = threading.Event()
    try:
        with running_a as a, running_b as b:
            _create_topic(b.address, "two-gateways", 3)
            producer = Producer(b.address, "two-gateways", "shared")
            runner = threading.Thread(target=lambda: producer.run(300, partitions=3, stop=stop))
            runner.start()
            time.sleep(3)
            seen: dict[str, float] = {}
            watching = threading.Event()

            def watch() -> None:  # when each gateway's managers first hold the change
                while not watching.wait(0.002) and len(seen) < 2:
                    for name, plugin in (("A", plugin_a), ("B", plugin_b)):
                        if name not in seen and plugin.produce.quota(shared) == 10_000:
                            seen[name] = time.monotonic()

            watcher = threading.Thread(target=watch)
            watcher.start()
            asked, asked_ms = time.monotonic(), kquota.monotonic_ms()
            kafka_configs(
                a.address,
                "--alter",
                "--add-config",
                "producer_byte_rate=10000",
                "--entity-type",
                "clients",
                "--entity-name",
                "shared",
            )
            assert plugin_a.produce.quota(shared) == 10_000, "A: in force when answered"
            watcher.join(30)
            watching.set()
            assert set(seen) == {"A", "B"}, f"B never applied the change: {seen}"
            time.sleep(5)  # the producer goes on under the new quota
            stop.set()
            runner.join(60)
            producer.finish()
    finally:
        stop.set()
        for live in (live_a, live_b):
            live.stop()
            assert isinstance(live.store, KafkaTopicStore)
            live.store.close()
    assert producer.failures == []
    produced = [a for a in plugin_b.applied if a.api == "produce" and a.client_id == "shared"]
    throttled = [a for a in produced if a.outcome.throttled]
    assert throttled, "B never throttled the producer after the change"
    assert produced[0].at_ms < asked_ms, "the producer wrote before the change"
    assert min(a.at_ms for a in throttled) >= asked_ms, "throttled before the change"
    print(
        f"A applied the change {seen['A'] - asked:.2f} s after kafka-configs started,"
        f" B {seen['B'] - asked:.2f} s after;"
        f" {len(throttled)} of {len(produced)} produce requests throttled on B"
    )


def test_a_partitioned_gateway_keeps_its_quotas_and_says_so(
    kafka_cluster: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An instance whose store cannot reach the cluster keeps the quotas it has, logs that
    it cannot refresh, and follows again (with what changed meanwhile) once it can. Its
    path to the cluster is a kquota gateway, shut down and restarted to cut and heal it."""
    topic = _topic()
    direct = KafkaTopicStore(kafka_cluster.bootstrap, topic)
    alice = kquota.Entity(user="alice")
    direct.apply(ChangeSet((Alteration(alice, {"producer_byte_rate": 1000.0}),)))
    host, port = kafka_cluster.broker(0).bootstrap.rsplit(":", 1)
    hop_port, hop_brokers = free_port(), free_ports(3)

    def hop() -> Any:
        return run_proxy((host, int(port)), hop_port, _plugin(), broker_ports=hop_brokers)

    produce = QuotaManager("produce", num_samples=NUM_SAMPLES, window_ms=WINDOW_MS)
    store = KafkaTopicStore(f"127.0.0.1:{hop_port}", topic, timeout=2)
    with caplog.at_level(logging.INFO, logger="kquota.config.live"):
        with hop():
            live = LiveQuotas(store, produce, interval=0.2).start()
            assert produce.quota(alice) == 1000
        try:
            deadline = time.monotonic() + 60
            while "cannot refresh quotas from Kafka topic store" not in caplog.text:
                assert time.monotonic() < deadline, caplog.text
                time.sleep(0.1)
            assert produce.quota(alice) == 1000, "kept while partitioned"
            direct.apply(ChangeSet((Alteration(alice, {"producer_byte_rate": 2000.0}),)))
            assert produce.quota(alice) == 1000
            with hop():
                while produce.quota(alice) != 2000:
                    assert time.monotonic() < deadline + 60, caplog.text
                    time.sleep(0.1)
            assert "are followed again" in caplog.text
        finally:
            live.stop()
            store.close()
            direct.close()
