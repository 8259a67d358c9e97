"""``kquota configs`` on bad input: bad arguments, broken or missing import files, an
unwritable export, a store that does not exist (reading it creates nothing), unusable or
locked stores. Exit status 2, one line on stderr, the store byte-for-byte unchanged (the
``store`` fixture is in ``tests/config/conftest.py``)."""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_configs_support import configs, sha256
from kquota.cli import main
from kquota.config.model import QuotaConfig

# Shorthands in the argument strings below.
SHORT = {
    "$ALICE": "--alter --entity-type users --entity-name alice",
    "$ADD": "--add-config producer_byte_rate=1",
}

# (id, the arguments as a shell splits them, a regex the one stderr line must match)
BAD_ARGS: list[tuple[str, str, str]] = [
    (
        "unknown property",
        "$ALICE --add-config bytes_per_second=5",
        "--add-config 'bytes_per_second=5': Invalid configuration key bytes_per_second "
        "\\(expected one of producer_byte_rate, ",
    ),
    (
        "non-numeric value",
        "$ALICE --add-config producer_byte_rate=fast",
        "invalid value 'fast' for producer_byte_rate: expected a decimal number",
    ),
    (
        "zero",
        "$ALICE --add-config producer_byte_rate=0",
        "--add-config 'producer_byte_rate=0': Quota producer_byte_rate must be greater than 0 "
        "\\(got 0.0; expected a LONG: a whole number greater than 0\\)$",
    ),
    (
        "negative",
        "$ALICE --add-config consumer_byte_rate=-1024",
        "Quota consumer_byte_rate must be greater than 0 \\(got -1024.0;",
    ),
    (
        "fractional byte rate",
        "$ALICE --add-config consumer_byte_rate=2.5",
        "--add-config 'consumer_byte_rate=2.5': consumer_byte_rate cannot be a fractional "
        "value. \\(got 2.5; expected a LONG: a whole number greater than 0\\)$",
    ),
    (
        "NaN",
        "$ALICE --add-config request_percentage=NaN",
        "Quota request_percentage must be a finite number \\(got NaN;",
    ),
    (
        "infinite",
        "$ALICE --add-config request_percentage=inf",
        "Quota request_percentage must be a finite number \\(got inf;",
    ),
    (
        "overflowing",
        "$ALICE $ADDe999",
        "--add-config 'producer_byte_rate=1e999': Proposed value for producer_byte_rate is too "
        "large for a LONG.",
    ),
    (
        "second value bad",
        "$ALICE --add-config producer_byte_rate=5,consumer_byte_rate=x",
        "invalid value 'x' for consumer_byte_rate",
    ),
    (
        "no =",
        "$ALICE --add-config producer_byte_rate",
        "--add-config 'producer_byte_rate': 'producer_byte_rate' is not key=value",
    ),
    ("no key", "$ALICE --add-config =5", "--add-config '=5': '=5' has no property name"),
    ("empty item", "$ALICE --add-config a=1,,b=2", "--add-config 'a=1,,b=2': an empty item"),
    ("trailing comma", "$ALICE --add-config producer_byte_rate=1,", "an empty item"),
    ("empty add-config", "$ALICE --add-config ''", "--add-config '': an empty item"),
    (
        "key twice",
        "$ALICE --add-config producer_byte_rate=1,producer_byte_rate=2",
        "producer_byte_rate is given twice",
    ),
    (
        "add and delete",
        "$ALICE $ADD --delete-config producer_byte_rate",
        "producer_byte_rate cannot be both added and deleted",
    ),
    (
        "delete unknown",
        "$ALICE --delete-config bytes",
        "--delete-config 'bytes': Invalid configuration key bytes \\(expected one of ",
    ),
    (
        "delete unset",
        "$ALICE --delete-config consumer_byte_rate",
        "cannot delete consumer_byte_rate of user-principal 'alice': not set",
    ),
    (
        "delete on a new entity",
        "--alter --delete-config producer_byte_rate --user carol",
        "cannot delete producer_byte_rate of user-principal 'carol': not set",
    ),
    (
        "delete malformed",
        "$ALICE --delete-config producer_byte_rate,",
        "--delete-config 'producer_byte_rate,': an empty item",
    ),
    ("nothing to alter", "$ALICE", "--alter needs --add-config"),
    (
        "unknown entity type",
        "--alter $ADD --entity-type topics --entity-name t",
        "unknown entity type 'topics': expected users, clients or ips",
    ),
    ("singular entity type", "--describe --entity-type user", "unknown entity type 'user'"),
    (
        "name and default",
        "$ALICE --entity-default $ADD",
        "--entity-name 'alice' and --entity-default both given for users",
    ),
    (
        "default and name",
        "--alter --entity-type users --entity-default --entity-name alice $ADD",
        "--entity-name 'alice' and --entity-default both given for users",
    ),
    (
        "too many names",
        "--alter --entity-type users --entity-name a --entity-name b $ADD",
        "2 entity names/defaults for 1 entity type",
    ),
    (
        "type twice",
        "--alter --entity-type users --entity-name a --entity-type users --entity-name b $ADD",
        "entity type 'users' given twice",
    ),
    ("no entity", "--alter $ADD", "--alter needs an entity"),
    (
        "type without name",
        "--alter --entity-type users $ADD",
        "--alter needs an entity: --entity-type users with --entity-name",
    ),
    (
        "empty name",
        "--alter --entity-type clients --entity-name '' $ADD",
        "empty --entity-name for clients",
    ),
    (
        "literal default",
        "--alter --entity-type users --entity-name '<default>' $ADD",
        "use --entity-default for the default entity",
    ),
    ("mixed flags", "$ALICE --client app $ADD", "cannot be combined"),
    ("no action", "--entity-type users", "exactly one action is needed"),
    (
        "two actions",
        "--alter --describe",
        "exactly one action is needed: .* \\(got --alter, --describe\\)",
    ),
    ("json with alter", "$ALICE $ADD --json", "--json goes with --describe only"),
    (
        "add with describe",
        "--describe $ADD",
        "--add-config and --delete-config go with --alter only",
    ),
    ("entity with export", "--export out.json --user a", "--export works on the whole store"),
    ("bad lock timeout", "--lock-timeout -1 --describe", "invalid lock timeout -1.0"),
    ("unknown scheme", "--describe --store zk://localhost:2181", "no store backend for zk://"),
    # KIP-599 and KIP-612: IP entities, connection_creation_rate, controller_mutation_rate
    (
        "ip with users",
        "--alter --entity-type ips --entity-name 10.0.0.1 --entity-type users --entity-name a "
        "--add-config connection_creation_rate=1",
        "entity type ips cannot be combined with users: only users and clients may be given",
    ),
    (
        "ip flag with client flag",
        "--alter --ip 10.0.0.1 --client app --add-config connection_creation_rate=1",
        "entity type ips cannot be combined with clients",
    ),
    (
        "ip flag with entity type",
        "--alter --ip 10.0.0.1 --entity-type users --entity-name a $ADD",
        "--user/--client/--ip\\(-defaults\\) cannot be combined",
    ),
    (
        "host name",
        "--alter --entity-type ips --entity-name broker-1.example "
        "--add-config connection_creation_rate=1",
        "invalid ip 'broker-1.example': expected an IPv4 or IPv6 address .*host names are not "
        "resolved",
    ),
    (
        "bad ip flag",
        "--describe --ip 300.1.2.3",
        "invalid ip '300.1.2.3'",
    ),
    (
        "ip without name",
        "--alter --entity-type ips --add-config connection_creation_rate=1",
        "--alter needs an entity: --entity-type ips with --entity-name NAME or --entity-default",
    ),
    (
        "client property on an ip",
        "--alter --ip 10.0.0.1 --add-config producer_byte_rate=1",
        "ip '10.0.0.1': Invalid configuration key producer_byte_rate \\(an ip entity takes only "
        "connection_creation_rate\\)$",
    ),
    (
        "mutation rate on an ip",
        "--alter --ip-defaults --add-config controller_mutation_rate=1",
        "the default ip: Invalid configuration key controller_mutation_rate",
    ),
    (
        "delete a client property of an ip",
        "--alter --ip ::1 --delete-config request_percentage",
        "ip '::1': Invalid configuration key request_percentage",
    ),
    (
        "connection rate on a user",
        "$ALICE --add-config connection_creation_rate=5",
        "user-principal 'alice': Invalid configuration key connection_creation_rate \\(user and "
        "client-id entities take ",
    ),
    (
        "connection rate on a user's client",
        "--alter --user bob --client-defaults --add-config connection_creation_rate=5",
        "user-principal 'bob', the default client-id: Invalid configuration key "
        "connection_creation_rate",
    ),
    (
        "fractional connection rate",
        "--alter --ip 10.0.0.1 --add-config connection_creation_rate=2.5",
        "connection_creation_rate cannot be a fractional value. \\(got 2.5; expected an INT: a "
        "whole number from 1 to 2147483647\\)$",
    ),
    (
        "connection rate too large",
        "--alter --ip 10.0.0.1 --add-config connection_creation_rate=2147483648",
        "Proposed value for connection_creation_rate is too large for an INT. \\(got 2147483648.0;",
    ),
    (
        "zero connection rate",
        "--alter --ip-defaults --add-config connection_creation_rate=0",
        "Quota connection_creation_rate must be greater than 0 \\(got 0.0;",
    ),
    (
        "zero mutation rate",
        "--alter --client-defaults --add-config controller_mutation_rate=0",
        "Quota controller_mutation_rate must be greater than 0 \\(got 0.0; expected a finite",
    ),
    (
        "mutation rate not a number",
        "$ALICE --add-config controller_mutation_rate=fast",
        "invalid value 'fast' for controller_mutation_rate: expected a decimal number",
    ),
    (
        "delete an unset ip",
        "--alter --ip 10.0.0.9 --delete-config connection_creation_rate",
        "cannot delete connection_creation_rate of ip '10.0.0.9': not set",
    ),
]


