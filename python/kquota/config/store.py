"""Quota stores: where the dynamic quota configuration lives, shared by processes.

A store holds one :class:`~kquota.config.model.QuotaConfig` and a version number. Every
write is one :class:`ChangeSet` applied all or nothing; the version grows with every
write, so a reader (:class:`~kquota.config.live.LiveQuotas`) notices a change by reading
one number.

:class:`SQLiteStore` is the default backend: one SQLite file, every write one
``BEGIN IMMEDIATE`` transaction, so concurrent writers in several processes lose nothing
and a writer killed mid-write leaves the previous state. :class:`MemoryStore` keeps the
configuration in one process (tests, embedding). ``kafka://HOST:PORT/TOPIC`` is a
:class:`~kquota.config.kafka_store.KafkaTopicStore`: a compacted topic on a Kafka cluster,
for processes on several hosts (``kquota[kafka]``). :func:`~kquota.config.open_store`
(in :mod:`kquota.config.backends`) opens the store a spec names.

SQLite schema versions
----------------------
The schema version is SQLite's ``PRAGMA user_version``; the number in ``kquota_meta``
(``version``) is the version of the configuration, bumped by every write.

1. ``kquota_quota``: user / client-id quotas (and the window in ``kquota_meta``).
2. adds ``kquota_ip_quota``: ``connection_creation_rate`` of IP entities.

A store is created at version 1 and upgraded by the first write that stores an IP entity,
inside that write's ``BEGIN IMMEDIATE`` transaction: the upgrade and the write commit
together or not at all, concurrent writers are serialized so one of them upgrades and the
others find it done, and every quota already stored is kept. Until then the file stays
readable by kquota versions that know only schema 1 (they refuse a newer schema with
"upgrade kquota" and change nothing), so processes following the store keep working
during an upgrade unless IP quotas are used. Reading never upgrades.

Plugging in another backend
---------------------------
Subclass :class:`QuotaStore` and implement :meth:`~QuotaStore.read`,
:meth:`~QuotaStore.apply` and :meth:`~QuotaStore.describe` (and :meth:`~QuotaStore.version`
when reading one number is cheaper than reading everything). Keep the contract written on
each method; :meth:`ChangeSet.apply_to` gives you the semantics of a write, so a backend
only has to persist its result atomically. Pass an instance to
:class:`~kquota.config.live.LiveQuotas`. To reach it from ``kquota configs --store`` and
``KQUOTA_STORE`` too, register a factory under the entry-point group ``kquota.stores``,
named after a URL scheme: ``--store redis://host/0`` then calls the factory registered as
``redis`` with the whole string and uses the store it returns.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterator, Mapping
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from kquota import Entity
from kquota.config.model import (
    AnyEntity,
    IpEntity,
    QuotaConfig,
    Window,
    check_bound,
    check_property_of,
    check_value,
    describe_entity,
)
from kquota.exceptions import QuotaFileError, StoreError

log = logging.getLogger(__name__)

DEFAULT_LOCK_TIMEOUT: Final = 5.0
"""Seconds a store operation waits for another process's lock before :class:`StoreError`."""

SCHEMA_VERSION: Final = 2
"""The newest SQLite schema this version of kquota reads and writes (see the module
documentation: schema 1 is read and written too, and upgraded when an IP entity is stored)."""

IP_SCHEMA_VERSION: Final = 2
"""The first SQLite schema that can hold IP entities."""

APPLICATION_ID: Final = 0x6B71756F
"""SQLite ``application_id`` that marks a file as a kquota store (ASCII ``kquo``)."""


# -- what a write is -------------------------------------------------------------------


