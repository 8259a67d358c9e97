"""``StoreAdmin``: the quota store side of the gateway's KIP-546 administration, over a
real SQLite file (the Kafka side is in test_gateway_admin.py)."""

from __future__ import annotations

import logging
from typing import Any

import kquota
import pytest
from kquota.config.model import IpEntity
from kquota.config.store import Alteration, ChangeSet, SQLiteStore
from kquota.exceptions import KquotaError, QuotaFileError
from kquota.proxy import StoreAdmin


@pytest.fixture
def store(tmp_path: Any) -> SQLiteStore:
    return SQLiteStore(tmp_path / "quotas.sqlite")


def test_alterations_are_written_once_and_described(store: SQLiteStore) -> None:
    changed = []
    admin = StoreAdmin(store, on_change=lambda: changed.append(store.version()))
    refusals = admin.alter(
        [
            ([("user", "alice"), ("client-id", None)], [("producer_byte_rate", 1024.0)]),
            ([("ip", None)], [("connection_creation_rate", 7.0)]),
            ([("client-id", "c")], [("request_percentage", None)]),  # not set: no change
            ([("user", "bob")], []),
        ],
        False,
    )
    assert refusals == [None, None, None, None]
    assert changed == [1], "one write, then one notice"
    assert sorted(admin.describe()) == [
        ([("ip", None)], [("connection_creation_rate", 7.0)]),
        ([("user", "alice"), ("client-id", None)], [("producer_byte_rate", 1024.0)]),
    ]
    config = store.read().config.by_entity()
    assert config[kquota.Entity(user="alice", client_id=kquota.DEFAULT)] == {
        "producer_byte_rate": 1024
    }
    assert config[IpEntity(kquota.DEFAULT)] == {"connection_creation_rate": 7}


def test_validate_only_and_refusals_write_nothing_of_their_own(store: SQLiteStore) -> None:
    admin = StoreAdmin(store)
    assert admin.alter([([("user", "u")], [("producer_byte_rate", 5.0)])], True) == [None]
    assert not store.path.exists() or store.read().version == 0
    refusals = admin.alter(
        [
            ([("user", kquota.DEFAULT)], [("producer_byte_rate", 5.0)]),
            ([("ip", "example.com")], [("connection_creation_rate", 5.0)]),
            ([("user", "u")], [("request_percentage", float("inf"))]),
            ([("user", "kept")], [("consumer_byte_rate", 9.0)]),
        ],
        False,
    )
    assert refusals[3] is None
    assert "'<default>'" in str(refusals[0])
    assert "example.com" in str(refusals[1])
    assert "request_percentage" in str(refusals[2])
    assert store.read().config.by_entity() == {
        kquota.Entity(user="kept"): {"consumer_byte_rate": 9}
    }


def test_a_failing_notice_is_logged_and_the_write_stands(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    def broken() -> None:
        raise RuntimeError("follower gone")

    admin = StoreAdmin(store, on_change=broken)
    with caplog.at_level(logging.ERROR, logger="kquota.proxy"):
        assert admin.alter([([("user", "u")], [("producer_byte_rate", 5.0)])], False) == [None]
    assert "not applied yet" in caplog.text and "follower gone" in caplog.text
    assert store.read().config.by_entity() == {kquota.Entity(user="u"): {"producer_byte_rate": 5}}


def test_a_store_is_required() -> None:
    with pytest.raises(KquotaError, match=r"invalid store 'quotas\.sqlite'"):
        StoreAdmin("quotas.sqlite")  # type: ignore[arg-type]


def test_missing_ok_removes_only_what_is_set(store: SQLiteStore) -> None:
    entity = kquota.Entity(user="u")
    store.apply(ChangeSet((Alteration(entity, {"producer_byte_rate": 5.0}),)))
    with pytest.raises(QuotaFileError, match="cannot delete consumer_byte_rate"):
        store.apply(ChangeSet((Alteration(entity, delete={"consumer_byte_rate"}),)))
    lenient = Alteration(
        entity, delete={"consumer_byte_rate", "producer_byte_rate"}, missing_ok=True
    )
    store.apply(ChangeSet((lenient,)))
    assert store.read().config.by_entity().get(entity, {}) == {}
