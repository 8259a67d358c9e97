"""The back-test as a Spark job: only wiring from Spark to :mod:`kquota.backtest.kernel`.

Steps (each Spark action is announced by :class:`Progress`):

1. read the traffic (Parquet or CSV) and note each row's input position (ties in time are
   replayed in input order);
2. validate: bad rows (missing or negative bytes, unparsable times, wrong types) get a
   reason, are counted and written to ``DIR/quarantine/``; ``strict`` refuses them;
3. resolve every request's sensors with the core's precedence rules (``mapInArrow``);
4. replicate the rows once per scenario (``--scale``) and replay: in open loop, group by
   (scenario, broker, hash bucket of the request-quota sensor) for the request quota, then
   by (scenario, broker, API, hash bucket of the byte-rate sensor) for produce and fetch
   (``applyInArrow``; a sensor always falls into one group, replayed in time order); in
   closed loop, group by (scenario, broker), which is sequential;
5. write ``DIR/requests/`` (partitioned by scenario), read it back for ``DIR/entities/``
   (one row per sensor) and, with ``recommend``, ``DIR/recommendations/``;
6. collect only small aggregates for the report.

The job never collects the traffic to the driver. Functions shipped to executors are
module-level functions of this package with the configuration passed as JSON, so the
executors need ``kquota`` installed (see the README's "cluster" notes).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, TextIO

import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]

from kquota import QuotaManager
from kquota.backtest import kernel, requestlog
from kquota.backtest.kernel import (
    ADDED_LATENCY,
    API,
    BROKER,
    BYTES,
    CLIENT,
    FETCH_THROTTLE,
    PRODUCE_THROTTLE,
    RECORDED,
    REQUEST_THROTTLE,
    SENSOR_CLIENT,
    SENSOR_USER,
    SENT,
    SEQ_COLUMNS,
    THREAD,
    THROTTLE,
    THROTTLE_OF,
    TIME,
    TS,
    USAGE,
    USER,
    ReplayMode,
)
from kquota.config import QuotaConfig
from kquota.config.model import QuotaType
from kquota.exceptions import OutputError, TrafficError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession
    from pyspark.sql.types import DataType, StructType

__all__ = [
    "BacktestOptions",
    "BacktestResult",
    "Progress",
    "check_traffic",
    "prepare_output",
    "run",
    "spark_errors",
    "spark_message",
    "spark_session",
]

SCENARIO: Final = "scenario"
"""The what-if scenario of a result row: ``x<scale>`` (``x1`` is the configuration as given)."""
REQUEST_SENSOR_USER: Final = "request_sensor_user"
REQUEST_SENSOR_CLIENT: Final = "request_sensor_client_id"
REASON: Final = "reason"
"""Why a quarantined row was refused."""

_RESULT_NAMES: Final = (
    SCENARIO,
    PRODUCE_THROTTLE,
    FETCH_THROTTLE,
    REQUEST_THROTTLE,
    THROTTLE,
    SENT,
    ADDED_LATENCY,
)
"""The per-request results of a replay, in output order."""

OUTPUT_COLUMNS: Final = (
    *_RESULT_NAMES,
    SENSOR_USER,
    SENSOR_CLIENT,
    REQUEST_SENSOR_USER,
    REQUEST_SENSOR_CLIENT,
)
"""Columns the back-test adds to every request (they must not be in the input)."""

_SCN: Final = "_kq_scn"
_KIND: Final = "_kq_kind"
_BUCKET: Final = "_kq_bucket"
_REASON: Final = "_kq_reason"
_PREFIX: Final = "_kq_"

STANDARD: Final = (TS, BROKER, USER, CLIENT, API, BYTES, THREAD)
"""The traffic table's own columns, in output order."""
REQUIRED: Final = (TS, CLIENT, API, BYTES)
"""Columns the traffic must have (``broker``, ``user``, ``thread_time_ns`` are optional)."""

LOG4J_CONFIG: Final = Path(__file__).with_name("log4j2.properties")
"""Quiet logging for the Spark driver kquota starts locally (errors only)."""

_LOCAL_SCHEME: Final = re.compile(r"^file:/+")

PartitionBy = Literal["broker", "sensor"]
"""How open-loop replay splits the work: whole brokers (one pass over the traffic), or
sensors (hash of the sensor tags: more parallel, a second pass when request quotas apply)."""


# -- options and results ---------------------------------------------------------------------


@dataclass(frozen=True)
class BacktestOptions:
    """What to back-test and where the results go."""

    traffic: str
    quotas: QuotaConfig
    out: str
    mode: ReplayMode = "open"
    scales: tuple[float, ...] = (1.0,)
    recommend: bool = False
    target: float = 0.01
    strict: bool = False
    input_format: str = "auto"
    buckets: int | None = None
    report: bool = True
    partition: PartitionBy = "broker"
    log: requestlog.LogOptions = field(default_factory=requestlog.LogOptions)
    """How to read Kafka's request log (``input_format`` ``kafka-request-log``)."""

    def __post_init__(self) -> None:
        if self.mode not in ("open", "closed"):
            raise TrafficError(f"invalid mode {self.mode!r}: expected 'open' or 'closed'")
        if not self.scales or any(not (s > 0 and np.isfinite(s)) for s in self.scales):
            raise TrafficError(f"invalid scales {self.scales!r}: expected numbers > 0")
        if len(set(self.scales)) != len(self.scales):
            raise TrafficError(f"invalid scales {self.scales!r}: each scale once")
        if not 0.0 <= self.target < 1.0:
            raise TrafficError(f"invalid target {self.target!r}: expected a fraction in [0, 1)")
        if self.input_format not in ("auto", "parquet", "csv", requestlog.FORMAT):
            raise TrafficError(
                f"invalid format {self.input_format!r}: expected auto, parquet, csv or "
                f"{requestlog.FORMAT}"
            )
        if self.partition not in ("broker", "sensor"):
            raise TrafficError(
                f"invalid partition {self.partition!r}: expected 'broker' or 'sensor'"
            )
        if self.buckets is not None and self.buckets < 1:
            raise TrafficError(f"invalid buckets {self.buckets!r}: expected a number >= 1")

    @property
    def scenarios(self) -> list[str]:
        """Scenario labels, one per scale: ``x0.5``, ``x1``, ``x2``."""
        return [scenario_label(s) for s in self.scales]

    @property
    def base_index(self) -> int:
        """The scenario recommendations and the report use: ``x1`` if present, else the first."""
        return self.scales.index(1.0) if 1.0 in self.scales else 0


