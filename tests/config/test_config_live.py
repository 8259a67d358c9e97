"""kquota.config.live: managers that follow a store, in one process and across processes."""

from __future__ import annotations

import json
import logging
import queue
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paths
import pytest
from kquota import (
    DEFAULT,
    UNLIMITED,
    UNLIMITED_CONNECTION_RATE,
    ConnectionQuotas,
    ControllerMutationQuotaManager,
    Entity,
    QuotaManager,
)
from kquota.config.live import LiveQuotas, apply_config, apply_ip_config, merge
from kquota.config.model import AnyEntity, IpEntity, QuotaConfig, Window
from kquota.config.store import Alteration, ChangeSet, MemoryStore, SQLiteStore
from kquota.exceptions import InvalidConfigError, StoreError

ALICE = Entity(user="alice")
GUIDE = paths.ROOT / "docs" / "guide" / "configuring-quotas.md"


def change(entity: AnyEntity, add: dict[str, float] | None = None, *delete: str) -> ChangeSet:
    return ChangeSet((Alteration(entity, add or {}, delete),))


def steady_records(manager: QuotaManager, start: int, stop: int) -> list[int]:
    """5000 B at every whole second: after 11 s, 55000 B over 10 s = 5500 B/s."""
    return [manager.record("alice", "app-1", 5000, now_ms=s * 1000) for s in range(start, stop)]


def test_changes_keep_samples_and_move_only_the_bound() -> None:
    store = MemoryStore()
    store.apply(change(ALICE, {"producer_byte_rate": 1000}))
    produce = QuotaManager("produce")
    live = LiveQuotas(store, produce)
    assert live.refresh() is True
    assert live.version == 1
    assert steady_records(produce, 0, 12)[-1] == 45000  # (5500 - 1000) / 1000 * 10 s
    rate = produce.measure("alice", "app-1", now_ms=11000)

    store.apply(change(ALICE, {"producer_byte_rate": 2000}))
    assert live.refresh() is True
    assert produce.measure("alice", "app-1", now_ms=11000) == rate  # samples kept
    assert produce.bound("alice", "app-1") == 2000.0
    assert steady_records(produce, 12, 13) == [17500]  # (5500 - 2000) / 2000 * 10 s

    store.apply(change(ALICE, None, "producer_byte_rate"))
    assert live.refresh() is True
    assert produce.quotas() == []
    assert produce.bound("alice", "app-1") == UNLIMITED
    assert steady_records(produce, 13, 14) == [0]
    assert live.refresh() is False  # nothing new


def test_only_the_difference_is_applied_to_each_manager_type() -> None:
    produce, fetch, request = (QuotaManager(t) for t in ("produce", "fetch", "request"))
    produce.set_quota(Entity(user="stale"), 1.0)  # not in the store: the store owns overrides
    config = QuotaConfig.from_entities(
        {
            ALICE: {"producer_byte_rate": 10.0, "consumer_byte_rate": 20.0},
            Entity(client_id=DEFAULT): {"request_percentage": 30.0},
        }
    )
    assert [apply_config(m, config) for m in (produce, fetch, request)] == [2, 1, 1]
    assert [apply_config(m, config) for m in (produce, fetch, request)] == [0, 0, 0]
    assert produce.quotas() == [(ALICE, 10.0)]
    assert fetch.quotas() == [(ALICE, 20.0)]
    assert request.quotas() == [(Entity(client_id=DEFAULT), 30.0)]


def test_store_wins_over_static_defaults() -> None:
    defaults = QuotaConfig.from_entities(
        {Entity(client_id=DEFAULT): {"producer_byte_rate": 100.0, "consumer_byte_rate": 200.0}}
    )
    store = MemoryStore()
    produce, fetch = QuotaManager("produce"), QuotaManager("fetch")
    live = LiveQuotas(store, produce, fetch, defaults=defaults)
    live.refresh()
    assert produce.quota(Entity(client_id=DEFAULT)) == 100.0
    store.apply(change(Entity(client_id=DEFAULT), {"producer_byte_rate": 5.0}))
    live.refresh()
    assert produce.quota(Entity(client_id=DEFAULT)) == 5.0
    assert fetch.quota(Entity(client_id=DEFAULT)) == 200.0
    store.apply(change(Entity(client_id=DEFAULT), None, "producer_byte_rate"))
    live.refresh()
    assert produce.quota(Entity(client_id=DEFAULT)) == 100.0  # back to the static default
    assert merge(None, defaults) is defaults


