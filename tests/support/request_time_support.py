"""What a real Kafka broker charges a client's request quota, next to what its request log
says (no tests here; ``python tests/support/request_time_support.py`` prints a table).

Kafka's ``request_percentage`` sensor (``kafka.server:type=Request,user=,client-id=C``,
attribute ``request-time``) records, per request, the handler thread's time with a quota
check and, once the response is sent, the network threads' time for the request without
one. The request log has the first (``localTimeMs``) and not the second. :func:`measure`
starts a :class:`~kafka_support.KafkaBroker` with remote JMX, sends a known number of
requests of one API and size per client id (:data:`WORKLOADS`, over raw sockets so that
nothing else shares the client id), reads every client's ``request-time`` with Kafka's own
``JmxTool``, and sets it beside the sum of that client's ``localTimeMs``.

The sensor is a rate; its total comes back exactly from the window Kafka divides by. The
broker runs with ``quota.window.num`` 2 of ``quota.window.size.seconds`` 3600, so that
everything recorded is in the current sample and the rate is the total over (now - first
record) + 3600 s (``Rate.windowSize`` counts the one missing full sample). The request
quota records only while some request quota is set: every client gets a default
``request_percentage`` too high to throttle.
"""

from __future__ import annotations

import csv
import io
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kafka_support import KafkaBroker, completed_request, kafka_configs, run_tool

JMX_TOOL_MAIN: Final = "org.apache.kafka.tools.JmxTool"
WINDOW_S: Final = 3600
"""``quota.window.size.seconds`` of the measuring broker: longer than any measurement."""
NO_LIMIT: Final = 1_000_000.0
"""The default ``request_percentage`` that turns the request quota on and never throttles."""
WAIT_S: Final = 30.0  # bounds a wait for Kafka; never a measurement

SMALL_TOPIC: Final = "small"
MEDIUM_TOPIC: Final = "medium"
LARGE_TOPIC: Final = "large"
SMALL_BYTES: Final = 100
MEDIUM_BYTES: Final = 64 * 1024
LARGE_BYTES: Final = 900 * 1024  # under the broker's 1 MB message.max.bytes


@dataclass(frozen=True)
class Workload:
    """``count`` requests from client id ``name``, one at a time on one connection."""

    name: str
    api: str
    count: int
    send: Callable[[socket.socket, int, str], tuple[int, int]]


PIPELINED_S: Final = 3.0
"""How long the pipelining producer (:func:`pipelined_producer`) produces."""


@dataclass(frozen=True)
class Measured:
    """One client's requests as the log shows them and what Kafka charged for them."""

    client_id: str
    api: str
    requests: int
    local_ms: float  # sum of localTimeMs
    send_ms: float  # sum of sendTimeMs
    request_bytes: int  # sum over the requests of the frame Kafka read (no size prefix)
    response_bytes: int  # sum over the responses of the frame Kafka wrote (no size prefix)
    kafka_ms: float  # what the request-time sensor recorded, in ms of thread time
    imported_ms: float  # the request time kquota's import of the log gives, summed

    @property
    def error(self) -> float:
        """The import's request time relative to Kafka's charge, less 1."""
        return self.imported_ms / self.kafka_ms - 1

    @property
    def network_ms(self) -> float:
        """Kafka's charge beyond the logged handler time, in all."""
        return self.kafka_ms - self.local_ms

    @property
    def network_us_per_request(self) -> float:
        return 1000 * self.network_ms / self.requests


# -- raw requests -------------------------------------------------------------------------


def _exchange(sock: socket.socket, frame: bytes) -> tuple[int, int]:
    """Send a whole request frame and read its response; both sizes (no size prefix)."""
    sock.sendall(frame)
    (size,) = struct.unpack(">i", _exactly(sock, 4))
    _exactly(sock, size)
    return len(frame) - 4, size


def _exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 1 << 20))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return bytes(out)