def scenario_label(scale: float) -> str:
    """``x0.5``, ``x1``, ``x2``: the scenario of a scaled configuration."""
    return f"x{scale:g}"


@dataclass
class BacktestResult:
    """What a run produced: counts, output paths and the small tables for the report."""

    rows_read: int
    rows_valid: int
    quarantined: dict[str, int]
    out: str
    mode: ReplayMode
    scenarios: list[str]
    base_scenario: str
    totals: pd.DataFrame
    top_entities: pd.DataFrame
    comparison: pd.DataFrame
    histogram: pd.DataFrame
    rate_series: dict[str, pd.DataFrame]
    recommendations: pd.DataFrame | None
    config: QuotaConfig
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    report: Path | None = None

    @property
    def rows_quarantined(self) -> int:
        """How many input rows were refused."""
        return sum(self.quarantined.values())


# -- progress ---------------------------------------------------------------------------------


class Progress:
    """Phase lines and, while Spark works, its task counts (from the status tracker)."""

    def __init__(self, spark: SparkSession | None, stream: TextIO | None = sys.stderr) -> None:
        self._spark = spark
        self._stream = stream
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._phase = ""
        self._started = time.monotonic()

    def phase(self, message: str) -> None:
        """Announce a step of the job."""
        self._phase = message
        self._write(f"[{time.monotonic() - self._started:6.1f}s] {message}")

    def note(self, message: str) -> None:
        """Print an indented detail of the current step."""
        self._write(f"          {message}")

    def _write(self, line: str) -> None:
        if self._stream is not None:
            print(line, file=self._stream, flush=True)

    def __enter__(self) -> Progress:
        if self._stream is not None and self._spark is not None:
            self._thread = threading.Thread(target=self._watch, name="kquota-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _watch(self) -> None:
        assert self._spark is not None
        tracker = self._spark.sparkContext.statusTracker()
        last = ""
        while not self._stop.wait(3.0):
            try:
                stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            except Exception:  # the context is stopping; progress is best effort
                return
            done = sum(s.numCompletedTasks for s in stages if s is not None)
            total = sum(s.numTasks for s in stages if s is not None)
            if total:
                line = f"          ... {done}/{total} tasks of {len(stages)} running stage(s)"
                if line != last:
                    self._write(line)
                    last = line


# -- the session ------------------------------------------------------------------------------


def spark_session(
    master: str | None = None, app_name: str = "kquota backtest"
) -> tuple[SparkSession, bool]:
    """The active SparkSession, or a new one; returns ``(session, created)``.

    A session that already exists (a notebook, ``spark-submit``, the tests) is used as it
    is and left running. Otherwise a session is started on ``master``; without one,
    ``spark-submit``'s ``spark.master`` or else ``local[*]``. A local session gets the
    current Python for its workers, UTC as its time zone and quiet logs.
    """
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    conf = SparkConf()
    chosen = master or conf.get("spark.master", None) or "local[*]"
    builder = SparkSession.builder.appName(app_name).master(chosen)
    builder = builder.config("spark.sql.execution.arrow.pyspark.enabled", "true")
    builder = builder.config("spark.ui.showConsoleProgress", "false")
    if chosen.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        builder = builder.config("spark.sql.session.timeZone", "UTC")
        if conf.get("spark.driver.memory", None) is None:
            builder = builder.config("spark.driver.memory", "4g")
        if LOG4J_CONFIG.exists() and conf.get("spark.driver.extraJavaOptions", None) is None:
            builder = builder.config(
                "spark.driver.extraJavaOptions",
                f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}",
            )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session, True


# -- reading and validating -------------------------------------------------------------------


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _local(path: str) -> Path:
    return Path(path.removeprefix("file://"))


def _detect_format(path: str, requested: str) -> str:
    if requested != "auto":
        return requested
    lowered = path.lower().rstrip("/")
    if lowered.endswith((".csv", ".csv.gz")):
        return "csv"
    if lowered.endswith((".parquet", ".pq")) or _is_remote(path):
        return "parquet"
    local = _local(path)
    if local.is_dir():
        names = [p.name.lower() for p in local.rglob("*") if p.is_file()]
        if any(n.endswith((".csv", ".csv.gz")) for n in names) and not any(
            n.endswith(".parquet") for n in names
        ):
            return "csv"
    return "parquet"


def read_traffic(spark: SparkSession, path: str, input_format: str = "auto") -> DataFrame:
    """The traffic table with its rows' input positions (:data:`~kernel.SEQ_COLUMNS`).

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
    clash = [c for c in frame.columns if c in OUTPUT_COLUMNS or c.startswith(_PREFIX)]
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
    # inputFiles() says file:///x where _metadata.file_path says file:/x: compare them alike
    rank = {_LOCAL_SCHEME.sub("file:/", name): i for i, name in enumerate(files)}
    file_rank = F.create_map(*[x for name, i in rank.items() for x in (F.lit(name), F.lit(i))])
    file_path = F.regexp_replace(F.col("_metadata.file_path"), _LOCAL_SCHEME.pattern, "file:/")
    position = (
        F.col("_metadata.row_index")
        if chosen == "parquet"
        else F.monotonically_increasing_id()  # CSV: one partition per split, in split order
    )
    seq_file, seq_row = SEQ_COLUMNS
    return frame.select(
        "*",
        (
            file_rank[file_path].cast("long") * F.lit(1 << 44) + F.col("_metadata.file_block_start")
        ).alias(seq_file),
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
        if not _is_remote(path):
            local = _local(path)
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
        if chosen == "parquet" and not _is_remote(path):
            _check_parquet_files(_local(path))
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
    if _is_remote(out):
        return
    folder = _local(out)
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


def spark_errors() -> tuple[type[Exception], ...]:
    """What a Spark call raises when Spark or Java fails: Py4J's errors (a Java exception,
    a lost gateway) and PySpark's own (``AnalysisException``, captured Java errors,
    ``PythonException``...). For ``except spark_errors() as exc:``."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JError)