def test_background_thread_follows_a_sqlite_store(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "q.sqlite")
    store.apply(change(Entity(user="bob"), {"producer_byte_rate": 7}))
    produce = QuotaManager("produce")
    with LiveQuotas(store, produce, interval=0.05) as live:
        assert live.running
        assert live.version == 1
        start = time.monotonic()
        store.apply(change(ALICE, {"producer_byte_rate": 42}))
        while produce.quota(ALICE) is None and time.monotonic() - start < 5:
            time.sleep(0.005)
        # How fast it follows is a measurement, not a test (a loaded machine is slower):
        # the 5 s above only bounds a hang.
        assert produce.quota(ALICE) == 42.0
        assert live.version == 2
    assert not live.running


def test_background_errors_keep_the_last_config_and_recover(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "q.sqlite"
    store = SQLiteStore(path)
    store.apply(change(ALICE, {"producer_byte_rate": 42}))
    good = path.read_bytes()
    produce = QuotaManager("produce")
    with LiveQuotas(store, produce, interval=0.02) as live:
        path.write_bytes(b"not a database at all")
        deadline = time.monotonic() + 5
        while live.last_error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert isinstance(live.last_error, StoreError)
        assert produce.quota(ALICE) == 42.0  # kept while the store is unusable
        path.write_bytes(good)
        store.apply(change(ALICE, {"producer_byte_rate": 43}))
        while produce.quota(ALICE) != 43.0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert produce.quota(ALICE) == 43.0
        assert live.last_error is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1  # one line per distinct error, not one per poll
    assert "not a SQLite database" in warnings[0].getMessage()


def test_start_raises_when_the_store_is_unusable(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite"
    SQLiteStore(path).apply(change(ALICE, {"producer_byte_rate": 42}))
    live = LiveQuotas(SQLiteStore(path), QuotaManager("produce"))
    path.write_text("nope")
    with pytest.raises(StoreError, match="not a SQLite database"):
        live.start()
    assert not live.running
    with pytest.raises(StoreError, match="not a SQLite database"):  # and at construction
        LiveQuotas(SQLiteStore(path), QuotaManager("produce"))


@pytest.mark.parametrize("typo", ["typo.sqlite", "no/such/folder/q.sqlite"])
def test_a_store_that_does_not_exist_raises_naming_it_and_stays_absent(
    tmp_path: Path, typo: str
) -> None:
    """Reading never creates a store: a typo in its path is an error, not a store
    serving no quotas."""
    path = tmp_path / typo
    store = SQLiteStore(path)
    with pytest.raises(StoreError, match="does not exist") as raised:
        LiveQuotas(store, QuotaManager("produce"))
    assert str(path) in str(raised.value)
    with pytest.raises(StoreError, match="does not exist") as raised:
        LiveQuotas.for_store(store, ["produce"])
    assert str(path) in str(raised.value)
    assert list(tmp_path.iterdir()) == []  # nothing was created
    store.apply(change(ALICE, {"producer_byte_rate": 42}))  # a write creates it
    with LiveQuotas.for_store(store, ["produce"]) as live:
        assert live.manager("produce").quota(ALICE) == 42.0


def test_a_store_that_disappears_is_reported_and_its_quotas_kept(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite"
    SQLiteStore(path).apply(change(ALICE, {"producer_byte_rate": 42}))
    live = LiveQuotas.for_store(SQLiteStore(path), ["produce"])
    path.unlink()
    with pytest.raises(StoreError, match="does not exist"):
        live.refresh()
    assert live.manager("produce").quota(ALICE) == 42.0


def test_for_store_uses_the_store_window(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryStore(
        QuotaConfig.from_entities({ALICE: {"request_percentage": 50.0}}, Window(5, 2000))
    )
    live = LiveQuotas.for_store(store, ["produce", "request"])
    assert [(m.quota_type, m.num_samples, m.window_ms) for m in live.managers] == [
        ("produce", 5, 2000),
        ("request", 5, 2000),
    ]
    assert live.manager("request").quota(ALICE) == 50.0
    with pytest.raises(InvalidConfigError, match="no 'fetch' manager is bound"):
        live.manager("fetch")
    # A new window cannot move into existing managers: they keep theirs, with a warning.
    store.replace(QuotaConfig.from_entities({ALICE: {"request_percentage": 60.0}}, Window()))
    live.refresh()
    assert live.manager("request").quota(ALICE) == 60.0
    assert live.manager("request").window_ms == 2000
    assert "keep their own window" in caplog.text
    # A store never written takes the defaults' window.
    empty = LiveQuotas.for_store(MemoryStore(), ["fetch"], defaults=QuotaConfig(Window(3, 1000)))
    assert empty.manager("fetch").num_samples == 3


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((), {}, "one or more QuotaManager"),
        (("produce",), {}, "one or more QuotaManager"),
        ((QuotaManager("produce"),), {"interval": 0}, "invalid interval 0"),
        ((QuotaManager("produce"),), {"interval": float("nan")}, "invalid interval nan"),
        ((QuotaManager("produce"),), {"defaults": {}}, "invalid defaults"),
    ],
)
def test_bad_arguments(args: tuple[Any, ...], kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        LiveQuotas(MemoryStore(), *args, **kwargs)
    with pytest.raises(InvalidConfigError, match="expected a QuotaStore"):
        LiveQuotas("q.sqlite", QuotaManager("produce"))  # type: ignore[arg-type]


def readme_examples() -> list[str]:
    """The Python examples of the guide's page on configuring quotas."""
    text = GUIDE.read_text(encoding="utf-8")
    return re.findall(r"```python\n(.*?)```", text, re.DOTALL)


def test_readme_examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    live_example, static_example = readme_examples()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KQUOTA_STORE", str(tmp_path / "quotas.sqlite"))
    SQLiteStore(tmp_path / "quotas.sqlite").apply(change(ALICE, {"producer_byte_rate": 1024}))
    scope: dict[str, Any] = {}
    exec(live_example, scope)
    assert scope["produce"].quota(ALICE) == 1024.0
    assert scope["throttle_ms"] == 0
    assert not scope["live"].running
    (tmp_path / "quota.properties").write_text("quota.consumer.default=2097152\n")
    exec(static_example, scope)
    assert scope["fetch"].quota_for("anyone", "app-1") == 2097152.0


# -- two processes: the CLI alters while a service records ------------------------------

RECORDER = """
import json, sys, time
from kquota.config.live import LiveQuotas
from kquota.config.store import SQLiteStore

# A service: records 5000 B per simulated second for alice/app-1, one step every 10 ms,
# and reports each throttle decision with the quota in force before and after it.
with LiveQuotas.for_store(SQLiteStore(sys.argv[1]), ["produce"]) as live:
    produce = live.manager("produce")
    deadline = time.monotonic() + 20
    step = unlimited_steps = 0
    while unlimited_steps < 10 and time.monotonic() < deadline:
        before = produce.quota_for("alice", "app-1")
        throttle = produce.record("alice", "app-1", 5000, now_ms=step * 1000)
        after = produce.quota_for("alice", "app-1")
        print(json.dumps({"step": step, "at": time.monotonic(), "throttle": throttle,
                          "before": before, "after": after}), flush=True)
        unlimited_steps += after is None
        step += 1
        time.sleep(0.01)
"""


# The `kquota` command (the console script's entry point) in a fresh interpreter.
KQUOTA = "import sys; from kquota.cli import main; sys.exit(main())"


def cli(store: Path, *args: str) -> tuple[float, float]:
    """Run ``kquota configs`` in its own process; return when it started and ended."""
    start = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", KQUOTA, "configs", "--store", str(store), *args],
        check=True,
        capture_output=True,
    )
    return start, time.monotonic()


class Recorder:
    """A recorder process whose report lines are read by a thread."""

    def __init__(self, store: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", textwrap.dedent(RECORDER), str(store)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.steps: list[dict[str, Any]] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))

    def wait_for(self, what: str, value: float | None, timeout: float = 10) -> dict[str, Any]:
        """The first new step whose ``what`` equals ``value``."""
        deadline = time.monotonic() + timeout
        while True:
            step = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            self.steps.append(step)
            if step[what] == value:
                return step

    def finish(self) -> list[dict[str, Any]]:
        """Wait for the process to end by itself; every step it reported."""
        self.proc.wait(timeout=30)
        self.close()
        while not self.lines.empty():
            self.steps.append(self.lines.get())
        return self.steps

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.reader.join(timeout=10)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def replay(steps: list[dict[str, Any]]) -> int:
    """Compare each throttle with one computed in this process from the bound in force;
    return how many steps raced with a change (bound before != after)."""
    oracle, raced = QuotaManager("produce"), 0
    for step in steps:
        if step["before"] is None:
            if oracle.quota(ALICE) is not None:
                oracle.remove_quota(ALICE)
        else:
            oracle.set_quota(ALICE, step["before"])
        throttle = oracle.record("alice", "app-1", 5000, now_ms=step["step"] * 1000)
        if step["before"] == step["after"]:
            assert throttle == step["throttle"], step
        else:
            raced += 1
    return raced


def test_cli_change_reaches_recording_processes(tmp_path: Path) -> None:
    store = tmp_path / "quotas.sqlite"
    SQLiteStore(store).apply(change(ALICE, {"producer_byte_rate": 1000}))
    recorders = [Recorder(store), Recorder(store)]
    try:
        for recorder in recorders:  # steady state under the first bound
            assert recorder.wait_for("step", 12)["throttle"] == 45000
        altered, _ = cli(
            store, "--alter", "--add-config", "producer_byte_rate=2000", "--user", "alice"
        )
        first_new = [r.wait_for("before", 2000.0) for r in recorders]
        deleted, _ = cli(
            store, "--alter", "--delete-config", "producer_byte_rate", "--user", "alice"
        )
        first_unlimited = [r.wait_for("before", None) for r in recorders]
        steps = [r.finish() for r in recorders]
    finally:
        for recorder in recorders:
            recorder.close()

    for recorder, new, free, reported in zip(
        recorders, first_new, first_unlimited, steps, strict=True
    ):
        assert recorder.proc.returncode == 0
        # The next decisions use the new bound, on the samples already recorded.
        assert new["throttle"] == 17500  # (5500 - 2000) / 2000 * 10 s
        assert free["throttle"] == 0
        # Each recorder saw the change only once the CLI had started (how soon after is a
        # measurement, not asserted: wait_for's timeout only bounds a hang).
        assert new["at"] > altered and free["at"] > deleted
        assert replay(reported) <= 2


# -- KIP-599 and KIP-612: the controller-mutation manager and connection quotas -----------

IP_1 = IpEntity("10.0.0.1")
DEFAULT_IP = IpEntity(DEFAULT)


def test_mutation_and_ip_quotas_follow_the_store_and_removal_restores_kafkas_defaults() -> None:
    store = MemoryStore()
    mutation, connections = ControllerMutationQuotaManager(), ConnectionQuotas()
    stale = Entity(user="stale")
    mutation.set_quota(stale, 1.0)  # not in the store: the store owns the overrides
    connections.set_ip_quota("10.9.9.9", 3)
    live = LiveQuotas(store, mutation=mutation, connections=connections)
    assert live.managers == ()
    assert live.mutation_manager is mutation and live.connection_quotas is connections
    live.refresh()
    assert mutation.quotas() == [] and connections.ip_quotas() == ([], None)

    store.apply(
        ChangeSet(
            (
                Alteration(ALICE, {"controller_mutation_rate": 2.0, "producer_byte_rate": 5.0}),
                Alteration(Entity(client_id=DEFAULT), {"controller_mutation_rate": 10.0}),
                Alteration(IP_1, {"connection_creation_rate": 3}),
                Alteration(IpEntity("::1"), {"connection_creation_rate": 20.0000004}),
                Alteration(DEFAULT_IP, {"connection_creation_rate": 50}),
            )
        )
    )
    assert live.refresh() is True
    assert mutation.quota_for("alice", "app") == 2.0
    assert mutation.quota_for("bob", "app") == 10.0
    assert connections.ip_quotas() == (
        [("0:0:0:0:0:0:0:1", 20), ("10.0.0.1", 3)],  # 20.0000004 applied as 20, as Kafka
        50,
    )
    assert connections.ip_quota("10.0.0.2") == 50

    # Only the difference is applied; an unchanged store changes nothing.
    assert apply_config(mutation, merge(None, store.read().config)) == 0
    assert apply_ip_config(connections, store.read().config) == 0

    # Removing each override restores what Kafka does without it.
    store.apply(
        ChangeSet(
            (
                Alteration(ALICE, {}, {"controller_mutation_rate"}),
                Alteration(IP_1, {}, {"connection_creation_rate"}),
            )
        )
    )
    live.refresh()
    assert mutation.quota_for("alice", "app") == 10.0  # the <default> client-id's
    assert connections.ip_quota("10.0.0.1") == 50  # the <default> IP's
    store.apply(
        ChangeSet(
            (
                Alteration(Entity(client_id=DEFAULT), {}, {"controller_mutation_rate"}),
                Alteration(DEFAULT_IP, {}, {"connection_creation_rate"}),
            )
        )
    )
    live.refresh()
    assert mutation.quota_for("alice", "app") is None  # no quota: unlimited
    assert mutation.quotas() == []
    assert connections.ip_quota("10.0.0.1") == UNLIMITED_CONNECTION_RATE  # Kafka's default
    assert connections.ip_quotas() == ([("0:0:0:0:0:0:0:1", 20)], None)
    assert store.read().config.by_entity()[ALICE] == {"producer_byte_rate": 5.0}


def test_a_default_ip_rate_of_int_max_is_no_default() -> None:
    connections = ConnectionQuotas()
    config = QuotaConfig.from_entities(
        {DEFAULT_IP: {"connection_creation_rate": float(UNLIMITED_CONNECTION_RATE)}}
    )
    assert apply_ip_config(connections, config) == 0  # the same as no <default> IP
    assert connections.ip_quota("10.0.0.1") == UNLIMITED_CONNECTION_RATE


def test_for_store_builds_the_new_managers_with_the_store_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore(
        QuotaConfig.from_entities(
            {
                ALICE: {"controller_mutation_rate": 4.0},
                IP_1: {"connection_creation_rate": 7.0},
            },
            Window(5, 2000),
        )
    )
    live = LiveQuotas.for_store(store, (), controller_mutation=True, connection_quotas=True)
    mutation, connections = live.mutation_manager, live.connection_quotas
    assert mutation is not None and connections is not None
    assert (mutation.num_samples, mutation.window_ms) == (5, 2000)
    assert (connections.num_samples, connections.window_ms) == (5, 2000)
    assert mutation.quota(ALICE) == 4.0
    assert connections.ip_quota("10.0.0.1") == 7
    with pytest.raises(InvalidConfigError, match=r"no 'produce' manager is bound \(bound: none\)"):
        live.manager("produce")
    assert LiveQuotas.for_store(store).mutation_manager is None  # only when asked for
    store.replace(QuotaConfig.from_entities({ALICE: {"controller_mutation_rate": 1.0}}))
    live.refresh()
    assert mutation.quota(ALICE) == 1.0
    assert "the controller-mutation, connection manager(s) keep their own window" in caplog.text


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "one or more QuotaManager instances, a mutation manager or connection quotas"),
        ({"mutation": QuotaManager("produce")}, "invalid mutation .*expected a Controller"),
        ({"connections": ControllerMutationQuotaManager()}, "invalid connections"),
    ],
)
def test_bad_new_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidConfigError, match=message):
        LiveQuotas(MemoryStore(), **kwargs)
    with pytest.raises(InvalidConfigError, match="a ControllerMutationQuotaManager goes as"):
        LiveQuotas(MemoryStore(), ControllerMutationQuotaManager())  # type: ignore[arg-type]