def record_batch(value_bytes: int) -> bytes:
    """One record batch (magic 2, no compression) of one record of ``value_bytes``."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, value_bytes + 1024)
    builder.append(0, int(time.time() * 1000), None, b"v" * value_bytes, [])
    return bytes(builder.build())


def _produce(
    topic: str, value_bytes: int, depth: int = 1
) -> Callable[[socket.socket, int, str], tuple[int, int]]:
    """Produce v9 (acks=1) of one record of ``value_bytes`` to ``topic``'s partition 0;
    with ``depth`` > 1, requests go ``depth`` at a time, their responses read after the
    last (pipelined, as a client with that many in flight sends them)."""
    from kafka_wire import encode_request
    from kio.schema.produce.v9.request import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )
    from kio.static.primitive import Records, i16, i32, i32Timedelta

    records = record_batch(value_bytes)
    import datetime

    body = ProduceRequest(
        transactional_id=None,
        acks=i16(1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
        topic_data=(
            TopicProduceData(
                name=topic,  # type: ignore[arg-type]
                partition_data=(PartitionProduceData(index=i32(0), records=Records(records)),),
            ),
        ),
    )

    def send(sock: socket.socket, correlation: int, client_id: str) -> tuple[int, int]:
        frame = encode_request(body, correlation, client_id)
        if depth == 1:
            return _exchange(sock, frame)
        sock.sendall(frame)
        received = 0
        if correlation % depth == 0:
            for _ in range(depth):
                (size,) = struct.unpack(">i", _exactly(sock, 4))
                _exactly(sock, size)
                received += size
        return len(frame) - 4, received

    return send


def _fetch(topic: str, max_bytes: int) -> Callable[[socket.socket, int, str], tuple[int, int]]:
    """Fetch v4 of ``topic``'s partition 0 from offset 0, at most ``max_bytes`` (at least
    one batch), answered at once (no wait in purgatory)."""
    import datetime

    from kafka_wire import encode_request
    from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i8, i32, i64

    body = FetchRequest(
        replica_id=BrokerId(-1),
        max_wait=datetime.timedelta(milliseconds=0),
        min_bytes=i32(0),
        max_bytes=i32(max_bytes),
        isolation_level=i8(0),
        topics=(
            FetchTopic(
                topic=TopicName(topic),
                partitions=(
                    FetchPartition(
                        partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(max_bytes)
                    ),
                ),
            ),
        ),
    )

    def send(sock: socket.socket, correlation: int, client_id: str) -> tuple[int, int]:
        return _exchange(sock, encode_request(body, correlation, client_id))

    return send


def _metadata(sock: socket.socket, correlation: int, client_id: str) -> tuple[int, int]:
    from kafka_wire import encode_request
    from kio.schema.metadata.v12.request import MetadataRequest

    body = MetadataRequest(topics=None, include_topic_authorized_operations=False)
    return _exchange(sock, encode_request(body, correlation, client_id))


def _api_versions(sock: socket.socket, correlation: int, client_id: str) -> tuple[int, int]:
    from kafka_wire import encode_request
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    body = ApiVersionsRequest(client_software_name="kquota-test", client_software_version="1")
    return _exchange(sock, encode_request(body, correlation, client_id))


def workloads(scale: float = 1.0) -> list[Workload]:
    """The measured workloads: each API and size on a client id of its own."""

    def n(count: int, multiple: int = 1) -> int:
        return max(10, round(count * scale / multiple)) * multiple

    return [
        Workload("api-versions", "api_versions", n(400), _api_versions),
        Workload("metadata", "metadata", n(400), _metadata),
        Workload("produce-100b", "produce", n(400), _produce(SMALL_TOPIC, SMALL_BYTES)),
        Workload("produce-64k", "produce", n(200), _produce(MEDIUM_TOPIC, MEDIUM_BYTES)),
        Workload("produce-900k", "produce", n(60), _produce(LARGE_TOPIC, LARGE_BYTES)),
        # pipelined: the network threads read each request as soon as the last is answered
        Workload("produce-29k-x5", "produce", n(400, 5), _produce(SMALL_TOPIC, 29 * 1024, 5)),
        Workload("produce-29k-x50", "produce", n(400, 50), _produce(SMALL_TOPIC, 29 * 1024, 50)),
        Workload("fetch-100b", "fetch", n(400), _fetch(SMALL_TOPIC, 1)),
        Workload("fetch-64k", "fetch", n(200), _fetch(MEDIUM_TOPIC, 1)),
        Workload("fetch-900k", "fetch", n(60), _fetch(LARGE_TOPIC, 1)),
    ]


def pipelined_producer(bootstrap: str, client_id: str, seconds: float = PIPELINED_S) -> None:
    """librdkafka producing 4 KiB messages as fast as it can for ``seconds`` (acks=1,
    requests of up to 32 KiB, as many in flight as it likes: librdkafka's default), as the
    agreement test's ``busy`` producer does without its quota."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 32 * 1024,
            "queue.buffering.max.kbytes": 16 * 1024,
        }
    )
    value = b"q" * 4096
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        try:
            producer.produce(SMALL_TOPIC, value)
        except BufferError:
            producer.poll(0.05)
            continue
        producer.poll(0)
    if producer.flush(WAIT_S):
        raise RuntimeError(f"{client_id}: messages still in flight {WAIT_S:g} s after the run")


