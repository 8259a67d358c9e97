"""kquota.config.store's SQLite schema upgrade for IP entities (1 -> 2): an old store is
read as it is and upgraded once, by the first write that holds an IP, keeping every quota;
an upgrade that cannot apply or is killed changes nothing; damaged schema-2 stores are
store errors."""

from __future__ import annotations

import logging
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import pytest
from kquota import DEFAULT, Entity
from kquota.config.model import AnyEntity, IpEntity, Window
from kquota.config.store import APPLICATION_ID, Alteration, ChangeSet, SQLiteStore
from kquota.exceptions import QuotaFileError, StoreError
from store_support import (
    ALICE,
    BOB_APP,
    DEFAULT_CLIENT,
    DEFAULT_IP,
    IP_1,
    IP_6,
    change,
    run_python,
    sha256,
)

# -- IP entities and the schema upgrade (1 -> 2) ----------------------------------------

# The schema-1 store exactly as a kquota without IP entities creates it (its store.py
# _CREATE, with its two constants written out).
SCHEMA_1 = (
    "CREATE TABLE kquota_meta (key TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL)",
    "INSERT INTO kquota_meta (key, value) VALUES "
    "('version', 0), ('num_samples', 11), ('window_ms', 1000)",
    # user / client_id NULL: the entity has no such dimension; '<default>': the default.
    "CREATE TABLE kquota_quota (user TEXT, client_id TEXT, property TEXT NOT NULL, "
    "value REAL NOT NULL, CHECK (user IS NOT NULL OR client_id IS NOT NULL))",
    "CREATE UNIQUE INDEX kquota_quota_key ON kquota_quota "
    "(user IS NULL, ifnull(user, ''), client_id IS NULL, ifnull(client_id, ''), property)",
    f"PRAGMA application_id = {APPLICATION_ID}",
    "PRAGMA user_version = 1",
)

OLD_QUOTAS: dict[Entity, dict[str, float]] = {
    ALICE: {"producer_byte_rate": 1048576.0, "consumer_byte_rate": 0.1 + 0.2},
    Entity(user=DEFAULT): {"request_percentage": 250.0},
    DEFAULT_CLIENT: {"consumer_byte_rate": 5e-324},
    BOB_APP: {"producer_byte_rate": 7.0},
    Entity(user="bob", client_id=DEFAULT): {"request_percentage": 1.5},
    Entity(user=DEFAULT, client_id="app-1"): {"consumer_byte_rate": 1.0},
    Entity(user=DEFAULT, client_id=DEFAULT): {"producer_byte_rate": 3.0},
    Entity(client_id="weird ,= id"): {"producer_byte_rate": 2.0},
}


def old_store(path: Path, version: int = 7) -> None:
    """A schema-1 store as a kquota without IP entities writes it: OLD_QUOTAS, window 5 x 2 s."""
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        for statement in SCHEMA_1:
            conn.execute(statement)
        conn.executemany(
            "INSERT INTO kquota_quota (user, client_id, property, value) VALUES (?, ?, ?, ?)",
            [
                (e.user, e.client_id, prop, value)
                for e, config in OLD_QUOTAS.items()
                for prop, value in config.items()
            ],
        )
        conn.execute("UPDATE kquota_meta SET value = 5 WHERE key = 'num_samples'")
        conn.execute("UPDATE kquota_meta SET value = 2000 WHERE key = 'window_ms'")
        conn.execute("UPDATE kquota_meta SET value = ? WHERE key = 'version'", (version,))
        conn.execute("COMMIT")


def schema_of(path: Path) -> tuple[int, list[str]]:
    """``user_version`` and the tables of a store file."""
    with closing(sqlite3.connect(path)) as conn:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = [
            row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        ]
    return version, sorted(tables)