def wait_for(condition: Callable[[], bool], what: str) -> float:
    """Seconds until ``condition()`` holds; HANG_S only bounds a hang."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < HANG_S, f"never saw {what}"
        time.sleep(0.002)
    return time.monotonic() - start


HANG_S = 30.0


def test_threads_enforce_changes_to_the_new_quotas_while_they_arrive(tmp_path: Path) -> None:
    """Recording threads (partition mutations, new connections) keep going while another
    thread changes the store; a LiveQuotas thread (default interval) applies each change,
    and the recorders see it enforced."""
    store = SQLiteStore(tmp_path / "q.sqlite")
    store.apply(change(Entity(client_id="unrelated"), {"controller_mutation_rate": 1}))
    stop = threading.Event()
    seen: dict[str, set[object]] = {"refused": set(), "ip_throttled": set()}
    errors: list[BaseException] = []

    def clock() -> int:
        """The time as Kafka's threads read it: each thread's readings never go back, but a
        thread may record after others recorded later times (a shared simulated counter
        let a descheduled thread fall seconds behind, and an unlimited bucket refilled
        over minus eleven seconds goes negative, as Kafka's would)."""
        return time.monotonic_ns() // 1_000_000

    with LiveQuotas.for_store(store, (), controller_mutation=True, connection_quotas=True) as live:
        mutation, connections = live.mutation_manager, live.connection_quotas
        assert mutation is not None and connections is not None
        connections.add_listener("PLAINTEXT")

        def mutate() -> None:
            try:
                while not stop.is_set():
                    check = mutation.record_strict("alice", "admin", 1, now_ms=clock())
                    if not check.accepted:
                        seen["refused"].add(mutation.quota_for("alice", "admin"))
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        def connect() -> None:
            try:
                while not stop.is_set():
                    decision = connections.on_new_connection(
                        "PLAINTEXT", "10.0.0.1", now_ms=clock()
                    )
                    if decision.ip_throttle_ms > 0:
                        seen["ip_throttled"].add(connections.ip_quota("10.0.0.1"))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=f) for f in (mutate, connect, mutate, connect)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(0.2)
            assert seen == {"refused": set(), "ip_throttled": set()}  # nothing limited yet
            store.apply(
                ChangeSet(
                    (
                        Alteration(Entity(user="alice"), {"controller_mutation_rate": 5}),
                        Alteration(IP_1, {"connection_creation_rate": 2}),
                    )
                )
            )
            wait_for(lambda: 5.0 in seen["refused"], "mutations refused at 5/s")
            wait_for(lambda: 2 in seen["ip_throttled"], "connections throttled at 2/s")
            # Removal: back to no limit (Kafka's default), enforced while recording goes on.
            store.apply(
                ChangeSet(
                    (
                        Alteration(Entity(user="alice"), {}, {"controller_mutation_rate"}),
                        Alteration(IP_1, {}, {"connection_creation_rate"}),
                    )
                )
            )
            wait_for(lambda: mutation.quota_for("alice", "admin") is None, "the removal")
            wait_for(
                lambda: connections.ip_quota("10.0.0.1") == UNLIMITED_CONNECTION_RATE,
                "the IP removal",
            )
            seen["refused"].clear()
            seen["ip_throttled"].clear()
            time.sleep(0.2)
            assert mutation.record_strict("alice", "admin", 1e9, now_ms=clock()).accepted
            assert (
                connections.on_new_connection(
                    "PLAINTEXT", "10.0.0.1", now_ms=clock()
                ).ip_throttle_ms
                == 0
            )
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=HANG_S)
    assert errors == []
    assert not any(thread.is_alive() for thread in threads)
    assert live.last_error is None


