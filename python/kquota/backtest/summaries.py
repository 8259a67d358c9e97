"""After the replay: what Spark aggregates from ``DIR/requests/`` — the per-sensor summaries
(``DIR/entities/``), the recommended quotas (``DIR/recommendations/``) and the small tables
the report draws (the only data collected to the driver).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, Final

import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]

from kquota.backtest import frames, outputs, requestlog, stages
from kquota.backtest.options import (
    REQUEST_SENSOR_CLIENT,
    REQUEST_SENSOR_USER,
    SCENARIO,
    BacktestOptions,
)
from kquota.config import QuotaConfig

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "ENTITY_SCHEMA",
    "RECOMMENDATION_SCHEMA",
    "comparison",
    "entities",
    "kernel_entities",
    "kernel_entity_frame",
    "plot_candidates",
    "rate_series",
    "recommendations",
    "throttle_counts",
    "top_entities",
    "top_entities_of",
    "usage_all",
]


def usage_all(
    requests: DataFrame,
    config: QuotaConfig,
    types: Collection[str] | None = None,
    scenario: int | None = None,
) -> DataFrame | None:
    """One row per request, scenario and sensor it was recorded by, from ``DIR/requests/``
    (a union of one selection per quota type with quotas; Spark reads each column once per
    selection that needs it).

    Columns: scenario, ``quota_type``, broker, the sensor's tags, user, client_id, ts_ms,
    ``time_ms`` (when it was recorded), ``usage`` (bytes or thread nanoseconds), bytes,
    ``recorded`` (false for an unrecorded fetch), ``throttle_ms`` (that quota type's),
    added latency, ``unrecord_if`` (the request quota throttled it) and the input position.
    ``types``: only these quota types' rows (every type with quotas when ``None``);
    ``scenario``: only that scenario's (its index in ``--scale``).
    """
    from pyspark.sql import functions as F

    requests = outputs.scenario_rows(requests, scenario)
    parts = []
    for quota_type in frames.QUOTA_TYPES:
        if not config.quotas(quota_type) or (types is not None and quota_type not in types):
            continue
        if quota_type == "request":
            rows = requests.where(F.col(frames.THREAD).isNotNull())
            tags = (F.col(REQUEST_SENSOR_USER), F.col(REQUEST_SENSOR_CLIENT))
            usage, recorded = F.col(frames.THREAD), F.lit(True)
        else:
            rows = requests.where(F.lower(F.col(frames.API)) == quota_type)
            tags = (F.col(frames.SENSOR_USER), F.col(frames.SENSOR_CLIENT))
            usage = F.col(frames.BYTES)
            recorded = (
                (F.col(frames.FETCH_THROTTLE) <= 0) & (F.col(frames.REQUEST_THROTTLE) <= 0)
                if quota_type == "fetch"
                else F.lit(True)
            )
        parts.append(
            rows.select(
                F.col(SCENARIO),
                F.lit(quota_type).alias("quota_type"),
                F.col(frames.BROKER),
                tags[0].alias(frames.SENSOR_USER),
                tags[1].alias(frames.SENSOR_CLIENT),
                F.col(frames.USER),
                F.col(frames.CLIENT),
                F.col(frames.TS),
                F.col(frames.SENT).alias(frames.TIME),
                usage.cast("long").alias(frames.USAGE),
                F.col(frames.BYTES),
                recorded.alias(frames.RECORDED),
                F.col(frames.THROTTLE_OF[quota_type]).alias(frames.THROTTLE),
                F.col(frames.ADDED_LATENCY),
                (F.col(frames.REQUEST_THROTTLE) > 0).alias("unrecord_if"),
                *frames.SEQ_COLUMNS,
            )
        )
    if not parts:
        return None
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    return union


ENTITY_SCHEMA: Final = (
    f"{SCENARIO} string, quota_type string, {frames.BROKER} string, "
    f"{frames.SENSOR_USER} string, {frames.SENSOR_CLIENT} string, entity string, "
    f"quota double, requests long, {frames.BYTES} long, "
    f"{frames.USAGE} long, throttled_requests long, throttled_fraction double, "
    "total_throttle_ms long, mean_throttle_ms double, p99_throttle_ms long, "
    "max_throttle_ms long, peak_rate double, utilization double, "
    "mean_added_latency_ms double, max_added_latency_ms long"
)
"""The schema of ``DIR/entities/``: one row per (scenario, quota type, broker, sensor)."""

RECOMMENDATION_SCHEMA: Final = (
    "_kq_entity long, brokers long, requests long, recommended_quota double, "
    "throttled_fraction double"
)
"""The schema the recommend stage returns (entities by their dense id, named afterwards)."""


def _arrow_schema(ddl: str) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    schema = StructType.fromDDL(ddl)
    assert isinstance(schema, StructType)
    return to_arrow_schema(schema)


def entities(
    spark: SparkSession,
    usage: DataFrame,
    valid: DataFrame,
    options: BacktestOptions,
) -> DataFrame:
    """Per sensor and scenario: :func:`frames.summarize`'s columns, with Spark doing the sums.

    The same definitions as the kernel: exact integer sums and counts aggregated by Spark;
    the windowed peak and the nearest-rank p99 from :func:`frames.sensor_peaks` on
    partitions that hold whole sensors; the bounds from the core, per sensor of the
    configuration (a scenario's bound is the base bound times its scale, exactly as
    :meth:`~kquota.config.QuotaConfig.scaled` computes it).
    """
    from pyspark.sql import functions as F

    keys = [SCENARIO, "quota_type", frames.BROKER, frames.SENSOR_USER, frames.SENSOR_CLIENT]
    window = options.quotas.window
    # a 64-bit id per sensor keeps the heavy aggregations on one fixed-width key
    usage = usage.withColumn("_sid", F.xxhash64(*keys))
    throttle = F.greatest(F.col(frames.THROTTLE), F.lit(0))
    stats = usage.groupBy("_sid", *keys).agg(
        F.count(F.lit(1)).alias("requests"),
        F.sum(frames.BYTES).alias(frames.BYTES),
        F.sum(frames.USAGE).alias(frames.USAGE),
        F.sum((throttle > 0).cast("long")).alias("throttled_requests"),
        F.sum(throttle.cast("long")).alias("total_throttle_ms"),
        F.max(throttle).cast("long").alias("max_throttle_ms"),
        F.sum(frames.ADDED_LATENCY).alias("_latency"),
        F.max(frames.ADDED_LATENCY).alias("max_added_latency_ms"),
    )
    window_json = QuotaConfig(window).dumps()
    amount = F.when(F.col(frames.RECORDED), F.col(frames.USAGE)).otherwise(F.lit(0)).cast("long")
    peaks = (
        usage.select("_sid", frames.TIME, amount.alias("_amount"), frames.THROTTLE)
        .repartition("_sid")
        .mapInArrow(
            lambda batches: stages.peak_batches(window_json, batches),
            "_sid long, _peak long, p99_throttle_ms long",
        )
    )
    base_json = options.quotas.dumps()
    bounds = (
        valid.select(frames.USER, frames.CLIENT)
        .distinct()
        .mapInArrow(
            lambda batches: stages.pair_batches(base_json, batches),
            f"quota_type string, {frames.SENSOR_USER} string, {frames.SENSOR_CLIENT} string,"
            " quota double",
        )
        .where(~F.isnan("quota"))
        .groupBy("quota_type", frames.SENSOR_USER, frames.SENSOR_CLIENT)
        .agg(F.max("quota").alias("_quota"))
    )
    scales = spark.createDataFrame(
        list(zip(options.scenarios, options.scales, strict=True)),
        f"{SCENARIO} string, _scale double",
    )
    unit = F.when(F.col("quota_type") == "request", F.lit(frames.NANOS_TO_PERCENT)).otherwise(
        F.lit(1.0)
    )
    quota = F.col("_quota") * F.col("_scale")
    peak_rate = F.col("_peak").cast("double") * unit / F.lit(frames.rate_span_seconds(window))
    entities = (
        stats.join(peaks, "_sid")
        .join(F.broadcast(scales), SCENARIO)
        .join(bounds, ["quota_type", frames.SENSOR_USER, frames.SENSOR_CLIENT], "left")
        .select(
            *keys,
            F.lit(None).cast("string").alias("entity"),
            quota.alias("quota"),
            "requests",
            frames.BYTES,
            frames.USAGE,
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
    return entities.mapInArrow(stages.label_batches, entities.schema)


_KERNEL_ONLY: Final = ("scenario", "p50_throttle_ms")
"""Columns of the kernel's summaries that ``DIR/entities/`` does not have (as they are)."""


def kernel_entity_frame(parts: dict[str, dict[str, Any]], options: BacktestOptions) -> pd.DataFrame:
    """``DIR/entities/``'s rows from the replay kernels' summaries (``{broker: summaries()}``),
    on the driver: :data:`ENTITY_SCHEMA`'s columns, an unlimited sensor's quota and
    utilization NaN.

    The kernel accumulates :func:`frames.summarize`'s columns while it replays (the tests
    check it equals ``summarize``), so no pass over ``DIR/requests/`` is needed: one row per
    (scenario, quota type, broker, sensor), collected from the executors (a row per sensor,
    not per request).
    """
    import numpy as np

    tables = []
    for broker, columns in sorted(parts.items()):
        frame = pd.DataFrame({k: v for k, v in columns.items() if k not in _KERNEL_ONLY})
        frame.insert(0, SCENARIO, np.asarray(options.scenarios, dtype=object)[columns["scenario"]])
        frame[frames.BROKER] = broker
        tables.append(frame)
    if not tables:
        return pd.DataFrame(columns=_ENTITY_NAMES)
    out = pd.concat(tables, ignore_index=True)
    out["entity"] = [
        frames.entity_label(u, c)
        for u, c in zip(out[frames.SENSOR_USER], out[frames.SENSOR_CLIENT], strict=True)
    ]
    return out[_ENTITY_NAMES]


_ENTITY_NAMES: Final = [name.split(" ")[0] for name in ENTITY_SCHEMA.split(", ")]


def kernel_entities(spark: SparkSession, frame: pd.DataFrame) -> DataFrame:
    """:func:`kernel_entity_frame`'s rows as a Spark frame of :data:`ENTITY_SCHEMA` (to be
    written by Spark); an unlimited sensor's quota and utilization null, as the Spark
    aggregation gives them."""
    if frame.empty:
        return spark.createDataFrame([], ENTITY_SCHEMA)
    out = frame.copy()
    unlimited = out["quota"].isna()
    out["quota"] = out["quota"].astype(object).where(~unlimited, None)
    out["utilization"] = out["utilization"].astype(object).where(~unlimited, None)
    return spark.createDataFrame(out, ENTITY_SCHEMA)


_TOP_ORDER: Final = (
    "total_throttle_ms",
    "quota_type",
    frames.BROKER,
    frames.SENSOR_USER,
    frames.SENSOR_CLIENT,
)


def top_entities(entities: DataFrame, base: str, limit: int) -> pd.DataFrame:
    """The ``limit`` sensors of the base scenario with the most throttle time (then by
    quota type, broker and tags), from ``DIR/entities/``."""
    from pyspark.sql import functions as F

    first, *rest = _TOP_ORDER
    top: pd.DataFrame = (
        entities.where((F.col(SCENARIO) == base) & (F.col("throttled_requests") > 0))
        .orderBy(F.desc(first), *rest)
        .limit(limit)
        .toPandas()
    )
    return top


def top_entities_of(frame: pd.DataFrame, base: str, limit: int) -> pd.DataFrame:
    """:func:`top_entities` from :func:`kernel_entity_frame`'s rows, on the driver."""
    chosen = frame[(frame[SCENARIO] == base) & (frame["throttled_requests"] > 0)]
    chosen = chosen.sort_values(
        list(_TOP_ORDER), ascending=[False] + [True] * (len(_TOP_ORDER) - 1), kind="stable"
    )
    return chosen.head(limit).reset_index(drop=True)


def plot_candidates(entities: DataFrame | pd.DataFrame, base: str, per_type: int) -> pd.DataFrame:
    """The ``per_type`` most throttled sensors of each quota type (base scenario), in
    :func:`top_entities`' order, for the report to choose its plots from (so that a quota
    type, or an entity, whose throttles are fewer than the top ones' still gets one); from
    ``DIR/entities/`` or from :func:`kernel_entity_frame`'s rows."""
    first, *rest = _TOP_ORDER
    if isinstance(entities, pd.DataFrame):
        rows = entities[(entities[SCENARIO] == base) & (entities["throttled_requests"] > 0)]
        rows = rows.sort_values(
            list(_TOP_ORDER), ascending=[False] + [True] * len(rest), kind="stable"
        )
        return rows.groupby("quota_type", sort=False).head(per_type).reset_index(drop=True)
    from pyspark.sql import Window as SparkWindow
    from pyspark.sql import functions as F

    order = SparkWindow.partitionBy("quota_type").orderBy(F.desc(first), *rest)
    picked: pd.DataFrame = (
        entities.where((F.col(SCENARIO) == base) & (F.col("throttled_requests") > 0))
        .withColumn("_rank", F.row_number().over(order))
        .where(F.col("_rank") <= per_type)
        .drop("_rank")
        .toPandas()
    )
    picked = picked.sort_values(
        list(_TOP_ORDER), ascending=[False] + [True] * len(rest), kind="stable"
    )
    return picked.reset_index(drop=True)


def throttle_counts(requests: DataFrame) -> pd.DataFrame:
    """Per scenario and applied throttle value: requests, per-type throttled, added latency.

    One small aggregate (one row per distinct throttle value) from which the report
    derives the scenario totals and the throttle-time distribution exactly.
    """
    from pyspark.sql import functions as F

    counts: pd.DataFrame = (
        outputs.scenario_rows(requests)
        .groupBy(SCENARIO, frames.THROTTLE)
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.sum((F.col(frames.PRODUCE_THROTTLE) > 0).cast("long")).alias("produce_throttled"),
            F.sum((F.col(frames.FETCH_THROTTLE) > 0).cast("long")).alias("fetch_throttled"),
            F.sum((F.col(frames.REQUEST_THROTTLE) > 0).cast("long")).alias("request_throttled"),
            F.sum(frames.ADDED_LATENCY).alias("added_latency_ms"),
            F.max(frames.ADDED_LATENCY).alias("max_added_latency_ms"),
        )
        .toPandas()
    )
    return counts