@dataclass(frozen=True)
class Alteration:
    """One entity's change: properties to add or replace, and properties to delete.

    As ``kafka-configs --alter --add-config ... --delete-config ...``. Deleting a property
    the entity does not have is an error when the change is applied (as ``kafka-configs``
    reports it), unless ``missing_ok``: then it changes nothing, as Kafka's controller
    treats such a removal in an AlterClientQuotas request.
    """

    entity: AnyEntity
    add: Mapping[str, float] = field(default_factory=dict)
    delete: Collection[str] = frozenset()
    missing_ok: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.entity, Entity | IpEntity):
            raise QuotaFileError(
                f"invalid entity {self.entity!r}: expected a kquota.Entity or an IpEntity"
            )
        add = {check_property_of(self.entity, k): check_value(k, v) for k, v in self.add.items()}
        if isinstance(self.delete, str):  # a lone name, not its characters
            raise QuotaFileError(f"delete must be a collection of names, got {self.delete!r}")
        delete = frozenset(check_property_of(self.entity, k) for k in self.delete)
        both = sorted(delete & add.keys())
        if both:
            raise QuotaFileError(f"{', '.join(both)} cannot be both added and deleted")
        if not add and not delete:
            raise QuotaFileError(f"nothing to change for {describe_entity(self.entity)}")
        object.__setattr__(self, "add", add)
        object.__setattr__(self, "delete", delete)


@dataclass(frozen=True)
class ChangeSet:
    """Everything one write does, applied all or nothing.

    ``replace=True`` drops every existing quota first (``kquota configs --import``);
    ``window`` replaces the window when given. Use :meth:`replacing` to build the change
    that makes a store hold exactly one configuration.
    """

    alterations: tuple[Alteration, ...] = ()
    window: Window | None = None
    replace: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "alterations", tuple(self.alterations))
        for alteration in self.alterations:
            if not isinstance(alteration, Alteration):
                raise QuotaFileError(f"invalid alteration {alteration!r}: expected Alteration")
        if self.window is not None and not isinstance(self.window, Window):
            raise QuotaFileError(f"invalid window {self.window!r}: expected a Window")

    @classmethod
    def replacing(cls, config: QuotaConfig) -> ChangeSet:
        """The change that replaces a store's whole content (window included) by ``config``."""
        return cls(
            tuple(Alteration(e.entity, e.config) for e in config.entries),
            config.window,
            replace=True,
        )

    def apply_to(self, config: QuotaConfig) -> QuotaConfig:
        """The configuration after this change: the semantics every backend persists.

        Raises :class:`~kquota.exceptions.QuotaFileError` (naming the entity and
        property) when a deleted property is not set.
        """
        entities = {} if self.replace else config.by_entity()
        for alteration in self.alterations:
            current = entities.setdefault(alteration.entity, {})
            missing = sorted(set(alteration.delete) - current.keys())
            if missing and not alteration.missing_ok:
                raise QuotaFileError(
                    f"cannot delete {', '.join(missing)} of "
                    f"{describe_entity(alteration.entity)}: not set"
                )
            for name in alteration.delete:
                current.pop(name, None)
            current.update(alteration.add)
        # what is kept stays as it was; what is added was checked by its Alteration
        return QuotaConfig.from_entities(entities, self.window or config.window, bounds=True)


@dataclass(frozen=True)
class StoreSnapshot:
    """A store's whole configuration and the version it had when read."""

    version: int
    config: QuotaConfig


# -- the interface ---------------------------------------------------------------------


class QuotaStore(ABC):
    """Where the dynamic quota configuration lives; see the module documentation.

    Implementations must be safe to use from several threads, and from several
    processes when the backend is shared between them.
    """

    @abstractmethod
    def read(self) -> StoreSnapshot:
        """The whole configuration and its version, read consistently.

        Reading never creates a store: one that does not exist raises
        :class:`~kquota.exceptions.StoreError` naming it (only :meth:`apply` creates it).
        A store that exists but was never written reads as version 0 with an empty
        configuration (Kafka's default window). Raises
        :class:`~kquota.exceptions.StoreError` when the store cannot be used.
        """

    @abstractmethod
    def apply(self, changes: ChangeSet) -> int:
        """Apply ``changes`` atomically and return the new version.

        The result is ``changes.apply_to(current configuration)``, computed and persisted
        in one transaction, so concurrent writers lose nothing. The new version is greater
        than every version read before. On error nothing changes: a
        :class:`~kquota.exceptions.QuotaFileError` for a change that does not apply (a
        deleted property that is not set), a :class:`~kquota.exceptions.StoreError` for a
        store that cannot be used.
        """

    @abstractmethod
    def describe(self) -> str:
        """What and where the store is, for messages (``SQLite store '/path'``)."""

    def version(self) -> int:
        """The current version, without reading the configuration where that is cheaper.

        Versions never decrease; readers compare them to notice changes. Like
        :meth:`read`, raises :class:`~kquota.exceptions.StoreError` for a store that does
        not exist.
        """
        return self.read().version

    def replace(self, config: QuotaConfig) -> int:
        """Make the store hold exactly ``config`` (window included), in one transaction."""
        return self.apply(ChangeSet.replacing(config))


