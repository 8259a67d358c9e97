"""Every acknowledged message, read back from the broker: the check that nothing a client was
told is stored went missing on the way through the proxy.

Producers (librdkafka, kafka-python, aiokafka) send messages whose keys name them
(``NAME:SEQ``) and note each acknowledgement in a :class:`Ledger`. :func:`read_back` then
reads every partition of the topic from offset 0 to its high watermark straight from the
broker's own port, with Kafka frames of the tests' codec (kio) and a record-batch reader of
its own, so that nothing of kquota is between the broker and the count. :func:`audit`
compares the two: a key acknowledged and not stored is lost; a key stored more than once is
a duplicate (a client's own retry can make one).
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
import threading
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

WAIT_S = 120.0
"""How long a producer's final flush may take: a producer held by its quota may get one
batch a second, and a throttle of several seconds before it."""


@dataclass
class Ledger:
    """The acknowledgements one producer had: key -> (partition, offset), and the failures
    it was told of (those messages may or may not be stored)."""

    name: str
    sent: int = 0
    acked: dict[bytes, tuple[int, int]] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    throttles_ms: list[int] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def key(self, seq: int) -> bytes:
        return f"{self.name}:{seq}".encode()

    def ack(self, key: bytes, partition: int, offset: int) -> None:
        with self._lock:
            self.acked[key] = (partition, offset)

    def fail(self, key: bytes, reason: str) -> None:
        with self._lock:
            self.failed.append(f"{key.decode()}: {reason}")


# -- producers -----------------------------------------------------------------------------


def librdkafka_producer(
    bootstrap: str,
    topic: str,
    ledger: Ledger,
    messages: int,
    *,
    client_id: str,
    value_bytes: int = 1024,
    config: dict[str, Any] | None = None,
) -> None:
    """Sends ``messages`` keyed messages with librdkafka (acks=all, its default retries and
    timeouts, as an application leaves them), then flushes."""
    from confluent_kafka import Producer

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            ledger.ack(msg.key(), msg.partition(), msg.offset())
        else:
            ledger.fail(msg.key(), str(err))

    def on_throttle(event: Any) -> None:
        ms = round(event.throttle_time * 1000)
        if ms > 0:
            ledger.throttles_ms.append(ms)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "none",
            "throttle_cb": on_throttle,
            **(config or {}),
        }
    )
    value = b"v" * value_bytes
    for seq in range(messages):
        while True:
            try:
                producer.produce(topic, value, key=ledger.key(seq), on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        ledger.sent += 1
        producer.poll(0)
    left = producer.flush(WAIT_S)
    if left:
        ledger.failed.append(f"{left} messages not delivered {WAIT_S:g} s after the last send")


def kafka_python_producer(
    bootstrap: str,
    topic: str,
    ledger: Ledger,
    messages: int,
    *,
    client_id: str,
    value_bytes: int = 1024,
) -> None:
    """The same with kafka-python."""
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        client_id=client_id,
        acks="all",
        linger_ms=5,
        max_block_ms=int(WAIT_S * 1000),
    )
    value = b"v" * value_bytes
    try:
        for seq in range(messages):
            key = ledger.key(seq)
            future = producer.send(topic, value, key=key)
            future.add_callback(lambda md, k=key: ledger.ack(k, md.partition, md.offset))
            future.add_errback(lambda exc, k=key: ledger.fail(k, repr(exc)))
            ledger.sent += 1
    finally:
        producer.close(timeout=WAIT_S)


def aiokafka_producer(
    bootstrap: str,
    topic: str,
    ledger: Ledger,
    messages: int,
    *,
    client_id: str,
    value_bytes: int = 1024,
) -> None:
    """The same with aiokafka, on an event loop of its own."""

    async def produce() -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, client_id=client_id, acks="all", linger_ms=5
        )
        await producer.start()
        value = b"v" * value_bytes
        pending: set[asyncio.Future[Any]] = set()

        def done(future: asyncio.Future[Any], key: bytes) -> None:
            pending.discard(future)
            if future.cancelled():
                ledger.fail(key, "cancelled")
            elif future.exception() is not None:
                ledger.fail(key, repr(future.exception()))
            else:
                md = future.result()
                ledger.ack(key, md.partition, md.offset)

        try:
            for seq in range(messages):
                key = ledger.key(seq)
                while len(pending) >= 2000:  # the application's own bound: aiokafka has none
                    await asyncio.sleep(0.005)
                future = await producer.send(topic, value, key=key)
                future.add_done_callback(lambda f, k=key: done(f, k))
                pending.add(future)
                ledger.sent += 1
        finally:
            await asyncio.wait_for(producer.stop(), WAIT_S)

    asyncio.run(produce())


def run_all(workloads: Iterable[Callable[[], None]]) -> list[str]:
    """Runs each workload in a thread of its own, all at once; the exceptions they raised."""
    errors: list[str] = []

    def guarded(work: Callable[[], None]) -> None:
        try:
            work()
        except Exception as exc:  # reported to the test, which fails on it
            errors.append(f"{getattr(work, '__name__', work)}: {exc!r}")

    threads = [threading.Thread(target=guarded, args=(w,)) for w in workloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors


# -- read-back straight from the broker ----------------------------------------------------


@dataclass(frozen=True)
class Stored:
    """One record as the broker returned it."""

    partition: int
    offset: int
    key: bytes | None


def _request(sock: socket.socket, body: Any, correlation_id: int, response_type: Any) -> Any:
    from kafka_wire import encode_request, read_response

    sock.sendall(encode_request(body, correlation_id, "read-back"))
    (size,) = struct.unpack(">i", _exactly(sock, 4))
    frame = _exactly(sock, size)
    return read_response(frame, response_type.__api_key__, response_type.__version__)


def _exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the read-back connection")
        out += chunk
    return bytes(out)


Brokers = tuple[str, int] | list[tuple[str, int]]
"""One broker's address, or a cluster's: each partition is asked of the one leading it."""

NOT_LEADER_OR_FOLLOWER = 6


def _brokers(brokers: Brokers) -> list[tuple[str, int]]:
    return list(brokers) if isinstance(brokers, list) else [brokers]


def high_watermarks(brokers: Brokers, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's end as ListOffsets v4 (latest) answers it, from its leader: Kafka's
    high watermark; on Tansu 0.6 (dynostore), the base offset of the batch it stored
    last, plus one."""
    out: dict[int, int] = {}
    for partition in range(partitions):
        for address in _brokers(brokers):
            offset = _list_offset(address, topic, partition)
            if offset is not None:
                out[partition] = offset
                break
        else:
            raise RuntimeError(f"ListOffsets {topic}-{partition}: no broker leads it")
    return out