def broker_comparison(requests: DataFrame) -> pd.DataFrame | None:
    """What the broker did beside what the replayed configuration does, per scenario,
    when the traffic says which throttle each request got (``kafka_throttle_ms``: Kafka's
    request log, or ``kquota proxy --capture``); ``None`` otherwise.

    Columns: ``scenario``, ``requests``, ``broker_throttled`` and ``replay_throttled``
    (requests with a positive throttle), ``both_throttled``, ``agree`` (requests throttled
    in both or in neither), ``broker_throttle_ms`` and ``replay_throttle_ms`` (totals).
    """
    from pyspark.sql import functions as F

    if requestlog.KAFKA_THROTTLE not in requests.columns:
        return None
    # a value that is not a whole number (a CSV's text) counts as no throttle, as a blank does
    live = F.coalesce(F.col(requestlog.KAFKA_THROTTLE).try_cast("long"), F.lit(0))
    replay = F.col(frames.THROTTLE)
    counted: pd.DataFrame = (
        outputs.scenario_rows(requests)
        .groupBy(SCENARIO)
        .agg(
            F.count(F.lit(1)).alias("requests"),
            F.sum((live > 0).cast("long")).alias("broker_throttled"),
            F.sum((replay > 0).cast("long")).alias("replay_throttled"),
            F.sum(((live > 0) & (replay > 0)).cast("long")).alias("both_throttled"),
            F.sum(((live > 0) == (replay > 0)).cast("long")).alias("agree"),
            F.sum(F.greatest(live, F.lit(0)).cast("long")).alias("broker_throttle_ms"),
            F.sum(replay.cast("long")).alias("replay_throttle_ms"),
        )
        .orderBy(SCENARIO)
        .toPandas()
    )
    return counted


