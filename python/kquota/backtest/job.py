"""The back-test as a Spark job: :func:`run` and the order of its steps, each wiring Spark to
:mod:`kquota.backtest.frames`.

Steps (each Spark action is announced by :class:`~kquota.backtest.session.Progress`):

1. read the traffic (Parquet or CSV) and note each row's input position (ties in time are
   replayed in input order) (:mod:`~kquota.backtest.inputs`);
2. validate: bad rows (missing or negative bytes, unparsable times, wrong types) get a
   reason and are left out of the replay; the rows are counted while the replay reads
   them (a Spark ``Observation``), and bad ones are then counted by reason and written to
   ``DIR/quarantine/`` (``strict`` counts them first, in a pass of its own, and refuses
   them before anything is written);
3. resolve every request's sensors with the core's precedence rules (once per distinct
   ``(user, client_id)``, in the replay);
4. replay every scenario (``--scale``) in one pass: repartition by broker (one shuffle for
   all scenarios), sort by time within partitions and stream the Arrow batches through the
   core's :class:`~kquota.ReplayKernel` (``mapInArrow``, :func:`broker_replay.replay`: strings
   become dictionary codes once per batch, results come back as Arrow columns), in open
   or closed loop; each row comes out once, with every scenario's results. ``--partition
   sensor`` (open loop) resolves the sensors first (Arrow UDF), then groups by (broker,
   request-quota sensor) for the request quota and by (broker, API, byte-rate sensor) for
   produce and fetch (a sensor always falls into one group, replayed in time order; more
   parallel than there are brokers);
5. write ``DIR/requests/`` (each request once, its input columns and every scenario's
   results: :mod:`~kquota.backtest.outputs`); ``DIR/entities/`` (one row per
   sensor) from the kernels' summaries, sent back with the replay (by sensor: aggregated
   by Spark from ``DIR/requests/``); with ``recommend``, ``DIR/recommendations/``
   (:mod:`~kquota.backtest.summaries`);
6. collect only small aggregates for the report (:mod:`~kquota.backtest.report`): when
   the kernel replays whole brokers, its counts per applied throttle and the broker
   comparison are tallied as the rows go out (:class:`~kquota.backtest.tally.Tally`)
   and the top entities come from its entity rows, so only the plotted sensors' rate
   series read ``DIR/requests/`` again.

The job never collects the traffic to the driver (the kernels' entity summaries, a row per
sensor, come through it on their way to ``DIR/entities/``). Functions shipped to executors are
module-level functions of this package with the configuration passed as JSON, so the
executors need ``kquota`` installed (the back-testing guide, docs/guide/backtesting.md:
"Running on a Spark cluster").
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pyarrow as pa  # type: ignore[import-untyped]

from kquota.backtest import (
    broker_replay,
    frames,
    inputs,
    outputs,
    report,
    requestlog,
    stages,
    summaries,
    tally,
)
from kquota.backtest.frames import (
    API,
    BROKER,
    CLIENT,
    PARTITIONS,
    SENSOR_CLIENT,
    SENSOR_USER,
    SEQ_COLUMNS,
    THREAD,
    TS,
    USER,
)
from kquota.backtest.inputs import STANDARD
from kquota.backtest.options import (
    REASON,
    REQUEST_SENSOR_CLIENT,
    REQUEST_SENSOR_USER,
    BacktestOptions,
    BacktestResult,
    RecommendedFile,
)
from kquota.backtest.outputs import RESULTS
from kquota.backtest.session import Progress, reading_traffic, spark_errors, writing_output
from kquota.exceptions import OutputError, TrafficError
from kquota.traffic_schema import KAFKA_THROTTLE

if TYPE_CHECKING:
    import pandas as pd  # type: ignore[import-untyped]
    from pyspark import Accumulator, AccumulatorParam
    from pyspark.sql import DataFrame, Observation, SparkSession
    from pyspark.sql.types import DataType, StructType

__all__ = ["run"]


def run(
    spark: SparkSession, options: BacktestOptions, progress: Progress | None = None
) -> BacktestResult:
    """Run the back-test; raise :class:`~kquota.exceptions.TrafficError` on bad input."""
    progress = progress or Progress(None, None)
    settings = {"spark.sql.execution.arrow.maxRecordsPerBatch": "50000"}
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

    started = time.monotonic()
    out = options.out.rstrip("/") or options.out
    inputs.prepare_output(out)
    configs = [options.quotas.scaled(s).dumps() for s in options.scales]
    if options.quotas.quota_callback is not None:
        from kquota.backtest import callback

        callback.ship(spark, options.quotas.quota_callback)

    traffic_path, traffic_format = options.traffic, options.input_format
    log_notes: list[str] = []
    if inputs.check_traffic(traffic_path, traffic_format) == requestlog.FORMAT:
        # Kafka's request log: parsed once, into DIR/traffic/, then back-tested from there
        traffic_path, traffic_format = f"{out}/traffic", "parquet"
        progress.phase(f"reading the request log {options.traffic} into {traffic_path}/")
        summary = requestlog.import_log(spark, options.traffic, traffic_path, options.log)
        progress.note(f"{summary.lines:,} lines, {summary.lines_skipped:,} skipped")
        log_notes = summary.notes()
        if options.quotas.quotas("request"):
            # the log has the handler's time only: say how the rest was estimated
            from kquota._core import REQUEST_LOG_NETWORK_TIME

            log_notes.append(REQUEST_LOG_NETWORK_TIME)
    progress.phase(f"reading {traffic_path}")
    raw = inputs.read_traffic(spark, traffic_path, traffic_format)
    parsed = inputs.parse(raw)
    observed: Observation | None = None
    if options.strict:
        # --strict refuses bad rows before anything is written: one pass to count them first
        rows_read, valid_rows, counts = _count_rows(parsed, options.traffic)
        _check_rows(options, rows_read, valid_rows, counts, progress)
        _quarantine(raw, parsed, options, valid_rows, counts, progress)
    else:
        # the rows are counted while the replay reads them (no pass of their own); bad rows
        # are counted per reason and quarantined afterwards, if there are any
        from pyspark.sql import Observation

        observed = Observation("kquota_traffic")
        parsed = parsed.observe(
            observed,
            F.count(F.lit(1)).alias("rows"),
            F.count_if(F.col(inputs.REASON_COLUMN).isNull()).alias("valid"),
            F.count_if(F.col(SEQ_COLUMNS[0]).isNull()).alias("unnumbered"),
        )
    valid = inputs.valid(parsed, raw.columns)
    notes: list[str] = log_notes
    if options.quotas.quotas("request") and THREAD not in raw.columns:
        notes.append("the traffic has no thread_time_ns: request quotas throttle nothing")
    if not options.quotas.entries:
        notes.append("the configuration has no quotas: nothing is measured or throttled")
    if options.quotas.kafka_version is not None:
        notes.append(f"throttles follow the quota rules of Kafka {options.quotas.kafka_version}")

    what = f"{valid_rows:,} requests" if observed is None else "the traffic"
    progress.phase(f"replaying {what} x {len(configs)} scenario(s), {options.mode} loop")
    # the kernel's entity summaries and the report's counts come back with the replay (whole
    # brokers per task); a traffic with controller mutations is replayed by the kernel (it
    # has their quota)
    mutations = PARTITIONS in valid.columns
    by_kernel = options.mode == "closed" or options.partition == "broker" or mutations
    sink: Accumulator[dict[str, dict[str, Any]]] | None = None
    tallies: Accumulator[dict[str, tally.Tally]] | None = None
    if by_kernel:
        param = cast("AccumulatorParam[dict[str, dict[str, Any]]]", tally.SummarySink())
        sink = spark.sparkContext.accumulator({}, param)
        counted = cast("AccumulatorParam[dict[str, tally.Tally]]", tally.SummarySink())
        tallies = spark.sparkContext.accumulator({}, counted)
    peak = spark.sparkContext.accumulator(
        0, cast("AccumulatorParam[int]", tally.PeakSink())
    )  # the Python workers' peak RSS, bytes
    replayed = _replay(spark, valid, options, configs, sink, peak, tallies)
    extras = [c for c in valid.columns if c not in STANDARD and not c.startswith(inputs.PREFIX)]
    requests_path = f"{out}/requests"
    try:
        with writing_output(requests_path):
            replayed.select(
                *STANDARD, *extras, *SEQ_COLUMNS, *(name for name, _ in stages.TAGS), RESULTS
            ).write.mode("overwrite").parquet(requests_path)
    except OutputError:
        if observed is not None:  # the first pass over the traffic: was it the reading?
            _count_rows(parsed, options.traffic)
        raise
    if observed is not None:
        try:
            rows_read, valid_rows, counts = _observed_rows(observed, parsed, options.traffic)
            _check_rows(options, rows_read, valid_rows, counts, progress)
            _quarantine(raw, parsed, options, valid_rows, counts, progress)
        except TrafficError:  # what was replayed is no result
            if not inputs.is_remote(out):
                shutil.rmtree(inputs.local_path(requests_path), ignore_errors=True)
            raise
    requests = spark.read.parquet(requests_path)

    entities_path = f"{out}/entities"
    if peak.value:
        progress.note(f"Python workers' peak RSS: {peak.value / 2**20:,.0f} MiB")
    progress.phase(f"wrote {requests_path}/; summarizing entities")
    usage = summaries.usage_all(requests, options.quotas)
    with writing_output(entities_path):
        entity_frame = None
        if sink is not None:
            entity_frame = summaries.kernel_entity_frame(sink.value, options)
            summaries.kernel_entities(spark, entity_frame).write.mode("overwrite").parquet(
                entities_path
            )
        elif usage is not None:
            summaries.entities(spark, usage, valid, options).write.mode("overwrite").parquet(
                entities_path
            )
        else:
            spark.createDataFrame([], summaries.ENTITY_SCHEMA).write.mode("overwrite").parquet(
                entities_path
            )
        entities = spark.read.parquet(entities_path)

    base = options.scenarios[options.base_index]
    recommendations = None
    recommended = None
    if not inputs.is_remote(out):
        shutil.rmtree(inputs.local_path(f"{out}/recommendations"), ignore_errors=True)
    if options.recommend:
        progress.phase(f"recommending quotas (throttled fraction <= {options.target:g}, {base})")
        with writing_output(f"{out}/recommendations"):
            recommendations = summaries.recommendations(
                spark, requests, entities, options, base, f"{out}/recommendations/entities", peak
            )
        recommendations, recommended = _recommended_file(
            spark, options, recommendations, traffic_path, traffic_format, out, progress
        )

    progress.phase("collecting summaries for the report")
    unserved = None
    if tallies is not None:
        by_throttle, broker = tally.tally_frames(tallies.value, options.scenarios)
        if options.mode == "closed" and options.clients is not None:
            unserved = tally.unserved_frame(tallies.value, options.scenarios)
        live = {f.name: f.dataType for f in requests.schema.fields}.get(KAFKA_THROTTLE)
        if live is None:
            broker = None
        elif broker is None:  # not in whole numbers: Spark compares them as it can
            broker = summaries.broker_comparison(requests)
    else:
        by_throttle = summaries.throttle_counts(requests)
        broker = summaries.broker_comparison(requests)
    # the kernels' entity rows are on the driver already: no Spark job for the top ones
    if entity_frame is not None:
        top = summaries.top_entities_of(entity_frame, base, report.TOP_ENTITIES)
    else:
        top = summaries.top_entities(entities, base, report.TOP_ENTITIES)
    # plots of different quota types and entities, not only of the most throttled few
    plotted = report.plot_choice(
        summaries.plot_candidates(
            entities if entity_frame is None else entity_frame, base, 4 * report.PLOTTED_ENTITIES
        )
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
        comparison=summaries.comparison(entities if entity_frame is None else entity_frame, top),
        histogram=report.throttle_histogram(by_throttle),
        rate_series=summaries.rate_series(requests, plotted, options, base),
        plotted=plotted,
        recommendations=recommendations,
        recommended=recommended,
        traffic=options.traffic,
        span_ms=_span(requests),
        target=options.target if options.recommend else None,
        config=options.quotas,
        notes=notes,
        broker=broker,
        worker_peak_rss=peak.value or None,
        clients=options.clients if options.mode == "closed" else None,
        unserved=unserved,
    )
    if options.report and not inputs.is_remote(out):
        progress.phase("writing the report")
        result.seconds = time.monotonic() - started
        with writing_output(f"{out}/report.html"):
            result.report = report.write_report(result, inputs.local_path(out))
    result.seconds = time.monotonic() - started
    return result


def _span(requests: DataFrame) -> tuple[int, int] | None:
    """The first and last request's time in the written requests (one column read)."""
    from pyspark.sql import functions as F

    row = requests.agg(F.min(TS), F.max(TS)).first()
    if row is None or row[0] is None:
        return None
    return int(row[0]), int(row[1])