@pytest.mark.parametrize(
    ("args", "message"), [c[1:] for c in BAD_ARGS], ids=[c[0] for c in BAD_ARGS]
)
def test_bad_arguments_exit_2_and_change_nothing(
    store: Path, capsys: pytest.CaptureFixture[str], args: str, message: str
) -> None:
    for short, long in SHORT.items():
        args = args.replace(short, long)
    before = sha256(store)
    status, out, err = configs(capsys, store, args)
    assert status == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith("kquota configs: ")
    assert re.search(message, err), err
    assert sha256(store) == before
    assert sorted(p.name for p in store.parent.iterdir()) == ["quotas.sqlite"]


def quota_file(config: object, entity: object = None) -> bytes:
    """A quota file with one entry (``{"user": "a"}`` unless told) whose config is ``config``."""
    entry = {"entity": entity or {"user": "a"}, "config": config}
    return json.dumps({"quotas": [entry]}).encode()


A_ENTRY = {"entity": {"user": "a"}, "config": {"producer_byte_rate": 1}}

BAD_FILES: list[tuple[str, bytes, str]] = [
    ("not JSON", b'{"quotas": [', "not valid JSON"),
    ("NaN", quota_file({"producer_byte_rate": float("nan")}), "NaN is not a valid quota value"),
    (
        "zero",
        quota_file({"producer_byte_rate": 0}),
        r"quotas\[0\]: Quota producer_byte_rate must be greater than 0 \(got 0.0;",
    ),
    (
        "fractional byte rate",
        quota_file({"consumer_byte_rate": 2.5}),
        r"quotas\[0\]: consumer_byte_rate cannot be a fractional value. \(got 2.5; expected a "
        r"LONG: a whole number greater than 0\)$",
    ),
    (
        "unknown property",
        quota_file({"rate": 1}),
        r"quotas\[0\]: user-principal 'a': Invalid configuration key rate \(user and",
    ),
    ("bad entity", quota_file({"producer_byte_rate": 1}, {"group": "a"}), "invalid entity"),
    ("entity twice", json.dumps({"quotas": [A_ENTRY, A_ENTRY]}).encode(), "appears twice"),
    ("bad window", b'{"window": {"num_samples": 11, "window_ms": 500}}', "invalid window_ms 500"),
    ("not UTF-8", b"\xff\xfe{}", "not UTF-8"),
    ("a list", b"[]", "expected a JSON object"),
    (
        "ip and user",
        quota_file({"connection_creation_rate": 1}, {"ip": "10.0.0.1", "user": "a"}),
        "an ip entity cannot be combined with user or client-id",
    ),
    (
        "host name",
        quota_file({"connection_creation_rate": 1}, {"ip": "localhost"}),
        "invalid ip 'localhost'",
    ),
    (
        "fractional connection rate",
        quota_file({"connection_creation_rate": 0.5}, {"ip": "<default>"}),
        "connection_creation_rate cannot be a fractional value. \\(got 0.5;",
    ),
    (
        "connection rate on a client",
        quota_file({"connection_creation_rate": 1}, {"client-id": "c"}),
        "client-id 'c': Invalid configuration key connection_creation_rate",
    ),
]