def test_a_new_store_stays_at_schema_1_until_it_holds_an_ip(tmp_path: Path) -> None:
    path = tmp_path / "quotas.sqlite"
    store = SQLiteStore(path)
    store.apply(change(ALICE, {"controller_mutation_rate": 4}))  # a client property: schema 1
    assert schema_of(path) == (1, ["kquota_meta", "kquota_quota"])
    store.apply(change(IP_1, {"connection_creation_rate": 5}))
    assert schema_of(path) == (2, ["kquota_ip_quota", "kquota_meta", "kquota_quota"])
    assert store.read().config.by_entity() == {
        ALICE: {"controller_mutation_rate": 4.0},
        IP_1: {"connection_creation_rate": 5.0},
    }


def test_an_old_store_is_read_as_is_and_upgraded_once_keeping_every_quota(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "quotas.sqlite"
    old_store(path)
    before = sha256(path)
    store = SQLiteStore(path)

    # Reading never upgrades (nor writes).
    snapshot = store.read()
    assert snapshot.version == store.version() == 7
    assert snapshot.config.window == Window(5, 2000)
    assert snapshot.config.by_entity() == OLD_QUOTAS
    assert sha256(path) == before

    # A write without IPs keeps schema 1 (older kquota processes can still follow it).
    assert store.apply(change(ALICE, {"controller_mutation_rate": 1})) == 8
    assert schema_of(path)[0] == 1
    # Alice's fractional consumer_byte_rate, which an older kquota took, is kept as it was
    # (a store that refused to open could not be fixed); set anew, it is refused as Kafka
    # refuses it.
    assert store.read().config.by_entity()[ALICE]["consumer_byte_rate"] == 0.1 + 0.2
    with pytest.raises(QuotaFileError, match=r"^consumer_byte_rate cannot be a fractional value"):
        change(ALICE, {"consumer_byte_rate": 0.1 + 0.2})

    # The first IP upgrades, in that write's transaction, and keeps everything.
    with caplog.at_level(logging.INFO, logger="kquota.config.store"):
        assert store.apply(change(IP_1, {"connection_creation_rate": 20})) == 9
        assert store.apply(change(DEFAULT_IP, {"connection_creation_rate": 5})) == 10
        assert SQLiteStore(path).apply(change(IP_6, {"connection_creation_rate": 1})) == 11
    upgrades = [r.getMessage() for r in caplog.records if "upgraded the schema" in r.message]
    assert upgrades == [f"{store.describe()}: upgraded the schema from version 1 to 2"]
    assert schema_of(path) == (2, ["kquota_ip_quota", "kquota_meta", "kquota_quota"])
    snapshot = store.read()
    assert snapshot.config.window == Window(5, 2000)
    expected: dict[AnyEntity, dict[str, float]] = {k: dict(v) for k, v in OLD_QUOTAS.items()}
    expected[ALICE]["controller_mutation_rate"] = 1.0
    expected[IP_1] = {"connection_creation_rate": 20.0}
    expected[DEFAULT_IP] = {"connection_creation_rate": 5.0}
    expected[IP_6] = {"connection_creation_rate": 1.0}
    assert snapshot.config.by_entity() == expected

    # Removing every IP keeps schema 2; the old rows are still exactly there.
    store.apply(
        ChangeSet(
            tuple(
                Alteration(ip, {}, {"connection_creation_rate"}) for ip in (IP_1, IP_6, DEFAULT_IP)
            )
        )
    )
    assert schema_of(path)[0] == 2
    assert {k: v for k, v in store.read().config.by_entity().items()} == {
        k: v for k, v in expected.items() if isinstance(k, Entity)
    }


def test_an_upgrade_that_cannot_apply_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "quotas.sqlite"
    old_store(path)
    before = sha256(path)
    bad = ChangeSet(
        (
            Alteration(IP_1, {"connection_creation_rate": 20}),
            Alteration(ALICE, {}, {"request_percentage"}),  # not set: the write fails
        )
    )
    with pytest.raises(QuotaFileError, match="cannot delete request_percentage"):
        SQLiteStore(path).apply(bad)
    assert sha256(path) == before
    assert schema_of(path)[0] == 1


UPGRADING_WRITER = """
import sys, time
from kquota.config.model import IpEntity
from kquota.config.store import Alteration, ChangeSet, SQLiteStore

store = SQLiteStore(sys.argv[1])
# SQLiteStore.apply of an IP on a schema-1 store, up to its COMMIT.
with store._transaction("BEGIN IMMEDIATE", create=True) as conn:
    before = store._load(conn)
    change = ChangeSet((Alteration(IpEntity("10.0.0.1"), {"connection_creation_rate": 9}),))
    store._upgrade(conn, 1, 2)
    store._write(conn, before.config, change.apply_to(before.config))
    conn.execute("UPDATE kquota_meta SET value = value + 1 WHERE key = 'version'")
    print("written", flush=True)
    time.sleep(60)
"""


def test_an_upgrade_killed_before_commit_leaves_the_old_schema(tmp_path: Path) -> None:
    path = tmp_path / "quotas.sqlite"
    old_store(path)
    store = SQLiteStore(path)
    old, before = store.read(), sha256(path)
    writer = run_python(UPGRADING_WRITER, str(path))
    assert writer.stdout is not None
    assert writer.stdout.readline() == "written\n", writer.communicate()
    writer.send_signal(signal.SIGKILL)
    writer.communicate()
    assert writer.returncode == -signal.SIGKILL
    assert store.read() == old  # SQLite rolls the hot journal back: upgrade and write
    assert sha256(path) == before
    assert schema_of(path) == (1, ["kquota_meta", "kquota_quota"])
    assert store.apply(change(IP_1, {"connection_creation_rate": 3})) == 8
    assert schema_of(path)[0] == 2


UPGRADE_RACER = """
import sys
from kquota.config.model import IpEntity
from kquota.config.store import Alteration, ChangeSet, SQLiteStore

store = SQLiteStore(sys.argv[1], timeout=60)
me, n = int(sys.argv[2]), int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()  # every racer starts at once
for i in range(n):
    ip = IpEntity(f"10.{me}.0.{i + 1}")
    store.apply(ChangeSet((Alteration(ip, {"connection_creation_rate": i + 1}),)))
"""


def test_concurrent_first_writers_upgrade_once_and_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "quotas.sqlite"
    old_store(path, version=0)
    racers, per_racer = 4, 10
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                textwrap.dedent(UPGRADE_RACER),
                str(path),
                str(r),
                str(per_racer),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(racers)
    ]
    for proc in procs:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    snapshot = SQLiteStore(path).read()
    assert snapshot.version == racers * per_racer
    assert schema_of(path) == (2, ["kquota_ip_quota", "kquota_meta", "kquota_quota"])
    entities = snapshot.config.by_entity()
    for r in range(racers):
        for i in range(per_racer):
            assert entities[IpEntity(f"10.{r}.0.{i + 1}")] == {"connection_creation_rate": i + 1.0}
    assert {k: v for k, v in entities.items() if isinstance(k, Entity)} == OLD_QUOTAS