# -- the broker's metrics -----------------------------------------------------------------


def request_time_rates(broker: KafkaBroker) -> tuple[int, dict[str, float]]:
    """Kafka's ``JmxTool`` once over every ``kafka.server:type=Request`` MBean of
    ``broker``: the read's wall-clock time (ms) and each client id's ``request-time`` (a
    rate of percent)."""
    out = run_tool(
        broker.version,
        JMX_TOOL_MAIN,
        "--jmx-url",
        broker.jmx_url,
        "--object-name",
        "kafka.server:type=Request,*",
        "--attributes",
        "request-time",
        "--one-time",
        "true",
        "--report-format",
        "csv",
    )
    # one "name,value" row per attribute, the read's time first; names hold commas
    rates: dict[str, float] = {}
    when = 0
    for row in csv.reader(io.StringIO(out)):
        if len(row) < 2:
            continue
        name, value = ",".join(row[:-1]), row[-1]
        if name == "time":
            when = int(value)
            continue
        # kafka.server:type=Request,client-id=C:request-time (user=U too with user quotas)
        mbean, _, attribute = name.rpartition(":")
        tags = dict(part.split("=", 1) for part in mbean.split(":", 1)[1].split(","))
        if attribute == "request-time" and "client-id" in tags:
            rates[tags["client-id"]] = float(value)
    if not when:
        raise ValueError(f"JmxTool printed no time column: {out[:500]!r}")
    return when, rates


def _charged_ms(rate: float, first_ms: int, read_ms: int) -> float:
    """The thread time (ms) a ``request-time`` rate of ``rate`` percent stands for: its
    total over the window ``Rate.windowSize`` gives while every record is in the first of
    two samples of :data:`WINDOW_S`, divided by 100 (Kafka records ns * 100 / 1e9)."""
    elapsed = read_ms - first_ms
    if not 0 <= elapsed < WINDOW_S * 1000:
        raise ValueError(
            f"the read came {elapsed} ms after the first record: it must be within the"
            f" {WINDOW_S} s sample"
        )
    window_s = (elapsed + WINDOW_S * 1000) / 1000
    return rate * window_s / 100 * 1000


# -- the log ------------------------------------------------------------------------------


def _wall_ms(line: str) -> int:
    import datetime

    stamp = datetime.datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f")
    return int(stamp.replace(tzinfo=datetime.UTC).timestamp() * 1000)


def logged(lines: list[str]) -> dict[str, dict[str, Any]]:
    """Per client id: its lines' count, sums of ``localTimeMs`` and ``sendTimeMs``, the
    earliest record time (end - responseQueueTimeMs - sendTimeMs) and the last line."""
    out: dict[str, dict[str, Any]] = {}
    for line in lines:
        document = completed_request(line)
        if document is None or document.get("isForwarded"):
            continue
        client = document["requestHeader"].get("clientId") or ""
        record = _wall_ms(line) - document["responseQueueTimeMs"] - document["sendTimeMs"]
        entry = out.setdefault(
            client, {"requests": 0, "local_ms": 0.0, "send_ms": 0.0, "first_ms": record}
        )
        entry["requests"] += 1
        entry["local_ms"] += document["localTimeMs"]
        entry["send_ms"] += document["sendTimeMs"]
        entry["first_ms"] = min(entry["first_ms"], record)
        entry["last"] = document
    return out


def imported_ms(lines: list[str]) -> dict[str, float]:
    """Per client id: the request time (``thread_ns``) kquota's request-log reader gives its
    lines, summed, in ms."""
    import numpy as np
    import pyarrow as pa
    from kquota._core import parse_request_log

    array = pa.array(lines, pa.string())
    validity, offsets, data = array.buffers()
    c = parse_request_log(offsets, data, validity, array.offset, len(array), 1)
    starts = np.frombuffer(c["client_offsets"], np.int32)
    text = bytes(c["client_data"])
    out: dict[str, float] = {}
    for i in range(len(array)):
        if c["reason"][i] != 0 or not c["thread_ns_valid"][i]:
            continue
        client = text[starts[i] : starts[i + 1]].decode()
        out[client] = out.get(client, 0.0) + float(c["thread_ns"][i]) / 1e6
    return out


# -- the measurement ----------------------------------------------------------------------