def spark_message(exc: BaseException) -> str:
    """One line saying what a Spark error is: the Java exception's own first line (not
    Py4J's "An error occurred while calling o42.parquet"), or the last line of a Python
    worker's traceback, or the first line of the message."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            return _first_line(str(java.toString()))
        except Exception:  # the gateway is gone: fall back to Python's text
            pass
    text = str(exc).strip()
    if "Traceback (most recent call last)" in text:
        last = [line for line in text.splitlines() if line.strip() and not line[:1].isspace()]
        if last:
            return last[-1].strip()
    return _first_line(text) or type(exc).__name__


@contextlib.contextmanager
def _writing(path: str) -> Iterator[None]:
    """Turn an ``OSError`` or a Spark failure while writing ``path`` into one
    :class:`~kquota.exceptions.OutputError` naming it."""
    try:
        yield
    except OSError as exc:
        raise OutputError(f"cannot write {path!r}: {exc.strerror or exc}") from None
    except spark_errors() as exc:
        raise OutputError(f"cannot write {path!r}: {spark_message(exc)}") from None


@contextlib.contextmanager
def _reading(path: str) -> Iterator[None]:
    """Turn a Spark failure while reading the traffic ``path`` into one
    :class:`~kquota.exceptions.TrafficError` naming it."""
    try:
        yield
    except spark_errors() as exc:
        raise TrafficError(f"cannot read traffic {path!r}: {spark_message(exc)}") from None


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


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""


def _parsed(frame: DataFrame) -> DataFrame:
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

    ts, ts_bad = time_ms(TS)
    size, size_bad = whole(BYTES, "a whole number")
    size_bad = F.coalesce(size_bad, F.when(size < 0, F.lit(f"{BYTES} negative")))
    if THREAD in types:
        thread, thread_bad = whole(THREAD, "a whole number")
        thread_bad = F.when(F.col(THREAD).isNull(), F.lit(None)).otherwise(
            F.coalesce(thread_bad, F.when(thread < 0, F.lit(f"{THREAD} negative")))
        )
    else:
        thread, thread_bad = F.lit(None).cast("long"), F.lit(None).cast("string")
    api = F.col(API).cast("string")
    api_bad = F.when(api.isNull() | (F.trim(api) == ""), F.lit(f"{API} missing"))
    reason = F.coalesce(ts_bad, api_bad, size_bad, thread_bad)
    return frame.select(
        "*",
        ts.alias("_kq_ts"),
        text(BROKER).alias("_kq_broker"),
        text(USER).alias("_kq_user"),
        text(CLIENT).alias("_kq_client"),
        api.alias("_kq_api"),
        size.alias("_kq_bytes"),
        thread.alias("_kq_thread"),
        reason.alias(_REASON),
    )


def _valid(parsed: DataFrame, columns: Sequence[str]) -> DataFrame:
    """Valid rows: the standard columns parsed, then every other input column unchanged."""
    from pyspark.sql import functions as F

    extras = [c for c in columns if c not in STANDARD and not c.startswith(_PREFIX)]
    standard = [F.col(f"_kq_{short}").alias(name) for name, short in _SHORT.items()]
    return parsed.where(F.col(_REASON).isNull()).select(*standard, *extras, *SEQ_COLUMNS)


_SHORT: Final = {
    TS: "ts",
    BROKER: "broker",
    USER: "user",
    CLIENT: "client",
    API: "api",
    BYTES: "bytes",
    THREAD: "thread",
}


# -- what runs on the executors ----------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _config(text: str) -> QuotaConfig:
    return QuotaConfig.from_json(json.loads(text))


@functools.lru_cache(maxsize=16)
def _managers(text: str) -> dict[QuotaType, QuotaManager]:
    config = _config(text)
    return {t: config.manager(t) for t in kernel.QUOTA_TYPES if config.quotas(t)}


def _frame(table: pa.Table | pa.RecordBatch, names: Sequence[str]) -> pd.DataFrame:
    """The kernel's columns of ``table`` as pandas (strings as categoricals: cheap)."""
    present = [n for n in names if n in table.schema.names]
    return table.select(present).to_pandas(strings_to_categorical=True)


def _categorical(values: pa.Array | pa.ChunkedArray) -> pd.Series:
    """A string column as a pandas categorical, encoded by Arrow (fast for repeated values)."""
    return values.dictionary_encode().to_pandas()


def _string_column(values: pd.Categorical) -> pa.Array:
    return pa.array(values).cast(pa.string())


_TAGS: Final = (
    (SENSOR_USER, "byte_user"),
    (SENSOR_CLIENT, "byte_client"),
    (REQUEST_SENSOR_USER, "request_user"),
    (REQUEST_SENSOR_CLIENT, "request_client"),
)
"""Output columns of the sensor tags and their :func:`kernel.resolve_sensors` keys."""


def _resolve_arrays(
    config_json: str, users: pa.Array, clients: pa.Array, apis: pa.Array
) -> pa.Array:
    """Scalar Arrow UDF: each request's kind and sensor tags, as a struct."""
    frame = pd.DataFrame(
        {USER: _categorical(users), CLIENT: _categorical(clients), API: _categorical(apis)}
    )
    resolved = kernel.resolve_sensors(frame, _managers(config_json))
    fields = [(_KIND, "kind"), *_TAGS]
    return pa.StructArray.from_arrays(
        [_string_column(resolved[key]) for _, key in fields], names=[name for name, _ in fields]
    )


def _request_column(index: int) -> str:
    return f"_kq_r{index}"


@dataclass(frozen=True)
class _StreamPlan:
    """What one streaming pass over a time-sorted partition does."""

    configs: tuple[str, ...]
    labels: tuple[str, ...]
    base: str
    resolve: bool
    request: bool
    replay_bytes: bool
    final: bool