def test_a_cli_change_in_another_process_reaches_the_new_quotas(tmp_path: Path) -> None:
    path = tmp_path / "q.sqlite"
    SQLiteStore(path).apply(change(ALICE, {"producer_byte_rate": 1}))  # a schema-1 store
    with LiveQuotas.for_store(
        SQLiteStore(path), ["produce"], controller_mutation=True, connection_quotas=True
    ) as live:
        mutation, connections = live.mutation_manager, live.connection_quotas
        assert mutation is not None and connections is not None
        cli(path, "--alter", "--add-config", "connection_creation_rate=9", "--ip-defaults")
        cli(path, "--alter", "--add-config", "controller_mutation_rate=0.5", "--client-defaults")
        # How soon is a measurement (about the 0.5 s interval), not asserted.
        wait_for(lambda: connections.ip_quota("192.168.1.1") == 9, "the <default> IP rate")
        wait_for(lambda: mutation.quota_for("u", "c") == 0.5, "the <default> client-id rate")
        assert live.manager("produce").quota(ALICE) == 1.0
        cli(path, "--alter", "--delete-config", "connection_creation_rate", "--ip-defaults")
        wait_for(
            lambda: connections.ip_quota("192.168.1.1") == UNLIMITED_CONNECTION_RATE,
            "the removal",
        )
