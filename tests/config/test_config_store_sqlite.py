"""kquota.config.store's SQLite backend: the file (created on the first write, values bit
for bit, unusable files left untouched, locks), transactions across processes, and crash
safety with writers killed at random moments under load."""

from __future__ import annotations

import inspect
import itertools
import json
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
from kquota import DEFAULT, Entity
from kquota.config.model import QuotaConfig
from kquota.config.store import APPLICATION_ID, SQLiteStore
from kquota.exceptions import QuotaFileError, StoreError
from store_support import ALICE, BOB_APP, DEFAULT_CLIENT, change, run_python, sha256

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
