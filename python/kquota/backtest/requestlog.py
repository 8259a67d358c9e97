"""Kafka's request log (``kafka.request.logger``) as back-test traffic.

A broker with ``kafka.request.logger`` at DEBUG writes one ``Completed request:`` line per
request into ``kafka-request.log`` (rolled hourly, often gzip-compressed afterwards). This
module reads those files into kquota's traffic schema (:mod:`kquota.backtest.synthetic`),
one row per usable line, with Spark's own JVM functions only (text source, one anchored
``regexp_extract`` on the head of the line, ``from_json`` with a schema of just the fields
needed, higher-order functions for the byte counts): no Python runs per line.

What a row holds (``../shared/docs/kafka-request-log.md``, section 5):

* ``ts_ms``: when Kafka records quota usage, ``end - responseQueueTimeMs - sendTimeMs``
  rounded down to the millisecond, the end being the line's timestamp read in
  :attr:`LogOptions.timezone`;
* ``broker`` (from the file's path or :attr:`LogOptions.broker_id`), ``user`` (the
  principal's name), ``client_id``, ``api`` (``produce``, ``fetch``, ``metadata``...);
* ``bytes``: for Produce the request size Kafka records (header + body, rebuilt from the
  logged fields with the message schema of the logged version); for a consumer Fetch that
  was not throttled, 4 + the response body size; 0 for a throttled Fetch (Kafka
  un-records it and sends an empty response) and for every other API;
* ``thread_time_ns``: handler-thread time (``localTimeMs``), null for Produce with
  ``acks=0`` (Kafka records it on the exempt sensor, not the request quota);
* extra columns carried through the back-test: :data:`ACKS`, :data:`KAFKA_THROTTLE`
  (what Kafka applied), :data:`API_VERSION`, :data:`CORRELATION_ID`;
* when the log has CreateTopics, CreatePartitions or DeleteTopics lines,
  :data:`~kquota.backtest.kernel.PARTITIONS`, :data:`~kquota.backtest.kernel.STRICT` and
  :data:`~kquota.backtest.kernel.TOPIC_PARTITIONS` (:func:`mutation_partitions`: topic
  partition counts tracked over the log in time order, the total and each topic's in request
  order; a request with a topic of unknown count has neither, counted in
  :attr:`LogSummary.unknown_counts`).

Lines that give no row are counted by reason (:data:`REASONS`) with up to five examples
each: lines of other loggers and ``RequestChannel$`` TRACE lines, the pre-2.8 text format,
truncated or corrupt JSON, invalid UTF-8, and the requests Kafka keeps outside client
quotas (follower fetches, lines forwarded to the controller, inter-broker APIs answered
on the exempt path). They never fail a run; a non-empty file with no usable line does.

Spark-free helpers (:func:`log_files`, :func:`broker_of`, :func:`is_request_log`,
:func:`uvarint_size`...) are plain functions; the Spark steps are :func:`read`,
:func:`import_log` and :func:`describe`.
"""

from __future__ import annotations

import glob
import re
import time
import urllib.parse
import uuid
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from kquota.backtest.kernel import (
    API,
    BROKER,
    BYTES,
    CLIENT,
    PARTITIONS,
    SEQ_COLUMNS,
    STRICT,
    THREAD,
    TOPIC_PARTITIONS,
    TS,
    USER,
)
from kquota.exceptions import OutputError, TrafficError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "ACKS",
    "API_VERSION",
    "CORRELATION_ID",
    "DEFAULT_BROKER_ID_FROM",
    "DEFAULT_NUM_PARTITIONS",
    "EXEMPT_API_KEYS",
    "FORMAT",
    "KAFKA_THROTTLE",
    "MAX_LINE_BYTES",
    "REASONS",
    "STRICT_SINCE",
    "UNKNOWN_COUNT",
    "Description",
    "LogFiles",
    "LogOptions",
    "LogSummary",
    "broker_of",
    "describe",
    "import_log",
    "is_request_log",
    "log_files",
    "mutation_partitions",
    "read",
    "uvarint_size",
]

FORMAT: Final = "kafka-request-log"
"""The ``--traffic-format`` of Kafka's request log."""
FILE_PREFIX: Final = "kafka-request.log"
"""What the files of a folder must be called to be read: ``kafka-request.log`` and its
rolled copies (``kafka-request.log.2024-06-03-17``, ``...-17.gz``)."""
DEFAULT_BROKER_ID_FROM: Final = r"([^/]+)/[^/]+$"
"""The broker of a file, by default: the name of the folder holding it (one folder per
broker, e.g. ``logs/broker-1/kafka-request.log``)."""
MAX_LINE_BYTES: Final = 16 * 1024 * 1024
"""Longer lines are not read: Hadoop's line reader (under Spark's text source) keeps at
most this much of a line and drops longer ones, so a corrupt file without newlines costs
bounded memory (a 100 MB line otherwise needs several copies of itself on one executor:
out of memory at Spark's default 1 GB). A Produce or Fetch line of thousands of partitions
is a few MB. Dropped lines are counted as :data:`TOO_LONG` from the bytes of plain (not
``.gz``) files that no line read accounts for: at least one line when that is
``>= MAX_LINE_BYTES``; in ``.gz`` files they go uncounted."""
EXAMPLES: Final = 5
"""Examples kept per reason."""
EXAMPLE_CHARS: Final = 300
"""Characters of a line kept as an example."""

ACKS: Final = "acks"
"""Produce ``acks`` (-1, 0, 1); null for other APIs."""
KAFKA_THROTTLE: Final = "kafka_throttle_ms"
"""The throttle the broker applied to the request (``throttleTimeMs``)."""
API_VERSION: Final = "api_version"
CORRELATION_ID: Final = "correlation_id"
EXTRA_COLUMNS: Final = (ACKS, KAFKA_THROTTLE, API_VERSION, CORRELATION_ID)
COLUMNS: Final = (TS, BROKER, USER, CLIENT, API, BYTES, THREAD, *EXTRA_COLUMNS)
"""The columns of imported traffic, in order."""