def _recommended_file(
    spark: SparkSession,
    options: BacktestOptions,
    recommendations: pd.DataFrame,
    traffic_path: str,
    traffic_format: str,
    out: str,
    progress: Progress,
) -> tuple[pd.DataFrame, RecommendedFile]:
    """The quota file the recommendations make (:func:`frames.applicable`), written to
    ``DIR/recommendations/quotas.json``, and the same traffic back-tested with it (its one
    scenario, in ``DIR/recommendations/backtest/``); the recommendations with each
    entity's change."""
    base = options.quotas.scaled(options.scales[options.base_index])
    config, changed = frames.applicable(
        base,
        recommendations,
        options.headroom,
        lower=options.lower,
        add=options.add_quotas,
    )
    path = f"{out}/recommendations/quotas.json"
    if inputs.is_remote(out):
        # a remote folder is Spark's to write: the file as its one line of text
        text = spark.createDataFrame([(config.dumps(),)], "value string")
        with writing_output(path):
            text.coalesce(1).write.mode("overwrite").text(path)
    else:
        with writing_output(path):
            Path(inputs.local_path(path)).write_text(config.dumps(), encoding="utf-8")
    progress.phase(f"back-testing the recommended quotas ({path})")
    again = dataclasses.replace(
        options,
        traffic=traffic_path,
        input_format=traffic_format,
        quotas=config,
        scales=(1.0,),
        recommend=False,
        report=False,
        out=f"{out}/recommendations/backtest",
    )
    tested = _run(spark, again, Progress(None, None))
    file = RecommendedFile(
        config=config,
        path=path,
        headroom=options.headroom,
        lower=options.lower,
        add_quotas=options.add_quotas,
        totals=tested.totals,
    )
    return changed, file


