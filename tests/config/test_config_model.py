"""kquota.config.model: properties and values, the quota file format, entity wording."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import paths
import pytest
from kquota import DEFAULT, ConnectionQuotas, ControllerMutationQuotaManager, Entity
from kquota.config.model import (
    ALL_PROPERTIES,
    CLIENT_PROPERTIES,
    IP_PROPERTIES,
    PROPERTIES,
    PROPERTY_OF,
    IpEntity,
    QuotaConfig,
    QuotaEntry,
    Window,
    check_ip,
    check_property,
    check_value,
    connection_rate,
    describe_entity,
    parse_value,
)
from kquota.exceptions import QuotaFileError

EXAMPLE: dict[str, Any] = {
    "window": {"num_samples": 11, "window_ms": 1000},
    "quotas": [
        {"entity": {"user": "alice"}, "config": {"producer_byte_rate": 1048576}},
        {"entity": {"user": "<default>"}, "config": {"consumer_byte_rate": 2097152}},
        {"entity": {"user": "bob", "client-id": "app-1"}, "config": {"request_percentage": 50}},
    ],
}


def test_properties_and_quota_types() -> None:
    assert PROPERTIES == {
        "producer_byte_rate": "produce",
        "consumer_byte_rate": "fetch",
        "request_percentage": "request",
    }
    assert {PROPERTY_OF[t] for t in ("produce", "fetch", "request")} == set(PROPERTIES)
    assert check_property("request_percentage") == "request_percentage"
    assert check_property("controller_mutation_rate") == "controller_mutation_rate"
    assert check_property("connection_creation_rate") == "connection_creation_rate"
    with pytest.raises(
        QuotaFileError, match=r"^Invalid configuration key replica_byte_rate \(expected one of "
    ):
        check_property("replica_byte_rate")


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (0, r"Quota producer_byte_rate must be greater than 0 \(got 0.0;"),
        (-1, r"Quota producer_byte_rate must be greater than 0 \(got -1.0;"),
        (2.5, r"producer_byte_rate cannot be a fractional value. \(got 2.5;"),
        (math.nan, r"Quota producer_byte_rate must be a finite number \(got NaN;"),
        (math.inf, r"Proposed value for producer_byte_rate is too large for a LONG. \(got inf;"),
        (-math.inf, r"Quota producer_byte_rate must be greater than 0 \(got -inf;"),
        pytest.param(10**400, r"Proposed value .* too large for a LONG. \(got inf;", id="10**400"),
        ("5", "invalid value '5' for producer_byte_rate: expected a number"),
        (True, "invalid value True for producer_byte_rate"),
        (None, "invalid value None for producer_byte_rate"),
    ],
)
def test_check_value_rejects(bad: object, message: str) -> None:
    with pytest.raises(QuotaFileError, match=f"^{message}"):
        check_value("producer_byte_rate", bad)


@pytest.mark.parametrize(
    ("text", "value"),
    [("1048576", 1048576.0), (" 2.5e6 ", 2.5e6), ("+5.", 5.0), ("150.", 150.0), ("1E2", 100.0)],
)
def test_parse_value_accepts_decimal_numbers(text: str, value: float) -> None:
    assert parse_value("producer_byte_rate", text) == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("0", r"^Quota consumer_byte_rate must be greater than 0 \(got 0.0;"),
        ("-1", r"^Quota consumer_byte_rate must be greater than 0 \(got -1.0;"),
        ("0.0e5", r"^Quota consumer_byte_rate must be greater than 0 \(got 0.0;"),
        ("2.5", r"^consumer_byte_rate cannot be a fractional value. \(got 2.5;"),
        ("nan", r"^Quota consumer_byte_rate must be a finite number \(got NaN;"),
        ("Infinity", r"too large for a LONG. \(got inf;"),
        ("-inf", r"must be greater than 0 \(got -inf;"),
        ("1e400", r"too large for a LONG. \(got inf;"),
        ("abc", "invalid value 'abc' for consumer_byte_rate: expected a decimal number"),
        ("", "invalid value '' for consumer_byte_rate: expected a decimal number"),
        ("1_000", "invalid value '1_000' for .*: expected a decimal number"),
        ("0x10", "invalid value '0x10' for .*: expected a decimal number"),
        ("5 MB", "invalid value '5 MB' for .*: expected a decimal number"),
    ],
)
def test_parse_value_rejects_and_names_the_text(text: str, reason: str) -> None:
    with pytest.raises(QuotaFileError, match=reason):
        parse_value("consumer_byte_rate", text)


@pytest.mark.parametrize(
    ("entity", "text"),
    [
        (Entity(user="alice"), "user-principal 'alice'"),
        (Entity(user=DEFAULT), "the default user-principal"),
        (Entity(client_id="app-1"), "client-id 'app-1'"),
        (Entity(client_id=DEFAULT), "the default client-id"),
        (Entity(user="bob", client_id="app-1"), "user-principal 'bob', client-id 'app-1'"),
        (Entity(user="bob", client_id=DEFAULT), "user-principal 'bob', the default client-id"),
        (Entity(user=DEFAULT, client_id="app-1"), "the default user-principal, client-id 'app-1'"),
        (
            Entity(user=DEFAULT, client_id=DEFAULT),
            "the default user-principal, the default client-id",
        ),
    ],
)
def test_describe_entity_in_kafka_wording(entity: Entity, text: str) -> None:
    assert describe_entity(entity) == text


def test_file_format_round_trip(tmp_path: Path) -> None:
    config = QuotaConfig.from_json(EXAMPLE)
    assert config.quotas("produce") == [(Entity(user="alice"), 1048576.0)]
    assert config.quotas("fetch") == [(Entity(user=DEFAULT), 2097152.0)]
    assert config.quotas("request") == [(Entity(user="bob", client_id="app-1"), 50.0)]
    path = tmp_path / "quotas.json"
    path.write_text(config.dumps())
    again = QuotaConfig.load(path)
    assert again.to_json() == config.to_json()
    assert [q["entity"] for q in json.loads(path.read_text())["quotas"]] == [
        {"user": "<default>"},  # defaults before names
        {"user": "alice"},
        {"user": "bob", "client-id": "app-1"},
    ]


def test_by_entity_and_from_entities() -> None:
    config = QuotaConfig.from_json(EXAMPLE)
    entities = config.by_entity()
    entities[Entity(user="alice")]["producer_byte_rate"] = 1.0  # a copy
    assert config.by_entity()[Entity(user="alice")] == {"producer_byte_rate": 1048576.0}
    rebuilt = QuotaConfig.from_entities(
        {**config.by_entity(), Entity(client_id="x"): {}}, Window(3, 2000)
    )
    assert rebuilt.window == Window(3, 2000)
    assert len(rebuilt.entries) == 3  # the entity without properties is left out


def test_manager_and_scaled() -> None:
    config = QuotaConfig.from_json(EXAMPLE).scaled(2)
    manager = config.manager("produce")
    assert manager.quotas() == [(Entity(user="alice"), 2097152.0)]
    assert (manager.num_samples, manager.window_ms) == (11, 1000)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "expected a JSON object"),
        ({"quota": []}, r"unknown key\(s\) \['quota'\]"),
        ({"window": {"num_samples": 0}}, "invalid num_samples 0"),
        ({"window": {"window_ms": 1500}}, "invalid window_ms 1500"),
        ({"window": {"size": 1}}, "invalid window"),
        ({"quotas": {}}, "expected a list"),
        ({"quotas": [{"entity": {"user": "a"}}]}, r"quotas\[0\]: expected"),
        ({"quotas": [{"entity": {}, "config": {}}]}, r"quotas\[0\]: invalid entity"),
        ({"quotas": [{"entity": {"host": "1.2.3.4"}, "config": {}}]}, "invalid entity"),
        ({"quotas": [{"entity": {"user": 5}, "config": {}}]}, "invalid entity"),
        ({"quotas": [{"entity": {"user": "a"}, "config": {}}]}, "expected properties"),
        (
            {"quotas": [{"entity": {"user": "a"}, "config": {"producer_byte_rate": -1}}]},
            r"quotas\[0\]: Quota producer_byte_rate must be greater than 0 \(got -1.0;",
        ),
        (
            {"quotas": [{"entity": {"user": "a"}, "config": {"bytes": 1}}]},
            r"quotas\[0\]: user-principal 'a': Invalid configuration key bytes \(user and",
        ),
        (
            {
                "quotas": [
                    {"entity": {"user": "a"}, "config": {"producer_byte_rate": 1}},
                    {"entity": {"user": "a"}, "config": {"consumer_byte_rate": 1}},
                ]
            },
            r"quotas\[1\]: entity .* appears twice",
        ),
    ],
)
def test_bad_file_content_names_the_part(data: object, message: str) -> None:
    with pytest.raises(QuotaFileError, match=f"my.json: .*{message}"):
        QuotaConfig.from_json(data, "my.json")


def test_a_kafka_version_follows_the_file_and_its_managers() -> None:
    data = {
        "kafka_version": "4.4.0",
        "quotas": [{"entity": {"user": "a"}, "config": {"producer_byte_rate": 1.0}}],
    }
    config = QuotaConfig.from_json(data)
    assert config.kafka_version == "4.4"  # as the core names the release
    assert config.manager("produce").kafka_version == "4.4"
    assert config.mutation_manager().kafka_version == "4.4"
    assert config.scaled(2.0).kafka_version == "4.4"
    assert QuotaConfig.from_json(json.loads(config.dumps())) == config
    assert "kafka_version" not in QuotaConfig().to_json()
    assert QuotaConfig().manager("fetch").kafka_version == "4.1"


@pytest.mark.parametrize(
    ("release", "message"),
    [
        ("3.7", 'invalid Kafka version "3.7": expected major.minor'),
        ("latest", 'invalid Kafka version "latest"'),
        (4.4, "invalid kafka_version 4.4: expected a Kafka release"),
    ],
)
def test_a_bad_kafka_version_names_the_value(release: object, message: str) -> None:
    with pytest.raises(QuotaFileError, match=f"my.json: {re.escape(message)}"):
        QuotaConfig.from_json({"kafka_version": release, "quotas": []}, "my.json")


@pytest.mark.parametrize("text", ["{", '{"quotas": NaN}', "[1,]", "\xff"])
def test_unreadable_files(tmp_path: Path, text: str) -> None:
    path = tmp_path / "q.json"
    path.write_text(text, encoding="latin-1")
    with pytest.raises(QuotaFileError, match=r"q\.json"):
        QuotaConfig.load(path)
    with pytest.raises(QuotaFileError, match="cannot read quota file"):
        QuotaConfig.load(tmp_path / "missing.json")


def test_scaled_quotas_are_bounds_that_need_not_be_whole() -> None:
    config = QuotaConfig.from_entities(
        {
            Entity(user="a"): {"producer_byte_rate": 1001, "controller_mutation_rate": 3},
            IpEntity("10.0.0.1"): {"connection_creation_rate": 7},
        }
    )
    scaled = config.scaled(0.5)
    assert scaled.by_entity() == {
        Entity(user="a"): {"producer_byte_rate": 500.5, "controller_mutation_rate": 1.5},
        IpEntity("10.0.0.1"): {"connection_creation_rate": 7},
    }
    # kquota's own text of it (what a back-test's workers read) is read back as bounds;
    # as a quota file, Kafka's rule refuses it.
    assert QuotaConfig.from_json(json.loads(scaled.dumps()), bounds=True) == scaled
    with pytest.raises(QuotaFileError, match="producer_byte_rate cannot be a fractional value"):
        QuotaConfig.from_json(json.loads(scaled.dumps()))
    for bad in (0, -1.0, math.nan, math.inf):
        with pytest.raises(QuotaFileError, match="invalid scale"):
            config.scaled(bad)
    with pytest.raises(QuotaFileError, match="a quota must be a finite number"):
        config.scaled(1e308)  # a byte rate beyond the largest double


def test_quota_entry_validates() -> None:
    with pytest.raises(QuotaFileError, match=r"^Quota producer_byte_rate must be greater than 0"):
        QuotaEntry(Entity(user="a"), {"producer_byte_rate": 0})
    with pytest.raises(QuotaFileError, match=r"^consumer_byte_rate cannot be a fractional value"):
        QuotaEntry(Entity(user="a"), {"consumer_byte_rate": 2.5})


# -- KIP-599 and KIP-612: controller_mutation_rate, IP entities, connection_creation_rate ---

NEW_EXAMPLE: dict[str, Any] = {
    "window": {"num_samples": 5, "window_ms": 2000},
    "quotas": [
        {"entity": {"user": "alice"}, "config": {"controller_mutation_rate": 2.5}},
        {
            "entity": {"user": "<default>", "client-id": "admin"},
            "config": {"controller_mutation_rate": 10, "producer_byte_rate": 1024},
        },
        {"entity": {"ip": "10.0.0.1"}, "config": {"connection_creation_rate": 20}},
        {"entity": {"ip": "2001:DB8:0:0:0:0:0:1"}, "config": {"connection_creation_rate": 3}},
        {"entity": {"ip": "<default>"}, "config": {"connection_creation_rate": 100}},
    ],
}


def test_property_kinds_follow_kafkas_config_defs() -> None:
    # QuotaConfig.userAndClientQuotaConfigs and ipConfigs at the pinned commit.
    assert CLIENT_PROPERTIES == (
        "producer_byte_rate",
        "consumer_byte_rate",
        "request_percentage",
        "controller_mutation_rate",
    )
    assert IP_PROPERTIES == ("connection_creation_rate",)
    assert (*CLIENT_PROPERTIES, *IP_PROPERTIES) == ALL_PROPERTIES
    assert set(PROPERTIES) < set(CLIENT_PROPERTIES)  # the back-test's three are unchanged


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        (1, 1.0),
        (20.0, 20.0),
        (2147483647, 2147483647.0),
        (20.0000005, 20.0000005),  # Kafka's controller tolerates a fraction up to 1e-6
    ],
)
def test_connection_creation_rate_is_kafkas_int(value: float, accepted: float) -> None:
    assert check_value("connection_creation_rate", value) == accepted
    assert connection_rate(accepted) == int(value)  # the broker truncates (toInt)


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (0, "Quota connection_creation_rate must be greater than 0 (got 0.0;"),
        (-3, "Quota connection_creation_rate must be greater than 0 (got -3.0;"),
        (math.nan, "Quota connection_creation_rate must be a finite number (got NaN;"),
        (1.5, "connection_creation_rate cannot be a fractional value. (got 1.5;"),
        # 0.999999 left over: not integral
        (19.999999, "connection_creation_rate cannot be a fractional value. (got 19.999999;"),
        (20.00001, "connection_creation_rate cannot be a fractional value. (got 20.00001;"),
        (
            2147483648,
            "Proposed value for connection_creation_rate is too large for an INT. "
            "(got 2147483648.0;",
        ),
        (1e300, "Proposed value for connection_creation_rate is too large for an INT. (got 1e300;"),
    ],
)
def test_connection_creation_rate_rejects(value: float, reason: str) -> None:
    with pytest.raises(
        QuotaFileError, match=rf"^{re.escape(reason)} expected an INT: a whole number from 1 to"
    ):
        check_value("connection_creation_rate", value)


@pytest.mark.parametrize("text", ["20", "20.0", "2e1", " 7 "])
def test_connection_creation_rate_from_text(text: str) -> None:
    assert parse_value("connection_creation_rate", text) == float(text)


@pytest.mark.parametrize(
    ("text", "reason"),
    [("2.5", "cannot be a fractional value. \\(got 2.5;"), ("3e9", "is too large for an INT")],
)
def test_connection_creation_rate_from_bad_text(text: str, reason: str) -> None:
    with pytest.raises(QuotaFileError, match=f"^.*connection_creation_rate {reason}"):
        parse_value("connection_creation_rate", text)


def test_controller_mutation_rate_is_a_double_greater_than_0() -> None:
    assert check_value("controller_mutation_rate", 0.5) == 0.5
    assert parse_value("controller_mutation_rate", "1e-3") == 0.001
    assert check_value("controller_mutation_rate", 2.5) == 2.5  # a DOUBLE: fractions allowed
    for bad, reason in ((0, "greater than 0"), (-1.0, "greater than 0"), (math.inf, "finite")):
        with pytest.raises(
            QuotaFileError, match=f"^Quota controller_mutation_rate must be .*{reason}"
        ):
            check_value("controller_mutation_rate", bad)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("10.0.0.1", "10.0.0.1"),
        ("::1", "::1"),
        ("0:0:0:0:0:0:0:1", "::1"),
        ("2001:DB8::A", "2001:db8::a"),
        ("::ffff:192.168.0.9", "192.168.0.9"),  # IPv4-mapped: Java's InetAddress is IPv4
        (DEFAULT, DEFAULT),
    ],
)
def test_ip_entities_are_canonical(text: str, canonical: str) -> None:
    assert check_ip(text) == canonical
    assert IpEntity(text) == IpEntity(canonical)
    assert IpEntity(text).ip == canonical
    assert IpEntity(text).is_default == (text == DEFAULT)


def test_an_ipv4_mapped_address_is_its_ipv4_entity_in_the_connection_quota() -> None:
    """A dual-stack acceptor sees an IPv4 client as ``::ffff:a.b.c.d``: the quota set on
    ``a.b.c.d`` (as a store keeps it) is that client's, with one sensor for both forms,
    so connections under either form are throttled as if all came as ``a.b.c.d``."""

    def connections(*ips: str) -> tuple[ConnectionQuotas, list[int]]:
        quotas = ConnectionQuotas(num_samples=2, window_ms=1000)
        quotas.add_listener("PLAINTEXT")
        quotas.set_ip_quota(IpEntity("::ffff:10.0.0.1").ip, 1)
        now = 10**12
        throttles = [quotas.on_new_connection("PLAINTEXT", ip, now).ip_throttle_ms for ip in ips]
        return quotas, throttles

    mixed, throttles = connections(*("::ffff:10.0.0.1", "10.0.0.1") * 3)
    _, plain = connections(*("10.0.0.1",) * 6)
    assert throttles == plain and throttles[0] == 0 and throttles[-1] > 0, throttles
    assert mixed.ip_quotas() == ([("10.0.0.1", 1)], None)
    assert mixed.ip_quota("::ffff:10.0.0.1") == mixed.ip_quota("10.0.0.1") == 1
    assert len(mixed.ip_sensor_names()) == 1, mixed.ip_sensor_names()


@pytest.mark.parametrize(
    "text",
    [
        "localhost",
        "kafka.example.com",
        "10.0.0",
        "10.0.0.256",
        "010.0.0.1",
        "1.2.3.4 ",
        "fe80::1%eth0",
        "[::1]",
        "",
        "10.0.0.1/32",
    ],
)
def test_ip_must_be_an_address_literal(text: str) -> None:
    with pytest.raises(
        QuotaFileError,
        match=f"invalid ip {re.escape(repr(text))}: expected an IPv4 or IPv6 address .*"
        "host names are not resolved",
    ):
        IpEntity(text)


def test_ip_entity_wording_and_properties() -> None:
    assert describe_entity(IpEntity("10.0.0.1")) == "ip '10.0.0.1'"
    assert describe_entity(IpEntity(DEFAULT)) == "the default ip"
    assert QuotaEntry(IpEntity("::1"), {"connection_creation_rate": 5}).config == {
        "connection_creation_rate": 5
    }
    with pytest.raises(
        QuotaFileError,
        match=r"^ip '::1': Invalid configuration key producer_byte_rate \(an ip entity takes only "
        "connection_creation_rate",
    ):
        QuotaEntry(IpEntity("::1"), {"producer_byte_rate": 5})
    with pytest.raises(
        QuotaFileError,
        match=r"^the default client-id: Invalid configuration key connection_creation_rate \(user "
        "and client-id entities take producer_byte_rate, ",
    ):
        QuotaEntry(Entity(client_id=DEFAULT), {"connection_creation_rate": 5})
    with pytest.raises(QuotaFileError, match="invalid entity 'x'"):
        QuotaEntry("x", {"producer_byte_rate": 5})  # type: ignore[arg-type]


def test_new_entities_round_trip_through_the_file_format(tmp_path: Path) -> None:
    config = QuotaConfig.from_json(NEW_EXAMPLE)
    assert config.mutation_quotas() == [
        (Entity(user="alice"), 2.5),
        (Entity(user=DEFAULT, client_id="admin"), 10.0),
    ]
    assert config.quotas("produce") == [(Entity(user=DEFAULT, client_id="admin"), 1024.0)]
    assert sorted(config.ip_quotas(), key=str) == [
        ("10.0.0.1", 20),
        ("2001:db8::1", 3),
        (None, 100),
    ]
    path = tmp_path / "quotas.json"
    path.write_text(config.dumps())
    again = QuotaConfig.load(path)
    assert again.by_entity() == config.by_entity()
    assert again.to_json() == config.to_json()
    written = json.loads(path.read_text())["quotas"]
    # Clients first, then IPs: the default, then addresses in numeric order (IPv4 first).
    assert [q["entity"] for q in written] == [
        {"user": "<default>", "client-id": "admin"},
        {"user": "alice"},
        {"ip": "<default>"},
        {"ip": "10.0.0.1"},
        {"ip": "2001:db8::1"},
    ]
    # A whole connection rate is written as a JSON integer, a double as a double.
    assert written[3]["config"] == {"connection_creation_rate": 20}
    assert written[1]["config"] == {"controller_mutation_rate": 2.5}


@pytest.mark.parametrize(
    ("entity", "config", "message"),
    [
        (
            {"ip": "10.0.0.1", "user": "a"},
            {"connection_creation_rate": 1},
            "an ip entity cannot be combined with user or client-id",
        ),
        (
            {"ip": "10.0.0.1", "client-id": "c"},
            {"connection_creation_rate": 1},
            "cannot be combined",
        ),
        ({"ip": "broker-1"}, {"connection_creation_rate": 1}, "invalid ip 'broker-1'"),
        ({"ip": 167772161}, {"connection_creation_rate": 1}, "invalid entity"),
        (
            {"ip": "10.0.0.1"},
            {"request_percentage": 1},
            "ip '10.0.0.1': Invalid configuration key request_percentage (an ip entity takes",
        ),
        (
            {"user": "a"},
            {"connection_creation_rate": 1},
            "user-principal 'a': Invalid configuration key connection_creation_rate (user and",
        ),
        (
            {"user": "a"},
            {"consumer_byte_rate": 2.5},
            "consumer_byte_rate cannot be a fractional value. (got 2.5; expected a LONG",
        ),
        (
            {"ip": "10.0.0.1"},
            {"connection_creation_rate": 0.5},
            "connection_creation_rate cannot be a fractional value. (got 0.5; expected an INT",
        ),
        (
            {"user": "a"},
            {"controller_mutation_rate": 0},
            "Quota controller_mutation_rate must be greater than 0 (got 0.0;",
        ),
    ],
)
def test_bad_new_entities_name_the_value(
    entity: dict[str, object], config: dict[str, object], message: str
) -> None:
    data = {"quotas": [{"entity": entity, "config": config}]}
    with pytest.raises(QuotaFileError, match=rf"my.json: quotas\[0\]: .*{re.escape(message)}"):
        QuotaConfig.from_json(data, "my.json")


def test_the_same_address_twice_is_one_entity() -> None:
    data = {
        "quotas": [
            {"entity": {"ip": "::1"}, "config": {"connection_creation_rate": 1}},
            {"entity": {"ip": "0:0:0:0:0:0:0:1"}, "config": {"connection_creation_rate": 2}},
        ]
    }
    with pytest.raises(QuotaFileError, match=r"quotas\[1\]: entity .* appears twice"):
        QuotaConfig.from_json(data)


def test_managers_from_the_new_properties() -> None:
    config = QuotaConfig.from_json(NEW_EXAMPLE)
    mutation = config.mutation_manager(sensor_expiry_ms=5000)
    assert isinstance(mutation, ControllerMutationQuotaManager)
    assert (mutation.num_samples, mutation.window_ms) == (5, 2000)
    assert sorted(mutation.quotas(), key=str) == sorted(config.mutation_quotas(), key=str)
    connections = config.connection_quotas(max_connection_creation_rate=50)
    assert isinstance(connections, ConnectionQuotas)
    assert (connections.num_samples, connections.window_ms) == (5, 2000)
    assert connections.broker_max_rate == 50
    assert connections.ip_quotas() == (
        [("10.0.0.1", 20), ("2001:db8:0:0:0:0:0:1", 3)],  # Kafka's getHostAddress form
        100,
    )
    assert connections.ip_quota("10.0.0.2") == 100  # the <default> IP


def test_scaled_scales_only_what_the_back_test_replays() -> None:
    config = QuotaConfig.from_json(NEW_EXAMPLE).scaled(0.5)
    assert config.quotas("produce") == [(Entity(user=DEFAULT, client_id="admin"), 512.0)]
    original = QuotaConfig.from_json(NEW_EXAMPLE).mutation_quotas()
    assert original and config.mutation_quotas() == [(e, v * 0.5) for e, v in original]
    assert config.ip_quotas() == QuotaConfig.from_json(NEW_EXAMPLE).ip_quotas()
    assert config.manager("produce").quotas() == [(Entity(user=DEFAULT, client_id="admin"), 512.0)]


def test_the_guides_quota_file_is_valid() -> None:
    guide = paths.ROOT / "docs" / "guide" / "configuring-quotas.md"
    section = guide.read_text(encoding="utf-8").split("## The quota file", 1)[1]
    block = re.search(r"```json\n(.*?)```", section, re.DOTALL)
    assert block is not None
    config = QuotaConfig.from_json(json.loads(block.group(1)), "configuring-quotas.md")
    assert config.ip_quotas() == [("10.0.0.1", 20), (None, 100)]
    assert config.mutation_quotas() == [(Entity(client_id=DEFAULT), 10.0)]
