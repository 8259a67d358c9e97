"""Plain pandas/NumPy functions over one group of requests.

Nothing here imports Spark. The Spark job (:mod:`kquota.backtest.job`) only groups the
traffic and calls these functions on each group; the tests call them directly.

A *group* is a table of requests that all went to one broker (quotas, and so sensors, are
per broker in Kafka). Its columns are those of the traffic table (:data:`TS`, :data:`USER`,
:data:`CLIENT`, :data:`API`, :data:`BYTES`, optionally :data:`THREAD` and the tie-breaking
:data:`SEQ_COLUMNS`); rows may come in any order: every function replays them in time order,
ties broken by :data:`SEQ_COLUMNS` (the position of the row in the input), and returns its
results in the group's own row order.

The modules, each re-exported here:

* :mod:`~kquota.backtest.frames.schema`: the columns a replay reads (kquota's traffic
  schema, :mod:`kquota.traffic_schema`) and writes;
* :mod:`~kquota.backtest.frames.replay`: the sensors requests resolve to, and the open and
  closed loop replays (:func:`replay_open`, :func:`replay_closed`);
* :mod:`~kquota.backtest.frames.entities`: per-sensor summaries (:func:`summarize`);
* :mod:`~kquota.backtest.frames.recommendation`: recommended quotas (:func:`recommend`) and
  the quota file to apply from them (:func:`applicable`).

Every throttle comes from the core (:meth:`kquota.QuotaManager.record_batch` per quota type
in open loop, the sequential :class:`kquota.ReplayKernel` in closed loop), on managers
built from the :class:`~kquota.config.QuotaConfig` with Kafka's own precedence rules. The
Spark job replays through :class:`kquota.ReplayKernel` (both loops); :class:`OpenLoop`
remains for its by-sensor partitioning, which splits a request's quota types over two
passes.
"""

from kquota.backtest.frames.entities import (
    RECORDED,
    SENSOR_CLIENT,
    SENSOR_USER,
    SUMMARY_COLUMNS,
    TIME,
    USAGE,
    entity_label,
    nearest_rank,
    pair_sensors,
    peak_rates,
    rate_span_seconds,
    rate_unit,
    sensor_bounds,
    sensor_peaks,
    summarize,
)
from kquota.backtest.frames.recommendation import (
    CHANGES,
    RECOMMENDATION_COLUMNS,
    applicable,
    proposed_quota,
    recommend,
)
from kquota.backtest.frames.replay import (
    ClientLimits,
    OpenLoop,
    ReplayMode,
    applied_throttle,
    kind_codes,
    kinds,
    replay_closed,
    replay_open,
    resolve_sensors,
    sensor_tags,
    time_order,
)
from kquota.backtest.frames.schema import (
    ADDED_LATENCY,
    API,
    BROKER,
    BYTES,
    CLIENT,
    FETCH_THROTTLE,
    KIND_FETCH,
    KIND_OTHER,
    KIND_PRODUCE,
    MUTATION_APIS,
    MUTATION_RESULTS,
    MUTATION_THROTTLE,
    NANOS_TO_PERCENT,
    PARTITIONS,
    PRODUCE_THROTTLE,
    QUOTA_TYPES,
    REFUSED_PARTITIONS,
    REQUEST_THROTTLE,
    SENT,
    SEQ_COLUMNS,
    SERVED,
    STRICT,
    THREAD,
    THROTTLE,
    THROTTLE_OF,
    TOPIC_PARTITIONS,
    TS,
    UNSERVED,
    UNSERVED_BUFFER_FULL,
    UNSERVED_TIMED_OUT,
    USER,
    BoolArray,
    FloatArray,
    Int32Array,
    Int64Array,
)

__all__ = [
    "ADDED_LATENCY",
    "API",
    "BROKER",
    "BYTES",
    "CHANGES",
    "CLIENT",
    "FETCH_THROTTLE",
    "KIND_FETCH",
    "KIND_OTHER",
    "KIND_PRODUCE",
    "MUTATION_APIS",
    "MUTATION_RESULTS",
    "MUTATION_THROTTLE",
    "NANOS_TO_PERCENT",
    "PARTITIONS",
    "PRODUCE_THROTTLE",
    "QUOTA_TYPES",
    "RECOMMENDATION_COLUMNS",
    "RECORDED",
    "REFUSED_PARTITIONS",
    "REQUEST_THROTTLE",
    "SENSOR_CLIENT",
    "SENSOR_USER",
    "SENT",
    "SEQ_COLUMNS",
    "SERVED",
    "STRICT",
    "SUMMARY_COLUMNS",
    "THREAD",
    "THROTTLE",
    "THROTTLE_OF",
    "TIME",
    "TOPIC_PARTITIONS",
    "TS",
    "UNSERVED",
    "UNSERVED_BUFFER_FULL",
    "UNSERVED_TIMED_OUT",
    "USAGE",
    "USER",
    "BoolArray",
    "ClientLimits",
    "FloatArray",
    "Int32Array",
    "Int64Array",
    "OpenLoop",
    "ReplayMode",
    "applicable",
    "applied_throttle",
    "entity_label",
    "kind_codes",
    "kinds",
    "nearest_rank",
    "pair_sensors",
    "peak_rates",
    "proposed_quota",
    "rate_span_seconds",
    "rate_unit",
    "recommend",
    "replay_closed",
    "replay_open",
    "resolve_sensors",
    "sensor_bounds",
    "sensor_peaks",
    "sensor_tags",
    "summarize",
    "time_order",
]
