"""Kafka's quota administration (KIP-546) through the gateway: ``kafka-configs.sh
--bootstrap-server <gateway>`` changes the quotas the gateway enforces, and every
AlterClientQuotas and DescribeClientQuotas request is answered as a real Kafka cluster
answers it, bad input included (the cluster is the oracle: the same requests go to both)."""

from __future__ import annotations

import importlib
import math
import socket
import struct
from typing import Any

import kquota
import pytest
from kafka_support import kafka_configs
from kafka_wire import encode_request, read_response
from kquota import QuotaManager
from kquota.config.live import LiveQuotas
from kquota.config.model import IpEntity, QuotaConfig
from kquota.config.store import MemoryStore, SQLiteStore
from kquota.proxy import StoreAdmin
from proxy_support import RecordingPlugin, free_ports, read_frame, run_proxy

pytestmark = pytest.mark.slow

NUM_SAMPLES = 11
WINDOW_MS = 1000


def _gateway(cluster: Any, plugin: RecordingPlugin, admin: StoreAdmin) -> Any:
    host, port = cluster.broker(0).bootstrap.rsplit(":", 1)
    return run_proxy(
        (host, int(port)), free_ports(1)[0], plugin, broker_ports=free_ports(3), admin=admin
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
    describes the same quotas afterwards, the gateway's are in its store, and a change is
    applied to the gateway's managers when the command returns."""
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
            for entity in ENTITIES:
                assert _described(gw.address, *entity) == _described(cluster, *entity), entity
            for kind in ("users", "clients", "ips"):
                listed = _described(gw.address, "--entity-type", kind)
                assert listed == _described(cluster, "--entity-type", kind), kind
                assert listed, kind

            # Removals, one of a key that is not set (kafka-configs refuses it itself).
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
        for entity, config in zip(ENTITIES, CONFIGS, strict=True):
            keys = ",".join(kv.split("=")[0] for kv in config.split(","))
            if entity is ENTITIES[0]:
                keys = "producer_byte_rate"
            kafka_configs(cluster, "--alter", "--delete-config", keys, *entity)


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