PRODUCE: Final = 0
FETCH: Final = 1
METADATA: Final = 3
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
CREATE_PARTITIONS: Final = 37
STRICT_SINCE: Final = {CREATE_TOPICS: 6, CREATE_PARTITIONS: 3, DELETE_TOPICS: 5}
"""The controller-mutation APIs and the first version Kafka enforces strictly."""
DEFAULT_NUM_PARTITIONS: Final = 1
"""Kafka's ``num.partitions``: what a CreateTopics topic with ``numPartitions`` -1 and no
assignments gets (:attr:`LogOptions.num_partitions`)."""
MAX_PRODUCE_VERSION: Final = 13
MAX_FETCH_VERSION: Final = 18
EXEMPT_API_KEYS: Final = {
    4: "LeaderAndIsr",
    5: "StopReplica",
    6: "UpdateMetadata",
    7: "ControlledShutdown",
    27: "WriteTxnMarkers",
    56: "AlterPartition",
}
"""Inter-broker APIs Kafka answers on the exempt path: outside every client quota."""

UNKNOWN_COUNT: Final = (
    "partition count of a deleted or grown topic unknown (no earlier CreateTopics, "
    "CreatePartitions or Metadata line for it)"
)
"""Why a mutation request has no :data:`PARTITIONS` (it still gives a row)."""

# Why a line gives no row, in the order they are tested (the first that applies wins).
NOT_UTF8: Final = "not UTF-8"
TOO_LONG: Final = "line over 16 MiB (not read; counted from missing bytes)"
TRACE_LINE: Final = "RequestChannel$ TRACE line"
OTHER_LINE: Final = "not a Completed request line"
OLD_FORMAT: Final = "pre-2.8 text format (unsupported)"
CORRUPT: Final = "truncated or corrupt JSON"
BAD_TIME: Final = "invalid timestamp"
FORWARDED: Final = "forwarded to the controller (isForwarded)"
EXEMPT: Final = "inter-broker API (exempt from quotas)"
FOLLOWER: Final = "follower fetch (outside client quotas)"
NO_BODY: Final = "produce or fetch without its request body"
UNKNOWN_VERSION: Final = "produce or fetch version not known"
REASONS: Final = (
    NOT_UTF8,
    TOO_LONG,
    TRACE_LINE,
    OTHER_LINE,
    OLD_FORMAT,
    CORRUPT,
    BAD_TIME,
    FORWARDED,
    EXEMPT,
    FOLLOWER,
    NO_BODY,
    UNKNOWN_VERSION,
)
"""Every reason a line is skipped for, in the order they are tested."""

