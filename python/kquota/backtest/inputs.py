"""What the back-test reads, checked: the traffic (its format, files, columns and rows) and
the output folder.

:func:`check_traffic` and :func:`prepare_output` look at local paths before Spark starts;
:func:`read_traffic` reads the traffic with each row's input position, :func:`parse` gives
every row its parsed standard columns and, when it is bad, a reason, and :func:`valid` keeps
the good rows.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from kquota.backtest import frames, requestlog
from kquota.backtest.options import OUTPUT_COLUMNS
from kquota.backtest.session import spark_errors, spark_message
from kquota.exceptions import OutputError, TrafficError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = [
    "PREFIX",
    "REASON_COLUMN",
    "REQUIRED",
    "STANDARD",
    "check_traffic",
    "is_remote",
    "local_path",
    "parse",
    "prepare_output",
    "read_traffic",
    "valid",
]

STANDARD: Final = (
    frames.TS,
    frames.BROKER,
    frames.USER,
    frames.CLIENT,
    frames.API,
    frames.BYTES,
    frames.THREAD,
)
"""The traffic table's own columns, in output order."""
REQUIRED: Final = (frames.TS, frames.CLIENT, frames.API, frames.BYTES)
"""Columns the traffic must have (``broker``, ``user``, ``thread_time_ns`` are optional)."""
PREFIX: Final = "_kq_"
"""The prefix of the back-test's working columns (no input column may start with it)."""
REASON_COLUMN: Final = "_kq_reason"
"""Why :func:`parse` refuses a row (null for a good row)."""

_LOCAL_SCHEME: Final = re.compile(r"^file:/+")


def is_remote(path: str) -> bool:
    """Whether ``path`` is a URL Spark reads (``hdfs://``, ``s3a://``...) rather than a
    local path (``file://`` is local)."""
    return "://" in path and not path.startswith("file://")


def local_path(path: str) -> Path:
    """A local path without its ``file://``."""
    return Path(path.removeprefix("file://"))


def _detect_format(path: str, requested: str) -> str:
    if requested != "auto":
        return requested
    lowered = path.lower().rstrip("/")
    if lowered.endswith((".csv", ".csv.gz")):
        return "csv"
    if lowered.endswith((".parquet", ".pq")) or is_remote(path):
        return "parquet"
    local = local_path(path)
    if local.is_dir():
        names = [p.name.lower() for p in local.rglob("*") if p.is_file()]
        if any(n.endswith((".csv", ".csv.gz")) for n in names) and not any(
            n.endswith(".parquet") for n in names
        ):
            return "csv"
    return "parquet"


def read_traffic(spark: SparkSession, path: str, input_format: str = "auto") -> DataFrame:
    """The traffic table with its rows' input positions (:data:`~frames.SEQ_COLUMNS`).

    Ties in time are replayed in input order: files in path order, rows in file order.
    CSV is read with a header and every column as a string (validation parses it).
    """
    from pyspark.sql import functions as F

    chosen = check_traffic(path, input_format)
    try:
        if chosen == "csv":
            frame = spark.read.option("header", True).option("mode", "PERMISSIVE").csv(path)
        else:
            frame = spark.read.parquet(path)
        files = sorted(frame.inputFiles())
    except spark_errors() as exc:
        raise TrafficError(
            f"cannot read traffic {path!r} as {chosen}: {spark_message(exc)}"
        ) from None
    clash = [c for c in frame.columns if c in OUTPUT_COLUMNS or c.startswith(PREFIX)]
    if clash:
        raise TrafficError(
            f"traffic column(s) {clash} clash with the back-test's own columns: rename them"
        )
    missing = [c for c in REQUIRED if c not in frame.columns]
    if missing:
        raise TrafficError(
            f"traffic {path!r} has no column(s) {missing}: expected {', '.join(STANDARD)} "
            "(broker, user and thread_time_ns are optional)"
        )
    # inputFiles() says file:///x where _metadata.file_path says file:/x: each file's rank
    # under both names, looked up directly (a regular expression on every row costs more
    # than reading it); a path in neither form is then looked up normalized
    rank = {_LOCAL_SCHEME.sub("file:/", name): i for i, name in enumerate(files)}
    names = {**rank, **{name: i for i, name in enumerate(files)}}
    file_rank = F.create_map(*[x for name, i in names.items() for x in (F.lit(name), F.lit(i))])
    given = F.col("_metadata.file_path")
    normalized = F.regexp_replace(given, _LOCAL_SCHEME.pattern, "file:/")
    ranked = F.coalesce(file_rank[given], file_rank[normalized])
    position = (
        F.col("_metadata.row_index")
        if chosen == "parquet"
        else F.monotonically_increasing_id()  # CSV: one partition per split, in split order
    )
    seq_file, seq_row = frames.SEQ_COLUMNS
    return frame.select(
        "*",
        (ranked.cast("long") * F.lit(1 << 44) + F.col("_metadata.file_block_start")).alias(
            seq_file
        ),
        position.cast("long").alias(seq_row),
    )


