"""``kquota traffic import``: a request log written as traffic Parquet in one pass over
its lines, with the partitions of each controller-mutation request tracked over the log and
the size of each throttled fetch rebuilt from a later fetch from the same position."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from kquota._core import REQUEST_LOG_SAME_POSITION, throttled_fetch_size
from kquota.backtest.frames import SEQ_COLUMNS
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
    from pyspark.sql import Column, DataFrame, SparkSession


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
    :data:`~kquota.backtest.frames.SEQ_COLUMNS`, ``_kq_controller_ts``."""
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


def fetch_sizes(rows: DataFrame, carried: Sequence[str] = ()) -> DataFrame:
    """Per throttled consumer fetch of ``rows`` (imported lines with their fetch keys), the
    size of the response Kafka would have sent, as a later fetch shows it. Kafka computed
    that size, throttled on it, un-recorded it and answered empty, so the line shows none;
    the connection's next fetch from the same position (the same partitions and offsets,
    or an incremental fetch changing nothing) that was not throttled got that response,
    with whatever arrived in the meantime: an upper bound, and the size itself when the
    consumer reads behind the log's end, where its limits cut each response. Columns: the
    row's :data:`~kquota.backtest.frames.SEQ_COLUMNS`, :data:`REBUILT` (null when no
    such fetch follows: the log cannot bound the size) and the ``carried`` columns of the
    row."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = (BROKER, TS, *SEQ_COLUMNS, BYTES, KAFKA_THROTTLE, _CONNECTION, _POSITION)
    fetches = rows.where(F.col(_POSITION).isNotNull()).select(
        *keys, *(c for c in carried if c not in keys)
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
        *SEQ_COLUMNS,
        KAFKA_THROTTLE,
        F.first(served, ignorenulls=True).over(later).alias(REBUILT),
        *carried,
    )
    return sized.where(F.col(KAFKA_THROTTLE) > 0).drop(KAFKA_THROTTLE)


BOUNDED: Final = "_kq_bounded"
"""A throttled fetch's size from the produce lines (:func:`fetch_bounds`)."""


BOUND_COLUMNS: Final = (BROKER, TS, API_VERSION, _FETCH_EMPTY, _FETCH_MAX_BYTES, _READS)
"""The columns of a throttled fetch :func:`fetch_bounds` sizes it from."""


