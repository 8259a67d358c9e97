"""kquota.config.model: properties and values, the quota file format, entity wording."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from kquota import DEFAULT, Entity
from kquota.config.model import (
    PROPERTIES,
    PROPERTY_OF,
    QuotaConfig,
    QuotaEntry,
    Window,
    check_property,
    check_value,
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
    with pytest.raises(QuotaFileError, match="unknown quota property 'replica_byte_rate'"):
        check_property("replica_byte_rate")


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, -math.inf, "5", True, None])
def test_check_value_rejects(bad: object) -> None:
    with pytest.raises(QuotaFileError, match=f"invalid value {bad!r} for producer_byte_rate"):
        check_value("producer_byte_rate", bad)


@pytest.mark.parametrize(
    ("text", "value"),
    [("1048576", 1048576.0), (" 2.5e6 ", 2.5e6), ("+.5", 0.5), ("150.", 150.0), ("1E2", 100.0)],
)
def test_parse_value_accepts_decimal_numbers(text: str, value: float) -> None:
    assert parse_value("producer_byte_rate", text) == value


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("0", "greater than 0"),
        ("-1", "greater than 0"),
        ("0.0e5", "greater than 0"),
        ("nan", "finite number"),
        ("Infinity", "finite number"),
        ("-inf", "finite number"),
        ("1e400", "finite number"),
        ("abc", "expected a decimal number"),
        ("", "expected a decimal number"),
        ("1_000", "expected a decimal number"),
        ("0x10", "expected a decimal number"),
        ("5 MB", "expected a decimal number"),
    ],
)
def test_parse_value_rejects_and_names_the_text(text: str, reason: str) -> None:
    with pytest.raises(QuotaFileError, match=f"invalid value {text!r} for consumer_byte_rate: .*"):
        parse_value("consumer_byte_rate", text)
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
            r"quotas\[0\]: invalid value -1",
        ),
        (
            {"quotas": [{"entity": {"user": "a"}, "config": {"bytes": 1}}]},
            "unknown quota property 'bytes'",
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


@pytest.mark.parametrize("text", ["{", '{"quotas": NaN}', "[1,]", "\xff"])
def test_unreadable_files(tmp_path: Path, text: str) -> None:
    path = tmp_path / "q.json"
    path.write_text(text, encoding="latin-1")
    with pytest.raises(QuotaFileError, match=r"q\.json"):
        QuotaConfig.load(path)
    with pytest.raises(QuotaFileError, match="cannot read quota file"):
        QuotaConfig.load(tmp_path / "missing.json")


def test_quota_entry_validates() -> None:
    with pytest.raises(QuotaFileError, match="invalid value 0"):
        QuotaEntry(Entity(user="a"), {"producer_byte_rate": 0})