@pytest.mark.parametrize(
    ("content", "message"), [c[1:] for c in BAD_FILES], ids=[c[0] for c in BAD_FILES]
)
def test_broken_import_file_exits_2_and_changes_nothing(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    source = tmp_path / "in.json"
    source.write_bytes(content)
    before = sha256(store)
    status, out, err = configs(capsys, store, "--import", str(source))
    assert (status, out, err.count("\n")) == (2, "", 1)
    assert "in.json" in err
    assert re.search(message, err), err
    assert sha256(store) == before


def test_missing_import_file_and_unwritable_export(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = sha256(store)
    status, _, err = configs(capsys, store, "--import", str(tmp_path / "missing.json"))
    assert status == 2
    assert "cannot read quota file" in err
    status, _, err = configs(capsys, store, "--export", str(tmp_path / "no" / "such" / "dir.json"))
    assert status == 2
    assert "cannot write" in err
    assert sha256(store) == before


def test_reading_a_store_that_does_not_exist_creates_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "typo.sqlite"
    for args in (["--describe"], ["--export", str(tmp_path / "out.json")]):
        status, _, err = configs(capsys, path, *args)
        assert status == 2
        assert f"SQLite store {str(path)!r} does not exist: check the path" in err
        assert err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []
    path.touch()  # there, but never written
    for args in (["--describe"], ["--export", str(tmp_path / "out.json")]):
        status, _, err = configs(capsys, path, *args)
        assert status == 2
        assert "holds no quotas yet (--alter or --import creates it)" in err
    assert sorted(tmp_path.iterdir()) == [path]


def not_sqlite(path: Path) -> None:
    path.write_text('{"quotas": []}\n')


def other_database(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (name TEXT)")
    conn.close()


def future_schema(path: Path) -> None:
    main(
        [
            "configs",
            "--store",
            str(path),
            "--alter",
            "--add-config",
            "producer_byte_rate=1",
            "--user",
            "a",
        ]
    )
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 7")
    conn.close()


STORE_ACTIONS = [
    ["--alter", "--add-config", "producer_byte_rate=1", "--user", "alice"],
    ["--describe"],
    ["--export", "OUT"],
    ["--import", "IN"],
]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (not_sqlite, "the file is not a SQLite database"),
        (other_database, "is a SQLite database but not a kquota store"),
        (future_schema, "has schema version 7, newer than the version 2"),
    ],
)
def test_unusable_store_exits_2_and_stays_byte_for_byte(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make: Callable[[Path], None],
    message: str,
) -> None:
    path = tmp_path / "quotas.sqlite"
    make(path)
    capsys.readouterr()
    source = tmp_path / "in.json"
    source.write_text(QuotaConfig().dumps())
    before = sha256(path)
    for action in STORE_ACTIONS:
        args = [
            str(tmp_path / "out.json") if a == "OUT" else str(source) if a == "IN" else a
            for a in action
        ]
        status, out, err = configs(capsys, path, *args)
        assert (status, out, err.count("\n")) == (2, "", 1)
        assert message in err
        assert str(path) in err
    assert sha256(path) == before
    assert not (tmp_path / "out.json").exists()


def test_locked_store_exits_2_and_changes_nothing(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = sha256(store)
    source = tmp_path / "in.json"
    source.write_text(QuotaConfig().dumps())
    holder = sqlite3.connect(store, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        for action in STORE_ACTIONS:
            args = [
                str(tmp_path / "out.json") if a == "OUT" else str(source) if a == "IN" else a
                for a in action
            ]
            status, out, err = configs(capsys, store, "--lock-timeout", "0.05", *args)
            assert (status, out) == (2, "")
            assert err == (
                f"kquota configs: SQLite store {str(store)!r} is locked: another process kept "
                "it locked for more than 0.05 s; nothing was changed\n"
            )
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert sha256(store) == before