def check_traffic(path: str, input_format: str = "auto") -> str:
    """Check traffic on the local file system before Spark starts (a remote path is left
    to Spark); return the format it is read as (``parquet``, ``csv`` or, for Kafka's
    request log, :data:`~kquota.backtest.requestlog.FORMAT`).

    A path that does not exist, is empty, is not the format chosen, or cannot be read (a
    name too long, no permission) raises :class:`~kquota.exceptions.TrafficError` naming it.
    """
    if input_format == requestlog.FORMAT or (
        input_format == "auto" and requestlog.is_request_log(path)
    ):
        requestlog.log_files(path)  # raises naming what is missing or empty
        return requestlog.FORMAT
    try:
        if not is_remote(path):
            local = local_path(path)
            if not local.exists():
                raise TrafficError(
                    f"traffic {path!r} does not exist: expected a Parquet or CSV path"
                )
            if local.is_dir() and not any(
                p.is_file() and not p.name.startswith(("_", ".")) for p in local.rglob("*")
            ):
                raise TrafficError(f"traffic {path!r} is empty: the folder holds no data files")
            if local.is_file():
                with local.open("rb") as handle:  # readable, and not empty
                    if not handle.read(1):
                        raise TrafficError(f"traffic {path!r} is empty (0 bytes)")
        chosen = _detect_format(path, input_format)
        if chosen == "parquet" and not is_remote(path):
            _check_parquet_files(local_path(path))
    except OSError as exc:
        inside = f" ({exc.filename})" if exc.filename and str(exc.filename) != path else ""
        raise TrafficError(f"cannot read traffic {path!r}: {exc.strerror or exc}{inside}") from None
    return chosen