def damaged_ip_table(path: Path) -> None:
    SQLiteStore(path).apply(change(IP_1, {"connection_creation_rate": 1}))
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DROP TABLE kquota_ip_quota")


def hand_written_ip(path: Path) -> None:
    SQLiteStore(path).apply(change(IP_1, {"connection_creation_rate": 1}))
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE kquota_ip_quota SET ip = 'broker-1.example'")


def ip_property_on_a_user(path: Path) -> None:
    SQLiteStore(path).apply(change(ALICE, {"producer_byte_rate": 1}))
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("UPDATE kquota_quota SET property = 'connection_creation_rate'")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (damaged_ip_table, "no such table: kquota_ip_quota"),
        (hand_written_ip, "invalid configuration: invalid ip 'broker-1.example'"),
        (
            ip_property_on_a_user,
            "invalid configuration: user-principal 'alice': Invalid configuration key "
            "connection_creation_rate",
        ),
    ],
)
def test_damaged_schema_2_stores_are_store_errors(
    tmp_path: Path, make: Callable[[Path], None], message: str
) -> None:
    path = tmp_path / "quotas.sqlite"
    make(path)
    before = sha256(path)
    store = SQLiteStore(path)
    for operation in (store.read, lambda: store.apply(change(BOB_APP, {"request_percentage": 1}))):
        with pytest.raises(StoreError, match=message):
            operation()
    assert sha256(path) == before