_SENSOR_KEY: Final = ("quota_type", frames.BROKER, frames.SENSOR_USER, frames.SENSOR_CLIENT)


_COMPARED: Final = (
    *_SENSOR_KEY,
    "entity",
    SCENARIO,
    "quota",
    "throttled_fraction",
    "total_throttle_ms",
    "utilization",
)


def comparison(entities: DataFrame | pd.DataFrame, top: pd.DataFrame) -> pd.DataFrame:
    """The top entities' summaries in every scenario (the what-if table), from
    ``DIR/entities/`` or from :func:`kernel_entity_frame`'s rows."""
    from pyspark.sql import functions as F

    if top.empty:
        return pd.DataFrame()
    if isinstance(entities, pd.DataFrame):
        return entities.merge(top[list(_SENSOR_KEY)], on=list(_SENSOR_KEY))[list(_COMPARED)]
    wanted = entities.sparkSession.createDataFrame(top[list(_SENSOR_KEY)])
    compared: pd.DataFrame = (
        entities.join(F.broadcast(wanted), list(_SENSOR_KEY)).select(*_COMPARED).toPandas()
    )
    return compared


def rate_series(
    requests: DataFrame, top: pd.DataFrame, options: BacktestOptions, base: str
) -> dict[str, pd.DataFrame]:
    """For the plotted sensors (base scenario), per window: recorded usage in quota units
    (``amount``), throttled requests, requests, and ``unrecorded`` requests (throttled
    fetches: their bytes are not in ``amount``, and the report leaves their windows out of
    the plotted rate).

    Only the base scenario's rows of those sensors are read and spread into usage."""
    from pyspark.sql import functions as F

    if top.empty:
        return {}
    theirs = F.lit(False)
    for quota_type, broker, user, client in top[list(_SENSOR_KEY)].itertuples(index=False):
        if quota_type == "request":
            tags = (F.col(REQUEST_SENSOR_USER), F.col(REQUEST_SENSOR_CLIENT))
        else:
            tags = (F.col(frames.SENSOR_USER), F.col(frames.SENSOR_CLIENT))
        theirs = theirs | (
            (F.col(frames.BROKER) == F.lit(broker))
            & tags[0].eqNullSafe(F.lit(user))
            & tags[1].eqNullSafe(F.lit(client))
        )
    usage = usage_all(
        requests.where(theirs),
        options.quotas,
        set(top["quota_type"]),  # a selection (a read of requests/) per type plotted
        options.scenarios.index(base),
    )
    if usage is None:
        return {}
    wanted = usage.sparkSession.createDataFrame(top[list(_SENSOR_KEY)])
    w = options.quotas.window.window_ms
    unit = F.when(F.col("quota_type") == "request", F.lit(frames.NANOS_TO_PERCENT)).otherwise(
        F.lit(1.0)
    )
    amount = (
        F.when(F.col(frames.RECORDED), F.col(frames.USAGE)).otherwise(F.lit(0)).cast("double")
        * unit
    )
    frame: pd.DataFrame = (
        usage.where(F.col(SCENARIO) == base)
        .join(F.broadcast(wanted), list(_SENSOR_KEY))
        .groupBy(
            *_SENSOR_KEY,
            F.expr(f"({frames.TIME} - pmod({frames.TIME}, {w})) div {w}").alias("window"),
        )
        .agg(
            F.sum(amount).alias("amount"),
            F.sum((F.col(frames.THROTTLE) > 0).cast("long")).alias("throttled"),
            F.count(F.lit(1)).alias("requests"),
            F.sum((~F.col(frames.RECORDED)).cast("long")).alias("unrecorded"),
        )
        .orderBy(*_SENSOR_KEY, "window")
        .toPandas()
    )
    return {
        "|".join(str(k) for k in key): part.reset_index(drop=True)
        for key, part in frame.groupby(list(_SENSOR_KEY), sort=False, observed=True)
    }


