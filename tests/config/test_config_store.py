"""kquota.config.store: the store contract on every backend (IP entities included), and how
a store is chosen (a path, a URL's scheme, a backend from an entry point). SQLite's own
guarantees are in ``test_config_store_sqlite.py``; its schema upgrade for IP entities in
``test_config_store_schema.py``."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from kquota import DEFAULT, Entity
from kquota.config.backends import default_store_path, open_store, store_spec
from kquota.config.model import AnyEntity, IpEntity, QuotaConfig, Window
from kquota.config.store import (
    Alteration,
    ChangeSet,
    MemoryStore,
    QuotaStore,
    SQLiteStore,
    StoreSnapshot,
)
from kquota.exceptions import QuotaFileError, StoreError
from store_support import ALICE, BOB_APP, DEFAULT_CLIENT, DEFAULT_IP, IP_1, IP_6, change


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


# -- IP entities, on every backend -----------------------------------------------------


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