def prepare_output(out: str) -> None:
    """Create a local output folder (with its parents) and check that files can be
    created in it, before Spark starts; a remote one is left to Spark.

    Raises :class:`~kquota.exceptions.OutputError` naming ``out`` (a name too long, a path
    through a file, no permission); folders created for a failed check are removed.
    """
    if is_remote(out):
        return
    folder = local_path(out)
    created: list[Path] = []
    try:
        missing = [p for p in (folder, *folder.parents) if not p.exists()]
        for part in reversed(missing):
            part.mkdir()
            created.append(part)
        if not folder.is_dir():
            raise OutputError(f"cannot write to --out {out!r}: it is a file, not a folder")
        fd, probe = tempfile.mkstemp(prefix=".kquota-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except BaseException as exc:
        for part in reversed(created):
            with contextlib.suppress(OSError):
                part.rmdir()
        if isinstance(exc, FileExistsError):
            raise OutputError(
                f"cannot write to --out {out!r}: {exc.filename!r} is a file, not a folder"
            ) from None
        if isinstance(exc, OSError):
            raise OutputError(f"cannot write to --out {out!r}: {exc.strerror or exc}") from None
        raise


def _check_parquet_files(path: Path) -> None:
    """Refuse local files that are not Parquet before Spark fails on them, loudly."""
    files = [path] if path.is_file() else sorted(path.rglob("*"))
    for file in files:
        if not file.is_file() or file.name.startswith(("_", ".")) or file.suffix == ".crc":
            continue
        with file.open("rb") as handle:
            head = handle.read(4)
            handle.seek(max(file.stat().st_size - 4, 0))
            tail = handle.read(4)
        if head != b"PAR1" or tail != b"PAR1":
            raise TrafficError(
                f"traffic file {str(file)!r} is not Parquet: expected Parquet, or CSV "
                "(a .csv name or --format csv)"
            )


def parse(frame: DataFrame) -> DataFrame:
    """``frame`` with the standard columns parsed (``_kq_<name>``) and ``_kq_reason``."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    types = {f.name: f.dataType for f in frame.schema.fields}

    def whole(name: str, what: str) -> tuple[Column, Column]:
        """A column of whole numbers as long, and why a row's value is not one."""
        col, kind = F.col(name), types[name]
        missing = F.lit(f"{name} missing")
        if isinstance(kind, T.IntegralType):
            return col.cast("long"), F.when(col.isNull(), missing)
        if isinstance(kind, T.FractionalType):
            number = col.cast("double")
            ok = ~F.isnan(number) & (number == F.floor(number)) & (F.abs(number) < 9.2e18)
            return (
                F.when(ok, number.cast("long")),
                F.when(col.isNull(), missing).when(~ok, F.lit(f"{name} not {what}")),
            )
        if isinstance(kind, T.StringType):
            text = F.trim(col)
            value = text.try_cast("long")
            blank = col.isNull() | (text == "")
            return value, F.when(blank, missing).when(value.isNull(), F.lit(f"{name} not {what}"))
        return F.lit(None).cast("long"), F.lit(f"{name} of wrong type {kind.simpleString()}")

    def time_ms(name: str) -> tuple[Column, Column]:
        col, kind = F.col(name), types[name]
        if isinstance(kind, T.TimestampType | T.TimestampNTZType | T.DateType):
            value = F.unix_millis(col.cast("timestamp"))
            return value, F.when(col.isNull(), F.lit(f"{name} missing"))
        if isinstance(kind, T.StringType):
            text = F.trim(col)
            value = F.coalesce(text.try_cast("long"), F.unix_millis(F.try_to_timestamp(text)))
            blank = col.isNull() | (text == "")
            return value, F.when(blank, F.lit(f"{name} missing")).when(
                value.isNull(), F.lit(f"{name} unparsable")
            )
        return whole(name, "a time in epoch milliseconds")

    def text(name: str) -> Column:
        if name not in types:
            return F.lit("")
        return F.coalesce(F.col(name).cast("string"), F.lit(""))

    ts, ts_bad = time_ms(frames.TS)
    size, size_bad = whole(frames.BYTES, "a whole number")
    size_bad = F.coalesce(size_bad, F.when(size < 0, F.lit(f"{frames.BYTES} negative")))
    if frames.THREAD in types:
        thread, thread_bad = whole(frames.THREAD, "a whole number")
        thread_bad = F.when(F.col(frames.THREAD).isNull(), F.lit(None)).otherwise(
            F.coalesce(thread_bad, F.when(thread < 0, F.lit(f"{frames.THREAD} negative")))
        )
    else:
        thread, thread_bad = F.lit(None).cast("long"), F.lit(None).cast("string")
    api = F.col(frames.API).cast("string")
    api_bad = F.when(api.isNull() | (F.trim(api) == ""), F.lit(f"{frames.API} missing"))
    mutation: list[Column] = []
    mutation_bad = F.lit(None).cast("string")
    if frames.PARTITIONS in types:
        # a controller mutation: partitions >= 0 on CreateTopics, CreatePartitions or
        # DeleteTopics, with whether its version is strict
        partitions, partitions_bad = whole(frames.PARTITIONS, "a whole number")
        is_mutation = F.regexp_replace(F.lower(F.trim(api)), "_", "").isin(
            *sorted(frames.MUTATION_APIS)
        )
        strict = (
            F.col(frames.STRICT).cast("boolean")
            if frames.STRICT in types
            else F.lit(None).cast("boolean")
        )
        mutation_bad = (
            F.when(F.col(frames.PARTITIONS).isNull(), F.lit(None))
            .when(partitions_bad.isNotNull(), partitions_bad)
            .when(partitions < 0, F.lit(f"{frames.PARTITIONS} negative"))
            .when(partitions > 2**31 - 1, F.lit(f"{frames.PARTITIONS} over 2147483647"))
            .when(
                ~is_mutation,
                F.lit(
                    f"{frames.PARTITIONS} on an api not CreateTopics, CreatePartitions,"
                    " DeleteTopics"
                ),
            )
            .when(strict.isNull(), F.lit(f"{frames.STRICT} missing (a mutation needs it)"))
        )
        mutation = [partitions.alias("_kq_partitions"), strict.alias("_kq_strict")]
        if frames.TOPIC_PARTITIONS in types:
            # per-topic counts in request order (null: one topic of partitions)
            given = F.col(frames.TOPIC_PARTITIONS)
            kind = types[frames.TOPIC_PARTITIONS]
            if isinstance(kind, T.ArrayType) and isinstance(kind.elementType, T.IntegralType):
                topics = given.cast("array<long>")
                bad_topic = F.exists(topics, lambda v: v.isNull() | (v < 0) | (v > 2**31 - 1))
                total = F.aggregate(topics, F.lit(0).cast("long"), lambda acc, v: acc + v)
                topics_bad = (
                    F.when(given.isNull(), F.lit(None))
                    .when(
                        F.col(frames.PARTITIONS).isNull(),
                        F.lit(f"{frames.TOPIC_PARTITIONS} without {frames.PARTITIONS}"),
                    )
                    .when(
                        bad_topic,
                        F.lit(
                            f"{frames.TOPIC_PARTITIONS} with a null, negative or over"
                            " 2147483647 count"
                        ),
                    )
                    .when(
                        total != partitions,
                        F.lit(f"{frames.TOPIC_PARTITIONS} sum is not {frames.PARTITIONS}"),
                    )
                )
            else:
                topics = F.lit(None).cast("array<long>")
                topics_bad = F.when(
                    given.isNotNull(),
                    F.lit(f"{frames.TOPIC_PARTITIONS} of wrong type {kind.simpleString()}"),
                )
            mutation_bad = F.coalesce(mutation_bad, topics_bad)
            mutation.append(topics.cast("array<int>").alias("_kq_topic_partitions"))
    elif frames.TOPIC_PARTITIONS in types:
        # per-topic counts with no total to replay them by: refused, not carried through
        mutation_bad = F.when(
            F.col(frames.TOPIC_PARTITIONS).isNotNull(),
            F.lit(f"{frames.TOPIC_PARTITIONS} without {frames.PARTITIONS}"),
        )
    reason = F.coalesce(ts_bad, api_bad, size_bad, thread_bad, mutation_bad)
    return frame.select(
        "*",
        ts.alias("_kq_ts"),
        text(frames.BROKER).alias("_kq_broker"),
        text(frames.USER).alias("_kq_user"),
        text(frames.CLIENT).alias("_kq_client"),
        api.alias("_kq_api"),
        size.alias("_kq_bytes"),
        thread.alias("_kq_thread"),
        *mutation,
        reason.alias(REASON_COLUMN),
    )


def valid(parsed: DataFrame, columns: Sequence[str]) -> DataFrame:
    """Valid rows: the standard columns parsed, then every other input column unchanged."""
    from pyspark.sql import functions as F

    mutation = [frames.PARTITIONS, frames.STRICT] if "_kq_partitions" in parsed.columns else []
    if "_kq_topic_partitions" in parsed.columns:
        mutation.append(frames.TOPIC_PARTITIONS)
    extras = [
        c for c in columns if c not in STANDARD and c not in mutation and not c.startswith(PREFIX)
    ]
    standard = [F.col(f"_kq_{short}").alias(name) for name, short in _SHORT.items()]
    standard += [F.col(f"_kq_{name}").alias(name) for name in mutation]
    return parsed.where(F.col(REASON_COLUMN).isNull()).select(
        *standard, *extras, *frames.SEQ_COLUMNS
    )


_SHORT: Final = {
    frames.TS: "ts",
    frames.BROKER: "broker",
    frames.USER: "user",
    frames.CLIENT: "client",
    frames.API: "api",
    frames.BYTES: "bytes",
    frames.THREAD: "thread",
}