_ENTITY_ID: Final = "_kq_entity"
_TYPE_CODE: Final = "_kq_type"
_BROADCAST_ENTITIES: Final = 1_000_000
"""Up to this many entities, their ids join the usage rows by broadcast."""


def recommendations(
    spark: SparkSession,
    requests: DataFrame,
    entities: DataFrame,
    options: BacktestOptions,
    base: str,
    path: str,
    peak_rss: Any = None,
) -> pd.DataFrame:
    """Per entity (across brokers): current quota and fraction, and the recommended quota
    (``peak_rss``: an accumulator of :class:`~kquota.backtest.tally.PeakSink`, told each
    worker's peak RSS).

    The entities are numbered on the driver (one row each, from ``entities``); the usage
    rows carry that number instead of the names through the shuffle to the search."""
    import numpy as np
    from pyspark.sql import functions as F

    usage = usage_all(requests, options.quotas, scenario=options.scenarios.index(base))
    if usage is None:
        return pd.DataFrame()
    keys = ["quota_type", frames.SENSOR_USER, frames.SENSOR_CLIENT]
    current: pd.DataFrame = (
        entities.where(F.col(SCENARIO) == base)
        .groupBy(*keys)
        .agg(
            F.max("quota").alias("current_quota"),
            (F.sum("throttled_requests") / F.sum("requests")).alias("current_throttled_fraction"),
        )
        .toPandas()
    )
    current[_ENTITY_ID] = np.arange(len(current), dtype=np.int64)
    current["entity"] = [
        frames.entity_label(u, c)
        for u, c in zip(current[frames.SENSOR_USER], current[frames.SENSOR_CLIENT], strict=True)
    ]
    names = spark.createDataFrame(
        current[[_ENTITY_ID, *keys, "entity", "current_quota", "current_throttled_fraction"]],
        f"{_ENTITY_ID} long, quota_type string, {frames.SENSOR_USER} string, "
        f"{frames.SENSOR_CLIENT} string, "
        "entity string, current_quota double, current_throttled_fraction double",
    )
    ids = names.select(*keys, _ENTITY_ID)
    # a partition holds whole entities (of any quota type): no sort, one search per type
    types = sorted({frames.QUOTA_TYPES.index(t) for t in current["quota_type"]})
    buckets = options.buckets or max(2 * spark.sparkContext.defaultParallelism, 2)
    # only what the search reads crosses the shuffle and goes to Python (mapInArrow sends
    # every column of its input): numbers, and the broker's name
    usage = usage.join(F.broadcast(ids) if len(current) <= _BROADCAST_ENTITIES else ids, keys)
    code = F.lit(0)
    for index, quota_type in enumerate(frames.QUOTA_TYPES):
        code = F.when(F.col("quota_type") == quota_type, F.lit(index)).otherwise(code)
    usage = usage.select(
        code.alias(_TYPE_CODE),
        _ENTITY_ID,
        frames.BROKER,
        frames.TS,
        frames.USAGE,
        "unrecord_if",
        *frames.SEQ_COLUMNS,
    ).repartition(buckets * max(len(types), 1), F.col(_ENTITY_ID))
    schema = _arrow_schema(RECOMMENDATION_SCHEMA)
    base_json = options.quotas.dumps()
    target = options.target
    recommended = usage.mapInArrow(
        lambda batches: stages.recommend_partition(base_json, target, schema, batches, peak_rss),
        RECOMMENDATION_SCHEMA,
    )
    # one file, written by one task after a shuffle: a coalesce(1) here would also pull
    # the search (mapInArrow, when the join is broadcast) into that one task
    recommended.join(names, _ENTITY_ID).select(
        "quota_type",
        frames.SENSOR_USER,
        frames.SENSOR_CLIENT,
        "entity",
        "brokers",
        "requests",
        "current_quota",
        "current_throttled_fraction",
        "recommended_quota",
        F.col("throttled_fraction").alias("recommended_throttled_fraction"),
    ).repartition(1).write.mode("overwrite").parquet(path)
    return spark.read.parquet(path).orderBy(F.desc("current_throttled_fraction"), *keys).toPandas()
