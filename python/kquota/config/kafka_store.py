"""A quota store on a compacted Kafka topic: one configuration shared by every process that
follows it, kept by the cluster itself (as Kafka keeps its own quotas in its metadata log).

``open_store("kafka://HOST:PORT[,HOST:PORT...]/TOPIC")`` (``--store`` on the command line)
opens a :class:`KafkaTopicStore`; ``?NAME=VALUE&...`` after the topic adds librdkafka
settings, ``?config=PATH`` reads them from a file (see :func:`open_kafka_store`). Several
``kquota proxy`` gateways in front of one cluster share their quotas this way: a change
made through any of them (``kafka-configs.sh``, ``kquota configs``) reaches the others
within their follow interval.

Layout: one partition, ``cleanup.policy=compact``, created by the first write. One record
per entity property, as Kafka's ``ClientQuotaRecord`` is one per entity and key: the key is
``{"entity": {...}, "property": NAME}`` in JSON (the quota file's entity form), the value
``{"value": NUMBER}``, or a tombstone once the property is removed. The window is the record
``{"window": true}``. A write is one Kafka transaction holding the records of the
properties it changes and a record ``{"write": true}`` (so every write moves the version),
and readers read committed records only, so a write is seen whole or not at all. Writers
in several processes lose nothing of each other's changes to other properties; two writes
of one property keep the later one, as in Kafka.

The version is the offset the store has read the partition up to. Reading catches up with
the end of the partition first; a cluster out of reach within ``timeout`` seconds is a
:class:`~kquota.exceptions.StoreError`, so a :class:`~kquota.config.live.LiveQuotas`
following the store keeps the last configuration it applied and logs that it cannot
refresh, then that it follows again once the cluster answers.

Needs the ``kafka`` extra (``pip install "kquota[kafka]"``: librdkafka's Python client).
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from kquota._extras import require
from kquota.config.model import AnyEntity, QuotaConfig, Window, entity_to_json
from kquota.config.store import ChangeSet, QuotaStore, StoreSnapshot
from kquota.exceptions import KquotaError, StoreError

__all__ = [
    "DEFAULT_KAFKA_TIMEOUT",
    "DEFAULT_TOPIC",
    "KafkaTopicStore",
    "open_kafka_store",
    "read_settings",
]

log = logging.getLogger(__name__)

DEFAULT_TOPIC: Final = "kquota-quotas"
"""The topic of ``kafka://HOST:PORT`` with no topic named."""

DEFAULT_KAFKA_TIMEOUT: Final = 5.0
"""Seconds a store operation waits for the cluster before :class:`StoreError`."""

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
_WINDOW_KEY: Final = b'{"window":true}'
_WRITE_KEY: Final = b'{"write":true}'
_PASSING: Final = (3, 6)  # UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER
# What the store sets itself on its clients: not taken from ``config``.
_OWN_SETTINGS: Final = frozenset(
    {
        "bootstrap.servers",
        "logger",
        "group.id",
        "enable.auto.commit",
        "enable.partition.eof",
        "fetch.wait.max.ms",
        "isolation.level",
        "allow.auto.create.topics",
        "auto.offset.reset",
        "transactional.id",
        "enable.idempotence",
    }
)


