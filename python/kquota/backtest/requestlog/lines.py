"""One pass over a request log's lines: each line's row in the traffic schema, or the
reason it gives none (:data:`REASONS`). Spark reads the text and knows each line's file
and position; the core's reader (``kquota_core::requestlog``, through
:func:`kquota._core.parse_request_log`) classifies, parses and sizes the lines a batch at a
time in ``mapInArrow``; Spark applies the broker's time zone and the broker lookup."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kquota._core import MUTATION_STRICT_SINCE
from kquota.backtest.frames import SEQ_COLUMNS
from kquota.backtest.requestlog.files import (
    _LOCAL_SCHEME,
    LogFiles,
    LogOptions,
    broker_of,
    log_files,
)
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
    import pyarrow as pa  # type: ignore[import-untyped]
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

_TOPIC: Final = "struct<op: string, name: string, count: int, id: string>"
_READ: Final = "struct<kind: string, topic: string, partition: int, offset: long, bytes: long>"
_PARSED: Final = (
    ("_kq_reason", "string"),
    ("_kq_example", "string"),
    ("_kq_wall_us", "long"),
    ("_kq_before_us", "long"),
    (USER, "string"),
    (CLIENT, "string"),
    (API, "string"),
    (BYTES, "long"),
    (THREAD, "long"),
    (ACKS, "int"),
    (KAFKA_THROTTLE, "long"),
    (API_VERSION, "int"),
    (CORRELATION_ID, "int"),
    ("_kq_topics", f"array<{_TOPIC}>"),
    (STRICT, "boolean"),
    ("_kq_share_fetch", "boolean"),
    ("_kq_fetch_connection", "long"),
    ("_kq_fetch_position", "long"),
    ("_kq_reads", f"array<{_READ}>"),
    ("_kq_fetch_empty", "long"),
    ("_kq_fetch_max_bytes", "long"),
    ("_kq_size", "long"),
)
"""What :func:`parse_batches` adds to a batch (Spark DDL types): each line's columns from
the core's reader (:func:`kquota._core.parse_request_log`)."""


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
FILE_RANK_SHIFT: Final = 44
"""A line's first position column is its file's rank (in the sorted input) shifted left by
this, plus the start of its split in the file (below 16 TiB)."""
_PLAIN: Final = "_kq_plain_bytes"
_TOPICS: Final = "_kq_topics"
_SHARE: Final = "_kq_share_fetch"
_CONNECTION: Final = "_kq_fetch_connection"
_POSITION: Final = "_kq_fetch_position"
_READS: Final = "_kq_reads"
_FETCH_EMPTY: Final = "_kq_fetch_empty"
_FETCH_MAX_BYTES: Final = "_kq_fetch_max_bytes"


