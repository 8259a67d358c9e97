"""Kafka request logs written from real message structures, for tests and benchmarks.

Every Produce and Fetch request and response is a ``kio`` dataclass (Kafka's message
schemas, generated; the ``proxy`` extra), turned into the line Kafka's
``RequestConvertToJson`` writes (``kafka_request_json.py``): camelCase keys, only the fields
of the logged version, tagged fields only when not at their default, UUIDs in base64url,
records as ``<field>SizeInBytes``. The structures are kept (:attr:`LoggedRequest.request`,
:attr:`LoggedRequest.response`) so that a test can encode them with ``kio`` and compare the
sizes the reader rebuilt from the JSON with the bytes on the wire.

What the log holds: Produce v0-13 and Fetch v0-18 (kio has Produce from v3 and Fetch from
v4, the versions Kafka 4.0 kept: the older ones are the v3/v4 structures logged without the
fields they lack, see :func:`legacy_fields`), transactional ids null and set, aborted
transactions null and listed, tagged fields present and absent, follower fetches (v0-14
``replicaId``, v15+ ``replicaState``), ``acks`` -1/0/1 (``acks=0`` has a ``""`` or
``null`` response), Produce lines with a ``""`` request, other APIs (Metadata, ApiVersions,
Heartbeat), inter-broker APIs (AlterPartition, WriteTxnMarkers), forwarded lines, INFO lines
of deprecated versions with ``requestApiVersionDeprecated``, IPv4 and IPv6 connections
in the 3.9 and 4.0 forms, times printed as Java prints doubles (``1.0E7``), and TRACE lines
of ``kafka.network.RequestChannel$`` between them. Everything is seeded and deterministic.
"""

from __future__ import annotations

import dataclasses
import datetime
import gzip
import importlib
import io
import json
import math
import random
import uuid
import zoneinfo
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kafka_request_json import (
    kafka_json,
    legacy_fields,
    make_message,
    message_module,
    schema_version,
)
from kquota.backtest import requestlog

__all__ = [
    "LogSpec",
    "LoggedRequest",
    "encoded_size",
    "expected_bytes",
    "generate",
    "kafka_json",
    "legacy_fields",
    "line",
    "logged_double",
    "write",
    "write_repeated",
]

START_MS: Final = 1_717_372_800_000
"""Midnight UTC, 3 June 2024."""
PRODUCE_VERSIONS: Final = tuple(range(14))
FETCH_VERSIONS: Final = tuple(range(19))
DEPRECATED: Final = {0: range(7), 1: range(4)}
"""Produce v0-6 and Fetch v0-3 (KIP-896): logged at INFO with ``requestApiVersionDeprecated``."""
API_NAMES: Final = {
    0: "PRODUCE",
    1: "FETCH",
    3: "METADATA",
    12: "HEARTBEAT",
    18: "API_VERSIONS",
    27: "WRITE_TXN_MARKERS",
    56: "ALTER_PARTITION",
}
_OTHER: Final = ((3, 12), (18, 3), (12, 4))
"""(key, version) of the other client APIs logged."""
_INTER_BROKER: Final = ((56, 3), (27, 1))
USERS: Final = ("alice", "bob", "CN=app,OU=x", "ANONYMOUS")
TOPICS: Final = ("orders", "payments", "clicks-\u00e9t\u00e9", "t")


@dataclass(frozen=True)
class LogSpec:
    """What to write: ``requests`` Completed request lines over ``brokers`` folders."""

    requests: int = 400
    brokers: int = 2
    clients: int = 8
    seed: int = 0
    start_ms: int = START_MS
    timezone: str = "UTC"
    trace: bool = True
    """A TRACE line of ``RequestChannel$`` before about every third request line."""


