"""``kquota traffic import``: a request log written as traffic Parquet in one pass over
its lines, with the partitions of each controller-mutation request tracked over the log and
the size of each throttled fetch rebuilt from a later fetch from the same position."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from kquota._core import REQUEST_LOG_SAME_POSITION, throttled_fetch_size
from kquota.backtest.kernel import SEQ_COLUMNS
from kquota.backtest.requestlog.files import LogOptions
from kquota.backtest.requestlog.lines import (
    _CONNECTION,
    _FETCH_EMPTY,
    _FETCH_MAX_BYTES,
    _POSITION,
    _READS,
    _REASON,
    _TOPICS,
    _controller_line,
    _Lines,
    read,
)
from kquota.backtest.requestlog.summary import EXAMPLES, LogSummary, _metrics, _spark_call, _summary
from kquota.exceptions import OutputError
from kquota.traffic_schema import (
    API,
    API_VERSION,
    BROKER,
    BYTES,
    CLIENT,
    COLUMNS,
    CORRELATION_ID,
    KAFKA_THROTTLE,
    PARTITIONS,
    STRICT,
    TOPIC_PARTITIONS,
    TS,
    USER,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


def _import_rows(lines: _Lines, observation: Any) -> DataFrame:
    """The rows :func:`import_log` writes (:data:`COLUMNS`), with :func:`_metrics` observed
    on every line of the same pass. The filter on the skip reason sits above the observed
    metrics, which Spark does not push a filter through, and above the ``mapInArrow`` that
    parses the lines: each line is parsed once."""
    from pyspark.sql import functions as F

    observed = lines.frame.observe(observation, *_metrics())
    controller = _controller_line()
    return observed.where(F.col(_REASON).isNull() | controller).select(
        *COLUMNS,
        STRICT,
        _TOPICS,
        _CONNECTION,
        _POSITION,
        _READS,
        _FETCH_EMPTY,
        _FETCH_MAX_BYTES,
        *SEQ_COLUMNS,
        controller.alias(CONTROLLER),
    )


CONTROLLER: Final = "_kq_controller"
"""Of the first pass's rows, a controller's line of a forwarded mutation: not a request of
its own, but the time of the broker's row of the same request (:func:`controller_times`)."""
FORWARD_MS: Final = 30_000
"""How long before the broker's row the controller's line of the same request may be:
Kafka's default ``request.timeout.ms``, past which the client has given up on it."""


def controller_times(rows: DataFrame, controller: DataFrame) -> DataFrame:
    """Per mutation request of ``rows`` (a broker's lines) that the broker forwarded and whose
    controller's line is in ``controller`` (the same client id, user, API and correlation
    id, at most :data:`FORWARD_MS` earlier: the latest such line), the time the controller
    recorded it on the controller-mutation quota: when its event loop took the request,
    which the broker's line cannot say (its remote time holds the forwarding, the
    controller's work and the metadata commit). Columns: the row's
    :data:`~kquota.backtest.kernel.SEQ_COLUMNS`, ``_kq_controller_ts``."""
    from pyspark.sql import functions as F

    keys = [USER, CLIENT, API, CORRELATION_ID]
    mine = rows.where(F.col(STRICT).isNotNull()).select(*keys, *SEQ_COLUMNS, TS)
    theirs = controller.select(*keys, F.col(TS).alias("_kq_controller_ts"))
    joined = mine.join(theirs, keys).where(
        F.col("_kq_controller_ts").between(F.col(TS) - F.lit(FORWARD_MS), F.col(TS))
    )
    return joined.groupBy(*SEQ_COLUMNS).agg(F.max("_kq_controller_ts").alias("_kq_controller_ts"))


REBUILT: Final = "_kq_rebuilt"
"""A throttled fetch's rebuilt size (:func:`fetch_sizes`)."""
BROADCAST_ROWS: Final = 2_000_000
"""Up to this many per-request results (mutation counts, rebuilt fetch sizes) are broadcast
to the imported rows, which keeps their order; more are joined by a shuffle, and the rows
sorted back into log order."""