def read(spark: SparkSession, path: str, options: LogOptions | None = None) -> _Lines:
    """Every line of the request-log files ``path`` names, classified: the traffic columns
    (:data:`COLUMNS`), :data:`~kquota.backtest.frames.SEQ_COLUMNS`, ``_kq_reason`` (null for
    a row, else one of :data:`REASONS`), ``_kq_example``, ``_kq_file`` and
    ``_kq_share_fetch`` (a ShareFetch line), ``_kq_fetch_connection`` and
    ``_kq_fetch_position`` (a consumer fetch's connection and read position, as keys).
    Lazy: nothing is read until an action. Raises :class:`~kquota.exceptions.TrafficError`
    naming a path that cannot be read or a file whose broker id cannot be found."""
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
    ranks = {_file_key(name): i for i, name in enumerate(found)}
    # by the file's rank, which the position column carries: only numbers go through the
    # Python worker, not each line's file name
    names = {i: _file_key(name) for i, name in enumerate(found)}
    brokers = {i: broker_of(name, options) for i, name in enumerate(found)}
    plain = {i: not name.endswith(".gz") for i, name in enumerate(found)}

    def lookup(mapping: dict[Any, Any], key: Column) -> Column:
        literal = F.create_map(*[x for k, v in mapping.items() for x in (F.lit(k), F.lit(v))])
        return literal[key]

    # 1. the line, its file and position; 2. the core's reader over Arrow batches of them
    value = F.col("value")
    # the rank by the path as Spark gives it, and only for a spelling not seen by the
    # path in kquota's form (a regular expression per line costs)
    raw = F.col("_metadata.file_path")
    file_key = F.regexp_replace(raw, _LOCAL_SCHEME.pattern, "file:/")
    rank = F.coalesce(lookup(ranks, raw), lookup(ranks, file_key))
    staged = text.select(
        value,
        (
            rank.cast("long") * F.lit(1 << FILE_RANK_SHIFT) + F.col("_metadata.file_block_start")
        ).alias(SEQ_COLUMNS[0]),
        F.monotonically_increasing_id().alias(SEQ_COLUMNS[1]),
    )
    large = spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false") == "true"
    schema = ", ".join(
        [f"{c} long" for c in SEQ_COLUMNS] + [f"{name} {kind}" for name, kind in _PARSED]
    )
    parse = functools.partial(parse_batches, num_partitions=options.num_partitions, large=large)
    parsed = staged.mapInArrow(parse, schema)
    # 3. the time: the line's wall clock in the broker's zone, less the response's
    # queue and send times (when Kafka recorded quota usage)
    wall = F.col("_kq_wall_us")
    if options.timezone == "UTC":
        end_us = wall
    else:
        end_us = F.unix_micros(F.to_utc_timestamp(F.timestamp_micros(wall), options.timezone))
    record_ms = F.floor((end_us - F.col("_kq_before_us")) / 1000).cast("long")
    reason = F.col(_REASON)
    file_rank = F.shiftright(F.col(SEQ_COLUMNS[0]), FILE_RANK_SHIFT)
    parsed = parsed.withColumn(_FILE, lookup(names, file_rank))
    frame = parsed.select(
        # a controller's line of a forwarded mutation has its time too (import_job)
        F.when(reason.isNull() | _controller_line(), record_ms).alias(TS),
        lookup(brokers, file_rank).alias(BROKER),
        USER,
        CLIENT,
        API,
        BYTES,
        THREAD,
        ACKS,
        KAFKA_THROTTLE,
        API_VERSION,
        CORRELATION_ID,
        _TOPICS,
        STRICT,
        *SEQ_COLUMNS,
        _REASON,
        _EXAMPLE,
        _FILE,
        _SHARE,
        _CONNECTION,
        _POSITION,
        _READS,
        _FETCH_EMPTY,
        _FETCH_MAX_BYTES,
        F.when(lookup(plain, file_rank), F.col("_kq_size") + 1).alias(_PLAIN),
    )
    return _Lines(frame, files, tuple(found))


def _controller_line() -> Column:
    """A controller's line of a forwarded CreateTopics, CreatePartitions or DeleteTopics: a
    skipped line (:data:`FORWARDED`) whose fields the reader still gives, timed when the
    controller recorded it."""
    from pyspark.sql import functions as F

    # a row's reason is null: false, not null
    forwarded = F.coalesce(F.col(_REASON) == F.lit(FORWARDED), F.lit(False))
    return forwarded & F.col(STRICT).isNotNull()


