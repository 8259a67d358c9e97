"""``kquota configs``: kafka-configs.sh's options over a real SQLite store."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from kquota import DEFAULT, Entity
from kquota.cli import main
from kquota.config.model import QuotaConfig
from kquota.config.store import SQLiteStore

# The `kquota` command (the console script's entry point) in a fresh interpreter.
KQUOTA = "import sys; from kquota.cli import main; sys.exit(main())"

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


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def configs(capsys: pytest.CaptureFixture[str], store: Path, *args: str) -> tuple[int, str, str]:
    """``kquota configs --store STORE ARGS...`` in this process: status, stdout, stderr.

    A single argument is split as a shell would split it."""
    argv = shlex.split(args[0]) if len(args) == 1 else list(args)
    status = main(["configs", "--store", str(store), *argv])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store holding two entities (version 2)."""
    path = tmp_path / "quotas.sqlite"
    for args in (
        ["--add-config", "producer_byte_rate=1048576", "--user", "alice"],
        ["--add-config", "request_percentage=50", "--user", "bob", "--client", "app-1"],
    ):
        assert main(["configs", "--store", str(path), "--alter", *args]) == 0
    return path


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


# -- bad input: exit status 2, one line on stderr, the store byte-for-byte unchanged ---------

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