class MemoryStore(QuotaStore):
    """A store inside one process: for tests, and for services that configure themselves."""

    def __init__(self, config: QuotaConfig | None = None) -> None:
        self._lock = threading.Lock()
        self._snapshot = StoreSnapshot(0, QuotaConfig())
        if config is not None:
            self.replace(config)

    def read(self) -> StoreSnapshot:
        """The configuration and version (see :meth:`QuotaStore.read`)."""
        with self._lock:
            return self._snapshot

    def version(self) -> int:
        """The current version."""
        with self._lock:
            return self._snapshot.version

    def apply(self, changes: ChangeSet) -> int:
        """Apply ``changes`` atomically (see :meth:`QuotaStore.apply`)."""
        with self._lock:
            config = changes.apply_to(self._snapshot.config)
            self._snapshot = StoreSnapshot(self._snapshot.version + 1, config)
            return self._snapshot.version

    def describe(self) -> str:
        """``memory store``."""
        return "memory store"


# -- SQLite ----------------------------------------------------------------------------

_CREATE = (  # schema 1
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

_UPGRADES: Final[dict[int, tuple[str, ...]]] = {
    # To schema 2: IP entities. ip is the canonical address literal, or '<default>'.
    2: (
        "CREATE TABLE kquota_ip_quota (ip TEXT NOT NULL, property TEXT NOT NULL, "
        "value REAL NOT NULL, PRIMARY KEY (ip, property))",
        "PRAGMA user_version = 2",
    ),
}
"""The statements that take a store from the schema before each key to that schema."""

_Row = tuple[str | None, str | None, str]
_IpRow = tuple[str, str]


class SQLiteStore(QuotaStore):
    """A quota store in one SQLite file (stdlib :mod:`sqlite3`), shared by processes.

    Every write is one ``BEGIN IMMEDIATE`` transaction that reads the configuration,
    applies the :class:`ChangeSet` and bumps the version: writers in several processes
    are serialized and lose nothing, and a writer killed before ``COMMIT`` leaves the
    previous state (SQLite's rollback journal). Reading never writes, except that SQLite
    rolls back what a killed writer left behind. The file is created (with its folder)
    by the first write; before that, reading raises :class:`~kquota.exceptions.StoreError`
    naming the file (a typo in a path must not read as a store without quotas). An
    empty file reads as version 0. An operation that waits more
    than ``timeout`` seconds for another process's lock, a file that is not SQLite or not
    a kquota store, and a schema from a newer kquota raise
    :class:`~kquota.exceptions.StoreError` and change nothing.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = DEFAULT_LOCK_TIMEOUT):
        if isinstance(timeout, bool) or not isinstance(timeout, int | float):
            raise StoreError(f"invalid lock timeout {timeout!r}: expected seconds >= 0")
        if not math.isfinite(timeout) or timeout < 0:
            raise StoreError(f"invalid lock timeout {timeout!r}: expected seconds >= 0")
        self.path = Path(path)
        """The database file."""
        self.timeout = float(timeout)
        """Seconds to wait for a lock held by another connection."""

    def describe(self) -> str:
        """``SQLite store '/path/to/quotas.sqlite'``."""
        return f"SQLite store {str(self.path)!r}"

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r}, timeout={self.timeout!r})"

    def read(self) -> StoreSnapshot:
        """The configuration and version, read in one transaction."""
        self._check_exists()
        with self._transaction("BEGIN", create=False) as conn:
            schema = self._schema(conn)
            if schema is None:
                return StoreSnapshot(0, QuotaConfig())
            return self._load(conn)

    def version(self) -> int:
        """The version: one small query, no configuration read."""
        self._check_exists()
        with self._transaction("BEGIN", create=False) as conn:
            if self._schema(conn) is None:
                return 0
            return self._version(conn)

    def apply(self, changes: ChangeSet) -> int:
        """Apply ``changes`` in one ``BEGIN IMMEDIATE`` transaction; return the new version."""
        if not isinstance(changes, ChangeSet):
            raise TypeError(f"expected a ChangeSet, got {type(changes).__name__}")
        if not self._exists():
            # A change that cannot apply to an empty store must not create the file.
            changes.apply_to(QuotaConfig())
            self._check_journal_name()
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except FileExistsError:  # a file where the folder should be
                raise StoreError(
                    f"cannot create the folder of {self.describe()}: "
                    f"{str(self.path.parent)!r} is a file, not a folder"
                ) from None
            except OSError as exc:
                raise StoreError(
                    f"cannot create the folder of {self.describe()}: {exc.strerror}"
                ) from None
        with self._transaction("BEGIN IMMEDIATE", create=True) as conn:
            schema = self._schema(conn)
            if schema is None:
                for statement in _CREATE:
                    conn.execute(statement)
                schema = 1
            before = self._load(conn)
            after = changes.apply_to(before.config)
            if schema < IP_SCHEMA_VERSION and _ip_rows(after):
                self._upgrade(conn, schema, IP_SCHEMA_VERSION)
            self._write(conn, before.config, after)
            version = before.version + 1
            conn.execute("UPDATE kquota_meta SET value = ? WHERE key = 'version'", (version,))
            return version

    # -- internals ---------------------------------------------------------------------

    def _exists(self) -> bool:
        try:
            return self.path.exists()
        except OSError as exc:  # e.g. a file name longer than the system allows
            raise StoreError(f"{self.describe()}: {exc.strerror}") from None

    def _check_exists(self) -> None:
        """Reading is not writing: a store that is not there is an error naming it."""
        if not self._exists():
            raise StoreError(
                f"{self.describe()} does not exist: check the path (a write creates it, "
                "e.g. kquota configs --alter or --import)"
            )

    def _check_journal_name(self) -> None:
        """SQLite writes ``NAME-journal`` beside the file: a name too long for that would
        leave an empty file behind a failed first write."""
        try:
            limit = os.pathconf(self.path.parent, "PC_NAME_MAX")
        except (OSError, ValueError):  # no folder yet, or no limit known
            limit = 255
        if len(os.fsencode(self.path.name)) + len("-journal") > limit:
            raise StoreError(
                f"{self.describe()}: the file name is too long (SQLite adds '-journal' to it; "
                f"at most {limit - len('-journal')} bytes)"
            )

    @contextmanager
    def _transaction(self, begin: str, *, create: bool) -> Iterator[sqlite3.Connection]:
        """A connection inside ``begin``; committed on success, rolled back on error,
        with SQLite errors turned into one :class:`StoreError`."""
        uri = self.path.absolute().as_uri() + ("?mode=rwc" if create else "?mode=rw")
        try:
            with closing(
                sqlite3.connect(uri, uri=True, timeout=self.timeout, isolation_level=None)
            ) as conn:
                conn.execute(begin)
                try:
                    yield conn
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise self._error(exc) from None

    def _error(self, exc: sqlite3.Error) -> StoreError:
        code = getattr(exc, "sqlite_errorcode", -1) & 0xFF
        what = self.describe()
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return StoreError(
                f"{what} is locked: another process kept it locked for more than "
                f"{self.timeout:g} s; nothing was changed"
            )
        if code == sqlite3.SQLITE_NOTADB:
            return StoreError(f"{what}: the file is not a SQLite database; nothing was changed")
        if code == sqlite3.SQLITE_CANTOPEN:
            return StoreError(f"{what}: cannot open the file ({exc})")
        if code == sqlite3.SQLITE_READONLY:
            return StoreError(f"{what} is read-only: {exc}")
        if code == sqlite3.SQLITE_CORRUPT:
            return StoreError(f"{what} is damaged: {exc}")
        return StoreError(f"{what}: {exc}")

    def _schema(self, conn: sqlite3.Connection) -> int | None:
        """The schema version, or ``None`` for an empty database; rejects foreign files."""
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        schema = conn.execute("PRAGMA user_version").fetchone()[0]
        empty = app_id == 0 and schema == 0
        if empty and conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0:
            return None
        if app_id != APPLICATION_ID:
            raise StoreError(
                f"{self.describe()} is a SQLite database but not a kquota store; "
                "nothing was changed"
            )
        if schema > SCHEMA_VERSION:
            raise StoreError(
                f"{self.describe()} has schema version {schema}, newer than the version "
                f"{SCHEMA_VERSION} this kquota understands: upgrade kquota; nothing was changed"
            )
        if schema < 1:
            raise StoreError(f"{self.describe()} has an invalid schema version {schema}")
        return int(schema)

    def _upgrade(self, conn: sqlite3.Connection, schema: int, target: int) -> None:
        """Run the upgrades from ``schema`` to ``target`` inside the caller's write
        transaction (they commit with it)."""
        for version in range(schema + 1, target + 1):
            for statement in _UPGRADES[version]:
                conn.execute(statement)
        log.info("%s: upgraded the schema from version %d to %d", self.describe(), schema, target)

    @staticmethod
    def _schema_in(conn: sqlite3.Connection) -> int:
        """The schema version of an existing store (already checked by :meth:`_schema`)."""
        return int(conn.execute("PRAGMA user_version").fetchone()[0])

    def _version(self, conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT value FROM kquota_meta WHERE key = 'version'").fetchone()
        if row is None or not isinstance(row[0], int):
            raise StoreError(f"{self.describe()} is damaged: it has no version")
        return row[0]

    def _load(self, conn: sqlite3.Connection) -> StoreSnapshot:
        meta = dict(conn.execute("SELECT key, value FROM kquota_meta").fetchall())
        entities: dict[AnyEntity, dict[str, float]] = {}
        try:
            window = Window(meta.get("num_samples", 0), meta.get("window_ms", 0))
            rows = conn.execute("SELECT user, client_id, property, value FROM kquota_quota")
            for user, client_id, prop, value in rows:
                entity: AnyEntity = Entity(user=user, client_id=client_id)
                entities.setdefault(entity, {})[prop] = check_bound(prop, value)
            if self._schema_in(conn) >= IP_SCHEMA_VERSION:
                for ip, prop, value in conn.execute(
                    "SELECT ip, property, value FROM kquota_ip_quota"
                ):
                    entity = IpEntity(ip)
                    if entity.ip != ip:  # written by kquota: always canonical
                        raise QuotaFileError(f"ip {ip!r} is not in canonical form")
                    entities.setdefault(entity, {})[prop] = check_bound(prop, value)
            # read back as written, even a value an older kquota took and Kafka would not
            config = QuotaConfig.from_entities(entities, window, bounds=True)
        except (ValueError, TypeError) as exc:
            raise StoreError(f"{self.describe()} holds an invalid configuration: {exc}") from None
        return StoreSnapshot(self._version(conn), config)

    def _write(self, conn: sqlite3.Connection, before: QuotaConfig, after: QuotaConfig) -> None:
        old, new = _rows(before), _rows(after)
        gone = [key for key, value in old.items() if new.get(key) != value]
        added = [(*key, value) for key, value in new.items() if old.get(key) != value]
        conn.executemany(
            "DELETE FROM kquota_quota WHERE user IS ? AND client_id IS ? AND property = ?", gone
        )
        conn.executemany(
            "INSERT INTO kquota_quota (user, client_id, property, value) VALUES (?, ?, ?, ?)",
            added,
        )
        if self._schema_in(conn) >= IP_SCHEMA_VERSION:
            old_ips, new_ips = _ip_rows(before), _ip_rows(after)
            conn.executemany(
                "DELETE FROM kquota_ip_quota WHERE ip = ? AND property = ?",
                [key for key, value in old_ips.items() if new_ips.get(key) != value],
            )
            conn.executemany(
                "INSERT INTO kquota_ip_quota (ip, property, value) VALUES (?, ?, ?)",
                [(*key, value) for key, value in new_ips.items() if old_ips.get(key) != value],
            )
        if after.window != before.window:
            for key, value in (
                ("num_samples", after.window.num_samples),
                ("window_ms", after.window.window_ms),
            ):
                conn.execute("UPDATE kquota_meta SET value = ? WHERE key = ?", (value, key))


def _rows(config: QuotaConfig) -> dict[_Row, float]:
    return {
        (e.entity.user, e.entity.client_id, prop): value
        for e in config.entries
        if isinstance(e.entity, Entity)
        for prop, value in e.config.items()
    }


def _ip_rows(config: QuotaConfig) -> dict[_IpRow, float]:
    return {
        (e.entity.ip, prop): value
        for e in config.entries
        if isinstance(e.entity, IpEntity)
        for prop, value in e.config.items()
    }