def parse_batches(
    batches: Iterable[pa.RecordBatch], num_partitions: int = 1, large: bool = False
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` over batches of ``value`` (the lines) and pass-through columns: each
    batch without ``value`` and with :data:`_PARSED`, from the core's reader (one call a
    batch, the GIL released; the arrays wrap its buffers without copying)."""
    import numpy as np
    import pyarrow as pa

    from kquota._core import (
        REQUEST_LOG_READ_KINDS,
        REQUEST_LOG_REASONS,
        REQUEST_LOG_TOPIC_OPS,
        parse_request_log,
    )

    reasons = pa.array([None, *REQUEST_LOG_REASONS], pa.string())
    ops = pa.array(REQUEST_LOG_TOPIC_OPS, pa.string())
    kinds = pa.array(REQUEST_LOG_READ_KINDS, pa.string())
    text = pa.large_string() if large else pa.string()
    topic_type = pa.struct([("op", text), ("name", text), ("count", pa.int32()), ("id", text)])
    read_type = pa.struct(
        [
            ("kind", text),
            ("topic", text),
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("bytes", pa.int64()),
        ]
    )

    def bitmap(valid: Any) -> Any:
        return pa.array(valid, pa.bool_()).buffers()[1]

    def strings(c: dict[str, Any], name: str, n: int) -> Any:
        valid = c.get(f"{name}_valid")
        array = pa.StringArray.from_buffers(
            n,
            pa.py_buffer(c[f"{name}_offsets"]),
            pa.py_buffer(c[f"{name}_data"]),
            None if valid is None else bitmap(valid),
        )
        return array.cast(text) if large else array

    def nullable(c: dict[str, Any], name: str, kind: Any, n: int) -> Any:
        values = c[name]
        if kind == pa.bool_():
            return pa.array(values, pa.bool_(), mask=~c[f"{name}_valid"])
        return pa.Array.from_buffers(
            kind, n, [bitmap(c[f"{name}_valid"]), pa.py_buffer(values)], null_count=-1
        )

    for batch in batches:
        lines = batch.column("value")
        if pa.types.is_large_string(lines.type) or pa.types.is_large_binary(lines.type):
            lines = lines.cast(pa.string())
        n = len(lines)
        validity, offsets, data = lines.buffers()
        c = parse_request_log(
            offsets, data if data is not None else b"", validity, lines.offset, n, num_partitions
        )
        line_offsets = np.frombuffer(offsets, np.int32, n + 1, lines.offset * 4)
        topics = pa.StructArray.from_arrays(
            [
                ops.take(pa.array(c["topic_op"])).cast(text),
                strings(c, "topic_name", len(c["topic_op"])),
                nullable(c, "topic_count", pa.int32(), len(c["topic_op"])),
                strings(c, "topic_id", len(c["topic_op"])),
            ],
            fields=list(topic_type),
        )
        reads = pa.StructArray.from_arrays(
            [
                kinds.take(pa.array(c["read_kind"])).cast(text),
                strings(c, "read_topic", len(c["read_kind"])),
                pa.array(c["read_partition"]),
                pa.array(c["read_offset"]),
                pa.array(c["read_bytes"]),
            ],
            fields=list(read_type),
        )
        columns = [
            reasons.take(pa.array(c["reason"])).cast(text),
            strings(c, "example", n),
            nullable(c, "wall_us", pa.int64(), n),
            pa.array(c["before_us"]),
            strings(c, "user", n),
            strings(c, "client", n),
            strings(c, "api", n),
            pa.array(c["bytes"]),
            nullable(c, "thread_ns", pa.int64(), n),
            nullable(c, "acks", pa.int32(), n),
            pa.array(c["kafka_throttle"]),
            nullable(c, "api_version", pa.int32(), n),
            nullable(c, "correlation_id", pa.int32(), n),
            pa.ListArray.from_arrays(
                pa.array(c["topic_offsets"]), topics, mask=pa.array(~c["topics_valid"])
            ),
            nullable(c, "strict", pa.bool_(), n),
            pa.array(c["share_fetch"]),
            nullable(c, "fetch_connection", pa.int64(), n),
            nullable(c, "fetch_position", pa.int64(), n),
            pa.ListArray.from_arrays(pa.array(c["read_offsets"]), reads),
            nullable(c, "fetch_empty", pa.int64(), n),
            nullable(c, "fetch_max_bytes", pa.int64(), n),
            pa.array(np.diff(line_offsets).astype(np.int64)),
        ]
        kept = [batch.column(i) for i, f in enumerate(batch.schema) if f.name != "value"]
        names = [f.name for f in batch.schema if f.name != "value"]
        yield pa.RecordBatch.from_arrays(
            [*kept, *columns], names=[*names, *(name for name, _ in _PARSED)]
        )