# -- the input's rows ---------------------------------------------------------------------------


def _count_rows(parsed: DataFrame, traffic: str) -> tuple[int, int, dict[str, int]]:
    """One pass over the traffic: rows read, valid rows, and the bad rows per reason."""
    from pyspark.sql import functions as F

    with reading_traffic(traffic):
        rows = (
            parsed.groupBy(inputs.REASON_COLUMN)
            .agg(F.count(F.lit(1)), F.count_if(F.col(SEQ_COLUMNS[0]).isNull()))
            .collect()
        )
    if any(r[2] for r in rows):  # every row must know its input position (ties need it)
        raise TrafficError(f"cannot number the rows of {traffic!r} by input file")
    counts = {(r[0] if r[0] is not None else ""): int(r[1]) for r in rows}
    valid_rows = counts.pop("", 0)
    return valid_rows + sum(counts.values()), valid_rows, counts


def _observed_rows(
    observed: Observation, parsed: DataFrame, traffic: str
) -> tuple[int, int, dict[str, int]]:
    """What :func:`_count_rows` gives, from the counts taken while the replay read the
    traffic (a pass of its own only to count bad rows per reason, when there are any)."""
    try:
        metrics = observed.get
    except spark_errors():  # a traffic of no partitions: nothing was observed
        return _count_rows(parsed, traffic)
    rows_read, valid_rows = int(metrics["rows"]), int(metrics["valid"])
    if metrics["unnumbered"]:
        raise TrafficError(f"cannot number the rows of {traffic!r} by input file")
    if rows_read > valid_rows:
        return _count_rows(parsed, traffic)
    return rows_read, valid_rows, {}