def fetch_bounds(spark: SparkSession, rows: DataFrame, unsized: DataFrame) -> DataFrame:
    """Per throttled full consumer fetch in ``unsized`` (throttled fetches no later fetch
    sized: their :data:`~kquota.backtest.frames.SEQ_COLUMNS` and :data:`BOUND_COLUMNS`),
    the size Kafka checked against the quota, from what the broker's
    produce lines show each partition held when Kafka recorded the fetch: the batches from
    its fetch offset on, read within the fetch's limits as Kafka reads them
    (:func:`kquota._core.throttled_fetch_size`). A partition's bytes are known when a
    logged batch starts at its fetch offset (the bytes produced since are a lower bound:
    what other brokers or lines not in the log added is missing) or when every logged
    batch of it starts before its offset (nothing more was produced to it). A fetch with a
    partition neither says is not sized, nor is an incremental one, whose line lists only
    what changed in its session. Topics a fetch names by id are matched to the produce
    lines' names (from ``rows``) through the Metadata lines. Columns: the row's
    :data:`~kquota.backtest.frames.SEQ_COLUMNS` and :data:`BOUNDED`, only for the fetches
    sized.

    A broker appends a partition's batches in time order, so the batches produced by the
    time of the fetch are those below some offset: the bytes from the fetch offset on are
    the bytes produced by then less those below the fetch offset, two running sums over
    the partition's batches (one in time order, one in offset order) rather than a join
    of every fetch with every batch."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    seq = list(SEQ_COLUMNS)
    read = F.col("_kq_r")
    partition = [BROKER, "_kq_topic", "_kq_partition"]
    # the fetch partitions, on the driver: a few per consumer connection in a real log
    asked = (
        unsized.where(F.col(_FETCH_EMPTY).isNotNull())
        .select(*seq, *BOUND_COLUMNS[:-1], F.posexplode(F.col(_READS)).alias("_kq_pos", "_kq_r"))
        .select(
            *seq,
            BROKER,
            TS,
            API_VERSION,
            _FETCH_EMPTY,
            _FETCH_MAX_BYTES,
            "_kq_pos",
            read["topic"].alias("_kq_topic"),
            read["partition"].alias("_kq_partition"),
            read["offset"].alias("_kq_from"),
            read["bytes"].alias("_kq_limit"),
        )
        .collect()
    )
    if not asked:
        return spark.createDataFrame([], _bounded_schema())
    named = {r["_kq_topic"] for r in asked}
    # the ids of the topics asked for (by id or by name: a produce may name it by id)
    ids = {
        i: n
        for i, n in rows.where(F.size(F.col(_TOPICS)) > 0)
        .select(F.explode(F.col(_TOPICS)).alias("_kq_t"))
        .where(F.col("_kq_t")["id"].isNotNull() & F.col("_kq_t")["name"].isNotNull())
        .select(F.col("_kq_t")["id"], F.col("_kq_t")["name"])
        .distinct()
        .collect()
        if i in named or n in named
    }
    # a topic named by id takes its name where a Metadata line gave it
    points = [
        (*(r[c] for c in seq), r[BROKER], ids.get(r["_kq_topic"], r["_kq_topic"]), r) for r in asked
    ]
    batches = rows.where((F.col(API) == "produce") & (F.size(F.col(_READS)) > 0)).select(
        BROKER, F.col(TS).alias("_kq_when"), F.explode(F.col(_READS)).alias("_kq_r")
    )
    topic = read["topic"]
    if ids:
        topic = F.coalesce(F.element_at(F.create_map(*_pairs(ids)), topic), topic)
    batches = batches.select(
        BROKER,
        "_kq_when",
        topic.alias("_kq_topic"),
        read["partition"].alias("_kq_partition"),
        read["offset"].alias("_kq_offset"),
        read["bytes"].alias("_kq_size"),
    )
    key_schema = f"{BROKER} string, _kq_topic string, _kq_partition int"
    wanted = spark.createDataFrame(
        sorted({(b, t, r["_kq_partition"]) for *_, b, t, r in points}), key_schema
    )
    mine = batches.join(F.broadcast(wanted), partition)
    # known partitions first (a batch starts at the offset, or every batch starts before
    # it): most throttled fetches of a log the produce lines do not cover stop here
    last = {
        (r[BROKER], r["_kq_topic"], r["_kq_partition"]): r["_kq_last"]
        for r in mine.groupBy(*partition).agg(F.max("_kq_offset").alias("_kq_last")).collect()
    }
    offsets = spark.createDataFrame(
        sorted({(b, t, r["_kq_partition"], r["_kq_from"]) for *_, b, t, r in points}),
        f"{key_schema}, _kq_offset long",
    )
    starts = {
        (r[BROKER], r["_kq_topic"], r["_kq_partition"], r["_kq_offset"]): (r[4], r[5])
        for r in batches.join(F.broadcast(offsets), [*partition, "_kq_offset"])
        .select(*partition, "_kq_offset", "_kq_when", "_kq_size")
        .collect()
    }
    fetches: dict[tuple[int, ...], list[tuple[Any, ...]]] = {}
    unknown: set[tuple[int, ...]] = set()
    for *at, broker, name, r in points:
        where = (broker, name, r["_kq_partition"])
        first = starts.get((*where, r["_kq_from"]))
        tail = last.get(where)
        if first is None and (tail is None or tail >= r["_kq_from"]):
            unknown.add(tuple(at))
        fetches.setdefault(tuple(at), []).append((where, r, first))
    known = {k: v for k, v in fetches.items() if k not in unknown}
    if not known:
        return spark.createDataFrame([], _bounded_schema())
    # the bytes there: the batches' running sums in offset order (below the fetch offset:
    # a batch at it comes after the fetch) and in time order (by the fetch's time: a batch
    # at that ms comes before it), each fetch partition a point among its batches
    marks = spark.createDataFrame(
        [
            (*where, r["_kq_from"], r[TS], *key, r["_kq_pos"])
            for key, parts in known.items()
            for where, r, _ in parts
        ],
        f"{key_schema}, _kq_o long, _kq_w long, "
        + ", ".join(f"{c} long" for c in seq)
        + ", _kq_pos int",
    )
    around = mine.join(F.broadcast(marks.select(*partition).distinct()), partition).select(
        *partition,
        F.col("_kq_offset").alias("_kq_o"),
        F.col("_kq_when").alias("_kq_w"),
        F.col("_kq_size"),
        F.lit(0).alias("_kq_kind"),
        *(F.lit(None).cast("long").alias(c) for c in seq),
        F.lit(None).cast("int").alias("_kq_pos"),
    )
    everything = Window.partitionBy(*partition)
    below = everything.orderBy("_kq_o", F.col("_kq_kind").desc()).rowsBetween(
        Window.unboundedPreceding, -1
    )
    by_then = everything.orderBy("_kq_w", "_kq_kind").rowsBetween(Window.unboundedPreceding, -1)
    held = {
        (*(r[c] for c in seq), r["_kq_pos"]): max(r["_kq_by_then"] - r["_kq_below"], 0)
        for r in around.unionByName(
            marks.select(
                *partition,
                "_kq_o",
                "_kq_w",
                F.lit(0).cast("long").alias("_kq_size"),
                F.lit(1).alias("_kq_kind"),
                *seq,
                "_kq_pos",
            )
        )
        .select(
            *seq,
            "_kq_pos",
            "_kq_kind",
            F.coalesce(F.sum("_kq_size").over(below), F.lit(0)).alias("_kq_below"),
            F.coalesce(F.sum("_kq_size").over(by_then), F.lit(0)).alias("_kq_by_then"),
        )
        .where(F.col("_kq_kind") == 1)
        .collect()
    }
    sized = []
    for key, parts in known.items():
        parts.sort(key=lambda p: p[1]["_kq_pos"])
        reads = [
            (
                int(r["_kq_limit"]),
                held[(*key, r["_kq_pos"])],
                # the batch at the offset, when it was there by then
                first[1] if first is not None and first[0] <= r[TS] else 0,
            )
            for _, r, first in parts
        ]
        r = parts[0][1]
        size = throttled_fetch_size(
            int(r[API_VERSION]), int(r[_FETCH_EMPTY]), int(r[_FETCH_MAX_BYTES]), reads
        )
        sized.append((*key, size))
    return spark.createDataFrame(sized, _bounded_schema())


def _pairs(mapping: dict[str, str]) -> list[Column]:
    """``mapping`` as the arguments of ``create_map``."""
    from pyspark.sql import functions as F

    return [F.lit(v) for pair in mapping.items() for v in pair]


def _bounded_schema() -> Any:
    from pyspark.sql.types import LongType, StructField, StructType

    return StructType([StructField(c, LongType()) for c in (*SEQ_COLUMNS, BOUNDED)])


def mutation_partitions(rows: DataFrame) -> DataFrame:
    """Per CreateTopics, CreatePartitions or DeleteTopics row of ``rows`` (imported lines with
    their ``_kq_topics``), the partitions it creates or deletes, tracked over the whole log in
    time order (ties by input position): a created topic has its requested count
    (``numPartitions``, else its assignments, else ``num.partitions``); a deleted topic the
    count its latest CreateTopics, CreatePartitions or Metadata response line gave; a grown
    topic its new count minus that one. Columns: the row's
    :data:`~kquota.backtest.frames.SEQ_COLUMNS`, ``partitions`` (null when a topic's count is
    unknown), :data:`~kquota.backtest.frames.TOPIC_PARTITIONS` (each topic's count in
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
        # not cached: caching the throttled fetches with their reads costs more than
        # computing their window again for the few the sizes leave
        sizes = fetch_sizes(rows).where(F.col(REBUILT).isNotNull())
        summary.rebuilt_fetches = sizes.count()
        results.append((sizes, summary.rebuilt_fetches))
        size = F.coalesce(F.col(REBUILT), F.col(BYTES))
        if summary.rebuilt_fetches < summary.throttled_fetches:
            left = fetch_sizes(rows, BOUND_COLUMNS).where(F.col(REBUILT).isNull())
            bounds = fetch_bounds(spark, rows, left)
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
