"""One pass over a request log's lines: each line's row in the traffic schema, or the
reason it gives none (:data:`REASONS`), with Spark's own JVM functions only (text source,
one anchored ``regexp_extract`` on the head of the line, ``from_json`` with a schema of
just the fields needed, higher-order functions for the byte counts)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kquota._core import MUTATION_STRICT_SINCE
from kquota.backtest.kernel import SEQ_COLUMNS
from kquota.backtest.requestlog.files import (
    _LOCAL_SCHEME,
    LogFiles,
    LogOptions,
    broker_of,
    log_files,
)
from kquota.backtest.requestlog.sizes import fetch_response_size, produce_request_size
from kquota.exceptions import TrafficError
from kquota.traffic_schema import (
    ACKS,
    API,
    API_VERSION,
    BROKER,
    BYTES,
    CLIENT,
    CORRELATION_ID,
    KAFKA_THROTTLE,
    STRICT,
    THREAD,
    TS,
    USER,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession


MAX_LINE_BYTES: Final = 16 * 1024 * 1024
"""Longer lines are not read: Hadoop's line reader (under Spark's text source) keeps at
most this much of a line and drops longer ones, so a corrupt file without newlines costs
bounded memory (a 100 MB line otherwise needs several copies of itself on one executor:
out of memory at Spark's default 1 GB). A Produce or Fetch line of thousands of partitions
is a few MB. Dropped lines are counted as :data:`TOO_LONG` from the bytes of plain (not
``.gz``) files that no line read accounts for: at least one line when that is
``>= MAX_LINE_BYTES``; in ``.gz`` files they go uncounted."""
EXAMPLE_CHARS: Final = 300
"""Characters of a line kept as an example."""

PRODUCE: Final = 0
FETCH: Final = 1
METADATA: Final = 3
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
CREATE_PARTITIONS: Final = 37
SHARE_FETCH: Final = 78
"""ShareFetch (KIP-932 share groups): Kafka records its response size against the fetch
byte quota, but its logged response prints records as ``""`` with no size, so its bytes
cannot be rebuilt: its rows have 0 bytes and are counted apart
(:attr:`~kquota.backtest.requestlog.summary.LogSummary.share_fetches`)."""
STRICT_SINCE: Final = {
    CREATE_TOPICS: MUTATION_STRICT_SINCE["create_topics"],
    CREATE_PARTITIONS: MUTATION_STRICT_SINCE["create_partitions"],
    DELETE_TOPICS: MUTATION_STRICT_SINCE["delete_topics"],
}
"""The controller-mutation APIs (by API key) and the first version Kafka enforces
strictly: the core's versions."""
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
# a fetch response's partition under the names of 3.0+ (partitionIndex, recordsSizeInBytes)
# and of 2.8 (partition, recordSetSizeInBytes); records printed as null have neither size
_FETCH_PARTITION: Final = (
    "array<struct<partitionIndex int, partition int, "
    "abortedTransactions array<struct<producerId long>>, "
    "recordsSizeInBytes long, recordSetSizeInBytes long, divergingEpoch struct<epoch int>, "
    "currentLeader struct<leaderId int>, snapshotId struct<epoch int>>>"
)
_FETCH_RESPONSE: Final = (
    f"responses array<struct<topic string, topicId string, partitions {_FETCH_PARTITION}, "
    f"partitionResponses {_FETCH_PARTITION}>>"
)
LINE_SCHEMA: Final = (
    "isForwarded boolean, requestHeader struct<requestApiKey int, requestApiVersion int, "
    "correlationId int, clientId string, requestApiKeyName string>, "
    f"request struct<{_PRODUCE_REQUEST}, {_FETCH_REQUEST}, {_MUTATION_REQUEST}>, "
    f"response struct<throttleTimeMs long, {_FETCH_RESPONSE}, {_METADATA_RESPONSE}>, "
    "localTimeMs double, throttleTimeMs long, responseQueueTimeMs double, sendTimeMs double, "
    "principal string"
)
"""The ``from_json`` schema: only what a row needs (``""``/``null`` bodies read as null)."""


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
_SHARE: Final = "_kq_share_fetch"


def read(spark: SparkSession, path: str, options: LogOptions | None = None) -> _Lines:
    """Every line of the request-log files ``path`` names, classified: the traffic columns
    (:data:`COLUMNS`), :data:`~kquota.backtest.kernel.SEQ_COLUMNS`, ``_kq_reason`` (null for
    a row, else one of :data:`REASONS`), ``_kq_example``, ``_kq_file`` and
    ``_kq_share_fetch`` (a ShareFetch line). Lazy: nothing is read until an action. Raises
    :class:`~kquota.exceptions.TrafficError` naming a path that cannot be read or a file
    whose broker id cannot be found."""
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
    # A mutation request a broker forwards to the controller has two lines: the controller's
    # (isForwarded, skipped) and the broker's, whose throttleTimeMs is the request quota's
    # only; the controller-mutation throttle is in the logged response, and the broker gives
    # the client the larger of the two (RequestHandlerHelper.sendForwardedResponse).
    mutation_throttle = F.coalesce(response["throttleTimeMs"], F.lit(0)).cast("long")
    kafka_throttle = F.when(
        key.isin(*STRICT_SINCE), F.greatest(throttle, mutation_throttle)
    ).otherwise(throttle)
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
        F.when(produce, produce_request_size(header, request))
        .when(
            fetch,
            F.when((throttle > 0) | response.isNull(), 0).otherwise(
                fetch_response_size(version, response)
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
        kafka_throttle.alias(KAFKA_THROTTLE),
        version.alias(API_VERSION),
        header["correlationId"].alias(CORRELATION_ID),
        topics.alias(_TOPICS),
        strict.alias(STRICT),
        *SEQ_COLUMNS,
        reason.alias(_REASON),
        F.when(reason.isNotNull(), example).alias(_EXAMPLE),
        F.col(_FILE),
        (key == SHARE_FETCH).alias(_SHARE),
        F.when(~F.col(_FILE).endswith(".gz"), F.col("_kq_size") + 1).alias(_PLAIN),
    )
    return _Lines(frame, files, tuple(found))