def fetch_sizes(rows: DataFrame) -> DataFrame:
    """Per throttled consumer fetch of ``rows`` (imported lines with their fetch keys), the
    size of the response Kafka would have sent, as a later fetch shows it. Kafka computed
    that size, throttled on it, un-recorded it and answered empty, so the line shows none;
    the connection's next fetch from the same position (the same partitions and offsets,
    or an incremental fetch changing nothing) that was not throttled got that response,
    with whatever arrived in the meantime: an upper bound, and the size itself when the
    consumer reads behind the log's end, where its limits cut each response. Columns: the
    row's :data:`~kquota.backtest.kernel.SEQ_COLUMNS` and :data:`REBUILT` (null when no
    such fetch follows: the log cannot bound the size)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    fetches = rows.where(F.col(_POSITION).isNotNull()).select(
        BROKER, TS, *SEQ_COLUMNS, BYTES, KAFKA_THROTTLE, _CONNECTION, _POSITION
    )
    order = [F.col(TS), *(F.col(c) for c in SEQ_COLUMNS)]
    connection = Window.partitionBy(BROKER, _CONNECTION).orderBy(*order)
    position = F.col(_POSITION)
    before = F.lag(position).over(connection)
    # a run: fetches from one position; an incremental fetch changing nothing stays in it
    moved = (position != F.lit(REQUEST_LOG_SAME_POSITION)) & (
        before.isNull() | (before != position)
    )
    runs = fetches.withColumn(
        "_kq_run",
        F.sum(moved.cast("long")).over(connection.rowsBetween(Window.unboundedPreceding, 0)),
    )
    later = (
        Window.partitionBy(BROKER, _CONNECTION, "_kq_run")
        .orderBy(*order)
        .rowsBetween(1, Window.unboundedFollowing)
    )
    served = F.when(F.col(KAFKA_THROTTLE) <= 0, F.col(BYTES))
    # the window over every fetch of the run, then only the throttled ones kept
    sized = runs.select(
        *SEQ_COLUMNS, KAFKA_THROTTLE, F.first(served, ignorenulls=True).over(later).alias(REBUILT)
    )
    return sized.where(F.col(KAFKA_THROTTLE) > 0).drop(KAFKA_THROTTLE)


BOUNDED: Final = "_kq_bounded"
"""A throttled fetch's size from the produce lines (:func:`fetch_bounds`)."""