@dataclass(frozen=True)
class LoggedRequest:
    """One ``Completed request`` line and what a reader must find in it."""

    broker: str
    end_ms: int
    record_ms: int
    user: str
    client_id: str
    api: str
    api_key: int
    api_version: int
    correlation_id: int
    acks: int | None
    throttle_ms: int
    thread_ns: int | None
    """The handler's time (``localTimeMs``), ns; None for ``acks=0``."""
    send_us: int
    """The line's ``sendTimeMs``, µs."""
    reason: str | None
    """Why the reader skips the line (:data:`kquota.backtest.requestlog.REASONS`), or None."""
    header: Any
    request: Any
    """The kio request, or None when the line's request is ``""``/``null``."""
    response: Any
    """The kio response, or None when the line's response is ``""``/``null``."""
    line: str
    level: str = "DEBUG"


WrittenLog = tuple[Path, list[LoggedRequest]]
"""A folder of request logs :func:`write` wrote, and what they logged."""


# -- what a logged request costs: its bytes on the wire, its thread time -------------------


def encoded_size(entity: Any) -> int:
    """The bytes of ``entity`` (a header or a message body) encoded with kio."""
    from kio.serial import entity_writer

    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    return len(buffer.getvalue())


def expected_bytes(logged: LoggedRequest) -> int:
    """The bytes a reader must find for ``logged``, from kio's own encoding of its
    messages and the definitions of the doc (section 5): Produce: header + request body;
    consumer Fetch not throttled: 4 + response body, encoded as Kafka sizes it for the
    quota, with no ``node_endpoints`` (Kafka sizes it with an empty node list); otherwise 0.
    Produce v0-2 and Fetch v0-3 are encoded as v3/v4 less the fields they lack
    (:func:`legacy_fields`): a null transactional id (2 bytes), per partition the last
    stable offset (8) and null aborted transactions (4), and Fetch v0's throttle time (4)."""
    if logged.api_key == 0 and logged.request is not None:
        size = encoded_size(logged.header) + encoded_size(logged.request)
        return size - (2 if logged.api_version < 3 else 0)
    if logged.api_key == 1 and logged.response is not None and logged.throttle_ms == 0:
        response = logged.response
        if getattr(response, "node_endpoints", ()):
            response = dataclasses.replace(response, node_endpoints=())
        size = 4 + encoded_size(response)
        if logged.api_version < 4:
            partitions = sum(len(t.partitions) for t in logged.response.responses)
            size -= 12 * partitions + (4 if logged.api_version < 1 else 0)
        return size
    return 0


def expected_thread_ns(logged: LoggedRequest) -> int | None:
    """The request time a reader must find for ``logged``: the handler's, plus the
    network threads' estimate (``docs/guide/fidelity.md``): the send time, at most 100 µs
    + 0.05 ns per byte of a fetch response, plus 1 µs + 0.3 ns per byte of a produce
    request, each product truncated to whole ns; None for ``acks=0``."""
    if logged.thread_ns is None:
        return None
    size = expected_bytes(logged)
    fetched = size if logged.api_key == 1 else 0
    written = min(logged.send_us * 1000, 100_000 + int(0.05 * fetched))
    read = size if logged.api_key == 0 else 0
    return logged.thread_ns + written + 1_000 + int(0.3 * read)


# -- lines ----------------------------------------------------------------------------------


def logged_double(value: float) -> str:
    """``value`` as Java's ``Double.toString`` prints it: ``0.05``, ``12.0``, ``1.0E7``."""
    if value == 0:
        return "0.0"
    if 1e-3 <= abs(value) < 1e7:
        text = repr(float(value))
        return text if "e" not in text else f"{value:.6f}".rstrip("0")
    mantissa, exponent = f"{value:.15e}".split("e")
    mantissa = mantissa.rstrip("0")
    if mantissa.endswith("."):
        mantissa += "0"
    return f"{mantissa}E{int(exponent)}"