def open_kafka_store(spec: str, *, timeout: float = DEFAULT_KAFKA_TIMEOUT) -> KafkaTopicStore:
    """The store of ``kafka://HOST:PORT[,HOST:PORT...][/TOPIC][?NAME=VALUE&...]``.

    Each query parameter is a librdkafka setting of the store's clients
    (``?security.protocol=SSL``), but ``config=PATH``: a file of settings, one
    ``NAME=VALUE`` a line (``#`` and ``!`` start a comment), read now. A file keeps
    secrets such as ``sasl.password`` off command lines; a query parameter overrides the
    file's setting of the same name. Names and values are percent-decoded (``%26`` is
    ``&``); a ``+`` is itself, as in a path or a password, not a space."""
    match = re.fullmatch(r"kafka://([^/?]*)(?:/([^?]*))?(?:\?(.*))?", spec)
    if match is None or not match.group(1):
        raise StoreError(
            f"invalid Kafka store {spec!r}: expected "
            "kafka://HOST:PORT[,HOST:PORT...]/TOPIC[?NAME=VALUE&...]"
        )
    bootstrap, topic, query = match.groups()
    settings: dict[str, str] = {}
    given: dict[str, str] = {}
    if query:
        pairs = [part.partition("=") for part in query.split("&")]
        if any(not name or not equals for name, equals, _ in pairs):
            raise StoreError(f"invalid settings {query!r} of Kafka store: expected NAME=VALUE&...")
        for quoted_name, _, quoted_value in pairs:
            name, value = urllib.parse.unquote(quoted_name), urllib.parse.unquote(quoted_value)
            if name in given:
                raise StoreError(f"Kafka store setting {name!r} given twice")
            given[name] = value
    if "config" in given:
        settings.update(read_settings(given.pop("config")))
    settings.update(given)
    return KafkaTopicStore(bootstrap, topic or DEFAULT_TOPIC, timeout=timeout, config=settings)