def _list_offset(address: tuple[str, int], topic: str, partition: int) -> int | None:
    """ListOffsets(latest) of one partition from one broker; ``None`` if it does not
    lead it."""
    from kio.schema.list_offsets.v4.request import (
        ListOffsetsPartition,
        ListOffsetsRequest,
        ListOffsetsTopic,
    )
    from kio.schema.list_offsets.v4.response import ListOffsetsResponse
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i8, i32, i64

    body = ListOffsetsRequest(
        replica_id=BrokerId(-1),
        isolation_level=i8(0),
        topics=(
            ListOffsetsTopic(
                name=TopicName(topic),
                partitions=(
                    ListOffsetsPartition(
                        partition_index=i32(partition),
                        current_leader_epoch=i32(-1),
                        timestamp=i64(-1),
                    ),
                ),
            ),
        ),
    )
    with socket.create_connection(address, timeout=30) as sock:
        response = _request(sock, body, 1, ListOffsetsResponse)
    (part,) = [p for t in response.topics for p in t.partitions]
    if part.error_code == NOT_LEADER_OR_FOLLOWER:
        return None
    if part.error_code != 0:
        raise RuntimeError(f"ListOffsets {topic}-{partition}: error {part.error_code}")
    return int(part.offset)


@dataclass
class ReadBack:
    """What a read-back found: the records, and each partition's end as the Fetch
    responses gave it (their ``high_watermark``) and as ListOffsets(latest) answers."""

    records: list[Stored]
    fetch_ends: dict[int, int]
    list_offsets_ends: dict[int, int]


def read_back(brokers: Brokers, topic: str, partitions: int) -> ReadBack:
    """Every record of ``topic`` from offset 0 to each partition's high watermark, fetched
    from the broker leading it among ``brokers`` (Fetch v4: no fetch session, no topic
    ids).

    The end is the ``high_watermark`` of the Fetch responses themselves, not
    ListOffsets(latest): Tansu 0.6 answers that with the base offset of the batch it
    stored last, plus one, which leaves out the rest of that batch (see
    :func:`high_watermarks`, kept for the comparison)."""
    listed = high_watermarks(brokers, topic, partitions)
    stored: list[Stored] = []
    ends: dict[int, int] = {}
    for partition in range(partitions):
        for address in _brokers(brokers):
            read = _read_partition(address, topic, partition)
            if read is not None:
                stored += read[0]
                ends[partition] = read[1]
                break
        else:
            raise RuntimeError(f"Fetch {topic}-{partition}: no broker leads it")
    return ReadBack(stored, ends, listed)