def _prefill(bootstrap: str) -> None:
    """The topics, each with one batch at offset 0 of its size (what the fetches read)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(t, 1, 1) for t in (SMALL_TOPIC, MEDIUM_TOPIC, LARGE_TOPIC)]
    for future in admin.create_topics(topics, request_timeout=WAIT_S).values():
        future.result(WAIT_S)
    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + WAIT_S
    for topic, size in ((SMALL_TOPIC, SMALL_BYTES), (MEDIUM_TOPIC, MEDIUM_BYTES)):
        while True:  # a new topic's leader may not be known for a moment
            try:
                with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
                    _produce(topic, size)(sock, 1, "prefill")
                break
            except ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
        _produce(LARGE_TOPIC, LARGE_BYTES)(sock, 1, "prefill")


def measure(
    version: str, folder: Any = None, *, scale: float = 1.0, rounds: int = 1
) -> list[Measured]:
    """The measured workloads (:func:`workloads`, then :func:`pipelined_producer` as
    ``pipelined``) on a broker of ``version``, ``rounds`` times each (client ids ``NAME.R``):
    per client id, the log's sums and Kafka's charge (the pipelined producer's over all its
    requests, Metadata and ApiVersions included)."""
    config = {"quota.window.num": 2, "quota.window.size.seconds": WINDOW_S}
    measured = workloads(scale)
    sizes: dict[str, tuple[int, int]] = {}
    with KafkaBroker(folder, version=version, config=config, jmx=True) as broker:
        kafka_configs(
            broker.bootstrap,
            "--alter",
            "--add-config",
            f"request_percentage={NO_LIMIT}",
            "--entity-type",
            "clients",
            "--entity-default",
            version=version,
        )
        _prefill(broker.bootstrap)
        time.sleep(1.0)  # the quota reaches the broker's cache through its metadata
        host, port = broker.bootstrap.rsplit(":", 1)
        for r in range(rounds):
            for work in measured:
                client = f"{work.name}.{r}"
                request_total = response_total = 0
                with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
                    for correlation in range(1, work.count + 1):
                        sent, received = work.send(sock, correlation, client)
                        request_total += sent
                        response_total += received
                sizes[client] = (request_total, response_total)
            pipelined_producer(broker.bootstrap, f"pipelined.{r}", PIPELINED_S * scale)
        time.sleep(1.0)  # the last responses' network time is recorded once they are sent
        read_ms, rates = request_time_rates(broker)
    # read after the stop: every completed request has its line
    lines = list(broker.request_log_lines())
    logs, imported = logged(lines), imported_ms(lines)
    out = []
    for r in range(rounds):
        for work in [*measured, None]:
            client = f"{'pipelined' if work is None else work.name}.{r}"
            entry = logs.get(client)
            if entry is None or client not in rates:
                raise RuntimeError(f"{client}: no log lines or no request-time metric")
            if work is not None and entry["requests"] != work.count:
                raise RuntimeError(f"{client}: {entry['requests']} lines for {work.count} requests")
            out.append(
                Measured(
                    client_id=client,
                    api="produce" if work is None else work.api,
                    requests=entry["requests"],
                    local_ms=entry["local_ms"],
                    send_ms=entry["send_ms"],
                    request_bytes=sizes.get(client, (0, 0))[0],
                    response_bytes=sizes.get(client, (0, 0))[1],
                    kafka_ms=_charged_ms(rates[client], int(entry["first_ms"]), read_ms),
                    imported_ms=imported[client],
                )
            )
    return out


def table(rows: list[Measured]) -> str:
    """The measurement as text: per client id, the log's handler time and Kafka's charge
    per request (µs), and the difference (network-thread time)."""
    lines = [
        f"{'client id':<16} {'requests':>8} {'req B':>7} {'resp B':>7}"
        f" {'local us/req':>12} {'send us/req':>11}"
        f" {'kafka us/req':>12} {'network us/req':>14} {'kafka/local':>11}"
        f" {'kquota us/req':>13} {'error':>6}"
    ]
    for m in rows:
        per = 1000 / m.requests
        lines.append(
            f"{m.client_id:<16} {m.requests:>8} {m.request_bytes // m.requests:>7}"
            f" {m.response_bytes // m.requests:>7} {m.local_ms * per:>12.1f}"
            f" {m.send_ms * per:>11.1f}"
            f" {m.kafka_ms * per:>12.1f} {m.network_us_per_request:>14.1f}"
            f" {m.kafka_ms / m.local_ms if m.local_ms else float('nan'):>11.2f}"
            f" {m.imported_ms * per:>13.1f} {m.error:>+6.0%}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    from kafka_support import KAFKA_VERSION

    chosen = sys.argv[1] if len(sys.argv) > 1 else KAFKA_VERSION
    print(table(measure(chosen, rounds=int(sys.argv[2]) if len(sys.argv) > 2 else 1)))