def _timestamp(ms: int, zone: str) -> str:
    moment = datetime.datetime.fromtimestamp(ms // 1000, tz=zoneinfo.ZoneInfo(zone))
    return moment.strftime("%Y-%m-%d %H:%M:%S") + f",{ms % 1000:03d}"


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def line(
    end_ms: int,
    level: str,
    document: str,
    zone: str = "UTC",
) -> str:
    """A ``Completed request`` line with the JSON object ``document`` (no newline)."""
    stamp = _timestamp(end_ms, zone)
    return f"[{stamp}] {level} Completed request:{document} (kafka.request.logger)"


def _body(value: Any) -> str:
    if isinstance(value, str):  # "" or a JSON fragment written as is (null)
        return value if value == "null" else _dumps(value)
    return _dumps(value)


def _document(
    header: dict[str, Any],
    request: Any,
    response: Any,
    times: dict[str, float],
    throttle: int,
    connection: str,
    principal: str,
    forwarded: bool,
    extra: dict[str, Any],
) -> str:
    """The JSON object, keys in Kafka's order, doubles as Java prints them."""
    parts = [
        f'"isForwarded":{"true" if forwarded else "false"}',
        f'"requestHeader":{_dumps(header)}',
        f'"request":{_body(request)}',
        f'"response":{_body(response)}',
        f'"connection":{_dumps(connection)}',
        f'"totalTimeMs":{logged_double(times["total"])}',
        f'"requestQueueTimeMs":{logged_double(times["queue"])}',
        f'"localTimeMs":{logged_double(times["local"])}',
        f'"remoteTimeMs":{logged_double(times["remote"])}',
        f'"throttleTimeMs":{throttle}',
        f'"responseQueueTimeMs":{logged_double(times["responseQueue"])}',
        f'"sendTimeMs":{logged_double(times["send"])}',
        '"securityProtocol":"SASL_SSL"',
        f'"principal":{_dumps(principal)}',
        '"listener":"SASL_SSL"',
        '"clientInformation":{"softwareName":"apache-kafka-java","softwareVersion":"3.9.0"}',
    ]
    parts += [f'"{k}":{v}' for k, v in extra.items()]
    return "{" + ",".join(parts) + "}"


def renamed(value: Any, names: dict[str, str]) -> Any:
    """``value`` (Kafka's JSON) with the keys ``names`` maps renamed, at any depth, key
    order kept."""
    if isinstance(value, dict):
        return {names.get(k, k): renamed(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed(v, names) for v in value]
    return value


def completed_line(
    ms: int,
    key: int,
    name: str,
    version: int,
    cid: int,
    request: Any,
    response: Any,
    *,
    client: str | None,
    user: str = "alice",
    throttle: int = 0,
    forwarded: bool = False,
) -> str:
    """One hand-made "Completed request" line at ``ms``: API ``key`` (``name``) at
    ``version``, correlation id ``cid``, from ``client`` as ``user``, 2 ms in all."""
    header = {
        "requestApiKey": key,
        "requestApiVersion": version,
        "correlationId": cid,
        "clientId": client,
        "requestApiKeyName": name,
    }
    times = {"total": 2.0, "queue": 0.0, "local": 1.5, "remote": 0.0, "responseQueue": 0.0}
    document = _document(
        header,
        request,
        response,
        {**times, "send": 0.0},
        throttle,
        "10.0.0.1:9092-10.0.0.2:5000-1",
        f"User:{user}",
        forwarded,
        {},
    )
    return line(ms, "DEBUG", document)


def _trace(rng: random.Random, header: dict[str, Any], connection: str) -> str:
    kind = rng.randrange(3)
    api = header["requestApiKeyName"]
    if kind == 0:
        text = (
            f"Processor {rng.randrange(3)} received request: RequestHeader(apiKey={api}, "
            f"apiVersion={header['requestApiVersion']}, clientId={header.get('clientId')}, "
            f"correlationId={header['correlationId']}, headerVersion=2) -- "
            "{acks=-1,timeout=30000,partitionSizes=[orders-0=512]}"
        )
    elif kind == 1:
        text = f"Sending {api} response to client {connection} of {rng.randrange(40, 9000)} bytes."
    else:
        text = f"Notifying channel throttling has started for client {connection} for {api}"
    return f"[2024-06-03 00:00:00,000] TRACE {text} (kafka.network.RequestChannel$)"


# -- generation -------------------------------------------------------------------------------


def _records(rng: random.Random) -> bytes:
    return b"\0" * rng.choice((0, 1, 70, 127, 128, 700, 16_383, 16_384, 70_000))


def _produce(rng: random.Random, version: int, acks: int) -> tuple[Any, Any]:
    v = schema_version(0, version)
    req = message_module(0, v, "request")
    resp = message_module(0, v, "response")
    from kio.schema.errors import ErrorCode

    txn = rng.choice((None, "txn-1", "")) if version >= 3 else None
    topics = []
    responses = []
    for t in rng.sample(TOPICS, rng.randint(1, 3)):
        parts = [
            make_message(req.PartitionProduceData, index=p, records=_records(rng))
            for p in rng.sample(range(200), rng.randint(1, 3))
        ]
        topics.append(
            make_message(
                req.TopicProduceData,
                name=t,
                topic_id=uuid.UUID(int=rng.getrandbits(128)),
                partition_data=tuple(parts),
            )
        )
        responses.append(
            make_message(
                resp.TopicProduceResponse,
                name=t,
                topic_id=uuid.UUID(int=rng.getrandbits(128)),
                partition_responses=tuple(
                    make_message(
                        resp.PartitionProduceResponse,
                        index=p.index,
                        error_code=ErrorCode.none,
                        base_offset=rng.randrange(10**9),
                        log_append_time=None,
                        log_start_offset=0,
                        record_errors=(),
                        error_message=None,
                    )
                    for p in parts
                ),
            )
        )
    request = make_message(
        req.ProduceRequest,
        transactional_id=txn,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=30_000),
        topic_data=tuple(topics),
    )
    response = make_message(
        resp.ProduceResponse,
        responses=tuple(responses),
        throttle_time=datetime.timedelta(0),
    )
    return request, response


def _fetch(rng: random.Random, version: int, follower: bool, throttle: int) -> tuple[Any, Any]:
    v = schema_version(1, version)
    req = message_module(1, v, "request")
    resp = message_module(1, v, "response")
    from kio.schema.errors import ErrorCode

    replica = rng.randrange(1, 6) if follower else -1
    values: dict[str, Any] = {
        "replica_id": replica,
        "max_wait": datetime.timedelta(milliseconds=500),
        "min_bytes": 1,
        "max_bytes": 52_428_800,
        "isolation_level": rng.randrange(2),
        "session_id": rng.randrange(2**31),
        "session_epoch": rng.randrange(100),
        "rack_id": rng.choice(("", "rack-a")),
        "forgotten_topics_data": (),
    }
    if version >= 15 and follower:
        values["replica_state"] = make_message(
            req.ReplicaState, replica_id=replica, replica_epoch=7
        )
    if version >= 12 and rng.random() < 0.5:
        values["cluster_id"] = "kquota-cluster"
    topics = []
    out_topics = []
    empty_session = rng.random() < 0.15  # an incremental fetch with nothing new
    for t in [] if empty_session else rng.sample(TOPICS, rng.randint(1, 3)):
        # a throttled fetch is answered with an empty response (no partitions)
        topic_id = uuid.UUID(int=rng.getrandbits(128))
        indexes = rng.sample(range(100), rng.randint(1, 3))
        topics.append(
            make_message(
                req.FetchTopic,
                topic=t,
                topic_id=topic_id,
                partitions=tuple(
                    make_message(
                        req.FetchPartition,
                        partition=p,
                        fetch_offset=rng.randrange(10**6),
                        partition_max_bytes=1_048_576,
                    )
                    for p in indexes
                ),
            )
        )
        parts = []
        for p in indexes:
            part: dict[str, Any] = {
                "partition_index": p,
                "error_code": ErrorCode.none,
                "high_watermark": rng.randrange(10**9),
                "last_stable_offset": rng.randrange(10**9),
                "log_start_offset": 0,
                "preferred_read_replica": -1,
                "records": b"" if throttle else _records(rng),
                "aborted_transactions": None,
            }
            if version >= 4 and rng.random() < 0.4:
                part["aborted_transactions"] = tuple(
                    make_message(
                        resp.AbortedTransaction, producer_id=rng.randrange(9), first_offset=3
                    )
                    for _ in range(rng.randrange(3))
                )
            if version >= 12:
                if rng.random() < 0.3:
                    part["diverging_epoch"] = make_message(
                        resp.EpochEndOffset, epoch=4, end_offset=99
                    )
                if rng.random() < 0.3:
                    part["current_leader"] = make_message(
                        resp.LeaderIdAndEpoch, leader_id=2, leader_epoch=9
                    )
                if rng.random() < 0.2:
                    part["snapshot_id"] = make_message(resp.SnapshotId, end_offset=10, epoch=3)
            parts.append(make_message(resp.PartitionData, **part))
        if throttle:
            continue
        out_topics.append(
            make_message(
                resp.FetchableTopicResponse, topic=t, topic_id=topic_id, partitions=tuple(parts)
            )
        )
    request = make_message(req.FetchRequest, topics=tuple(topics), **values)
    response_values: dict[str, Any] = {
        "throttle_time": datetime.timedelta(milliseconds=throttle),
        "error_code": ErrorCode.none,
        "session_id": values["session_id"],
        "responses": tuple(out_topics),
    }
    if version >= 16 and rng.random() < 0.4:
        response_values["node_endpoints"] = tuple(
            make_message(resp.NodeEndpoint, node_id=n, host=h, port=9092, rack=r)
            for n, h, r in ((1, "kafka-1.example", "rack-a"), (2, "::1", None))[: rng.randint(1, 2)]
        )
    return request, make_message(resp.FetchResponse, **response_values)


def _other(api_key: int, version: int) -> tuple[Any, Any]:
    req = message_module(api_key, version, "request")
    resp = message_module(api_key, version, "response")
    request_class = next(
        getattr(req, n) for n in dir(req) if n.endswith("Request") and n != "RequestHeader"
    )
    response_class = next(
        getattr(resp, n) for n in dir(resp) if n.endswith("Response") and n != "ResponseHeader"
    )
    return make_message(request_class), make_message(response_class)


def _strip(document: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k not in keys}


def _connection(rng: random.Random) -> str:
    local, remote = rng.choice(
        (("10.0.0.5", "10.0.3.17"), ("fe80:0:0:0:a00:27ff:fe4e:66a1", "2001:db8:0:0:0:0:0:1"))
    )
    index = rng.randrange(40)
    if rng.random() < 0.5:  # 4.0: with the processor id
        return f"{local}:9093-{remote}:{rng.randrange(30000, 60000)}-{rng.randrange(3)}-{index}"
    return f"{local}:9093-{remote}:{rng.randrange(30000, 60000)}-{index}"


def _plan(rng: random.Random, spec: LogSpec) -> list[tuple[int, int, bool]]:
    """(api key, version, plain) of every line: every Produce and Fetch version at least
    once as a plain line (a client's, not throttled, with its bodies), then any."""
    plan = [(0, v, True) for v in PRODUCE_VERSIONS] + [(1, v, True) for v in FETCH_VERSIONS]
    plan += [(k, v, False) for k, v in (*_OTHER, *_INTER_BROKER)]
    while len(plan) < spec.requests:
        r = rng.random()
        if r < 0.4:
            plan.append((0, rng.choice(PRODUCE_VERSIONS[3:]), False))
        elif r < 0.8:
            plan.append((1, rng.choice(FETCH_VERSIONS[4:]), False))
        elif r < 0.97:
            plan.append((*rng.choice(_OTHER), False))
        else:
            plan.append((*rng.choice(_INTER_BROKER), False))
    rng.shuffle(plan)
    return plan


def generate(spec: LogSpec) -> tuple[list[LoggedRequest], dict[str, list[str]]]:
    """The logged requests and, per broker, its lines in file order (TRACE lines
    included): deterministic for a ``spec``."""
    rng = random.Random(spec.seed)
    logged: list[LoggedRequest] = []
    lines: dict[str, list[str]] = {f"broker-{b}": [] for b in range(spec.brokers)}
    clients = [f"client-{i}" for i in range(spec.clients)] + ["", "\u00e9t\u00e9-app"]
    now = {b: spec.start_ms for b in lines}
    for correlation, (key, version, plain) in enumerate(_plan(rng, spec)):
        broker = f"broker-{rng.randrange(spec.brokers)}"
        now[broker] += rng.randrange(0, 40)
        record_ms = now[broker]
        client = rng.choice(clients)
        user = rng.choice(USERS)
        throttle = 0 if plain else rng.choice((0, 0, 0, 0, 120, 1_500))
        acks: int | None = None
        reason: str | None = None
        forwarded = not plain and rng.random() < 0.02
        request_text: Any = None
        response_text: Any = None
        if key == 0:
            acks = rng.choice((-1, -1, 1, 0))
            request, response = _produce(rng, version, acks)
            if acks == 0:
                response = None
                response_text = rng.choice(("", "null"))
            if not plain and rng.random() < 0.03:  # logging switched on in flight
                request = None
                request_text = rng.choice(("", "null"))
                reason = requestlog.NO_BODY
        elif key == 1:
            follower = not plain and rng.random() < 0.15
            request, response = _fetch(rng, version, follower, throttle)
            if follower:
                reason = requestlog.FOLLOWER
                throttle = 0
        else:
            request, response = _other(key, version)
            if rng.random() < 0.1:
                request, request_text = None, rng.choice(("", "null"))
            if (key, version) in _INTER_BROKER:
                reason = requestlog.EXEMPT
        if forwarded:
            reason = requestlog.FORWARDED
        header_version = 2 if (key == 0 and version >= 9) or (key == 1 and version >= 12) else 1
        header_module = importlib.import_module(
            f"kio.schema.request_header.v{header_version}.header"
        )
        header = header_module.RequestHeader(
            request_api_key=key,
            request_api_version=version,
            correlation_id=correlation,
            client_id=client,
        )
        header_json = kafka_json(header)
        header_json["requestApiKeyName"] = API_NAMES[key]
        deprecated = version in DEPRECATED.get(key, ())
        if deprecated:
            header_json["requestApiVersionDeprecated"] = True
        drop_request, drop_response, drop_partition = legacy_fields(key, version)
        if request is not None:
            request_text = _strip(kafka_json(request), drop_request)
        if response is not None:
            response_text = _strip(kafka_json(response), drop_response)
            if drop_partition:
                for topic in response_text["responses"]:
                    topic["partitions"] = [_strip(p, drop_partition) for p in topic["partitions"]]
        micros = {
            name: rng.randrange(0, 3_000)
            for name in ("queue", "local", "remote", "responseQueue", "send")
        }
        if rng.random() < 0.01:
            micros["remote"] = 12_345_678_000  # 3.4 hours: printed 1.2345678E7
        times = {name: us / 1000 for name, us in micros.items()}
        times["total"] = sum(times.values())
        after = micros["responseQueue"] + micros["send"]
        end_ms = record_ms + math.ceil(after / 1000)
        extra: dict[str, Any] = {}
        if key == 0 and rng.random() < 0.3:
            extra["temporaryMemoryBytes"] = rng.randrange(1, 10**6)
        if rng.random() < 0.05:
            extra["messageConversionsTime"] = logged_double(0.25)
        document = _document(
            header_json,
            request_text,
            response_text,
            times,
            throttle,
            _connection(rng),
            f"User:{user}",
            forwarded,
            extra,
        )
        level = "INFO" if deprecated else "DEBUG"
        text = line(end_ms, level, document, spec.timezone)
        if spec.trace and rng.random() < 0.35:
            lines[broker].append(_trace(rng, header_json, "10.0.0.5:9093-10.0.3.17:40000-0"))
        lines[broker].append(text)
        logged.append(
            LoggedRequest(
                broker=broker,
                end_ms=end_ms,
                record_ms=record_ms,
                user=user,
                client_id=client,
                api=API_NAMES[key].lower(),
                api_key=key,
                api_version=version,
                correlation_id=correlation,
                acks=acks,
                throttle_ms=throttle,
                thread_ns=None if acks == 0 else micros["local"] * 1000,
                send_us=micros["send"],
                reason=reason,
                header=header,
                request=request,
                response=response,
                line=text,
                level=level,
            )
        )
    return logged, lines


def write(spec: LogSpec, folder: str | Path) -> list[LoggedRequest]:
    """Write ``folder/broker-N/`` with each broker's lines in three files, as Kafka rolls
    them: ``kafka-request.log.2024-06-03-00.gz`` (compressed), ``...-01`` and the current
    ``kafka-request.log``. Returns the logged requests."""
    logged, lines = generate(spec)
    for broker, text in lines.items():
        target = Path(folder) / broker
        target.mkdir(parents=True, exist_ok=True)
        third = max(len(text) // 3, 1)
        chunks = (text[:third], text[third : 2 * third], text[2 * third :])
        names = (
            "kafka-request.log.2024-06-03-00.gz",
            "kafka-request.log.2024-06-03-01",
            "kafka-request.log",
        )
        for name, chunk in zip(names, chunks, strict=True):
            data = "".join(f"{t}\n" for t in chunk).encode()
            if name.endswith(".gz"):
                (target / name).write_bytes(gzip.compress(data, mtime=0))
            else:
                (target / name).write_bytes(data)
    return logged


def write_repeated(spec: LogSpec, folder: str | Path, lines: int, files_per_broker: int = 1) -> int:
    """Write ``lines`` lines (about; for benchmarks) into ``folder/broker-N/`` by
    repeating the lines of :func:`generate` with new times and correlation ids; returns
    the lines written. Plain text, one file per broker unless ``files_per_broker``."""
    _, per_broker = generate(spec)
    templates = [t for text in per_broker.values() for t in text]
    split = []
    for t in templates:
        if "Completed request:" in t and '"correlationId":' in t:
            rest = t.split("] ", 1)[1]
            before, after = rest.split('"correlationId":', 1)
            after = after.split(",", 1)[1]
            split.append((before + '"correlationId":', "," + after))
        else:
            split.append((t.split("] ", 1)[1], ""))
    written = 0
    brokers = [f"broker-{b}" for b in range(spec.brokers)]
    per_file = max(lines // (len(brokers) * files_per_broker), 1)
    ms = spec.start_ms
    for broker in brokers:
        target = Path(folder) / broker
        target.mkdir(parents=True, exist_ok=True)
        for f in range(files_per_broker):
            name = (
                "kafka-request.log" if f == files_per_broker - 1 else f"kafka-request.log.{f:04d}"
            )
            with (target / name).open("w", encoding="utf-8") as out:
                chunk: list[str] = []
                for i in range(per_file):
                    before, after = split[(written + i) % len(split)]
                    ms += 1 if i % 4 == 0 else 0
                    stamp = _timestamp(ms, "UTC")
                    if after:
                        chunk.append(f"[{stamp}] {before}{written + i}{after}\n")
                    else:
                        chunk.append(f"[{stamp}] {before}\n")
                    if len(chunk) >= 10_000:
                        out.write("".join(chunk))
                        chunk.clear()
                out.write("".join(chunk))
            written += per_file
    return written


def rows(logged: Sequence[LoggedRequest]) -> list[LoggedRequest]:
    """The logged requests a reader turns into rows (those with no skip reason)."""
    return [r for r in logged if r.reason is None]
