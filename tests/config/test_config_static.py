"""kquota.config.static: KIP-13 static defaults from a properties file."""

from __future__ import annotations

from pathlib import Path

import pytest
from kquota import DEFAULT, Entity
from kquota.config.model import Window
from kquota.config.static import load_static_defaults, parse_static_defaults
from kquota.exceptions import QuotaFileError


def test_defaults_become_default_client_id_quotas(tmp_path: Path) -> None:
    path = tmp_path / "quota.properties"
    path.write_text(
        "# static client quotas\n"
        "! also a comment\n"
        "\n"
        "quota.producer.default=1048576\n"
        "quota.consumer.default : 2097152\n"
        "quota.window.num 5\n"
        "   quota.window.size.seconds=2\n"
    )
    config = load_static_defaults(path)
    assert config.window == Window(5, 2000)
    assert config.by_entity() == {
        Entity(client_id=DEFAULT): {
            "producer_byte_rate": 1048576.0,
            "consumer_byte_rate": 2097152.0,
        }
    }
    produce = config.manager("produce")
    assert (produce.num_samples, produce.window_ms) == (5, 2000)
    # KIP-13: every client id without a quota of its own gets the default, each on its own.
    assert produce.quota_for("anyone", "app-1") == 1048576.0
    assert produce.tags("anyone", "app-1") == ("", "app-1")


def test_only_one_default_and_kafka_window() -> None:
    config = parse_static_defaults("quota.consumer.default=500\n")
    assert config.window == Window(11, 1000)
    assert config.quotas("fetch") == [(Entity(client_id=DEFAULT), 500.0)]
    assert config.quotas("produce") == []
    assert parse_static_defaults("# nothing\n").entries == ()


def test_java_syntax_continuations_and_escapes() -> None:
    config = parse_static_defaults(
        "quota.producer.default = 10\\\n    48576\nquota\\u002econsumer.default=7\n"
    )
    assert config.by_entity()[Entity(client_id=DEFAULT)] == {
        "producer_byte_rate": 1048576.0,
        "consumer_byte_rate": 7.0,
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("quota.producer.defualt=5\n", r"q.properties:1: unknown key 'quota.producer.defualt'"),
        (
            "# c\nquota.producer.default=0\n",
            r"q.properties:2: quota.producer.default: Quota producer_byte_rate must be greater "
            r"than 0 \(got 0.0;",
        ),
        ("quota.producer.default=-5\n", r":1: quota.producer.default: .*greater than 0 \(got -5.0"),
        ("quota.consumer.default=2.5\n", r":1: .*consumer_byte_rate cannot be a fractional value"),
        ("quota.consumer.default=NaN\n", r":1: .*must be a finite number \(got NaN"),
        ("quota.consumer.default=5MB\n", r":1: quota.consumer.default: invalid value '5MB'"),
        ("quota.consumer.default\n", r":1: quota.consumer.default: invalid value ''"),
        ("\nquota.window.num=0\n", r":2: invalid value '0' for quota.window.num"),
        ("quota.window.size.seconds=1.5\n", r":1: invalid value '1.5' for quota.window.size"),
        (
            "quota.producer.default=1\n\nquota.producer.default=2\n",
            r":3: quota.producer.default is already set on line 1",
        ),
        ("quota.producer.default=\\u12\n", r":1: malformed \\uXXXX escape"),
        ("producer_byte_rate=5\n", r":1: unknown key 'producer_byte_rate'"),
    ],
)
def test_bad_lines_are_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "q.properties"
    path.write_text(text)
    with pytest.raises(QuotaFileError, match=message):
        load_static_defaults(path)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(QuotaFileError, match=r"cannot read properties file .*missing"):
        load_static_defaults(tmp_path / "missing.properties")
    (tmp_path / "bin.properties").write_bytes(b"\xff\xfe")
    with pytest.raises(QuotaFileError, match="not UTF-8"):
        load_static_defaults(tmp_path / "bin.properties")