_KERNEL_COLUMNS: Final = (BROKER, TS, USER, CLIENT, API, BYTES, THREAD)


def _stream(plan: _StreamPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition sorted by time (whole sensors in it): open-loop replay.

    With ``plan.final``, every row comes out once per scenario with its throttles; without
    it, the rows come out once with one request-throttle column per scenario (the first of
    two passes).
    """
    loop = kernel.OpenLoop([_config(c) for c in plan.configs])
    managers = _managers(plan.base)
    for batch in batches:
        n = batch.num_rows
        names = batch.schema.names
        frame = _frame(batch, _KERNEL_COLUMNS)
        if plan.request:
            requests = loop.request_throttles(frame)
        else:
            requests = [
                batch.column(names.index(_request_column(i))).to_numpy(zero_copy_only=False)
                if _request_column(i) in names
                else np.zeros(n, dtype=np.int32)
                for i in range(len(plan.configs))
            ]
        if not plan.final:
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, *(pa.array(r, pa.int32()) for r in requests)],
                names=[*names, *(_request_column(i) for i in range(len(requests)))],
            )
            continue
        kept = [i for i, name in enumerate(names) if not name.startswith("_kq_r")]
        base = [batch.column(i) for i in kept]
        base_names = [names[i] for i in kept]
        if plan.resolve:
            resolved = kernel.resolve_sensors(frame, managers)
            base += [_string_column(resolved[key]) for _, key in _TAGS]
            base_names += [name for name, _ in _TAGS]
        if plan.replay_bytes:
            byte_results = loop.byte_throttles(frame, requests)
        else:
            zeros = np.zeros(n, dtype=np.int32)
            byte_results = [(zeros, zeros)] * len(plan.configs)
        ts = batch.column(names.index(TS))
        no_latency = pa.array(np.zeros(n, dtype=np.int64))
        for label, request, (produce, fetch) in zip(
            plan.labels, requests, byte_results, strict=True
        ):
            yield pa.RecordBatch.from_arrays(
                [
                    *base,
                    pa.repeat(pa.scalar(label, pa.string()), n),
                    pa.array(produce, pa.int32()),
                    pa.array(fetch, pa.int32()),
                    pa.array(request, pa.int32()),
                    pa.array(kernel.applied_throttle(produce, fetch, request), pa.int32()),
                    ts,
                    no_latency,
                ],
                names=[*base_names, *_RESULT_NAMES],
            )


def _closed_stage(configs: Sequence[str], base_json: str, table: pa.Table) -> pa.Table:
    """applyInArrow: the closed-loop replay of one (scenario, broker) group."""
    frame = _frame(table, (*_KERNEL_COLUMNS, *SEQ_COLUMNS))
    result = kernel.replay_closed(frame, _config(configs[table.column(_SCN)[0].as_py()]))
    resolved = kernel.resolve_sensors(frame, _managers(base_json))
    for name, key in _TAGS:
        table = table.append_column(name, _string_column(resolved[key]))
    for name, kind in (
        (PRODUCE_THROTTLE, pa.int32()),
        (FETCH_THROTTLE, pa.int32()),
        (REQUEST_THROTTLE, pa.int32()),
        (THROTTLE, pa.int32()),
        (SENT, pa.int64()),
        (ADDED_LATENCY, pa.int64()),
    ):
        table = table.append_column(name, pa.array(result[name].to_numpy(), kind))
    return table


def _peak_batches(window_json: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition holding whole sensors: peak usage and p99 throttle."""
    table = pa.Table.from_batches(list(batches))
    if not table.num_rows:
        return
    ids, peaks, p99 = kernel.sensor_peaks(
        table.column("_sid").to_numpy(),
        table.column(TIME).to_numpy(),
        table.column("_amount").to_numpy(),
        table.column(THROTTLE).to_numpy(),
        _config(window_json).window,
    )
    yield pa.RecordBatch.from_arrays(
        [pa.array(ids), pa.array(peaks), pa.array(p99)],
        names=["_sid", "_peak", "p99_throttle_ms"],
    )


def _pair_batches(base_json: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over distinct (user, client_id) pairs: their sensors and bounds."""
    managers = _managers(base_json)
    for batch in batches:
        frame = _frame(batch, (USER, CLIENT))
        out = kernel.pair_sensors(frame[USER], frame[CLIENT], managers)
        yield pa.RecordBatch.from_pandas(out, preserve_index=False)


def _label_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over entity rows: the entity as Kafka names it."""
    for batch in batches:
        users = batch.column(batch.schema.names.index(SENSOR_USER)).to_pylist()
        clients = batch.column(batch.schema.names.index(SENSOR_CLIENT)).to_pylist()
        labels = [
            kernel.entity_label(u or "", c or "") for u, c in zip(users, clients, strict=True)
        ]
        index = batch.schema.names.index("entity")
        yield batch.set_column(index, "entity", pa.array(labels, pa.string()))


def _recommend_stage(base_json: str, target: float, schema: pa.Schema, table: pa.Table) -> pa.Table:
    """applyInArrow: recommendations for the entities of one (quota type, bucket) group."""
    quota_type = kernel.QUOTA_TYPES[kernel.QUOTA_TYPES.index(table.column("quota_type")[0].as_py())]
    frame = _frame(
        table, (BROKER, SENSOR_USER, SENSOR_CLIENT, TS, USAGE, "unrecord_if", *SEQ_COLUMNS)
    )
    out = kernel.recommend(frame, _config(base_json).window, quota_type, target)
    return pa.Table.from_pandas(out, schema=schema, preserve_index=False)


# -- the job -------------------------------------------------------------------------------------


def _with_field(schema: StructType, *fields: tuple[str, DataType]) -> StructType:
    from pyspark.sql.types import StructField, StructType

    return StructType([*schema.fields, *(StructField(n, t, True) for n, t in fields)])


def _result_fields() -> list[tuple[str, DataType]]:
    from pyspark.sql.types import IntegerType, LongType, StringType

    int32 = IntegerType()
    return [
        (SCENARIO, StringType()),
        (PRODUCE_THROTTLE, int32),
        (FETCH_THROTTLE, int32),
        (REQUEST_THROTTLE, int32),
        (THROTTLE, int32),
        (SENT, LongType()),
        (ADDED_LATENCY, LongType()),
    ]


def _tag_fields() -> list[tuple[str, DataType]]:
    from pyspark.sql.types import StringType

    return [(name, StringType()) for name, _ in _TAGS]


def _replay(
    spark: SparkSession, valid: DataFrame, options: BacktestOptions, configs: Sequence[str]
) -> DataFrame:
    """Every request once per scenario, with its throttles, sending time and sensor tags."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, StructType

    base_json = options.quotas.dumps()
    config = options.quotas
    labels = tuple(options.scenarios)
    order = [F.col(TS), *(F.col(c) for c in SEQ_COLUMNS)]
    if options.mode == "closed":
        scenarios = spark.createDataFrame(
            [(label, i) for i, label in enumerate(labels)], f"{SCENARIO} string, {_SCN} int"
        )
        rows = valid.crossJoin(F.broadcast(scenarios))
        fields = [f for f in _result_fields() if f[0] != SCENARIO]
        schema = _with_field(rows.schema, *_tag_fields(), *fields)
        return (
            rows.groupBy(_SCN, BROKER)
            .applyInArrow(lambda table: _closed_stage(configs, base_json, table), schema)
            .drop(_SCN)
        )

    request = bool(config.quotas("request")) and THREAD in valid.columns
    replay_bytes = bool(config.quotas("produce") or config.quotas("fetch"))
    plan = functools.partial(
        _StreamPlan, tuple(configs), labels, base_json, replay_bytes=replay_bytes
    )
    if options.partition == "broker":
        # one pass: a partition holds whole brokers, every sensor of them in time order
        rows = valid.repartition(F.col(BROKER)).sortWithinPartitions(*order)
        final = plan(resolve=True, request=request, final=True)
        schema = _with_field(valid.schema, *_tag_fields(), *_result_fields())
        return rows.mapInArrow(lambda batches: _stream(final, batches), schema)

    # by sensor: resolve the sensors first, then one pass per quota family
    tag_type = ", ".join(f"{name}: string" for name in (_KIND, *(n for n, _ in _TAGS)))

    def resolve(users: pa.Array, clients: pa.Array, apis: pa.Array) -> pa.Array:
        return _resolve_arrays(base_json, users, clients, apis)

    arrow_udf = F.arrow_udf  # type: ignore[attr-defined]  # PySpark >= 4.1, not in its stubs
    tags = arrow_udf(resolve, f"struct<{tag_type}>")(F.col(USER), F.col(CLIENT), F.col(API))
    rows = valid.withColumn("_kq_tags", tags)
    rows = rows.select(
        *valid.columns, *(F.col(f"_kq_tags.{n}").alias(n) for n in (_KIND, *(t for t, _ in _TAGS)))
    )
    if request:
        rows = rows.repartition(
            F.col(BROKER), F.col(REQUEST_SENSOR_USER), F.col(REQUEST_SENSOR_CLIENT)
        ).sortWithinPartitions(*order)
        first = plan(resolve=False, request=True, final=False)
        schema = _with_field(
            rows.schema, *((_request_column(i), IntegerType()) for i in range(len(configs)))
        )
        rows = rows.mapInArrow(lambda batches: _stream(first, batches), schema)
    if replay_bytes:
        other = F.col(_KIND) == kernel.KIND_OTHER
        spread = F.when(other, F.xxhash64(F.col(SEQ_COLUMNS[1]))).otherwise(
            F.xxhash64(F.col(BROKER), F.col(_KIND), F.col(SENSOR_USER), F.col(SENSOR_CLIENT))
        )
        rows = rows.repartition(spread).sortWithinPartitions(*order)
    final = plan(resolve=False, request=False, final=True)
    kept = [f for f in rows.schema.fields if not f.name.startswith("_kq_r")]
    schema = _with_field(StructType(kept), *_result_fields())
    return rows.mapInArrow(lambda batches: _stream(final, batches), schema).drop(_KIND)


def _usage_all(requests: DataFrame, config: QuotaConfig) -> DataFrame | None:
    """One row per request and sensor it was recorded by (one scan of the requests).

    Columns: scenario, ``quota_type``, broker, the sensor's tags, user, client_id, ts_ms,
    ``time_ms`` (when it was recorded), ``usage`` (bytes or thread nanoseconds), bytes,
    ``recorded`` (false for an unrecorded fetch), ``throttle_ms`` (that quota type's),
    added latency, ``unrecord_if`` (the request quota throttled it) and the input position.
    """
    from pyspark.sql import functions as F

    kind = F.lower(F.col(API))
    items = []
    for quota_type in kernel.QUOTA_TYPES:
        if not config.quotas(quota_type):
            continue
        if quota_type == "request":
            present = F.col(THREAD).isNotNull()
            tags = (F.col(REQUEST_SENSOR_USER), F.col(REQUEST_SENSOR_CLIENT))
            usage, recorded = F.col(THREAD), F.lit(True)
        else:
            present = kind == quota_type
            tags = (F.col(SENSOR_USER), F.col(SENSOR_CLIENT))
            usage = F.col(BYTES)
            recorded = (
                (F.col(FETCH_THROTTLE) <= 0) & (F.col(REQUEST_THROTTLE) <= 0)
                if quota_type == "fetch"
                else F.lit(True)
            )
        item = F.struct(
            F.lit(quota_type).alias("quota_type"),
            tags[0].alias(SENSOR_USER),
            tags[1].alias(SENSOR_CLIENT),
            usage.cast("long").alias(USAGE),
            recorded.alias(RECORDED),
            F.col(THROTTLE_OF[quota_type]).alias(THROTTLE),
        )
        items.append(F.when(present, item))
    if not items:
        return None
    recorded_by = F.filter(F.array(*items), lambda item: item.isNotNull())
    return requests.select(
        F.col(SCENARIO),
        F.col(BROKER),
        F.col(USER),
        F.col(CLIENT),
        F.col(TS),
        F.col(SENT).alias(TIME),
        F.col(BYTES),
        F.col(ADDED_LATENCY),
        (F.col(REQUEST_THROTTLE) > 0).alias("unrecord_if"),
        *SEQ_COLUMNS,
        F.explode(recorded_by).alias("_item"),
    ).select(
        SCENARIO,
        "_item.quota_type",
        BROKER,
        f"_item.{SENSOR_USER}",
        f"_item.{SENSOR_CLIENT}",
        USER,
        CLIENT,
        TS,
        TIME,
        f"_item.{USAGE}",
        BYTES,
        f"_item.{RECORDED}",
        f"_item.{THROTTLE}",
        ADDED_LATENCY,
        "unrecord_if",
        *SEQ_COLUMNS,
    )


_ENTITY_NAMES: Final = (SCENARIO, *kernel.SUMMARY_COLUMNS)

ENTITY_SCHEMA: Final = (
    f"{SCENARIO} string, quota_type string, {BROKER} string, {SENSOR_USER} string, "
    f"{SENSOR_CLIENT} string, entity string, quota double, requests long, {BYTES} long, "
    f"{USAGE} long, throttled_requests long, throttled_fraction double, "
    "total_throttle_ms long, mean_throttle_ms double, p99_throttle_ms long, "
    "max_throttle_ms long, peak_rate double, utilization double, "
    "mean_added_latency_ms double, max_added_latency_ms long"
)
"""The schema of ``DIR/entities/``: one row per (scenario, quota type, broker, sensor)."""

RECOMMENDATION_SCHEMA: Final = (
    f"quota_type string, {SENSOR_USER} string, {SENSOR_CLIENT} string, entity string, "
    "brokers long, requests long, recommended_quota double, throttled_fraction double"
)
"""The schema the recommend stage returns (``DIR/recommendations/`` adds current values)."""


def _arrow_schema(ddl: str) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(ddl)
    assert isinstance(schema, StructType)
    return to_arrow_schema(schema)


def _entities(
    spark: SparkSession,
    usage: DataFrame,
    valid: DataFrame,
    options: BacktestOptions,
) -> DataFrame:
    """Per sensor and scenario: :func:`kernel.summarize`'s columns, with Spark doing the sums.

    The same definitions as the kernel: exact integer sums and counts aggregated by Spark;
    the windowed peak and the nearest-rank p99 from :func:`kernel.sensor_peaks` on
    partitions that hold whole sensors; the bounds from the core, per sensor of the
    configuration (a scenario's bound is the base bound times its scale, exactly as
    :meth:`~kquota.config.QuotaConfig.scaled` computes it).
    """
    from pyspark.sql import functions as F

    keys = [SCENARIO, "quota_type", BROKER, SENSOR_USER, SENSOR_CLIENT]
    window = options.quotas.window
    # a 64-bit id per sensor keeps the heavy aggregations on one fixed-width key
    usage = usage.withColumn("_sid", F.xxhash64(*keys))
    throttle = F.greatest(F.col(THROTTLE), F.lit(0))
    stats = usage.groupBy("_sid", *keys).agg(
        F.count(F.lit(1)).alias("requests"),
        F.sum(BYTES).alias(BYTES),
        F.sum(USAGE).alias(USAGE),
        F.sum((throttle > 0).cast("long")).alias("throttled_requests"),
        F.sum(throttle.cast("long")).alias("total_throttle_ms"),
        F.max(throttle).cast("long").alias("max_throttle_ms"),
        F.sum(ADDED_LATENCY).alias("_latency"),
        F.max(ADDED_LATENCY).alias("max_added_latency_ms"),
    )
    window_json = QuotaConfig(window).dumps()
    amount = F.when(F.col(RECORDED), F.col(USAGE)).otherwise(F.lit(0)).cast("long")
    peaks = (
        usage.select("_sid", TIME, amount.alias("_amount"), THROTTLE)
        .repartition("_sid")
        .mapInArrow(
            lambda batches: _peak_batches(window_json, batches),
            "_sid long, _peak long, p99_throttle_ms long",
        )
    )
    base_json = options.quotas.dumps()
    bounds = (
        valid.select(USER, CLIENT)
        .distinct()
        .mapInArrow(
            lambda batches: _pair_batches(base_json, batches),
            f"quota_type string, {SENSOR_USER} string, {SENSOR_CLIENT} string, quota double",
        )
        .where(~F.isnan("quota"))
        .groupBy("quota_type", SENSOR_USER, SENSOR_CLIENT)
        .agg(F.max("quota").alias("_quota"))
    )
    scales = spark.createDataFrame(
        list(zip(options.scenarios, options.scales, strict=True)),
        f"{SCENARIO} string, _scale double",
    )
    unit = F.when(F.col("quota_type") == "request", F.lit(kernel.NANOS_TO_PERCENT)).otherwise(
        F.lit(1.0)
    )
    quota = F.col("_quota") * F.col("_scale")
    peak_rate = F.col("_peak").cast("double") * unit / F.lit(kernel.rate_span_seconds(window))
    entities = (
        stats.join(peaks, "_sid")
        .join(F.broadcast(scales), SCENARIO)
        .join(bounds, ["quota_type", SENSOR_USER, SENSOR_CLIENT], "left")
        .select(
            *keys,
            F.lit(None).cast("string").alias("entity"),
            quota.alias("quota"),
            "requests",
            BYTES,
            USAGE,
            "throttled_requests",
            (F.col("throttled_requests") / F.col("requests")).alias("throttled_fraction"),
            "total_throttle_ms",
            (F.col("total_throttle_ms") / F.col("requests")).alias("mean_throttle_ms"),
            "p99_throttle_ms",
            "max_throttle_ms",
            peak_rate.alias("peak_rate"),
            (peak_rate / quota).alias("utilization"),
            (F.col("_latency") / F.col("requests")).alias("mean_added_latency_ms"),
            "max_added_latency_ms",
        )
    )
    return entities.mapInArrow(_label_batches, entities.schema)


def run(
    spark: SparkSession, options: BacktestOptions, progress: Progress | None = None
) -> BacktestResult:
    """Run the back-test; raise :class:`~kquota.exceptions.TrafficError` on bad input."""
    progress = progress or Progress(None, None)
    settings = {
        "spark.sql.execution.arrow.maxRecordsPerBatch": "50000",
        "spark.sql.maxConcurrentOutputFileWriters": str(len(options.scales) + 1),
    }
    saved = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        return _run(spark, options, progress)
    finally:
        for key, old in saved.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _run(spark: SparkSession, options: BacktestOptions, progress: Progress) -> BacktestResult:
    from pyspark.sql import functions as F

    from kquota.backtest import report

    started = time.monotonic()
    out = options.out.rstrip("/") or options.out
    prepare_output(out)
    configs = [options.quotas.scaled(s).dumps() for s in options.scales]

    traffic_path, traffic_format = options.traffic, options.input_format
    log_notes: list[str] = []
    if check_traffic(traffic_path, traffic_format) == requestlog.FORMAT:
        # Kafka's request log: parsed once, into DIR/traffic/, then back-tested from there
        traffic_path, traffic_format = f"{out}/traffic", "parquet"
        progress.phase(f"reading the request log {options.traffic} into {traffic_path}/")
        summary = requestlog.import_log(spark, options.traffic, traffic_path, options.log)
        progress.note(f"{summary.lines:,} lines, {summary.lines_skipped:,} skipped")
        log_notes = summary.notes()
    progress.phase(f"reading {traffic_path}")
    raw = read_traffic(spark, traffic_path, traffic_format)
    parsed = _parsed(raw)
    with _reading(options.traffic):  # the first action: Spark reads every row here
        rows = (
            parsed.groupBy(_REASON)
            .agg(F.count(F.lit(1)), F.count_if(F.col(SEQ_COLUMNS[0]).isNull()))
            .collect()
        )
    if any(r[2] for r in rows):  # every row must know its input position (ties need it)
        raise TrafficError(f"cannot number the rows of {options.traffic!r} by input file")
    counts = {(r[0] if r[0] is not None else ""): int(r[1]) for r in rows}
    valid_rows = counts.pop("", 0)
    refused = sum(counts.values())
    rows_read = valid_rows + refused
    if rows_read == 0:
        raise TrafficError(f"traffic {options.traffic!r} has no rows")
    progress.note(f"{rows_read:,} rows, {refused:,} refused")
    if refused and options.strict:
        detail = ", ".join(f"{n:,} {reason}" for reason, n in sorted(counts.items()))
        raise TrafficError(f"--strict: {refused:,} bad row(s) in the traffic ({detail})")
    quarantine = f"{out}/quarantine"
    if refused:
        progress.phase(f"quarantining {refused:,} bad rows to {quarantine}/")
        original = [c for c in raw.columns if not c.startswith(_PREFIX)]
        with _writing(quarantine):
            parsed.where(F.col(_REASON).isNotNull()).select(
                *original, F.col(_REASON).alias(REASON)
            ).coalesce(1).write.mode("overwrite").parquet(quarantine)
    elif not _is_remote(out):
        shutil.rmtree(_local(quarantine), ignore_errors=True)
    if valid_rows == 0:
        raise TrafficError(
            f"traffic {options.traffic!r} has no valid rows ({rows_read:,} refused, see "
            f"{quarantine}/)"
        )
    valid = _valid(parsed, raw.columns)
    notes: list[str] = log_notes
    if options.quotas.quotas("request") and THREAD not in raw.columns:
        notes.append("the traffic has no thread_time_ns: request quotas throttle nothing")
    if not options.quotas.entries:
        notes.append("the configuration has no quotas: nothing is measured or throttled")

    progress.phase(
        f"replaying {valid_rows:,} requests x {len(configs)} scenario(s), {options.mode} loop"
    )
    replayed = _replay(spark, valid, options, configs)
    extras = [c for c in valid.columns if c not in STANDARD and not c.startswith(_PREFIX)]
    requests_path = f"{out}/requests"
    with _writing(requests_path):
        replayed.select(
            *STANDARD, *extras, *SEQ_COLUMNS, *(name for name, _ in _TAGS), *_RESULT_NAMES
        ).write.mode("overwrite").partitionBy(SCENARIO).parquet(requests_path)
        requests = spark.read.parquet(requests_path)

    entities_path = f"{out}/entities"
    progress.phase(f"wrote {requests_path}/; summarizing entities")
    usage = _usage_all(requests, options.quotas)
    with _writing(entities_path):
        if usage is not None:
            _entities(spark, usage, valid, options).write.mode("overwrite").parquet(entities_path)
        else:
            spark.createDataFrame([], ENTITY_SCHEMA).write.mode("overwrite").parquet(entities_path)
        entities = spark.read.parquet(entities_path)

    base = options.scenarios[options.base_index]
    recommendations = None
    if options.recommend:
        progress.phase(f"recommending quotas (throttled fraction <= {options.target:g}, {base})")
        with _writing(f"{out}/recommendations"):
            recommendations = _recommendations(
                spark, requests, entities, options, base, f"{out}/recommendations"
            )
    elif not _is_remote(out):
        shutil.rmtree(_local(f"{out}/recommendations"), ignore_errors=True)

    progress.phase("collecting summaries for the report")
    by_throttle = _throttle_counts(requests)
    top: pd.DataFrame = (
        entities.where((F.col(SCENARIO) == base) & (F.col("throttled_requests") > 0))
        .orderBy(F.desc("total_throttle_ms"), "quota_type", BROKER, SENSOR_USER, SENSOR_CLIENT)
        .limit(report.TOP_ENTITIES)
        .toPandas()
    )
    result = BacktestResult(
        rows_read=rows_read,
        rows_valid=valid_rows,
        quarantined=dict(sorted(counts.items())),
        out=out,
        mode=options.mode,
        scenarios=options.scenarios,
        base_scenario=base,
        totals=report.scenario_totals(by_throttle, options.scenarios, options.scales),
        top_entities=top,
        comparison=_comparison(entities, top),
        histogram=report.throttle_histogram(by_throttle),
        rate_series=_rate_series(usage, top.head(report.PLOTTED_ENTITIES), options, base),
        recommendations=recommendations,
        config=options.quotas,
        notes=notes,
    )
    if options.report and not _is_remote(out):
        progress.phase("writing the report")
        result.seconds = time.monotonic() - started
        with _writing(f"{out}/report.html"):
            result.report = report.write_report(result, _local(out))
    result.seconds = time.monotonic() - started
    return result


def _throttle_counts(requests: DataFrame) -> pd.DataFrame:
    """Per scenario and applied throttle value: requests, per-type throttled, added latency.

    One small aggregate (one row per distinct throttle value) from which the report
    derives the scenario totals and the throttle-time distribution exactly.
    """
    from pyspark.sql import functions as F

    counts: pd.DataFrame = (
        requests.groupBy(SCENARIO, THROTTLE)
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.sum((F.col(PRODUCE_THROTTLE) > 0).cast("long")).alias("produce_throttled"),
            F.sum((F.col(FETCH_THROTTLE) > 0).cast("long")).alias("fetch_throttled"),
            F.sum((F.col(REQUEST_THROTTLE) > 0).cast("long")).alias("request_throttled"),
            F.sum(ADDED_LATENCY).alias("added_latency_ms"),
            F.max(ADDED_LATENCY).alias("max_added_latency_ms"),
        )
        .toPandas()
    )
    return counts


_SENSOR_KEY: Final = ("quota_type", BROKER, SENSOR_USER, SENSOR_CLIENT)


def _comparison(entities: DataFrame, top: pd.DataFrame) -> pd.DataFrame:
    """The top entities' summaries in every scenario (the what-if table)."""
    from pyspark.sql import functions as F

    if top.empty:
        return pd.DataFrame()
    wanted = entities.sparkSession.createDataFrame(top[list(_SENSOR_KEY)])
    return (
        entities.join(F.broadcast(wanted), list(_SENSOR_KEY))
        .select(
            *_SENSOR_KEY,
            "entity",
            SCENARIO,
            "quota",
            "throttled_fraction",
            "total_throttle_ms",
            "utilization",
        )
        .toPandas()
    )


def _rate_series(
    usage: DataFrame | None, top: pd.DataFrame, options: BacktestOptions, base: str
) -> dict[str, pd.DataFrame]:
    """For the plotted sensors (base scenario): recorded usage per window, in quota units."""
    from pyspark.sql import functions as F

    if usage is None or top.empty:
        return {}
    wanted = usage.sparkSession.createDataFrame(top[list(_SENSOR_KEY)])
    w = options.quotas.window.window_ms
    unit = F.when(F.col("quota_type") == "request", F.lit(kernel.NANOS_TO_PERCENT)).otherwise(
        F.lit(1.0)
    )
    amount = F.when(F.col(RECORDED), F.col(USAGE)).otherwise(F.lit(0)).cast("double") * unit
    frame: pd.DataFrame = (
        usage.where(F.col(SCENARIO) == base)
        .join(F.broadcast(wanted), list(_SENSOR_KEY))
        .groupBy(*_SENSOR_KEY, F.expr(f"({TIME} - pmod({TIME}, {w})) div {w}").alias("window"))
        .agg(
            F.sum(amount).alias("amount"),
            F.sum((F.col(THROTTLE) > 0).cast("long")).alias("throttled"),
            F.count(F.lit(1)).alias("requests"),
        )
        .orderBy(*_SENSOR_KEY, "window")
        .toPandas()
    )
    return {
        "|".join(str(k) for k in key): part.reset_index(drop=True)
        for key, part in frame.groupby(list(_SENSOR_KEY), sort=False, observed=True)
    }


def _recommendations(
    spark: SparkSession,
    requests: DataFrame,
    entities: DataFrame,
    options: BacktestOptions,
    base: str,
    path: str,
) -> pd.DataFrame:
    """Per entity (across brokers): current quota and fraction, and the recommended quota."""
    from pyspark.sql import functions as F

    usage = _usage_all(requests.where(F.col(SCENARIO) == base), options.quotas)
    if usage is None:
        return pd.DataFrame()
    keys = ["quota_type", SENSOR_USER, SENSOR_CLIENT]
    buckets = options.buckets or max(2 * spark.sparkContext.defaultParallelism, 2)
    usage = usage.withColumn(
        _BUCKET, F.pmod(F.xxhash64(SENSOR_USER, SENSOR_CLIENT), F.lit(buckets))
    )
    schema = _arrow_schema(RECOMMENDATION_SCHEMA)
    base_json = options.quotas.dumps()
    target = options.target
    recommended = usage.groupBy("quota_type", _BUCKET).applyInArrow(
        lambda table: _recommend_stage(base_json, target, schema, table), RECOMMENDATION_SCHEMA
    )
    current = (
        entities.where(F.col(SCENARIO) == base)
        .groupBy(*keys)
        .agg(
            F.max("quota").alias("current_quota"),
            (F.sum("throttled_requests") / F.sum("requests")).alias("current_throttled_fraction"),
        )
    )
    recommended.join(current, keys, "left").select(
        "quota_type",
        SENSOR_USER,
        SENSOR_CLIENT,
        "entity",
        "brokers",
        "requests",
        "current_quota",
        "current_throttled_fraction",
        "recommended_quota",
        F.col("throttled_fraction").alias("recommended_throttled_fraction"),
    ).coalesce(1).write.mode("overwrite").parquet(path)
    return spark.read.parquet(path).orderBy(F.desc("current_throttled_fraction"), *keys).toPandas()


def main(argv: Sequence[str] | None = None) -> int:
    """``spark-submit .../kquota/backtest/job.py --traffic ...``: the ``kquota backtest`` CLI."""
    from kquota.cli import main as cli_main

    return cli_main(["backtest", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