def _check_rows(
    options: BacktestOptions,
    rows_read: int,
    valid_rows: int,
    counts: dict[str, int],
    progress: Progress,
) -> None:
    """Refuse a traffic with no rows, and bad rows under ``--strict``."""
    refused = rows_read - valid_rows
    if rows_read == 0:
        raise TrafficError(f"traffic {options.traffic!r} has no rows")
    progress.note(f"{rows_read:,} rows, {refused:,} refused")
    if refused and options.strict:
        detail = ", ".join(f"{n:,} {reason}" for reason, n in sorted(counts.items()))
        raise TrafficError(f"--strict: {refused:,} bad row(s) in the traffic ({detail})")


def _quarantine(
    raw: DataFrame,
    parsed: DataFrame,
    options: BacktestOptions,
    valid_rows: int,
    counts: dict[str, int],
    progress: Progress,
) -> None:
    """Write the bad rows (``counts``: per reason) to ``out/quarantine/`` with their reason,
    or remove an old quarantine; then refuse a traffic whose rows are all bad."""
    from pyspark.sql import functions as F

    out = options.out.rstrip("/") or options.out
    quarantine = f"{out}/quarantine"
    refused = sum(counts.values())
    if refused:
        progress.phase(f"quarantining {refused:,} bad rows to {quarantine}/")
        with writing_output(quarantine):
            original = [c for c in raw.columns if not c.startswith(inputs.PREFIX)]
            parsed.where(F.col(inputs.REASON_COLUMN).isNotNull()).select(
                *original, F.col(inputs.REASON_COLUMN).alias(REASON)
            ).coalesce(1).write.mode("overwrite").parquet(quarantine)
    elif not inputs.is_remote(out):
        shutil.rmtree(inputs.local_path(quarantine), ignore_errors=True)
    if valid_rows == 0:
        raise TrafficError(
            f"traffic {options.traffic!r} has no valid rows ({refused:,} refused, see "
            f"{quarantine}/)"
        )


