"""``kquota configs``: kafka-configs.sh's options over a real SQLite store, IP entities
and ``controller_mutation_rate`` included. Bad input is ``test_cli_configs_bad_input.py``;
the ``store`` fixture is in ``tests/config/conftest.py``."""

from __future__ import annotations

import json
import shlex
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest
from cli_configs_support import KQUOTA, configs
from kquota import DEFAULT, Entity
from kquota.cli import main
from kquota.config.model import QuotaConfig
from kquota.config.store import SQLiteStore

# The 8 entity shapes: the options that name them, the entity, and --describe's wording.
SHAPES: list[tuple[str, Entity, str]] = [
    (
        "--entity-type users --entity-name alice",
        Entity(user="alice"),
        "user-principal 'alice'",
    ),
    (
        "--entity-type users --entity-default",
        Entity(user=DEFAULT),
        "the default user-principal",
    ),
    (
        "--entity-type clients --entity-name app-1",
        Entity(client_id="app-1"),
        "client-id 'app-1'",
    ),
    (
        "--entity-type clients --entity-default",
        Entity(client_id=DEFAULT),
        "the default client-id",
    ),
    (
        "--entity-type users --entity-name bob --entity-type clients --entity-name app-1",
        Entity(user="bob", client_id="app-1"),
        "user-principal 'bob', client-id 'app-1'",
    ),
    (  # the other order, as kafka-configs accepts it
        "--entity-type clients --entity-default --entity-type users --entity-name bob",
        Entity(user="bob", client_id=DEFAULT),
        "user-principal 'bob', the default client-id",
    ),
    (
        "--entity-type users --entity-default --entity-type clients --entity-name app-2",
        Entity(user=DEFAULT, client_id="app-2"),
        "the default user-principal, client-id 'app-2'",
    ),
    (
        "--entity-type users --entity-default --entity-type clients --entity-default",
        Entity(user=DEFAULT, client_id=DEFAULT),
        "the default user-principal, the default client-id",
    ),
]


def test_every_entity_shape_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second = tmp_path / "first.sqlite", tmp_path / "second.sqlite"
    for i, (options, _, wording) in enumerate(SHAPES):
        # Byte rates are Kafka's LONGs: a fraction is refused, and nothing is written.
        status, out, err = configs(
            capsys,
            first,
            "--alter",
            "--add-config",
            f"producer_byte_rate={1024 * (i + 1)},consumer_byte_rate={2048 * (i + 1) + 0.5}",
            *shlex.split(options),
        )
        assert (status, out) == (2, "")
        assert "consumer_byte_rate cannot be a fractional value." in err
        status, out, err = configs(
            capsys,
            first,
            "--alter",
            "--add-config",
            f"producer_byte_rate={1024 * (i + 1)},consumer_byte_rate={2048 * (i + 1)}",
            *shlex.split(options),
        )
        assert (status, err) == (0, "")
        assert out == (
            f"Completed updating quota configs for {wording} in "
            f"SQLite store {str(first)!r} (version {i + 1}).\n"
        )
    exported, again = tmp_path / "exported.json", tmp_path / "again.json"
    assert configs(capsys, first, "--export", str(exported))[0] == 0
    status, out, _ = configs(capsys, second, "--import", str(exported))
    assert status == 0
    assert (
        out
        == f"Imported 8 entities from {exported} into SQLite store {str(second)!r} (version 1).\n"
    )
    assert configs(capsys, second, "--export", str(again))[0] == 0
    assert again.read_text() == exported.read_text()
    assert QuotaConfig.load(again).by_entity() == {
        entity: {"producer_byte_rate": 1024.0 * (i + 1), "consumer_byte_rate": 2048.0 * (i + 1)}
        for i, (_, entity, _) in enumerate(SHAPES)
    }

    status, out, _ = configs(capsys, second, "--describe")
    assert status == 0
    lines = out.splitlines()
    assert len(lines) == 8
    for i, (options, _, wording) in enumerate(SHAPES):
        line = (
            f"Quota configs for {wording} are consumer_byte_rate={2048.0 * (i + 1)!r}, "
            f"producer_byte_rate={1024.0 * (i + 1)!r}"
        )
        assert line in lines
        # and --describe of exactly that entity shows just that line
        assert configs(capsys, second, f"--describe {options}")[1] == line + "\n"


def test_describe_in_kafka_wording_and_filters(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        configs(capsys, store, "--alter --add-config consumer_byte_rate=2097152 --user-defaults")[0]
        == 0
    )
    alice = "Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0"
    bob = "Quota configs for user-principal 'bob', client-id 'app-1' are request_percentage=50.0"
    default = "Quota configs for the default user-principal are consumer_byte_rate=2097152.0"
    assert configs(capsys, store, "--describe") == (0, f"{default}\n{alice}\n{bob}\n", "")
    # Kafka's filters match exactly the entity types given ("containsOnly").
    for args, lines in [
        ("--entity-type users", [default, alice]),
        ("--entity-type users --entity-name alice", [alice]),
        ("--entity-type users --entity-default", [default]),
        ("--entity-type clients", []),
        ("--entity-type clients --entity-type users", [bob]),
        ("--user bob --client app-1", [bob]),
        ("--user bob", []),
        ("--user nobody", []),
    ]:
        assert configs(capsys, store, f"--describe {args}") == (
            0,
            "".join(f"{x}\n" for x in lines),
            "",
        )