_HEAD: Final = (
    r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3})\] [A-Z]+ Completed request:(?:\{|$|[^{])"
)
_HEAD_CHARS: Final = 80
_SUFFIX: Final = " (kafka.request.logger)"
_TRACE_SUFFIX: Final = "(kafka.network.RequestChannel$)"
_OFFSET: Final = re.compile(r"^[+-]\d{2}:\d{2}$")
_LOCAL_SCHEME: Final = re.compile(r"^file:/+")

# The JSON fields read: everything else in a line is skipped by the parser.
_PRODUCE_REQUEST: Final = (
    "acks int, transactionalId string, topicData array<struct<name string, topicId string, "
    "partitionData array<struct<index int, recordsSizeInBytes long>>>>"
)
# CreateTopics (name, numPartitions, assignments), CreatePartitions (name, count), DeleteTopics
# (v6+ topics[].name, before topicNames): the fields of the three share one struct
_MUTATION_REQUEST: Final = (
    "topics array<struct<name string, numPartitions int, count int, "
    "assignments array<struct<brokerIds array<int>>>>>, topicNames array<string>"
)
_METADATA_RESPONSE: Final = (
    "topics array<struct<name string, errorCode int, partitions array<struct<partitionIndex int>>>>"
)
_FETCH_REQUEST: Final = "replicaId int, replicaState struct<replicaId int>"
_FETCH_RESPONSE: Final = (
    "responses array<struct<topic string, topicId string, partitions array<struct<"
    "partitionIndex int, abortedTransactions array<struct<producerId long>>, "
    "recordsSizeInBytes long, divergingEpoch struct<epoch int>, "
    "currentLeader struct<leaderId int>, snapshotId struct<epoch int>>>>>, "
    "nodeEndpoints array<struct<nodeId int, host string, rack string>>"
)
LINE_SCHEMA: Final = (
    "isForwarded boolean, requestHeader struct<requestApiKey int, requestApiVersion int, "
    "correlationId int, clientId string, requestApiKeyName string>, "
    f"request struct<{_PRODUCE_REQUEST}, {_FETCH_REQUEST}, {_MUTATION_REQUEST}>, "
    f"response struct<{_FETCH_RESPONSE}, {_METADATA_RESPONSE}>, "
    "localTimeMs double, throttleTimeMs long, responseQueueTimeMs double, sendTimeMs double, "
    "principal string"
)
"""The ``from_json`` schema: only what a row needs (``""``/``null`` bodies read as null)."""


# -- options and files (no Spark) --------------------------------------------------------------


@dataclass(frozen=True)
class LogOptions:
    """How to read request-log files: where the broker id comes from, and the time zone."""

    broker_id_from: str = DEFAULT_BROKER_ID_FROM
    broker_id: int | None = None
    timezone: str = "UTC"
    num_partitions: int = DEFAULT_NUM_PARTITIONS
    """The brokers' ``num.partitions``: partitions of a created topic that asks for -1."""

    def __post_init__(self) -> None:
        if isinstance(self.num_partitions, bool) or not (
            isinstance(self.num_partitions, int) and self.num_partitions >= 1
        ):
            raise TrafficError(
                f"invalid --num-partitions {self.num_partitions!r}: expected a number >= 1 "
                "(the brokers' num.partitions)"
            )
        if self.broker_id is not None and self.broker_id < 0:
            raise TrafficError(f"invalid --broker-id {self.broker_id!r}: expected a number >= 0")
        try:
            pattern = re.compile(self.broker_id_from)
        except re.error as exc:
            raise TrafficError(
                f"invalid --broker-id-from {self.broker_id_from!r}: {exc} (expected a regular "
                "expression whose first group, or whole match, is the broker id)"
            ) from None
        if pattern.groups > 1 and self.broker_id is None:
            raise TrafficError(
                f"invalid --broker-id-from {self.broker_id_from!r}: expected at most one group"
            )
        check_timezone(self.timezone)


def check_timezone(zone: str) -> str:
    """``zone`` if it is an IANA time zone (``Europe/Paris``, ``UTC``) or an offset
    (``+02:00``), else :class:`~kquota.exceptions.TrafficError` naming it."""
    if _OFFSET.match(zone):
        return zone
    try:
        if zone and "\0" not in zone:
            zoneinfo.ZoneInfo(zone)
            return zone
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        pass
    raise TrafficError(
        f"invalid --log-timezone {zone!r}: expected a time zone such as UTC, Europe/Paris or +02:00"
    )


@dataclass(frozen=True)
class LogFiles:
    """The files a path names: those to read, and those skipped because they are empty."""

    path: str
    files: tuple[str, ...]
    empty: tuple[str, ...] = ()
    plain_bytes: int | None = None
    """The size of the files that are not ``.gz`` (None for a remote path)."""


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _has_magic(path: str) -> bool:
    return glob.has_magic(path)


def log_files(path: str) -> LogFiles:
    """The request-log files ``path`` names: a file, a folder (every ``kafka-request.log*``
    file under it, rolled and ``.gz`` ones included) or a glob. Empty files are listed apart.

    A remote path (``s3://...``) is left to Spark. Raises
    :class:`~kquota.exceptions.TrafficError` naming ``path`` when it names nothing to read.
    """
    if _is_remote(path):
        return LogFiles(path, (path,))
    local = path.removeprefix("file://")
    if _has_magic(local):
        found = sorted(p for p in glob.glob(local, recursive=True) if Path(p).is_file())
        if not found:
            raise TrafficError(f"traffic {path!r} matches no file: expected kafka-request.log*")
    elif Path(local).is_dir():
        found = sorted(
            str(p)
            for p in Path(local).rglob(f"{FILE_PREFIX}*")
            if p.is_file() and not p.name.endswith(".crc")
        )
        if not found:
            raise TrafficError(
                f"traffic {path!r} holds no {FILE_PREFIX}* file: expected Kafka's request log "
                "(one folder per broker, or --traffic-format parquet|csv)"
            )
    elif Path(local).is_file():
        found = [local]
    else:
        raise TrafficError(f"traffic {path!r} does not exist: expected a request-log path")
    files: list[str] = []
    empty: list[str] = []
    for name in found:
        try:
            size = Path(name).stat().st_size
            with open(name, "rb") as handle:  # readable
                handle.read(1)
        except OSError as exc:
            raise TrafficError(f"cannot read traffic file {name!r}: {exc.strerror}") from None
        (files if size else empty).append(str(Path(name).absolute()))
    if not files:
        raise TrafficError(
            f"traffic {path!r} has no line to read: all {len(empty):,} file(s) are empty"
        )
    plain = sum(Path(f).stat().st_size for f in files if not f.endswith(".gz"))
    return LogFiles(path, tuple(files), tuple(empty), plain)


def is_request_log(path: str) -> bool:
    """Whether ``kquota backtest --format auto`` reads ``path`` as Kafka's request log: a
    ``kafka-request.log*`` name, a glob, a folder holding such files and no Parquet or
    CSV, or a file whose first line starts like a log4j line (``[2024-06-03 ...``)."""
    if _is_remote(path):
        return Path(path).name.startswith(FILE_PREFIX)
    local = Path(path.removeprefix("file://"))
    if local.name.startswith(FILE_PREFIX) or _has_magic(str(local)):
        return True
    try:
        if local.is_dir():
            names = [p.name for p in local.rglob("*") if p.is_file()]
            return any(n.startswith(FILE_PREFIX) for n in names) and not any(
                n.endswith((".parquet", ".csv", ".csv.gz")) for n in names
            )
        if local.is_file() and not local.name.endswith((".parquet", ".pq", ".csv", ".gz")):
            with local.open("rb") as handle:
                return re.match(rb"\[\d{4}-\d\d-\d\d \d\d:", handle.read(32)) is not None
    except OSError:
        return False
    return False


def broker_of(file: str, options: LogOptions) -> str:
    """The broker a file's lines came from: :attr:`LogOptions.broker_id`, else the first
    group (or the whole match) of :attr:`LogOptions.broker_id_from` searched in its path."""
    if options.broker_id is not None:
        return str(options.broker_id)
    local = urllib.parse.unquote(_LOCAL_SCHEME.sub("/", file))
    found = re.search(options.broker_id_from, local)
    if found is None or not (found.group(1) if found.re.groups else found.group(0)):
        raise TrafficError(
            f"no broker id in traffic file {local!r}: --broker-id-from "
            f"{options.broker_id_from!r} does not match its path (give --broker-id N for one "
            "broker's files, or a regular expression that finds it)"
        )
    return found.group(1) if found.re.groups else found.group(0)


def uvarint_size(n: int) -> int:
    """Bytes of ``n`` as Kafka's unsigned varint (compact lengths: ``n`` = length + 1)."""
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


# -- summaries ----------------------------------------------------------------------------------


@dataclass
class LogSummary:
    """What reading the log found: lines, rows, and lines skipped by reason."""

    path: str
    files: int
    empty_files: tuple[str, ...]
    lines: int
    rows: int
    skipped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0
    mutations: int = 0
    """CreateTopics, CreatePartitions and DeleteTopics requests read."""
    unknown_counts: int = 0
    """Of those, requests whose partition count is unknown (a DeleteTopics or CreatePartitions
    of a topic no earlier CreateTopics, CreatePartitions or Metadata line gave the count of):
    imported without :data:`PARTITIONS`, so not replayed on the mutation quota."""
    unknown_topics: list[str] = field(default_factory=list)
    """Up to :data:`EXAMPLES` of the topics whose count was unknown."""

    @property
    def lines_skipped(self) -> int:
        return sum(self.skipped.values())

    def notes(self) -> list[str]:
        """One line per skip reason with its count and first example (for the report)."""
        out = [
            f"request log {self.path}: {self.lines:,} lines in {self.files:,} file(s), "
            f"{self.rows:,} requests, {self.lines_skipped:,} lines skipped"
            + (f", {len(self.empty_files):,} empty file(s)" if self.empty_files else "")
        ]
        for reason, count in self.skipped.items():
            example = self.examples.get(reason, [""])[0]
            out.append(f"skipped {count:,} line(s): {reason}, e.g. {example!r}")
        if self.unknown_counts:
            topics = ", ".join(repr(t) for t in self.unknown_topics)
            out.append(
                f"{self.unknown_counts:,} of {self.mutations:,} mutation request(s) not replayed "
                f"on the controller-mutation quota: {UNKNOWN_COUNT} (e.g. {topics})"
            )
        return out


@dataclass
class Description:
    """``kquota traffic describe``: what a request log (or traffic table) holds."""

    summary: LogSummary
    start_ms: int | None
    end_ms: int | None
    brokers: list[str]
    clients: int
    users: int
    apis: dict[str, tuple[int, int]]
    """Per API: (requests, bytes)."""

    def text(self) -> str:
        """The description as the terminal shows it."""
        s = self.summary
        span = "none"
        if self.start_ms is not None and self.end_ms is not None:
            span = (
                f"{_utc(self.start_ms)} to {_utc(self.end_ms)} "
                f"({(self.end_ms - self.start_ms) / 1000:,.3f} s)"
            )
        lines = [
            f"traffic: {s.path}",
            f"files: {s.files:,} read, {len(s.empty_files):,} empty",
            f"lines: {s.lines:,} ({s.rows:,} requests, {s.lines_skipped:,} skipped)",
            f"span: {span}",
            f"brokers: {len(self.brokers):,} ({', '.join(self.brokers[:10])}"
            + (", ..." if len(self.brokers) > 10 else "")
            + ")",
            f"clients: {self.clients:,}",
            f"users: {self.users:,}",
            "APIs:",
        ]
        total = sum(b for _, b in self.apis.values())
        lines += [
            f"  {api:<24} {n:>14,} requests {b:>18,} bytes" for api, (n, b) in self.apis.items()
        ]
        lines.append(f"bytes: {total:,}")
        if s.skipped:
            lines.append("lines skipped:")
            for reason, count in s.skipped.items():
                lines.append(f"  {count:>14,}  {reason}")
                lines += [f"                  e.g. {e!r}" for e in s.examples.get(reason, [])]
        return "\n".join(lines)


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


# -- Spark ----------------------------------------------------------------------------------


def _uv(n: Column) -> Column:
    """:func:`uvarint_size` as a Spark column."""
    from pyspark.sql import functions as F

    return (
        F.when(n < 1 << 7, 1)
        .when(n < 1 << 14, 2)
        .when(n < 1 << 21, 3)
        .when(n < 1 << 28, 4)
        .otherwise(5)
    ).cast("long")


def _sum(array: Column, size: Callable[[Column], Column]) -> Column:
    """The sum of ``size(element)`` over an array (0 for a null array)."""
    from pyspark.sql import functions as F

    return F.coalesce(
        F.aggregate(array, F.lit(0).cast("long"), lambda acc, x: acc + size(x)), F.lit(0)
    ).cast("long")


def _count(array: Column) -> Column:
    from pyspark.sql import functions as F

    return F.coalesce(F.size(array), F.lit(0)).cast("long")


def _string_size(text: Column, flexible: Column | bool) -> Column:
    """A nullable string: int16 length (-1 for null) or compact (uvarint length + 1)."""
    from pyspark.sql import functions as F

    n = F.coalesce(F.octet_length(text).cast("long"), F.lit(0))
    compact = F.when(text.isNull(), F.lit(1)).otherwise(_uv(n + 1) + n)
    return F.when(F.lit(flexible), compact).otherwise(2 + n).cast("long")


def _produce_request_size(header: Column, request: Column) -> Column:
    """Kafka's ``request.sizeInBytes`` of a Produce line: header + body (doc section 5)."""
    from pyspark.sql import functions as F

    version = header["requestApiVersion"]
    flexible = version >= 9
    client = F.coalesce(F.octet_length(header["clientId"]).cast("long"), F.lit(0))
    head = F.when(flexible, 11 + client).otherwise(10 + client)

    def partition(p: Column) -> Column:
        r = p["recordsSizeInBytes"]
        records = F.when(flexible, F.when(r.isNull(), 1).otherwise(_uv(r + 1) + r)).otherwise(
            4 + F.coalesce(r, F.lit(0))
        )
        return 4 + records + F.when(flexible, 1).otherwise(0)

    def topic(t: Column) -> Column:
        parts = t["partitionData"]
        name = F.when(version >= 13, F.lit(16)).otherwise(_string_size(t["name"], flexible))
        count = F.when(flexible, _uv(_count(parts) + 1)).otherwise(4)
        return name + count + _sum(parts, partition) + F.when(flexible, 1).otherwise(0)

    topics = request["topicData"]
    txn = F.when(version >= 3, _string_size(request["transactionalId"], flexible)).otherwise(0)
    count = F.when(flexible, _uv(_count(topics) + 1)).otherwise(4)
    body = txn + 2 + 4 + count + _sum(topics, topic) + F.when(flexible, 1).otherwise(0)
    return (head + body).cast("long")


def _fetch_response_size(version: Column, response: Column) -> Column:
    """4 + the Fetch response body size, as ``FetchResponse.sizeOf`` (doc section 5)."""
    from pyspark.sql import functions as F

    flexible = version >= 12

    def flex(value: int) -> Column:
        return F.when(flexible, value).otherwise(0)

    def tagged(struct: Column, size: int) -> Column:
        # tag (1 byte) + size (1 byte) + the struct's fields and its own empty tag buffer
        return F.when(struct.isNull(), 0).otherwise(2 + size + 1)

    def partition(p: Column) -> Column:
        aborted = p["abortedTransactions"]
        n = _count(aborted)
        aborted_size = F.when(version < 4, 0).otherwise(
            F.when(flexible, F.when(aborted.isNull(), 1).otherwise(_uv(n + 1) + 17 * n)).otherwise(
                4 + 16 * n
            )
        )
        r = p["recordsSizeInBytes"]
        records = F.when(flexible, F.when(r.isNull(), 1).otherwise(_uv(r + 1) + r)).otherwise(
            4 + F.coalesce(r, F.lit(0))
        )
        tags = (
            tagged(p["divergingEpoch"], 12)
            + tagged(p["currentLeader"], 8)
            + tagged(p["snapshotId"], 12)
        )
        count = (
            F.when(p["divergingEpoch"].isNotNull(), 1).otherwise(0)
            + F.when(p["currentLeader"].isNotNull(), 1).otherwise(0)
            + F.when(p["snapshotId"].isNotNull(), 1).otherwise(0)
        )
        return (
            4
            + 2
            + 8
            + F.when(version >= 4, 8).otherwise(0)
            + F.when(version >= 5, 8).otherwise(0)
            + aborted_size
            + F.when(version >= 11, 4).otherwise(0)
            + records
            + F.when(flexible, _uv(count) + tags).otherwise(0)
        )

    def topic(t: Column) -> Column:
        parts = t["partitions"]
        name = F.when(version >= 13, F.lit(16)).otherwise(_string_size(t["topic"], flexible))
        count = F.when(flexible, _uv(_count(parts) + 1)).otherwise(4)
        return name + count + _sum(parts, partition) + flex(1)

    def endpoint(e: Column) -> Column:
        return 4 + _string_size(e["host"], True) + 4 + _string_size(e["rack"], True) + 1

    topics = response["responses"]
    nodes = response["nodeEndpoints"]
    node_size = _uv(_count(nodes) + 1) + _sum(nodes, endpoint)
    top_tags = F.when(nodes.isNull(), 1).otherwise(1 + 1 + _uv(node_size) + node_size)
    body = (
        F.when(version >= 1, 4).otherwise(0)
        + F.when(version >= 7, 2 + 4).otherwise(0)
        + F.when(flexible, _uv(_count(topics) + 1)).otherwise(4)
        + _sum(topics, topic)
        + F.when(flexible, top_tags).otherwise(0)
    )
    return (4 + body).cast("long")


def _file_key(name: str) -> str:
    """``inputFiles()`` says ``file:///x`` where ``_metadata.file_path`` says ``file:/x``."""
    return _LOCAL_SCHEME.sub("file:/", name)


@dataclass
class _Lines:
    """Every line of the input with its row (``_kq_reason`` null) or why it has none."""

    frame: DataFrame
    files: LogFiles
    read: tuple[str, ...]


_REASON: Final = "_kq_reason"
_EXAMPLE: Final = "_kq_example"
_FILE: Final = "_kq_file"
_PLAIN: Final = "_kq_plain_bytes"
_TOPICS: Final = "_kq_topics"


def read(spark: SparkSession, path: str, options: LogOptions | None = None) -> _Lines:
    """Every line of the request-log files ``path`` names, classified: the traffic columns
    (:data:`COLUMNS`), :data:`~kquota.backtest.kernel.SEQ_COLUMNS`, ``_kq_reason`` (null for
    a row, else one of :data:`REASONS`), ``_kq_example`` and ``_kq_file``. Lazy: nothing is
    read until an action. Raises :class:`~kquota.exceptions.TrafficError` naming a path
    that cannot be read or a file whose broker id cannot be found."""
    from pyspark.sql import functions as F

    from kquota.backtest.session import spark_errors, spark_message

    options = options or LogOptions()
    files = log_files(path)
    try:
        text = spark.read.option(
            "mapreduce.input.linerecordreader.line.maxlength", str(MAX_LINE_BYTES)
        ).text(list(files.files))
        found = sorted(text.inputFiles())
    except spark_errors() as exc:
        raise TrafficError(f"cannot read traffic {path!r}: {spark_message(exc)}") from None
    if not found:
        raise TrafficError(f"traffic {path!r} has no file to read")
    brokers = {_file_key(name): broker_of(name, options) for name in found}
    ranks = {_file_key(name): i for i, name in enumerate(found)}

    def lookup(mapping: dict[str, Any], key: Column) -> Column:
        literal = F.create_map(*[x for k, v in mapping.items() for x in (F.lit(k), F.lit(v))])
        return literal[key]

    # 1. the line, its file and position, and its head (one regex on its first characters)
    value = F.col("value")
    file_key = F.regexp_replace(F.col("_metadata.file_path"), _LOCAL_SCHEME.pattern, "file:/")
    staged = text.select(
        value,
        file_key.alias(_FILE),
        (
            lookup(ranks, file_key).cast("long") * F.lit(1 << 44)
            + F.col("_metadata.file_block_start")
        ).alias(SEQ_COLUMNS[0]),
        F.monotonically_increasing_id().alias(SEQ_COLUMNS[1]),
        F.octet_length(value).alias("_kq_size"),
        F.is_valid_utf8(value).alias("_kq_utf8"),
        F.regexp_extract(F.substring(value, 1, _HEAD_CHARS), _HEAD, 0).alias("_kq_head"),
    )
    # 2. the JSON object (from the '{' ending the head to the logger's name), parsed once
    head = F.col("_kq_head")
    head_len = F.length(head)
    parse = (
        F.col("_kq_utf8")
        & (F.col("_kq_size") <= MAX_LINE_BYTES)
        & (F.substring(head, -1, 1) == "{")
        & value.endswith(F.lit(_SUFFIX))
    )
    body = F.when(parse, value.substr(head_len, F.char_length(value) - head_len + 1 - len(_SUFFIX)))
    staged = staged.select("*", F.from_json(body, LINE_SCHEMA).alias("_kq_line"))
    # 3. the row, or why there is none
    line = F.col("_kq_line")
    header = line["requestHeader"]
    key = header["requestApiKey"]
    version = header["requestApiVersion"]
    request, response = line["request"], line["response"]
    ts_text = F.substring(head, 2, 23)

    def number(start: int, length: int) -> Column:
        return F.substring(ts_text, start, length).try_cast("int")

    seconds = F.concat(F.substring(ts_text, 18, 2), F.lit("."), F.substring(ts_text, 21, 3))
    end = F.try_make_timestamp(
        number(1, 4),
        number(6, 2),
        number(9, 2),
        number(12, 2),
        number(15, 2),
        seconds.try_cast("decimal(16,6)"),
        F.lit(options.timezone),
    )
    queue_us = F.round(line["responseQueueTimeMs"] * 1000).cast("long")
    send_us = F.round(line["sendTimeMs"] * 1000).cast("long")
    record_ms = F.floor((F.unix_micros(end) - queue_us - send_us) / 1000).cast("long")
    thread_ns = F.round(line["localTimeMs"] * 1000).cast("long") * 1000
    throttle = line["throttleTimeMs"]
    replica = F.coalesce(request["replicaState"]["replicaId"], request["replicaId"], F.lit(-1))
    acks = request["acks"]
    complete = (
        key.isNotNull()
        & version.isNotNull()
        & line["localTimeMs"].isNotNull()
        & line["responseQueueTimeMs"].isNotNull()
        & line["sendTimeMs"].isNotNull()
        & throttle.isNotNull()
        & line["principal"].isNotNull()
    )
    produce, fetch = key == PRODUCE, key == FETCH
    reason = (
        F.when(~F.col("_kq_utf8"), F.lit(NOT_UTF8))
        .when((head_len == 0) & value.endswith(F.lit(_TRACE_SUFFIX)), F.lit(TRACE_LINE))
        .when(head_len == 0, F.lit(OTHER_LINE))
        .when(F.substring(head, -1, 1) != "{", F.lit(OLD_FORMAT))
        .when(line.isNull() | ~complete, F.lit(CORRUPT))
        .when(end.isNull(), F.lit(BAD_TIME))
        .when(F.coalesce(line["isForwarded"], F.lit(False)), F.lit(FORWARDED))
        .when(key.isin(*EXEMPT_API_KEYS), F.lit(EXEMPT))
        .when((produce | fetch) & request.isNull(), F.lit(NO_BODY))
        .when(fetch & (replica >= 0), F.lit(FOLLOWER))
        .when(
            (produce & ((version < 0) | (version > MAX_PRODUCE_VERSION)))
            | (fetch & ((version < 0) | (version > MAX_FETCH_VERSION))),
            F.lit(UNKNOWN_VERSION),
        )
    )
    size_bytes = (
        F.when(produce, _produce_request_size(header, request))
        .when(
            fetch,
            F.when((throttle > 0) | response.isNull(), 0).otherwise(
                _fetch_response_size(version, response)
            ),
        )
        .otherwise(0)
    )

    # what the line says about topics' partition counts, in order: a created topic and its
    # count, a grown topic and its new count, a deleted topic, a topic a Metadata response saw
    def topic(op: str, name: Column, count: Column) -> Column:
        return F.struct(F.lit(op).alias("op"), name.alias("name"), count.cast("int").alias("count"))

    created = F.transform(
        request["topics"],
        lambda t: topic(
            "create",
            t["name"],
            F.when(t["numPartitions"] >= 0, t["numPartitions"])
            .when(F.size(t["assignments"]) > 0, F.size(t["assignments"]))
            .otherwise(F.lit(options.num_partitions)),
        ),
    )
    grown = F.transform(request["topics"], lambda t: topic("grow", t["name"], t["count"]))
    deleted = F.transform(
        F.coalesce(F.transform(request["topics"], lambda t: t["name"]), request["topicNames"]),
        lambda n: topic("delete", n, F.lit(None)),
    )
    seen = F.transform(
        F.filter(response["topics"], lambda t: (t["errorCode"] == 0) & t["name"].isNotNull()),
        lambda t: topic("seen", t["name"], F.size(t["partitions"])),
    )
    topics = (
        F.when(key == CREATE_TOPICS, created)
        .when(key == CREATE_PARTITIONS, grown)
        .when(key == DELETE_TOPICS, deleted)
        .when(key == METADATA, seen)
    )
    strict = F.when(key == CREATE_TOPICS, version >= STRICT_SINCE[CREATE_TOPICS]).when(
        key == CREATE_PARTITIONS, version >= STRICT_SINCE[CREATE_PARTITIONS]
    )
    strict = strict.when(key == DELETE_TOPICS, version >= STRICT_SINCE[DELETE_TOPICS])
    principal = line["principal"]
    user = F.substring(principal, F.instr(principal, ":") + 1, F.octet_length(principal))
    api = F.coalesce(F.lower(header["requestApiKeyName"]), F.concat(F.lit("api_"), key))
    example = F.substring(F.make_valid_utf8(value), 1, EXAMPLE_CHARS)
    frame = staged.select(
        F.when(reason.isNull(), record_ms).alias(TS),
        lookup(brokers, F.col(_FILE)).alias(BROKER),
        user.alias(USER),
        F.coalesce(header["clientId"], F.lit("")).alias(CLIENT),
        api.alias(API),
        size_bytes.alias(BYTES),
        F.when(produce & (acks == 0), F.lit(None).cast("long")).otherwise(thread_ns).alias(THREAD),
        F.when(produce, acks).alias(ACKS),
        throttle.alias(KAFKA_THROTTLE),
        version.alias(API_VERSION),
        header["correlationId"].alias(CORRELATION_ID),
        topics.alias(_TOPICS),
        strict.alias(STRICT),
        *SEQ_COLUMNS,
        reason.alias(_REASON),
        F.when(reason.isNotNull(), example).alias(_EXAMPLE),
        F.col(_FILE),
        F.when(~F.col(_FILE).endswith(".gz"), F.col("_kq_size") + 1).alias(_PLAIN),
    )
    return _Lines(frame, files, tuple(found))


def _metrics() -> list[Column]:
    """Aggregates over classified lines: lines, rows, and per reason its count and the first
    :data:`EXAMPLES` examples in input order (bounded: ``min_by`` keeps only ``k``)."""
    from pyspark.sql import functions as F

    reason = F.col(_REASON)
    metrics = [
        F.count(F.lit(1)).alias("lines"),
        F.count_if(reason.isNull()).alias("rows"),
        F.collect_set(F.col(_FILE)).alias("files_with_lines"),
        F.collect_set(F.when(reason.isNull(), F.col(_FILE))).alias("files_with_rows"),
        F.sum(F.col(_PLAIN)).alias("plain_bytes"),
    ]
    for i, name in enumerate(REASONS):
        hit = reason == name
        metrics.append(F.count_if(hit).alias(f"n{i}"))
        order = F.when(hit, F.struct(*SEQ_COLUMNS))
        metrics.append(F.min_by(F.col(_EXAMPLE), order, EXAMPLES).alias(f"e{i}"))
    return metrics


def _summary(lines: _Lines, values: dict[str, Any]) -> LogSummary:
    """The :class:`LogSummary` of :func:`_metrics`' values; raises
    :class:`~kquota.exceptions.TrafficError` naming the files that have lines but no
    usable one (or saying that no file has a line)."""
    skipped: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    for i, name in enumerate(REASONS):
        count = int(values.get(f"n{i}") or 0)
        if count:
            skipped[name] = count
            examples[name] = [e for e in (values.get(f"e{i}") or []) if e is not None]
    read_bytes = int(values.get("plain_bytes") or 0)
    missing = (lines.files.plain_bytes or 0) - read_bytes
    if lines.files.plain_bytes is not None and missing >= MAX_LINE_BYTES:
        skipped = {TOO_LONG: 1, **skipped}
        examples[TOO_LONG] = [f"{missing:,} bytes of the input are in lines not read"]
    summary = LogSummary(
        path=lines.files.path,
        files=len(lines.read),
        empty_files=lines.files.empty,
        lines=int(values.get("lines") or 0),
        rows=int(values.get("rows") or 0),
        skipped=skipped,
        examples=examples,
    )
    with_lines = set(values.get("files_with_lines") or ())
    with_rows = set(values.get("files_with_rows") or ())
    useless = sorted(with_lines - with_rows)
    if useless:
        names = ", ".join(repr(_LOCAL_SCHEME.sub("/", f)) for f in useless[:3])
        more = f" and {len(useless) - 3:,} more" if len(useless) > 3 else ""
        detail = "; ".join(f"{n:,} {r}" for r, n in skipped.items())
        raise TrafficError(
            f"traffic file {names}{more}: no usable Completed request line ({detail}); "
            "expected Kafka's request log (kafka.request.logger at DEBUG, Kafka 2.8 or later)"
        )
    if summary.rows == 0:
        raise TrafficError(
            f"traffic {lines.files.path!r} has no line in its {len(lines.read):,} file(s)"
        )
    return summary


def _spark_call(path: str) -> Any:
    from kquota.backtest.session import reading_traffic as _reading

    return _reading(path)


def _import_rows(lines: _Lines, observation: Any) -> DataFrame:
    """The rows :func:`import_log` writes (:data:`COLUMNS`), with :func:`_metrics` observed
    on every line of the same pass. The filter on the skip reason sits above the observed
    metrics, which Spark does not push a filter through: a line is parsed once (a filter
    pushed below the parsing projection would inline ``from_json`` once per use of a parsed
    field, ~20 times a line)."""
    from pyspark.sql import functions as F

    observed = lines.frame.observe(observation, *_metrics())
    return observed.where(F.col(_REASON).isNull()).select(*COLUMNS, STRICT, _TOPICS, *SEQ_COLUMNS)


def mutation_partitions(rows: DataFrame) -> DataFrame:
    """Per CreateTopics, CreatePartitions or DeleteTopics row of ``rows`` (imported lines with
    their ``_kq_topics``), the partitions it creates or deletes, tracked over the whole log in
    time order (ties by input position): a created topic has its requested count
    (``numPartitions``, else its assignments, else ``num.partitions``); a deleted topic the
    count its latest CreateTopics, CreatePartitions or Metadata response line gave; a grown
    topic its new count minus that one. Columns: the row's
    :data:`~kquota.backtest.kernel.SEQ_COLUMNS`, ``partitions`` (null when a topic's count is
    unknown), :data:`~kquota.backtest.kernel.TOPIC_PARTITIONS` (each topic's count in
    request order, which the replay records topic by topic as Kafka's controller does; null
    with ``partitions``), ``unknown`` (those topics' names)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    events = rows.where(F.size(F.col(_TOPICS)) > 0).select(
        F.col(TS), *SEQ_COLUMNS, F.posexplode(F.col(_TOPICS)).alias("_kq_pos", "_kq_t")
    )
    t = F.col("_kq_t")
    order = [F.col(TS), *(F.col(c) for c in SEQ_COLUMNS), F.col("_kq_pos")]
    before = (
        Window.partitionBy(t["name"]).orderBy(*order).rowsBetween(Window.unboundedPreceding, -1)
    )
    # the count after each event: -1 once deleted (unknown until created or seen again)
    after = F.when(t["op"] == "delete", F.lit(-1)).otherwise(t["count"])
    known = F.last(after, ignorenulls=True).over(before)
    count = (
        F.when(t["op"] == "create", t["count"])
        .when((t["op"] == "delete") & (known >= 0), known)
        .when((t["op"] == "grow") & (known >= 0) & (t["count"] >= known), t["count"] - known)
    )
    # the counts first (over every event, Metadata ones too), then the mutations
    mutations = (
        events.select(
            *SEQ_COLUMNS,
            F.col("_kq_pos"),
            t["op"].alias("_kq_op"),
            t["name"].alias("_kq_name"),
            count.alias("_kq_count"),
        )
        .where(F.col("_kq_op") != "seen")
        .groupBy(*SEQ_COLUMNS)
        .agg(
            F.sum("_kq_count").alias(PARTITIONS),
            F.count_if(F.col("_kq_count").isNull()).alias("_kq_unknown"),
            F.sort_array(F.collect_list(F.struct("_kq_pos", "_kq_count"))).alias("_kq_each"),
            F.collect_list(
                F.when(F.col("_kq_count").isNull(), F.coalesce("_kq_name", F.lit("")))
            ).alias("unknown"),
        )
    )
    return mutations.select(
        *SEQ_COLUMNS,
        F.when(F.col("_kq_unknown") == 0, F.col(PARTITIONS)).cast("int").alias(PARTITIONS),
        F.when(
            F.col("_kq_unknown") == 0,
            F.transform("_kq_each", lambda e: e["_kq_count"].cast("int")),
        ).alias(TOPIC_PARTITIONS),
        F.col("unknown"),
    )


def import_log(
    spark: SparkSession, path: str, out: str, options: LogOptions | None = None
) -> LogSummary:
    """Read the request log ``path`` into traffic Parquet at ``out`` (a folder) in one pass
    over the lines; return what was read. ``out`` is written under a temporary name and
    replaces any earlier ``out`` only when the log had usable lines; otherwise it raises
    :class:`~kquota.exceptions.TrafficError` and ``out`` stays as it was."""
    import shutil

    from pyspark.sql import Observation

    from kquota.backtest.session import writing_output as _writing

    started = time.monotonic()
    lines = read(spark, path, options)
    observation = Observation(f"kquota-request-log-{uuid.uuid4().hex}")
    rows = _import_rows(lines, observation)
    target = Path(out.removeprefix("file://"))
    temporary = target.with_name(f".{target.name[:100]}.{uuid.uuid4().hex[:8]}.tmp")
    parsed = target.with_name(f".{target.name[:100]}.{uuid.uuid4().hex[:8]}.lines.tmp")
    try:
        with _spark_call(path), _writing(out):
            rows.write.mode("overwrite").parquet(str(parsed))
        summary = _summary(lines, observation.get)
        with _spark_call(path), _writing(out):
            _with_partitions(spark, str(parsed), summary).write.mode("overwrite").parquet(
                str(temporary)
            )
        if target.is_dir():
            shutil.rmtree(target)
        elif target.exists():
            raise OutputError(f"cannot write {out!r}: it is a file, not a folder")
        temporary.rename(target)
    finally:
        shutil.rmtree(temporary, ignore_errors=True)
        shutil.rmtree(parsed, ignore_errors=True)
    summary.seconds = time.monotonic() - started
    return summary


def _with_partitions(spark: SparkSession, parsed: str, summary: LogSummary) -> DataFrame:
    """The imported rows at ``parsed`` (:data:`COLUMNS`) and, when the log has mutation
    requests, :data:`PARTITIONS` from :func:`mutation_partitions` and :data:`STRICT`; counts
    the mutation requests and those of unknown count into ``summary``."""
    from pyspark.sql import functions as F

    rows = spark.read.parquet(parsed)
    counted = mutation_partitions(rows)
    joined = rows.join(counted, list(SEQ_COLUMNS), "left")
    mutation = F.col(STRICT).isNotNull()
    # a mutation request with no topic creates or deletes nothing
    partitions = F.when(
        mutation, F.when(F.col("unknown").isNull(), F.lit(0)).otherwise(F.col(PARTITIONS))
    )
    stats = (
        joined.where(mutation)
        .agg(
            F.count(F.lit(1)).alias("mutations"),
            F.count_if(partitions.isNull()).alias("unknown"),
            F.slice(F.array_distinct(F.flatten(F.collect_list("unknown"))), 1, EXAMPLES).alias(
                "topics"
            ),
        )
        .first()
    )
    if stats is not None:
        summary.mutations = int(stats["mutations"] or 0)
        summary.unknown_counts = int(stats["unknown"] or 0)
        summary.unknown_topics = sorted(stats["topics"] or [])
    if not summary.mutations:  # the traffic as before: no mutation columns
        return rows.orderBy(*SEQ_COLUMNS).select(*COLUMNS)
    out = joined.withColumn(PARTITIONS, partitions.cast("int")).withColumn(
        TOPIC_PARTITIONS, F.when(partitions.isNotNull(), F.col(TOPIC_PARTITIONS))
    )
    return out.orderBy(*SEQ_COLUMNS).select(*COLUMNS, PARTITIONS, STRICT, TOPIC_PARTITIONS)


def _describe_apis(lines: _Lines, observation: Any) -> DataFrame:
    """Requests and bytes per API (a null API gathers the skipped lines), with
    :func:`_metrics`, the span, brokers, clients and users observed on the same pass."""
    from pyspark.sql import functions as F

    row = F.col(_REASON).isNull()
    observed = lines.frame.observe(
        observation,
        *_metrics(),
        F.min(TS).alias("start"),
        F.max(TS).alias("end"),
        F.collect_set(F.when(row, F.col(BROKER))).alias("brokers"),
        F.size(F.collect_set(F.when(row, F.col(CLIENT)))).alias("clients"),
        F.size(F.collect_set(F.when(row, F.col(USER)))).alias("users"),
    )
    return observed.groupBy(F.when(row, F.col(API)).alias(API)).agg(
        F.count_if(row).alias("n"), F.sum(F.when(row, F.col(BYTES))).alias("b")
    )


def describe(spark: SparkSession, path: str, options: LogOptions | None = None) -> Description:
    """What the request log ``path`` holds: requests, span, brokers, clients, users, APIs,
    bytes, and the lines skipped by reason (one pass over the lines, nothing written).

    The per-API counts are the one action (grouped by the API of a row, null for a skipped
    line); everything else is observed on the same pass. There is no ``Filter`` on the skip
    reason: Spark would push it below the projection that parses a line and inline the
    parse into the condition once per use of the parsed fields (from_json ~20 times a line).
    """
    from pyspark.sql import Observation

    started = time.monotonic()
    lines = read(spark, path, options)
    observation = Observation(f"kquota-request-log-{uuid.uuid4().hex}")
    with _spark_call(path):
        grouped = _describe_apis(lines, observation).collect()
        values = observation.get
        summary = _summary(lines, values)
    apis = sorted(
        ((r[API], int(r["n"]), int(r["b"] or 0)) for r in grouped if r[API] is not None),
        key=lambda a: (-a[1], a[0]),
    )
    summary.seconds = time.monotonic() - started
    return Description(
        summary=summary,
        start_ms=values["start"],
        end_ms=values["end"],
        brokers=sorted(values["brokers"] or [], key=_natural),
        clients=int(values["clients"]),
        users=int(values["users"]),
        apis={api: (n, b) for api, n, b in apis},
    )


def _natural(text: str) -> tuple[Any, ...]:
    """``broker-2`` before ``broker-10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))