# -- the replay ------------------------------------------------------------------------------


def _with_field(schema: StructType, *fields: tuple[str, DataType]) -> StructType:
    from pyspark.sql.types import StructField, StructType

    return StructType([*schema.fields, *(StructField(n, t, True) for n, t in fields)])


def _results_field(mutations: bool) -> tuple[str, DataType]:
    """The :data:`~kquota.backtest.outputs.RESULTS` column: a list of every scenario's results."""
    from pyspark.sql.pandas.types import from_arrow_type

    return RESULTS, from_arrow_type(outputs.results_type(mutations))


def _tag_fields() -> list[tuple[str, DataType]]:
    from pyspark.sql.types import StringType

    return [(name, StringType()) for name, _ in stages.TAGS]


def _replay(
    spark: SparkSession,
    valid: DataFrame,
    options: BacktestOptions,
    configs: Sequence[str],
    sink: Accumulator[dict[str, dict[str, Any]]] | None = None,
    peak: Accumulator[int] | None = None,
    tallies: Accumulator[dict[str, tally.Tally]] | None = None,
) -> DataFrame:
    """Every request once, with its sensor tags and every scenario's throttles and sending
    time (:data:`~kquota.backtest.outputs.RESULTS`)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, StructType

    base_json = options.quotas.dumps()
    config = options.quotas
    labels = tuple(options.scenarios)
    order = [F.col(TS), *(F.col(c) for c in SEQ_COLUMNS)]
    mutations = PARTITIONS in valid.columns
    if options.mode == "closed" or options.partition == "broker" or mutations:
        # one pass, one shuffle for every scenario: a partition holds whole brokers, each
        # replayed in time order through the core's kernel
        rows = valid.repartition(F.col(BROKER)).sortWithinPartitions(*order)
        whole = broker_replay.ReplayPlan(
            tuple(configs),
            labels,
            base_json,
            closed=options.mode == "closed",
            summaries=sink,
            peak_rss=peak,
            mutations=mutations,
            tallies=tallies,
            clients=None if options.clients is None else options.clients.as_tuple(),
        )
        schema = _with_field(valid.schema, *_tag_fields(), _results_field(mutations))
        return rows.mapInArrow(lambda batches: broker_replay.replay(whole, batches), schema)

    request = bool(config.quotas("request")) and THREAD in valid.columns
    replay_bytes = bool(config.quotas("produce") or config.quotas("fetch"))
    plan = functools.partial(
        stages.StreamPlan, tuple(configs), labels, base_json, replay_bytes=replay_bytes
    )
    # by sensor: resolve the sensors first, then one pass per quota family
    tag_type = ", ".join(f"{name}: string" for name in (stages.KIND, *(n for n, _ in stages.TAGS)))

    def resolve(users: pa.Array, clients: pa.Array, apis: pa.Array) -> pa.Array:
        return stages.resolve_arrays(base_json, users, clients, apis)

    arrow_udf = F.arrow_udf  # type: ignore[attr-defined]  # PySpark >= 4.1, not in its stubs
    tags = arrow_udf(resolve, f"struct<{tag_type}>")(F.col(USER), F.col(CLIENT), F.col(API))
    rows = valid.withColumn("_kq_tags", tags)
    rows = rows.select(
        *valid.columns,
        *(F.col(f"_kq_tags.{n}").alias(n) for n in (stages.KIND, *(t for t, _ in stages.TAGS))),
    )
    if request:
        rows = rows.repartition(
            F.col(BROKER), F.col(REQUEST_SENSOR_USER), F.col(REQUEST_SENSOR_CLIENT)
        ).sortWithinPartitions(*order)
        first = plan(resolve=False, request=True, final=False)
        schema = _with_field(
            rows.schema, *((stages.request_column(i), IntegerType()) for i in range(len(configs)))
        )
        rows = rows.mapInArrow(lambda batches: stages.stream(first, batches), schema)
    if replay_bytes:
        other = F.col(stages.KIND) == frames.KIND_OTHER
        spread = F.when(other, F.xxhash64(F.col(SEQ_COLUMNS[1]))).otherwise(
            F.xxhash64(F.col(BROKER), F.col(stages.KIND), F.col(SENSOR_USER), F.col(SENSOR_CLIENT))
        )
        rows = rows.repartition(spread).sortWithinPartitions(*order)
    final = plan(resolve=False, request=False, final=True)
    kept = [f for f in rows.schema.fields if not f.name.startswith("_kq_r")]
    schema = _with_field(StructType(kept), _results_field(False))
    return rows.mapInArrow(lambda batches: stages.stream(final, batches), schema).drop(stages.KIND)