def fetch_bounds(spark: SparkSession, rows: DataFrame, unsized: DataFrame) -> DataFrame:
    """Per throttled full consumer fetch of ``rows`` whose
    :data:`~kquota.backtest.kernel.SEQ_COLUMNS` are in ``unsized`` (throttled fetches no
    later fetch sized), the size Kafka checked against the quota, from what the broker's
    produce lines show each partition held when Kafka recorded the fetch: the batches from
    its fetch offset on, read within the fetch's limits as Kafka reads them
    (:func:`kquota._core.throttled_fetch_size`). A partition's bytes are known when a
    logged batch starts at its fetch offset (the bytes produced since are a lower bound:
    what other brokers or lines not in the log added is missing) or when every logged
    batch of it starts before its offset (nothing more was produced to it). A fetch with a
    partition neither says is not sized, nor is an incremental one, whose line lists only
    what changed in its session. Topics a fetch names by id are matched to the produce
    lines' names through the Metadata lines. Columns: the row's
    :data:`~kquota.backtest.kernel.SEQ_COLUMNS` and :data:`BOUNDED`, only for the fetches
    sized."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    seq = list(SEQ_COLUMNS)
    topic = F.col("_kq_r")["topic"]
    ids = (
        rows.where(F.size(F.col(_TOPICS)) > 0)
        .select(F.explode(F.col(_TOPICS)).alias("_kq_t"))
        .where(F.col("_kq_t")["id"].isNotNull() & F.col("_kq_t")["name"].isNotNull())
        .select(F.col("_kq_t")["id"].alias("_kq_id"), F.col("_kq_t")["name"].alias("_kq_name"))
        .dropDuplicates(["_kq_id"])
    )

    def named(frame: DataFrame) -> DataFrame:
        # a topic named by id takes its name where a Metadata line gave it
        return (
            frame.join(F.broadcast(ids), frame["_kq_topic"] == ids["_kq_id"], "left")
            .withColumn("_kq_topic", F.coalesce(F.col("_kq_name"), F.col("_kq_topic")))
            .drop("_kq_id", "_kq_name")
        )

    asked = named(
        rows.join(F.broadcast(unsized.select(*seq)), seq)
        .where(F.col(_FETCH_EMPTY).isNotNull())
        .select(
            *seq,
            BROKER,
            F.col(TS).alias("_kq_at"),
            F.posexplode(F.col(_READS)).alias("_kq_pos", "_kq_r"),
        )
        .select(
            *seq,
            BROKER,
            "_kq_at",
            "_kq_pos",
            topic.alias("_kq_topic"),
            F.col("_kq_r")["partition"].alias("_kq_partition"),
            F.col("_kq_r")["offset"].alias("_kq_from"),
            F.col("_kq_r")["bytes"].alias("_kq_limit"),
        )
    ).cache()
    produced = named(
        rows.where((F.col(API) == "produce") & (F.size(F.col(_READS)) > 0))
        .select(BROKER, F.col(TS).alias("_kq_when"), F.explode(F.col(_READS)).alias("_kq_r"))
        .select(
            BROKER,
            "_kq_when",
            topic.alias("_kq_topic"),
            F.col("_kq_r")["partition"].alias("_kq_partition"),
            F.col("_kq_r")["offset"].alias("_kq_offset"),
            F.col("_kq_r")["bytes"].alias("_kq_size"),
        )
    )
    where = [BROKER, "_kq_topic", "_kq_partition"]
    then = F.col("_kq_when") <= F.col("_kq_at")
    at_offset = F.col("_kq_offset") == F.col("_kq_from")
    held = (
        produced.join(F.broadcast(asked), where)
        .groupBy(*seq, "_kq_pos")
        .agg(
            F.count_if(at_offset).alias("_kq_starts"),
            F.count_if(F.col("_kq_offset") >= F.col("_kq_from")).alias("_kq_after"),
            F.sum(
                F.when(then & (F.col("_kq_offset") >= F.col("_kq_from")), F.col("_kq_size"))
            ).alias("_kq_available"),
            F.max(F.when(then & at_offset, F.col("_kq_size"))).alias("_kq_first"),
        )
    )
    fetches = (
        asked.join(held, [*seq, "_kq_pos"], "left")
        .groupBy(*seq)
        .agg(
            F.sort_array(
                F.collect_list(
                    F.struct(
                        "_kq_pos",
                        "_kq_limit",
                        F.coalesce("_kq_available", F.lit(0)).alias("available"),
                        F.coalesce("_kq_first", F.lit(0)).alias("first"),
                        # known: a batch starts at the offset, or none starts after it
                        (
                            (F.coalesce("_kq_starts", F.lit(0)) > 0)
                            | (F.col("_kq_starts").isNotNull() & (F.col("_kq_after") == 0))
                        ).alias("known"),
                    )
                )
            ).alias("_kq_parts")
        )
    )
    versions = rows.join(F.broadcast(unsized.select(*seq)), seq).select(
        *seq, API_VERSION, _FETCH_EMPTY, _FETCH_MAX_BYTES
    )
    sized = []
    for row in fetches.join(versions, seq).collect():
        parts = row["_kq_parts"]
        if not all(p["known"] for p in parts):
            continue
        size = throttled_fetch_size(
            int(row[API_VERSION]),
            int(row[_FETCH_EMPTY]),
            int(row[_FETCH_MAX_BYTES]),
            [(int(p["_kq_limit"]), int(p["available"]), int(p["first"])) for p in parts],
        )
        sized.append((*(int(row[c]) for c in seq), size))
    asked.unpersist()
    schema = StructType([StructField(c, LongType()) for c in (*seq, BOUNDED)])
    return spark.createDataFrame(sized, schema)


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
            # read once, by the second pass: compressing it would cost more than it saves
            rows.write.mode("overwrite").option("compression", "none").parquet(str(parsed))
        summary = _summary(lines, observation.get)
        with _spark_call(path), _writing(out):
            _second_pass(spark, str(parsed), summary).write.mode("overwrite").parquet(
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


def _second_pass(spark: SparkSession, parsed: str, summary: LogSummary) -> DataFrame:
    """The imported rows at ``parsed`` (:data:`COLUMNS`) with what needs the whole log:

    * with mutation requests and controllers' lines of forwarded ones
      (``summary.controller_lines``), their times from :func:`controller_times`;
    * with throttled fetches (``summary.throttled_fetches``, counted on the first pass),
      their sizes from :func:`fetch_sizes`;
    * with mutation requests (``summary.mutations``), :data:`PARTITIONS` from
      :func:`mutation_partitions` and :data:`STRICT`.

    Each is counted into ``summary``. The rows keep the order of the log: the results (one
    row per request they change) are broadcast to them, so the rows are neither shuffled
    nor sorted, unless there are more than :data:`BROADCAST_ROWS`."""
    from pyspark.sql import functions as F

    lines = spark.read.parquet(parsed)
    rows = lines.where(~F.col(CONTROLLER))
    columns = [F.col(c) for c in COLUMNS]
    results: list[tuple[DataFrame, int]] = []
    if summary.mutations and summary.controller_lines:
        timed = controller_times(rows, lines.where(F.col(CONTROLLER)))
        summary.controller_timed = timed.count()
        results.append((timed, summary.controller_timed))
        columns[COLUMNS.index(TS)] = F.coalesce(F.col("_kq_controller_ts"), F.col(TS)).alias(TS)
    if summary.throttled_fetches:
        every = fetch_sizes(rows)
        sizes = every.where(F.col(REBUILT).isNotNull())
        summary.rebuilt_fetches = sizes.count()
        results.append((sizes, summary.rebuilt_fetches))
        size = F.coalesce(F.col(REBUILT), F.col(BYTES))
        if summary.rebuilt_fetches < summary.throttled_fetches:
            bounds = fetch_bounds(spark, rows, every.where(F.col(REBUILT).isNull()))
            summary.bounded_fetches = bounds.count()
            if summary.bounded_fetches:
                results.append((bounds, summary.bounded_fetches))
                size = F.coalesce(F.col(REBUILT), F.col(BOUNDED), F.col(BYTES))
        columns[COLUMNS.index(BYTES)] = size.alias(BYTES)
    if summary.mutations:
        counted = mutation_partitions(rows)
        stats = counted.agg(
            F.count(F.lit(1)).alias("requests"),
            F.count_if(F.size("unknown") > 0).alias("unknown"),
            F.slice(F.array_distinct(F.flatten(F.collect_list("unknown"))), 1, EXAMPLES).alias(
                "topics"
            ),
        ).first()
        requests = 0
        if stats is not None:
            requests = int(stats["requests"] or 0)
            summary.unknown_counts = int(stats["unknown"] or 0)
            summary.unknown_topics = sorted(stats["topics"] or [])
        results.append((counted, requests))
        mutation = F.col(STRICT).isNotNull()
        # a mutation request with no topic creates or deletes nothing
        partitions = F.when(
            mutation, F.when(F.col("unknown").isNull(), F.lit(0)).otherwise(F.col(PARTITIONS))
        ).cast("int")
        columns += [
            partitions.alias(PARTITIONS),
            F.col(STRICT),
            F.when(partitions.isNotNull(), F.col(TOPIC_PARTITIONS)).alias(TOPIC_PARTITIONS),
        ]
    joined = rows
    small = sum(n for _, n in results) <= BROADCAST_ROWS
    for result, _ in results:
        joined = joined.join(F.broadcast(result) if small else result, list(SEQ_COLUMNS), "left")
    if not small:  # a shuffled join: back into the log's order
        joined = joined.orderBy(*SEQ_COLUMNS)
    return joined.select(*columns)