def _read_partition(
    address: tuple[str, int], topic: str, partition: int
) -> tuple[list[Stored], int] | None:
    """One partition's records from one broker, and where they end (the Fetch responses'
    high watermark); ``None`` if the broker does not lead the partition."""
    from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.fetch.v4.response import FetchResponse
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i8, i32, i64

    stored: list[Stored] = []
    offset = 0
    end = None
    stalled = 0
    with socket.create_connection(address, timeout=30) as sock:
        for correlation in itertools.count(11):
            if end is not None and offset >= end:
                break
            body = FetchRequest(
                replica_id=BrokerId(-1),
                max_wait=_ms(100),
                min_bytes=i32(1),
                max_bytes=i32(8 << 20),
                isolation_level=i8(0),
                topics=(
                    FetchTopic(
                        topic=TopicName(topic),
                        partitions=(
                            FetchPartition(
                                partition=i32(partition),
                                fetch_offset=i64(offset),
                                partition_max_bytes=i32(4 << 20),
                            ),
                        ),
                    ),
                ),
            )
            response = _request(sock, body, correlation, FetchResponse)
            (part,) = [p for t in response.responses for p in t.partitions]
            if part.error_code == NOT_LEADER_OR_FOLLOWER:
                return None
            if part.error_code != 0:
                raise RuntimeError(f"Fetch {topic}-{partition}@{offset}: error {part.error_code}")
            end = int(part.high_watermark)
            before = offset
            for base, records in record_batches(part.records or b""):
                for delta, key in records:
                    at = base + delta
                    if offset <= at < end:
                        stored.append(Stored(partition, at, key))
                        offset = at + 1
            if offset == before and offset < end:
                stalled += 1
                if stalled > 20:
                    raise RuntimeError(
                        f"Fetch {topic}-{partition}@{offset} returned nothing 20 times"
                        f" (high watermark {end})"
                    )
                time.sleep(0.05)
    return stored, offset


def _ms(value: int) -> Any:
    import datetime

    return datetime.timedelta(milliseconds=value)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), at
        shift += 7


_BATCH_HEAD = struct.Struct(">qiibIhiqqqhii")


def record_batches(data: bytes) -> Iterable[tuple[int, list[tuple[int, bytes | None]]]]:
    """The record batches (magic 2) in a fetch response's records: each batch's base offset
    and its records' offset deltas and keys. A batch cut short at the end is skipped, as a
    consumer skips it."""
    at = 0
    while at + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, at)
        end = at + 12 + length
        if end > len(data):
            return
        (_, _, _, magic, _, attributes, _, _, _, _, _, _, count) = _BATCH_HEAD.unpack_from(data, at)
        if magic != 2:
            raise ValueError(f"record batch at offset {base} has magic {magic}")
        body = data[at + _BATCH_HEAD.size : end]
        codec = attributes & 0x7
        if codec == 1:
            body = zlib.decompress(body, 16 + zlib.MAX_WBITS)
        elif codec != 0:
            raise ValueError(f"record batch at offset {base}: compression codec {codec}")
        records = []
        pos = 0
        for _ in range(count):
            length, pos = _varint(body, pos)
            record_end = pos + length
            pos += 1  # attributes
            _, pos = _varint(body, pos)  # timestamp delta
            delta, pos = _varint(body, pos)
            key_length, pos = _varint(body, pos)
            key = None if key_length < 0 else body[pos : pos + key_length]
            records.append((delta, key))
            pos = record_end
        yield base, records
        at = end


# -- the audit ----------------------------------------------------------------------------


@dataclass
class Audit:
    """What the read-back found for each producer."""

    acked: dict[str, int]
    lost: dict[str, list[bytes]]
    duplicated: dict[str, int]
    failed: dict[str, int]
    stored: int

    @property
    def lost_count(self) -> int:
        return sum(len(keys) for keys in self.lost.values())

    def describe(self) -> str:
        lines = [f"{self.stored} records stored"]
        for name, n in self.acked.items():
            lost = self.lost.get(name, [])
            lines.append(
                f"{name}: {n} acknowledged, {len(lost)} lost, "
                f"{self.duplicated.get(name, 0)} duplicated, {self.failed.get(name, 0)} failed"
                + (f" (first lost: {[k.decode() for k in lost[:5]]})" if lost else "")
            )
        return "\n".join(lines)


def audit(ledgers: Iterable[Ledger], stored: Iterable[Stored]) -> Audit:
    """Each ledger's acknowledged keys against the records stored."""
    copies = Counter(s.key for s in stored if s.key is not None)
    ledgers = list(ledgers)
    result = Audit(acked={}, lost={}, duplicated={}, failed={}, stored=sum(copies.values()))
    for ledger in ledgers:
        result.acked[ledger.name] = len(ledger.acked)
        result.failed[ledger.name] = len(ledger.failed)
        lost = sorted(k for k in ledger.acked if copies[k] == 0)
        if lost:
            result.lost[ledger.name] = lost
        prefix = f"{ledger.name}:".encode()
        result.duplicated[ledger.name] = sum(
            n - 1 for k, n in copies.items() if n > 1 and k.startswith(prefix)
        )
    return result