def test_describe_json_prints_the_file_format(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = configs(capsys, store, "--describe", "--json", "--entity-type", "users")
    assert status == 0
    assert json.loads(out) == {
        "window": {"num_samples": 11, "window_ms": 1000},
        "quotas": [{"entity": {"user": "alice"}, "config": {"producer_byte_rate": 1048576.0}}],
    }
    status, out, _ = configs(capsys, store, "--describe", "--json")
    assert (
        QuotaConfig.from_json(json.loads(out)).to_json()
        == SQLiteStore(store).read().config.to_json()
    )


def test_alter_adds_replaces_and_deletes_in_one_change(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, _ = configs(
        capsys,
        store,
        "--alter",
        "--add-config",
        "consumer_byte_rate=10, producer_byte_rate = 20",
        "--delete-config",
        "request_percentage",
        "--entity-type",
        "users",
        "--entity-name",
        "bob",
        "--entity-type",
        "clients",
        "--entity-name",
        "app-1",
    )
    assert status == 0
    snapshot = SQLiteStore(store).read()
    assert snapshot.version == 3
    assert snapshot.config.by_entity()[Entity(user="bob", client_id="app-1")] == {
        "consumer_byte_rate": 10.0,
        "producer_byte_rate": 20.0,
    }
    both = "producer_byte_rate,consumer_byte_rate"
    assert (
        configs(capsys, store, f"--alter --delete-config {both} --user bob --client app-1")[0] == 0
    )
    assert Entity(user="bob", client_id="app-1") not in SQLiteStore(store).read().config.by_entity()


def test_import_replaces_the_whole_store_in_one_transaction(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "new.json"
    source.write_text(
        json.dumps(
            {
                "window": {"num_samples": 5, "window_ms": 2000},
                "quotas": [
                    {"entity": {"client-id": "<default>"}, "config": {"consumer_byte_rate": 7}}
                ],
            }
        )
    )
    assert configs(capsys, store, "--import", str(source))[0] == 0
    snapshot = SQLiteStore(store).read()
    assert snapshot.version == 3  # one transaction
    assert snapshot.config.to_json() == QuotaConfig.load(source).to_json()  # alice and bob gone
    help_text = subprocess.run(
        [sys.executable, "-c", KQUOTA, "configs", "--help"], capture_output=True, text=True
    ).stdout
    assert "replace the store's whole content" in help_text
    assert "in one transaction" in help_text


def test_store_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "env.sqlite"
    monkeypatch.setenv("KQUOTA_STORE", str(path))
    assert (
        main(["configs", "--alter", "--add-config", "producer_byte_rate=5", "--client-defaults"])
        == 0
    )
    assert SQLiteStore(path).read().config.by_entity() == {
        Entity(client_id=DEFAULT): {"producer_byte_rate": 5.0}
    }
    assert main(["configs", "--describe"]) == 0
    assert capsys.readouterr().out.endswith(
        "Quota configs for the default client-id are producer_byte_rate=5.0\n"
    )


def test_concurrent_cli_processes_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "quotas.sqlite"
    command = [
        sys.executable,
        "-c",
        KQUOTA,
        "configs",
        "--store",
        str(path),
        "--lock-timeout",
        "60",
    ]
    procs = [
        subprocess.Popen(
            [
                *command,
                "--alter",
                "--add-config",
                f"producer_byte_rate={i + 1}",
                "--user",
                f"user-{i}",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(8)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    snapshot = SQLiteStore(path).read()
    assert snapshot.version == 8
    assert snapshot.config.by_entity() == {
        Entity(user=f"user-{i}"): {"producer_byte_rate": i + 1.0} for i in range(8)
    }


# -- KIP-599 and KIP-612: controller_mutation_rate and IP entities ----------------------

# The IP entity shapes: the options that name them, the entity name in the file format, and
# --describe's wording (ConfigCommand's "ip '<name>'" / "the default ip").
IP_SHAPES: list[tuple[str, str, str]] = [
    ("--entity-type ips --entity-name 10.0.0.1", "10.0.0.1", "ip '10.0.0.1'"),
    ("--ip 2001:DB8:0:0:0:0:0:1", "2001:db8::1", "ip '2001:db8::1'"),  # stored canonical
    ("--entity-type ips --entity-default", "<default>", "the default ip"),
    ("--ip ::ffff:192.168.0.9", "192.168.0.9", "ip '192.168.0.9'"),  # IPv4-mapped: IPv4
]


def test_ip_entities_alter_describe_and_round_trip(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i, (options, _, wording) in enumerate(IP_SHAPES):
        status, out, err = configs(
            capsys, store, f"--alter --add-config connection_creation_rate={10 * (i + 1)} {options}"
        )
        assert (status, err) == (0, "")
        assert out == (
            f"Completed updating quota configs for {wording} in "
            f"SQLite store {str(store)!r} (version {i + 3}).\n"
        )
    status, out, err = configs(
        capsys, store, "--alter --add-config controller_mutation_rate=2.5 --user alice"
    )
    assert (status, err) == (0, "")
    status, out, err = configs(
        capsys,
        store,
        "--alter --add-config controller_mutation_rate=10 --entity-type clients --entity-default",
    )
    assert (status, err) == (0, "")

    alice = (
        "Quota configs for user-principal 'alice' are controller_mutation_rate=2.5, "
        "producer_byte_rate=1048576.0"
    )
    default_client = "Quota configs for the default client-id are controller_mutation_rate=10.0"
    bob = "Quota configs for user-principal 'bob', client-id 'app-1' are request_percentage=50.0"
    ip = {
        wording: f"Quota configs for {wording} are connection_creation_rate={10.0 * (i + 1)!r}"
        for i, (_, _, wording) in enumerate(IP_SHAPES)
    }
    ips = [ip["the default ip"], ip["ip '10.0.0.1'"], ip["ip '192.168.0.9'"]]
    ips.append(ip["ip '2001:db8::1'"])  # IPv4 before IPv6, numerically
    assert configs(capsys, store, "--describe") == (
        0,
        "".join(f"{line}\n" for line in [default_client, alice, bob, *ips]),
        "",
    )
    for args, lines in [
        ("--entity-type ips", ips),
        ("--entity-type ips --entity-default", [ip["the default ip"]]),
        ("--ip-defaults", [ip["the default ip"]]),
        ("--ip 10.0.0.1", [ip["ip '10.0.0.1'"]]),
        ("--entity-type ips --entity-name 2001:db8::0:1", [ip["ip '2001:db8::1'"]]),
        ("--ip 10.0.0.2", []),
        ("--entity-type users", [alice]),
        ("--entity-type clients", [default_client]),
    ]:
        assert configs(capsys, store, f"--describe {args}") == (
            0,
            "".join(f"{x}\n" for x in lines),
            "",
        ), args

    # --export and --import round-trip every entity and property.
    exported, again = tmp_path / "exported.json", tmp_path / "again.json"
    second = tmp_path / "second.sqlite"
    assert configs(capsys, store, "--export", str(exported))[0] == 0
    assert configs(capsys, second, "--import", str(exported))[0] == 0
    assert configs(capsys, second, "--export", str(again))[0] == 0
    assert again.read_text() == exported.read_text()
    written = json.loads(exported.read_text())["quotas"]
    assert [q for q in written if "ip" in q["entity"]] == [
        {"entity": {"ip": "<default>"}, "config": {"connection_creation_rate": 30}},
        {"entity": {"ip": "10.0.0.1"}, "config": {"connection_creation_rate": 10}},
        {"entity": {"ip": "192.168.0.9"}, "config": {"connection_creation_rate": 40}},
        {"entity": {"ip": "2001:db8::1"}, "config": {"connection_creation_rate": 20}},
    ]
    assert SQLiteStore(second).read().config.by_entity() == (
        SQLiteStore(store).read().config.by_entity()
    )

    # --delete-config removes an IP's rate; the entity is gone with its last property.
    status, out, _ = configs(
        capsys, store, "--alter --delete-config connection_creation_rate --ip 10.0.0.1"
    )
    assert status == 0
    assert configs(capsys, store, "--describe --ip 10.0.0.1") == (0, "", "")


def test_describe_json_of_ips(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        configs(capsys, store, "--alter --add-config connection_creation_rate=20 --ip ::1")[0] == 0
    )
    status, out, _ = configs(capsys, store, "--describe --json --entity-type ips")
    assert status == 0
    assert json.loads(out) == {
        "window": {"num_samples": 11, "window_ms": 1000},
        "quotas": [{"entity": {"ip": "::1"}, "config": {"connection_creation_rate": 20}}],
    }


def test_an_old_store_gets_ips_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "quotas.sqlite"
    assert configs(capsys, path, "--alter --add-config producer_byte_rate=5 --user a")[0] == 0
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)
    assert (
        configs(capsys, path, "--alter --add-config connection_creation_rate=5 --ip-defaults")[0]
        == 0
    )
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (2,)
    assert configs(capsys, path, "--describe")[1] == (
        "Quota configs for user-principal 'a' are producer_byte_rate=5.0\n"
        "Quota configs for the default ip are connection_creation_rate=5.0\n"
    )


def test_help_names_the_new_entity_type_and_properties(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["configs", "--help"]) == 0
    text = capsys.readouterr().out
    for needle in (
        "--ip IP",
        "--ip-defaults",
        "controller_mutation_rate",
        "connection_creation_rate",
        "users, clients or ips",
    ):
        assert needle in text
