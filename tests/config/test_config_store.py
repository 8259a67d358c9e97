"""kquota.config.store: the store contract on every backend, and SQLite's guarantees
(transactions across processes, crash safety, unusable files left untouched)."""

from __future__ import annotations

import hashlib
import inspect
import itertools
import json
import logging
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
from kquota import DEFAULT, Entity
from kquota.config.backends import default_store_path, open_store, store_spec
from kquota.config.model import AnyEntity, IpEntity, QuotaConfig, Window
from kquota.config.store import (
    APPLICATION_ID,
    Alteration,
    ChangeSet,
    MemoryStore,
    QuotaStore,
    SQLiteStore,
    StoreSnapshot,
)
from kquota.exceptions import QuotaFileError, StoreError

ALICE = Entity(user="alice")
BOB_APP = Entity(user="bob", client_id="app-1")
DEFAULT_CLIENT = Entity(client_id=DEFAULT)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def change(entity: AnyEntity, add: dict[str, float] | None = None, *delete: str) -> ChangeSet:
    return ChangeSet((Alteration(entity, add or {}, delete),))


def run_python(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(params=["sqlite", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> QuotaStore:
    if request.param == "sqlite":
        return SQLiteStore(tmp_path / "quotas.sqlite")
    return MemoryStore()


# -- the contract, on every backend ----------------------------------------------------


def test_a_new_store_reads_empty_at_version_0(store: QuotaStore) -> None:
    if isinstance(store, SQLiteStore):
        store.path.touch()  # there, but never written (a missing file is an error, below)
    assert store.read() == StoreSnapshot(0, QuotaConfig())
    assert store.version() == 0


def test_apply_adds_changes_and_deletes_with_growing_versions(store: QuotaStore) -> None:
    assert store.apply(change(ALICE, {"producer_byte_rate": 1048576})) == 1
    assert store.apply(change(BOB_APP, {"request_percentage": 50.5})) == 2
    assert store.apply(change(ALICE, {"consumer_byte_rate": 2e6, "producer_byte_rate": 5})) == 3
    assert store.read().config.by_entity() == {
        ALICE: {"producer_byte_rate": 5.0, "consumer_byte_rate": 2e6},
        BOB_APP: {"request_percentage": 50.5},
    }
    assert store.apply(change(BOB_APP, None, "request_percentage")) == 4
    snapshot = store.read()
    assert snapshot.version == store.version() == 4
    assert BOB_APP not in snapshot.config.by_entity()  # no properties left: gone


def test_deleting_an_unset_property_fails_and_changes_nothing(store: QuotaStore) -> None:
    store.apply(change(ALICE, {"producer_byte_rate": 100}))
    before = store.read()
    both = ChangeSet(
        (
            Alteration(BOB_APP, {"producer_byte_rate": 1}),
            Alteration(ALICE, {}, {"consumer_byte_rate"}),
        )
    )
    with pytest.raises(QuotaFileError, match="cannot delete consumer_byte_rate of user-principal"):
        store.apply(both)
    assert store.read() == before  # the first alteration was not kept either


def test_replace_sets_exactly_the_config_and_window(store: QuotaStore) -> None:
    store.apply(change(ALICE, {"producer_byte_rate": 100}))
    wanted = QuotaConfig.from_entities(
        {DEFAULT_CLIENT: {"consumer_byte_rate": 7.0}, BOB_APP: {"request_percentage": 200.0}},
        Window(5, 2000),
    )
    assert store.replace(wanted) == 2
    assert store.read().config.to_json() == wanted.to_json()


def test_every_entity_shape_round_trips(store: QuotaStore) -> None:
    shapes = [
        Entity(user=u, client_id=c)
        for u, c in [
            ("alice", None),
            (DEFAULT, None),
            (None, "app-1"),
            (None, DEFAULT),
            ("bob", "app-1"),
            ("bob", DEFAULT),
            (DEFAULT, "app-1"),
            (DEFAULT, DEFAULT),
            ("", None),  # an empty name is a name, not an absent dimension
            ("CN=x, O=y's", "weird ,= id"),
        ]
    ]
    wanted = {e: {"producer_byte_rate": float(i + 1)} for i, e in enumerate(shapes)}
    store.replace(QuotaConfig.from_entities(wanted))
    assert store.read().config.by_entity() == wanted


def test_bad_changes_are_rejected_before_any_store() -> None:
    with pytest.raises(QuotaFileError, match="Invalid configuration key bytes"):
        Alteration(ALICE, {"bytes": 1})
    with pytest.raises(QuotaFileError, match=r"^Quota producer_byte_rate must be greater than 0"):
        Alteration(ALICE, {"producer_byte_rate": 0})
    with pytest.raises(QuotaFileError, match=r"^consumer_byte_rate cannot be a fractional value."):
        Alteration(ALICE, {"consumer_byte_rate": 2.5})
    with pytest.raises(QuotaFileError, match="both added and deleted"):
        Alteration(ALICE, {"producer_byte_rate": 1}, {"producer_byte_rate"})
    with pytest.raises(QuotaFileError, match="nothing to change"):
        Alteration(ALICE)
    with pytest.raises(QuotaFileError, match="collection of names"):
        Alteration(ALICE, {}, "producer_byte_rate")
    with pytest.raises(QuotaFileError, match="expected Alteration"):
        ChangeSet(("alice",))  # type: ignore[arg-type]


# -- SQLite: the file ------------------------------------------------------------------


def test_sqlite_file_is_created_with_its_folder_by_the_first_write(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "quotas.sqlite"
    store = SQLiteStore(path)
    for read in (store.read, store.version):
        with pytest.raises(StoreError, match="does not exist: check the path") as raised:
            read()
        assert str(path) in str(raised.value)
    assert not path.parent.exists()  # reading created nothing
    with pytest.raises(QuotaFileError):
        store.apply(change(ALICE, None, "producer_byte_rate"))
    assert not path.parent.exists()  # nor did a change that cannot apply
    store.apply(change(ALICE, {"producer_byte_rate": 1}))
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("SELECT value FROM kquota_meta WHERE key='version'").fetchone() == (1,)
    conn.close()
    assert SQLiteStore(path).read().config.by_entity() == {ALICE: {"producer_byte_rate": 1.0}}


def test_sqlite_values_round_trip_bit_for_bit(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "q.sqlite")
    values = [0.1, 1e-300, 1.7976931348623157e308, 1048576.0, 2.0 / 3.0]
    store.replace(
        QuotaConfig.from_entities(
            {Entity(user=f"u{i}"): {"request_percentage": v} for i, v in enumerate(values)}
        )
    )
    read = store.read().config.by_entity()
    assert [read[Entity(user=f"u{i}")]["request_percentage"] for i in range(5)] == values


def not_sqlite(path: Path) -> None:
    path.write_bytes(b"producer_byte_rate=1048576\n")


def random_bytes(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 40)


def other_database(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()


def future_schema(path: Path) -> None:
    SQLiteStore(path).apply(change(ALICE, {"producer_byte_rate": 1}))
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA user_version = 3")
    conn.close()


def damaged_value(path: Path) -> None:
    SQLiteStore(path).apply(change(ALICE, {"producer_byte_rate": 1}))
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE kquota_quota SET value = -5")
    conn.close()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (not_sqlite, "not a SQLite database"),
        (random_bytes, "not a SQLite database"),
        (other_database, "a SQLite database but not a kquota store"),
        (future_schema, "schema version 3, newer than the version 2"),
        (damaged_value, "invalid configuration: invalid value -5.0"),
    ],
)
def test_unusable_file_raises_store_error_and_stays_byte_for_byte(
    tmp_path: Path, make: Callable[[Path], None], message: str
) -> None:
    path = tmp_path / "quotas.sqlite"
    make(path)
    before = sha256(path)
    store = SQLiteStore(path, timeout=0.1)
    operations: list[Callable[[], object]] = [
        store.read,
        lambda: store.apply(change(BOB_APP, {"producer_byte_rate": 1})),
        lambda: store.replace(QuotaConfig()),
    ]
    if make is not damaged_value:
        operations.append(store.version)  # (the version alone is still readable there)
    for operation in operations:
        with pytest.raises(StoreError, match=message):
            operation()
    assert sha256(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["quotas.sqlite"]


def test_locked_store_times_out_with_store_error_and_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "quotas.sqlite"
    SQLiteStore(path).apply(change(ALICE, {"producer_byte_rate": 1}))
    before = sha256(path)
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        store = SQLiteStore(path, timeout=0.2)
        start = time.monotonic()
        for operation in (
            store.read,
            lambda: store.apply(change(ALICE, {"producer_byte_rate": 2})),
        ):
            with pytest.raises(StoreError, match=r"is locked: .* more than 0.2 s"):
                operation()
        assert 0.35 <= time.monotonic() - start < 5
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert sha256(path) == before
    assert SQLiteStore(path).read().config.by_entity() == {ALICE: {"producer_byte_rate": 1.0}}


def test_store_locked_by_another_process(tmp_path: Path) -> None:
    path = tmp_path / "quotas.sqlite"
    SQLiteStore(path).apply(change(ALICE, {"producer_byte_rate": 1}))
    before = sha256(path)
    holder = run_python(
        """
        import sqlite3, sys, time
        conn = sqlite3.connect(sys.argv[1], isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE kquota_meta SET value = 99 WHERE key = 'version'")
        print("locked", flush=True)
        time.sleep(30)
        """,
        str(path),
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == "locked\n"
        with pytest.raises(StoreError, match="is locked"):
            SQLiteStore(path, timeout=0.2).apply(change(ALICE, {"producer_byte_rate": 2}))
        assert SQLiteStore(path).read().version == 1  # readers still read the committed state
    finally:
        holder.kill()
        holder.communicate()
    assert sha256(path) == before


@pytest.mark.parametrize("timeout", [-1.0, float("nan"), float("inf"), True])
def test_bad_timeout(tmp_path: Path, timeout: float) -> None:
    with pytest.raises(StoreError, match="invalid lock timeout"):
        SQLiteStore(tmp_path / "q.sqlite", timeout=timeout)


# -- SQLite: processes -----------------------------------------------------------------

CRASHING_WRITER = """
import sys, time
from kquota import Entity
from kquota.config.model import QuotaConfig
from kquota.config.store import ChangeSet, SQLiteStore

store = SQLiteStore(sys.argv[1])
big = QuotaConfig.from_entities(
    {Entity(user=f"user-{i}"): {"producer_byte_rate": float(i + 1)} for i in range(5000)}
)
# SQLiteStore.apply up to its COMMIT, with a small page cache so that pages reach the file.
with store._transaction("BEGIN IMMEDIATE", create=True) as conn:
    conn.execute("PRAGMA cache_size = 10")
    before = store._load(conn)
    store._write(conn, before.config, ChangeSet.replacing(big).apply_to(before.config))
    conn.execute("UPDATE kquota_meta SET value = value + 1 WHERE key = 'version'")
    print("written", flush=True)
    time.sleep(60)
"""


def test_writer_killed_before_commit_leaves_the_old_state(tmp_path: Path) -> None:
    path = tmp_path / "quotas.sqlite"
    store = SQLiteStore(path)
    store.apply(change(ALICE, {"producer_byte_rate": 1048576}))
    old, before = store.read(), sha256(path)
    writer = run_python(CRASHING_WRITER, str(path))
    assert writer.stdout is not None
    assert writer.stdout.readline() == "written\n"
    assert sha256(path) != before  # the half-written transaction reached the file
    writer.send_signal(signal.SIGKILL)
    writer.communicate()
    assert writer.returncode == -signal.SIGKILL
    assert (tmp_path / "quotas.sqlite-journal").exists()
    assert store.read() == old  # SQLite rolls the hot journal back
    assert sha256(path) == before
    assert store.apply(change(BOB_APP, {"request_percentage": 10})) == 2


CONCURRENT_WRITER = """
import sys
from kquota import Entity
from kquota.config.store import Alteration, ChangeSet, SQLiteStore

store = SQLiteStore(sys.argv[1], timeout=60)
me, n = sys.argv[2], int(sys.argv[3])
shared = Entity(client_id="shared")
for i in range(n):
    mine = Alteration(Entity(user=me, client_id=str(i)), {"producer_byte_rate": i + 1})
    store.apply(ChangeSet((mine,)))
    # every writer also rewrites the same entity: the last write wins, none is half-applied
    both = {"consumer_byte_rate": i + 1, "request_percentage": i + 1}
    store.apply(ChangeSet((Alteration(shared, both),)))
"""


def test_concurrent_writers_in_processes_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "quotas.sqlite"
    writers, per_writer = 6, 15
    procs = [
        run_python(CONCURRENT_WRITER, str(path), f"w{w}", str(per_writer)) for w in range(writers)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    snapshot = SQLiteStore(path).read()
    assert snapshot.version == writers * per_writer * 2
    entities = snapshot.config.by_entity()
    for w in range(writers):
        for i in range(per_writer):
            assert entities[Entity(user=f"w{w}", client_id=str(i))] == {
                "producer_byte_rate": i + 1.0
            }
    shared = entities[Entity(client_id="shared")]
    assert shared["consumer_byte_rate"] == shared["request_percentage"]
    assert len(entities) == writers * per_writer + 1


# -- SQLite: writers killed at random moments under load -------------------------------

PROPERTIES_ALL = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")


def half_states(entities: dict[Entity, dict[str, float]], version: int) -> list[str]:
    """What is wrong with a configuration written by the killed writers below ([] if it is
    consistent).

    Writer ``name``'s change ``i`` sets all three properties of ``(name, str(i))`` to
    ``i + 1`` and the counter ``<user name>``'s ``producer_byte_rate`` to ``i + 1``, in one
    transaction; the CLI's change ``k`` sets all three properties of ``("cli", str(k))``.
    So a whole state has, per writer, exactly the changes ``0 .. counter - 1``, every one
    complete, and its version is 1 (the initial quota) + the counters + the CLI changes.
    """
    problems: list[str] = []
    counters: dict[str, int] = {}
    changes: dict[str, set[int]] = {}
    cli = 0
    for entity, config in entities.items():
        user, client = entity.user, entity.client_id
        if user is not None and user.startswith("w") and client is None:
            value = config.get("producer_byte_rate", 0.0)
            if set(config) != {"producer_byte_rate"} or value != int(value) or value < 1:
                problems.append(f"bad counter {user}: {config}")
                continue
            counters[user] = int(value)
        elif user is not None and (user.startswith("w") or user == "cli") and client is not None:
            if set(config) != set(PROPERTIES_ALL) or len(set(config.values())) != 1:
                problems.append(f"half-written change ({user}, {client}): {config}")
                continue
            if user == "cli":
                cli += 1
                if config["producer_byte_rate"] != int(client) + 1:
                    problems.append(f"wrong value in ({user}, {client}): {config}")
                continue
            if config["producer_byte_rate"] != int(client) + 1:
                problems.append(f"wrong value in ({user}, {client}): {config}")
            changes.setdefault(user, set()).add(int(client))
        elif entity != Entity(client_id=DEFAULT) or config != {"consumer_byte_rate": 1e6}:
            problems.append(f"unexpected entry {entity!r}: {config}")
    for name in counters.keys() | changes.keys():
        if changes.get(name, set()) != set(range(counters.get(name, 0))):
            problems.append(
                f"{name}: counter {counters.get(name, 0)} but changes "
                f"{sorted(changes.get(name, set()))}"
            )
    expected = 1 + sum(counters.values()) + cli
    if version != expected:
        problems.append(f"version {version} but 1 + {sum(counters.values())} + {cli} changes")
    return problems


LOGGING_WRITER = """
import os, sys
from kquota import Entity
from kquota.config.store import Alteration, ChangeSet, SQLiteStore

path, name, log = sys.argv[1:4]
store = SQLiteStore(path, timeout=60)
fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
properties = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
print("ready", flush=True)
for i in range(100_000):
    value = float(i + 1)
    changes = ChangeSet((
        Alteration(Entity(user=name, client_id=str(i)), dict.fromkeys(properties, value)),
        Alteration(Entity(user=name), {"producer_byte_rate": value}),
    ))
    os.write(fd, f"intent {i}\\n".encode())  # one write(2) each: whole lines or nothing
    version = store.apply(changes)
    os.write(fd, f"ack {i} {version}\\n".encode())
"""

CHECKING_READER = """
import os, sys, json
from kquota import DEFAULT, Entity
from kquota.config.store import SQLiteStore

PROPERTIES_ALL = ("producer_byte_rate", "consumer_byte_rate", "request_percentage")
{half_states}

path, stop, kind = sys.argv[1:4]
store = SQLiteStore(path, timeout=60)
reads, last, bad = 0, 0, []
if kind == "live":
    from kquota.config.live import LiveQuotas
    live = LiveQuotas.for_store(store, interval=60)  # refreshed by hand below
    produce, fetch, request = live.managers
while not os.path.exists(stop) and len(bad) < 10:
    try:
        if kind == "store":
            snapshot = store.read()
            version, entities = snapshot.version, snapshot.config.by_entity()
        else:
            live.refresh()  # what the poller thread calls; the managers hold its result
            version, entities = live.version, {{}}
            for manager, prop in (
                (produce, "producer_byte_rate"),
                (fetch, "consumer_byte_rate"),
                (request, "request_percentage"),
            ):
                for entity, value in manager.quotas():
                    entities.setdefault(entity, {{}})[prop] = value
    except Exception as exc:
        bad.append(f"{{type(exc).__name__}}: {{exc}}")
        continue
    reads += 1
    if version < last:
        bad.append(f"version went back from {{last}} to {{version}}")
    last = version
    bad.extend(f"at version {{version}}: {{p}}" for p in half_states(entities, version))
print(json.dumps({{"reads": reads, "last": last, "bad": bad}}))
"""


@dataclass
class KilledWriter:
    name: str
    log: Path
    proc: subprocess.Popen[str]


def test_writers_killed_at_random_moments_under_load(tmp_path: Path) -> None:
    """Writer processes (SQLiteStore.apply, and `kquota configs --alter`) hammer one store
    while readers (store reads, and a LiveQuotas applying each version to managers) check
    every state they see; writers are SIGKILLed at random moments, over and over. Every
    change a writer acknowledged is there, a killed change is there completely or not at
    all, the version counts exactly the changes applied, and the file is intact."""
    rng = random.Random(6)
    path = tmp_path / "quotas.sqlite"
    stop = tmp_path / "stop"
    store = SQLiteStore(path)
    assert store.apply(change(DEFAULT_CLIENT, {"consumer_byte_rate": 1e6})) == 1
    reader_source = CHECKING_READER.format(
        half_states=textwrap.dedent(inspect.getsource(half_states))
    )
    readers = [run_python(reader_source, str(path), str(stop), k) for k in ("store", "live")]

    incarnations = itertools.count()

    def start_writer() -> KilledWriter:
        name = f"w{next(incarnations)}"
        log = tmp_path / f"{name}.log"
        return KilledWriter(name, log, run_python(LOGGING_WRITER, str(path), name, str(log)))

    cli_acked: set[int] = set()
    cli_killed: set[int] = set()
    cli_failures: list[str] = []
    # A fixed number of kills, at moments drawn from a fixed seed: where a kill lands
    # still depends on scheduling, but every assertion below holds wherever it lands.
    kills = 12
    done = threading.Event()

    def cli_writer() -> None:
        cli_rng = random.Random(7)
        for k in itertools.count():
            if done.is_set():
                return
            values = ",".join(f"{p}={k + 1}" for p in PROPERTIES_ALL)
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kquota",
                    "configs",
                    "--store",
                    str(path),
                    "--alter",
                    "--add-config",
                    values,
                    "--user",
                    "cli",
                    "--client",
                    str(k),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            if cli_rng.random() < 0.5:
                try:  # around the time the CLI takes, so that some kills land in its write
                    proc.wait(timeout=cli_rng.uniform(0.05, 0.2))
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGKILL)
            _, err = proc.communicate(timeout=60)
            if proc.returncode == 0:
                cli_acked.add(k)
            elif proc.returncode == -signal.SIGKILL:
                cli_killed.add(k)
            else:
                cli_failures.append(f"exit {proc.returncode}: {err}")

    writers = [start_writer() for _ in range(3)]
    finished: list[KilledWriter] = []
    cli = threading.Thread(target=cli_writer)
    cli.start()
    try:
        while len(finished) < kills:
            slot = rng.randrange(len(writers))
            victim = writers[slot]
            assert victim.proc.stdout is not None
            assert victim.proc.stdout.readline() == "ready\n"
            time.sleep(rng.uniform(0.0, 0.05))
            victim.proc.send_signal(signal.SIGKILL)
            victim.proc.communicate()
            finished.append(victim)
            writers[slot] = start_writer()
    finally:
        for writer in writers:
            writer.proc.send_signal(signal.SIGKILL)
            writer.proc.communicate()
            finished.append(writer)
        done.set()
        cli.join()
        stop.touch()
    reports = []
    for reader in readers:
        out, err = reader.communicate(timeout=60)
        assert reader.returncode == 0, err
        reports.append(json.loads(out))

    # The store opens, SQLite finds the file intact, and the state is whole.
    snapshot = SQLiteStore(path).read()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    entities = snapshot.config.by_entity()
    assert half_states(entities, snapshot.version) == []

    # Exact accounting against the writers' logs: what was acknowledged is there; the one
    # change a writer was killed in (logged as intended, never acknowledged) is there or not.
    acked, in_doubt, applied_in_doubt = 0, 0, 0
    acked_versions: list[int] = []
    for writer in finished:
        assert writer.proc.returncode == -signal.SIGKILL
        lines = writer.log.read_text().splitlines() if writer.log.exists() else []
        intents = [int(line.split()[1]) for line in lines if line.startswith("intent ")]
        acks = [line.split()[1:] for line in lines if line.startswith("ack ")]
        assert len(intents) + len(acks) == len(lines)
        assert intents == list(range(len(intents)))
        assert [int(i) for i, _ in acks] == list(range(len(acks)))
        acked_versions.extend(int(v) for _, v in acks)
        counter = entities.get(Entity(user=writer.name), {}).get("producer_byte_rate", 0)
        acked += len(acks)
        if len(intents) == len(acks) + 1:
            in_doubt += 1
            assert counter in (len(acks), len(acks) + 1), writer.name
            applied_in_doubt += int(counter) - len(acks)
        else:
            assert len(intents) == len(acks)
            assert counter == len(acks), writer.name
    cli_applied = {int(e.client_id) for e in entities if e.user == "cli" and e.client_id}
    assert cli_failures == []
    assert cli_acked <= cli_applied <= cli_acked | cli_killed
    applied_in_doubt += len(cli_applied - cli_acked)
    assert snapshot.version == 1 + acked + len(cli_acked) + applied_in_doubt
    assert len(set(acked_versions)) == len(acked_versions)  # every version given out once
    assert max(acked_versions) <= snapshot.version

    # The test did what it says: many kills, many of them inside a write, and readers
    # that saw the store change under them without ever seeing a half state.
    assert len(finished) >= 10 and in_doubt >= 3 and acked >= 20, (len(finished), in_doubt, acked)
    for report in reports:
        assert report["bad"] == []
        assert report["reads"] >= 20 and report["last"] > 1
    assert SQLiteStore(path).apply(change(ALICE, {"producer_byte_rate": 1})) == (
        snapshot.version + 1
    )


# -- choosing a store ------------------------------------------------------------------


def test_store_spec_and_default_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("KQUOTA_STORE", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert default_store_path() == tmp_path / "state" / "kquota" / "quotas.sqlite"
    assert store_spec() == str(tmp_path / "state" / "kquota" / "quotas.sqlite")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_store_path() == tmp_path / ".local" / "state" / "kquota" / "quotas.sqlite"
    monkeypatch.setenv("KQUOTA_STORE", str(tmp_path / "env.sqlite"))
    assert store_spec() == str(tmp_path / "env.sqlite")
    assert store_spec(tmp_path / "arg.sqlite") == str(tmp_path / "arg.sqlite")
    store = open_store(timeout=1.5)
    assert isinstance(store, SQLiteStore)
    assert (store.path, store.timeout) == (tmp_path / "env.sqlite", 1.5)
    via_url = open_store(f"sqlite://{tmp_path}/url.sqlite")
    assert isinstance(via_url, SQLiteStore)
    assert via_url.path == tmp_path / "url.sqlite"


def test_unknown_scheme(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"no store backend for redis:// .*kquota.stores"):
        open_store("redis://localhost/0")


@pytest.fixture
def memory_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A real installed distribution (a dist-info on sys.path) that registers a backend."""
    (tmp_path / "kquota_mem_backend.py").write_text(
        textwrap.dedent(
            """
            from kquota.config.store import MemoryStore

            STORES = {}

            def open_store(spec):
                return STORES.setdefault(spec, MemoryStore())

            def not_a_store(spec):
                return object()
            """
        )
    )
    dist = tmp_path / "kquota_mem_backend-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: kquota-mem-backend\nVersion: 1.0\n"
    )
    (dist / "entry_points.txt").write_text(
        "[kquota.stores]\n"
        "mem = kquota_mem_backend:open_store\n"
        "broken = kquota_mem_backend:not_a_store\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("kquota_mem_backend", None)


@pytest.mark.usefixtures("memory_backend")
def test_backend_from_an_entry_point() -> None:
    store = open_store("mem://one")
    assert isinstance(store, MemoryStore)
    store.apply(change(ALICE, {"producer_byte_rate": 3}))
    assert open_store("mem://one").read().version == 1  # the same backend instance
    with pytest.raises(StoreError, match="returned object, not a QuotaStore"):
        open_store("broken://x")


def test_a_subclass_only_needs_read_apply_describe() -> None:
    class ListStore(QuotaStore):
        def __init__(self) -> None:
            self.snapshots = [StoreSnapshot(0, QuotaConfig())]

        def read(self) -> StoreSnapshot:
            return self.snapshots[-1]

        def apply(self, changes: ChangeSet) -> int:
            last = self.snapshots[-1]
            self.snapshots.append(StoreSnapshot(last.version + 1, changes.apply_to(last.config)))
            return last.version + 1

        def describe(self) -> str:
            return "list store"

    store = ListStore()
    assert store.replace(QuotaConfig.from_entities({ALICE: {"producer_byte_rate": 1.0}})) == 1
    assert store.version() == 1
    with pytest.raises(TypeError):
        QuotaStore()  # type: ignore[abstract]


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
IP_1 = IpEntity("10.0.0.1")
IP_6 = IpEntity("2001:db8::1")
DEFAULT_IP = IpEntity(DEFAULT)


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


def test_new_entities_round_trip(store: QuotaStore) -> None:
    wanted: dict[AnyEntity, dict[str, float]] = {
        ALICE: {"controller_mutation_rate": 2.5, "producer_byte_rate": 10.0},
        DEFAULT_CLIENT: {"controller_mutation_rate": 0.125},
        IP_1: {"connection_creation_rate": 20.0},
        IP_6: {"connection_creation_rate": 2147483647.0},
        DEFAULT_IP: {"connection_creation_rate": 20.0000005},  # kept as given, like Kafka
    }
    assert store.replace(QuotaConfig.from_entities(wanted, Window(3, 1000))) == 1
    assert store.read().config.by_entity() == wanted
    assert store.apply(change(IP_1, {"connection_creation_rate": 30})) == 2
    assert store.apply(change(DEFAULT_IP, None, "connection_creation_rate")) == 3
    assert store.apply(change(ALICE, None, "controller_mutation_rate")) == 4
    entities = store.read().config.by_entity()
    assert entities[IP_1] == {"connection_creation_rate": 30.0}
    assert DEFAULT_IP not in entities
    assert entities[ALICE] == {"producer_byte_rate": 10.0}
    with pytest.raises(QuotaFileError, match="cannot delete connection_creation_rate of ip"):
        store.apply(change(IpEntity("10.0.0.2"), None, "connection_creation_rate"))
    assert store.version() == 4


def test_alterations_check_the_kind_of_entity() -> None:
    with pytest.raises(QuotaFileError, match=r"^ip '10.0.0.1': Invalid configuration key producer"):
        Alteration(IP_1, {"producer_byte_rate": 1})
    with pytest.raises(
        QuotaFileError, match=r"^the default ip: Invalid configuration key request_percentage"
    ):
        Alteration(DEFAULT_IP, {}, {"request_percentage"})
    with pytest.raises(
        QuotaFileError, match=r"^user-principal 'alice': Invalid configuration key connection_"
    ):
        Alteration(ALICE, {"connection_creation_rate": 1})
    with pytest.raises(
        QuotaFileError, match=r"^connection_creation_rate cannot be a fractional value. \(got 1.5;"
    ):
        Alteration(IP_1, {"connection_creation_rate": 1.5})
    with pytest.raises(QuotaFileError, match=r"invalid entity '10\.0\.0\.1'"):
        Alteration("10.0.0.1", {"connection_creation_rate": 1})  # type: ignore[arg-type]


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