def read_settings(path: str | Path) -> dict[str, str]:
    """The librdkafka settings in the file at ``path``: one ``NAME=VALUE`` a line, blank
    lines and lines starting with ``#`` or ``!`` skipped (a subset of Java's properties
    files, as Kafka's tools take with ``--command-config``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"cannot read Kafka store settings {str(path)!r}: {exc}") from None
    settings: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        name, equals, value = line.partition("=")
        if not equals or not name.strip():
            raise StoreError(f"{str(path)!r} line {number}: expected NAME=VALUE, got {line[:80]!r}")
        settings[name.strip()] = value.strip()
    return settings


def _key(entity: AnyEntity, prop: str) -> bytes:
    data = {"entity": entity_to_json(entity), "property": prop}
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


def _value(data: object) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":")).encode()


class KafkaTopicStore(QuotaStore):
    """Quotas on the compacted topic ``topic`` of the cluster at ``bootstrap``; see the
    module documentation. ``config`` adds librdkafka settings (security, for instance) to
    the store's clients, each checked by librdkafka now; the ones the store sets itself
    (``bootstrap.servers``, ``group.id``, ``transactional.id``, ``isolation.level`` and
    the like) are refused. Safe to use from several threads."""

    def __init__(
        self,
        bootstrap: str,
        topic: str = DEFAULT_TOPIC,
        *,
        timeout: float = DEFAULT_KAFKA_TIMEOUT,
        config: Mapping[str, str] | None = None,
    ) -> None:
        require("kafka", "the Kafka topic store")
        if not isinstance(bootstrap, str) or not all(
            part.strip().rpartition(":")[2].isdigit() for part in bootstrap.split(",")
        ):
            raise StoreError(
                f"invalid Kafka bootstrap {bootstrap!r}: expected HOST:PORT[,HOST:PORT...]"
            )
        if not isinstance(topic, str) or _TOPIC_NAME.fullmatch(topic) is None:
            raise StoreError(
                f"invalid Kafka topic {topic!r}: 1 to 249 letters, digits, '.', '_' or '-'"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise StoreError(f"invalid timeout {timeout!r}: expected seconds > 0")
        config = dict(config or {})
        for name, value in config.items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise StoreError(
                    f"invalid Kafka store setting {name!r}={value!r}: expected text for both"
                )
            if name in _OWN_SETTINGS:
                raise StoreError(
                    f"Kafka store setting {name!r} is the store's own: "
                    "the bootstrap servers come from the store's address, the rest from "
                    "how it reads and writes"
                )
        self.bootstrap = bootstrap
        self.topic = topic
        self.timeout = float(timeout)
        self._settings: dict[str, Any] = {
            "bootstrap.servers": bootstrap,
            # librdkafka's own lines go to this module's logger, not to stderr
            "logger": log,
            **config,
        }
        self._lock = threading.RLock()
        self._consumer: Any = None
        self._producer: Any = None
        self._records: dict[bytes, bytes] = {}
        self._end = 0
        self._unreadable: set[bytes] = set()
        if config:
            # librdkafka checks every name and value when a client is made: a mistake is
            # an error now, not a store that cannot refresh later
            from confluent_kafka import KafkaException

            try:
                self._consumer_()
            except KafkaException as exc:
                raise StoreError(
                    f"invalid librdkafka setting of {self.describe()}: {exc.args[0].str()}"
                ) from None

    def describe(self) -> str:
        """``Kafka topic store 'TOPIC' on BOOTSTRAP``."""
        return f"Kafka topic store {self.topic!r} on {self.bootstrap}"

    def __repr__(self) -> str:
        return f"KafkaTopicStore({self.bootstrap!r}, {self.topic!r}, timeout={self.timeout!r})"

    def close(self) -> None:
        """Close the store's connections to the cluster (it reconnects when used again)."""
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
            self._consumer = None
            self._producer = None
            self._records.clear()
            self._end = 0

    # -- the interface -------------------------------------------------------------------

    def version(self) -> int:
        """The offset the topic is read up to, after catching up with its end."""
        with self._lock:
            self._catch_up()
            return self._end

    def read(self) -> StoreSnapshot:
        """The configuration and version, after catching up with the topic's end."""
        with self._lock:
            self._catch_up()
            return StoreSnapshot(self._end, self._config())

    def apply(self, changes: ChangeSet) -> int:
        """Write ``changes`` as one transaction of the records they change; the new version."""
        if not isinstance(changes, ChangeSet):
            raise TypeError(f"expected a ChangeSet, got {type(changes).__name__}")
        with self._lock:
            if not self._topic_exists():
                changes.apply_to(QuotaConfig())  # a change that cannot apply creates nothing
                self._create_topic()
            self._catch_up()
            before = self._config()
            after = changes.apply_to(before)
            self._write(_records(before, after))
            self._catch_up()
            return self._end

    # -- the cluster ---------------------------------------------------------------------

    def _error(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(f"{self.describe()}: {what}: {exc}")

    def _topic_exists(self) -> bool:
        consumer = self._consumer_()
        try:
            metadata = consumer.list_topics(self.topic, timeout=self.timeout)
        except Exception as exc:
            raise self._error("the cluster cannot be reached", exc) from None
        topic = metadata.topics.get(self.topic)
        return topic is not None and topic.error is None and bool(topic.partitions)

    def _create_topic(self) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewTopic

        admin = AdminClient(self._settings)
        topic = NewTopic(self.topic, 1, config={"cleanup.policy": "compact"})
        future = admin.create_topics([topic], request_timeout=self.timeout)[self.topic]
        try:
            future.result(self.timeout)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise self._error("cannot create the topic", exc) from None
        except Exception as exc:
            raise self._error("cannot create the topic", exc) from None
        deadline = time.monotonic() + self.timeout
        while not self._topic_exists():  # until its partition has a leader
            if time.monotonic() > deadline:
                raise StoreError(f"{self.describe()}: the topic was created but has no leader")
            time.sleep(0.1)

    def _consumer_(self) -> Any:
        if self._consumer is None:
            from confluent_kafka import Consumer

            self._consumer = Consumer(
                {
                    **self._settings,
                    "group.id": f"kquota-store-{uuid.uuid4()}",  # never committed
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    # a fetch at the end waits this long for news: a write is seen soon
                    "fetch.wait.max.ms": 100,
                    "isolation.level": "read_committed",
                    "allow.auto.create.topics": False,
                    "auto.offset.reset": "earliest",
                }
            )
        return self._consumer

    def _catch_up(self) -> None:
        """Read the partition up to its end as it is now."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        if not self._topic_exists():
            raise StoreError(
                f"{self.describe()} does not exist: a write creates it "
                "(e.g. kquota configs --alter or --import)"
            )
        consumer = self._consumer_()
        partition = TopicPartition(self.topic, 0)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                start, end = consumer.get_watermark_offsets(
                    partition, timeout=self.timeout, cached=False
                )
                break
            except KafkaException as exc:
                # A topic just created: its leader may not know it for a moment.
                error = exc.args[0]
                passing = error.retriable() or error.code() in _PASSING
                if not passing or time.monotonic() > deadline:
                    raise self._error("the cluster cannot be reached", exc) from None
                time.sleep(0.1)
            except Exception as exc:
                raise self._error("the cluster cannot be reached", exc) from None
        if not consumer.assignment():
            consumer.assign([TopicPartition(self.topic, 0, max(start, self._end))])
        deadline = time.monotonic() + self.timeout
        while self._end < end:
            left = deadline - time.monotonic()
            message = consumer.poll(max(left, 0)) if left > 0 else None
            if message is None:
                raise StoreError(
                    f"{self.describe()}: read up to offset {self._end} of {end} within "
                    f"{self.timeout:g} s"
                )
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    self._end = max(self._end, message.offset())
                    continue
                raise self._error("cannot read the topic", error)
            key, value = message.key(), message.value()
            if key is not None:
                if value is None:
                    self._records.pop(key, None)
                else:
                    self._records[key] = value
            self._end = message.offset() + 1

    def _write(self, records: dict[bytes, bytes | None]) -> None:
        from confluent_kafka import KafkaException, Producer

        if self._producer is None:
            producer = Producer(
                {
                    **self._settings,
                    "transactional.id": f"kquota-store-{self.topic}-{uuid.uuid4()}",
                    "enable.idempotence": True,
                }
            )
            try:
                producer.init_transactions(self.timeout)
            except KafkaException as exc:
                raise self._error("cannot start writing", exc) from None
            self._producer = producer
        producer = self._producer
        records = {**records, _WRITE_KEY: _value({"id": str(uuid.uuid4())})}
        try:
            producer.begin_transaction()
            for key, value in records.items():
                producer.produce(self.topic, key=key, value=value, partition=0)
            producer.commit_transaction(self.timeout)
        except KafkaException as exc:
            try:
                producer.abort_transaction(self.timeout)
            except KafkaException:
                self._producer = None  # a new one next time
            raise self._error("the change was not written", exc) from None

    # -- records and configuration ------------------------------------------------------

    def _config(self) -> QuotaConfig:
        window = Window()
        entities: dict[AnyEntity, dict[str, float]] = {}
        for key, value in self._records.items():
            if key == _WRITE_KEY:
                continue
            try:
                data = json.loads(value)
                if key == _WINDOW_KEY:
                    window = Window(**data)
                    continue
                record = json.loads(key)
                one = {"entity": record["entity"], "config": {record["property"]: data["value"]}}
                # a record kquota wrote: read back as written (QuotaEntry.bounds)
                entries = QuotaConfig.from_json(
                    {"quotas": [one]}, self.describe(), bounds=True
                ).entries
            except (ValueError, KeyError, TypeError, KquotaError) as exc:
                if key not in self._unreadable:  # said once per record
                    self._unreadable.add(key)
                    log.warning("%s: skipping a record it cannot read, %r: %s", self, key, exc)
                continue
            for entry in entries:
                entities.setdefault(entry.entity, {}).update(entry.config)
        return QuotaConfig.from_entities(entities, window, bounds=True)


def _records(before: QuotaConfig, after: QuotaConfig) -> dict[bytes, bytes | None]:
    """The records that take the topic from ``before`` to ``after``."""
    records: dict[bytes, bytes | None] = {}
    old, new = before.by_entity(), after.by_entity()
    for entity in old.keys() | new.keys():
        was, now = old.get(entity, {}), new.get(entity, {})
        for prop in was.keys() | now.keys():
            if prop not in now:
                records[_key(entity, prop)] = None
            elif was.get(prop) != now[prop]:
                records[_key(entity, prop)] = _value({"value": now[prop]})
    if after.window != before.window:
        window = after.window
        records[_WINDOW_KEY] = _value(
            {"num_samples": window.num_samples, "window_ms": window.window_ms}
        )
    return records