# -- the scenario: five clients under their quotas ---------------------------------------


@dataclass(frozen=True)
class Producer:
    """One producer of a run: its client (``librdkafka``, ``kafka-python`` or
    ``aiokafka``), client id and, for librdkafka, settings of its own."""

    client: str
    client_id: str
    config: tuple[tuple[str, Any], ...] = ()


FIVE: dict[str, Producer] = {
    "rdkafka": Producer("librdkafka", "rdkafka"),
    "kafka-python": Producer("kafka-python", "kafka-python"),
    "aiokafka": Producer("aiokafka", "aiokafka"),
    # two librdkafka producers sharing one client id and its quota
    "shared-a": Producer("librdkafka", "shared"),
    "shared-b": Producer("librdkafka", "shared"),
}
"""The producers of :func:`five_clients` (with a consumer, the fifth client)."""
PRODUCER_CLIENT_IDS = {name: producer.client_id for name, producer in FIVE.items()}
CONSUMER_CLIENT_ID = "consumer"


def set_quotas(managers: Any, quota: float) -> None:
    """``quota`` bytes/s on every producer's client id (``producer_byte_rate``) and on the
    consumer's (``consumer_byte_rate``), on a plugin's or a gateway's managers."""
    import kquota

    for client_id in set(PRODUCER_CLIENT_IDS.values()):
        managers.produce.set_quota(kquota.Entity(client_id=client_id), quota)
    managers.fetch.set_quota(kquota.Entity(client_id=CONSUMER_CLIENT_ID), quota)


@dataclass
class Delivery:
    """One run of :func:`five_clients` and its read-back."""

    ledgers: dict[str, Ledger]
    errors: list[str]
    consumed: int
    read: ReadBack
    audit: Audit

    @property
    def acknowledged(self) -> int:
        return sum(self.audit.acked.values())

    @property
    def largest_throttle_ms(self) -> int:
        return max((max(g.throttles_ms, default=0) for g in self.ledgers.values()), default=0)

    def describe(self) -> str:
        ends = ", ".join(
            f"{p}: fetch {self.read.fetch_ends[p]}, ListOffsets {self.read.list_offsets_ends[p]}"
            for p in sorted(self.read.fetch_ends)
        )
        failures = "".join(
            f"\n{name} was told of failures, first: {ledger.failed[0]}"
            for name, ledger in self.ledgers.items()
            if ledger.failed
        )
        return (
            f"{self.audit.describe()}{failures}\nlargest throttle {self.largest_throttle_ms} ms;"
            f" consumer read {self.consumed}; partition ends: {ends}; errors: {self.errors}"
        )


def five_clients(
    bootstrap: str,
    brokers: Brokers,
    topic: str,
    messages: int,
    *,
    partitions: int = 3,
    value_bytes: int = 1024,
    producers: dict[str, Producer] | None = None,
    during: Callable[[], None] | None = None,
) -> Delivery:
    """Five producers (librdkafka, kafka-python, aiokafka, and two librdkafka producers
    sharing one client id; or ``producers``) send ``messages`` keyed messages each to
    ``topic`` through ``bootstrap`` while a librdkafka consumer reads it, and ``during``
    runs beside them (a fault); then every partition is read back from ``brokers``
    themselves and audited against the acknowledgements."""
    from confluent_kafka import Consumer

    producers = FIVE if producers is None else producers
    ledgers = {name: Ledger(name) for name in producers}
    stop = threading.Event()
    consumed = [0]

    def consume() -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"{topic}-readers",
                "client.id": CONSUMER_CLIENT_ID,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe([topic])
            while not stop.is_set():
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    consumed[0] += 1
        finally:
            consumer.close()

    def producer(name: str) -> Callable[[], None]:
        spec = producers[name]

        def run() -> None:
            if spec.client == "librdkafka":
                librdkafka_producer(
                    bootstrap,
                    topic,
                    ledgers[name],
                    messages,
                    client_id=spec.client_id,
                    value_bytes=value_bytes,
                    config=dict(spec.config),
                )
            else:
                produce = {"kafka-python": kafka_python_producer, "aiokafka": aiokafka_producer}
                produce[spec.client](
                    bootstrap,
                    topic,
                    ledgers[name],
                    messages,
                    client_id=spec.client_id,
                    value_bytes=value_bytes,
                )

        run.__name__ = name
        return run

    reader = threading.Thread(target=consume, name="consumer")
    reader.start()
    try:
        work = [producer(name) for name in ledgers]
        if during is not None:
            work.append(during)
        errors = run_all(work)
    finally:
        stop.set()
        reader.join(WAIT_S)
    read = read_back(brokers, topic, partitions)
    return Delivery(ledgers, errors, consumed[0], read, audit(ledgers.values(), read.records))
