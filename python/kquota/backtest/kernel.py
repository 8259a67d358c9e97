"""The back-test kernel: plain pandas/NumPy functions over one group of requests.

Nothing here imports Spark. The Spark job (:mod:`kquota.backtest.job`) only groups the
traffic and calls these functions on each group; the tests call them directly.

A *group* is a table of requests that all went to one broker (quotas, and so sensors, are
per broker in Kafka). Its columns are those of the traffic table (:data:`TS`, :data:`USER`,
:data:`CLIENT`, :data:`API`, :data:`BYTES`, optionally :data:`THREAD` and the tie-breaking
:data:`SEQ_COLUMNS`); rows may come in any order: every function replays them in time order,
ties broken by :data:`SEQ_COLUMNS` (the position of the row in the input), and returns its
results in the group's own row order.

Every throttle comes from the core (:meth:`kquota.QuotaManager.record_batch` per quota type
in open loop, the sequential :class:`kquota.ReplayKernel` in closed loop), on managers
built from the :class:`~kquota.config.QuotaConfig` with Kafka's own precedence rules. The
Spark job replays through :class:`kquota.ReplayKernel` (both loops); :class:`OpenLoop`
remains for its by-sensor partitioning, which splits a request's quota types over two
passes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped]

from kquota import QuotaManager, ReplayKernel, RequestPath
from kquota._core import applied_throttles, recommend_quotas
from kquota.config import QuotaConfig, Window
from kquota.config.model import QuotaType

__all__ = [
    "API",
    "BROKER",
    "BYTES",
    "CLIENT",
    "KIND_FETCH",
    "KIND_OTHER",
    "KIND_PRODUCE",
    "MUTATION_APIS",
    "MUTATION_RESULTS",
    "MUTATION_THROTTLE",
    "NANOS_TO_PERCENT",
    "PARTITIONS",
    "QUOTA_TYPES",
    "REFUSED_PARTITIONS",
    "SEQ_COLUMNS",
    "STRICT",
    "THREAD",
    "TOPIC_PARTITIONS",
    "TS",
    "USER",
    "OpenLoop",
    "applied_throttle",
    "entity_label",
    "kind_codes",
    "kinds",
    "nearest_rank",
    "pair_sensors",
    "peak_rates",
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

# -- the traffic table -----------------------------------------------------------------------

TS: Final = "ts_ms"
"""Request time, epoch milliseconds (int64)."""
BROKER: Final = "broker"
"""The broker that handled the request (string; optional, one broker when absent)."""
USER: Final = "user"
"""The principal name, unsanitized (string, may be empty)."""
CLIENT: Final = "client_id"
"""The client id (string, may be empty)."""
API: Final = "api"
"""The Kafka API name: ``produce``, ``fetch`` or any other (compared case-insensitively)."""
BYTES: Final = "bytes"
"""Produce request size or fetch response size in bytes (int64 >= 0)."""
THREAD: Final = "thread_time_ns"
"""Request-handler thread time in nanoseconds (int64 >= 0; optional, null = unknown)."""
PARTITIONS: Final = "partitions"
"""Partitions created or deleted by a CreateTopics, CreatePartitions or DeleteTopics request
(int >= 0; optional, null = not replayed as a controller mutation): its permits on the
``controller_mutation_rate`` quota (KIP-599)."""
STRICT: Final = "strict"
"""Whether the mutation request's version is enforced strictly (CreateTopics >= v6,
CreatePartitions >= v3, DeleteTopics >= v5): topics over the quota are refused; otherwise
accepted and throttled (bool; required on a row with :data:`PARTITIONS`)."""
TOPIC_PARTITIONS: Final = "topic_partitions"
"""The partitions of each topic of a mutation request, in request order (array of int >= 0;
optional, null = one topic of :data:`PARTITIONS`, which stays the total and must equal their
sum). Kafka's controller records a request topic by topic: a strict request's topics are
refused (THROTTLING_QUOTA_EXCEEDED) once an earlier topic overdrew the bucket, so
:data:`REFUSED_PARTITIONS` counts the partitions of the refused topics."""
MUTATION_APIS: Final = frozenset({"createtopics", "createpartitions", "deletetopics"})
"""The APIs the controller-mutation quota applies to (as :data:`API` is compared: lower case,
without underscores: ``CreateTopics`` or the request log's ``create_topics``)."""
SEQ_COLUMNS: Final = ("_kq_seq_file", "_kq_seq_row")
"""Tie-breakers for requests with the same :data:`TS`: the row's position in the input."""

KIND_PRODUCE: Final = "produce"
KIND_FETCH: Final = "fetch"
KIND_OTHER: Final = "other"

QUOTA_TYPES: Final[tuple[QuotaType, ...]] = ("produce", "fetch", "request")
"""The three client-quota types, in the order the results list them."""

NANOS_TO_PERCENT: Final = 100.0 / 1_000_000_000.0
"""Request-time usage unit: thread nanoseconds to percent of one thread (Kafka's constant)."""

# -- results -----------------------------------------------------------------------------------

PRODUCE_THROTTLE: Final = "produce_throttle_ms"
FETCH_THROTTLE: Final = "fetch_throttle_ms"
REQUEST_THROTTLE: Final = "request_throttle_ms"
THROTTLE: Final = "throttle_ms"
SENT: Final = "sent_ms"
ADDED_LATENCY: Final = "added_latency_ms"
MUTATION_THROTTLE: Final = "mutation_throttle_ms"
"""The controller-mutation quota's throttle of a mutation request (0 otherwise); the applied
:data:`THROTTLE` is the larger of it and the request quota's, ties to the request quota."""
REFUSED_PARTITIONS: Final = "refused_partitions"
"""The partitions of a strict mutation refused (THROTTLING_QUOTA_EXCEEDED); 0 otherwise."""
MUTATION_RESULTS: Final = (MUTATION_THROTTLE, REFUSED_PARTITIONS)
"""The result columns a replay adds when the traffic has :data:`PARTITIONS`."""
THROTTLE_OF: Final[dict[QuotaType, str]] = {
    "produce": PRODUCE_THROTTLE,
    "fetch": FETCH_THROTTLE,
    "request": REQUEST_THROTTLE,
}
"""The per-request throttle column of each quota type."""

Int32Array = npt.NDArray[np.int32]
Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


_KIND_NAMES: Final = (KIND_PRODUCE, KIND_FETCH, KIND_OTHER)
_KIND_CODE: Final = {KIND_PRODUCE: 0, KIND_FETCH: 1}


def _factorize(values: pd.Series) -> tuple[Int64Array, list[str]]:
    """Codes of the distinct values and the values as strings (a null counts as ``""``)."""
    codes, uniques = pd.factorize(values, sort=False)
    names = [str(u) for u in uniques]
    codes = np.asarray(codes, dtype=np.int64)
    missing = codes < 0
    if missing.any():
        if "" not in names:
            names.append("")
        codes = np.where(missing, names.index(""), codes)
    return codes, names


def kind_codes(api: pd.Series) -> npt.NDArray[np.int8]:
    """0 (produce), 1 (fetch) or 2 (any other API) for each API name, case-insensitively."""
    codes, names = _factorize(api)
    table = np.array([_KIND_CODE.get(name.lower(), 2) for name in names] or [2], dtype=np.int8)
    return table[codes]


def kinds(api: pd.Series) -> npt.NDArray[np.object_]:
    """:data:`KIND_PRODUCE`, :data:`KIND_FETCH` or :data:`KIND_OTHER` for each API name."""
    return np.array(_KIND_NAMES, dtype=object)[kind_codes(api)]


def time_order(frame: pd.DataFrame, times: str = TS) -> Int64Array:
    """Row positions in replay order: by ``times``, ties by :data:`SEQ_COLUMNS` (stable)."""
    keys: list[npt.NDArray[np.generic]] = [
        frame[name].to_numpy() for name in reversed(SEQ_COLUMNS) if name in frame.columns
    ]
    keys.append(frame[times].to_numpy(dtype=np.int64))
    return np.lexsort(keys).astype(np.int64)


def _pair_codes(users: pd.Series, clients: pd.Series) -> tuple[Int64Array, list[tuple[str, str]]]:
    """Codes of the distinct ``(user, client_id)`` pairs and the pairs themselves."""
    user_codes, user_values = _factorize(users)
    client_codes, client_values = _factorize(clients)
    n_clients = max(len(client_values), 1)
    codes, uniques = pd.factorize(user_codes * n_clients + client_codes, sort=False)
    pairs = [
        (user_values[u], client_values[c])
        for u, c in zip(
            (uniques // n_clients).tolist(), (uniques % n_clients).tolist(), strict=True
        )
    ]
    return np.asarray(codes, dtype=np.int64), pairs


def _expand(
    per_pair: Sequence[str], pair_codes: Int64Array, rows: BoolArray | None
) -> pd.Categorical:
    """A categorical column from one string per pair (null where ``rows`` is false)."""
    codes, categories = pd.factorize(np.array(list(per_pair) or [""], dtype=object), sort=False)
    out = np.asarray(codes, dtype=np.int64)[pair_codes] if len(pair_codes) else pair_codes
    if rows is not None:
        out = np.where(rows, out, -1)
    return pd.Categorical.from_codes(out, categories=pd.Index(categories, dtype=object))


def _tags(
    pair_codes: Int64Array,
    pairs: Sequence[tuple[str, str]],
    manager: QuotaManager,
    rows: BoolArray | None = None,
) -> tuple[pd.Categorical, pd.Categorical]:
    tags = [manager.tags(user, client) for user, client in pairs]
    return (
        _expand([t[0] for t in tags], pair_codes, rows),
        _expand([t[1] for t in tags], pair_codes, rows),
    )


def sensor_tags(
    users: pd.Series, clients: pd.Series, manager: QuotaManager
) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.object_]]:
    """The ``(user, client-id)`` metric tags of each request, by the core's precedence rules.

    Requests with equal tags share one sensor (on one broker). The tags depend only on which
    overrides exist, so they are the same for a configuration and any scaled copy of it.
    """
    user_tags, client_tags = _tags(*_pair_codes(users, clients), manager)
    return np.asarray(user_tags, dtype=object), np.asarray(client_tags, dtype=object)


def resolve_sensors(
    frame: pd.DataFrame, managers: Mapping[QuotaType, QuotaManager]
) -> dict[str, pd.Categorical]:
    """Each request's kind and the tags of the sensors it is recorded by, as categoricals.

    ``managers`` are configured managers of the quota types that have quotas. Returns
    ``kind`` (:func:`kinds`), ``byte_user``/``byte_client`` (the produce sensor of produce
    requests, the fetch sensor of fetch requests, null otherwise) and
    ``request_user``/``request_client`` (the request sensor; null without request quotas).
    """
    n = len(frame)
    kind = kind_codes(frame[API]) if n else np.empty(0, dtype=np.int8)
    codes, pairs = _pair_codes(frame[USER], frame[CLIENT])
    none = np.zeros(n, dtype=np.bool_)
    result = {
        "kind": pd.Categorical.from_codes(
            kind.astype(np.int64), categories=pd.Index(list(_KIND_NAMES), dtype=object)
        )
    }
    byte_user: list[str] = []
    byte_client: list[str] = []
    byte_code = np.full(n, -1, dtype=np.int64)
    byte_types: tuple[QuotaType, ...] = ("produce", "fetch")
    for code, quota_type in enumerate(byte_types):
        rows = kind == code
        if quota_type not in managers or not rows.any():
            continue
        tags = [managers[quota_type].tags(user, client) for user, client in pairs]
        byte_code[rows] = codes[rows] + len(byte_user)
        byte_user += [t[0] for t in tags]
        byte_client += [t[1] for t in tags]
    has_bytes = byte_code >= 0
    result["byte_user"] = _expand(byte_user, np.maximum(byte_code, 0), has_bytes)
    result["byte_client"] = _expand(byte_client, np.maximum(byte_code, 0), has_bytes)
    if "request" in managers and n:
        result["request_user"], result["request_client"] = _tags(codes, pairs, managers["request"])
    else:
        empty = _expand([], np.zeros(n, dtype=np.int64), none)
        result["request_user"] = result["request_client"] = empty
    return result


class OpenLoop:
    """Open-loop replay of requests that arrive in batches, for several scenarios at once.

    Rows must come in replay order per sensor: time order (ties by :data:`SEQ_COLUMNS`) for
    the requests of any one ``(broker, sensor)``, within a batch and across batches; how
    different sensors interleave does not matter. Each scenario (one
    :class:`~kquota.config.QuotaConfig`) gets one manager per broker and quota type, built
    on first use and kept across batches, and every batch goes through the core's
    :meth:`~kquota.QuotaManager.record_batch`. The Spark job feeds it the sorted rows of a
    partition batch by batch; :func:`replay_open` feeds it one sorted group.
    """

    def __init__(self, configs: Sequence[QuotaConfig]) -> None:
        self._configs = list(configs)
        self._managers: dict[tuple[int, str, QuotaType], QuotaManager] = {}
        self._last: tuple[pd.DataFrame, _Batch] | None = None

    def _batch(self, frame: pd.DataFrame) -> _Batch:
        """The converted columns of ``frame``, converted once for both quota families."""
        if self._last is None or self._last[0] is not frame:
            self._last = (frame, _Batch(frame))
        return self._last[1]

    @property
    def scenarios(self) -> int:
        """How many configurations are replayed side by side."""
        return len(self._configs)

    def _record(
        self,
        scenario: int,
        quota_type: QuotaType,
        batch: _Batch,
        rows: Int64Array,
        values: FloatArray,
        unrecord_if: BoolArray | None = None,
    ) -> Int32Array:
        """Throttles of ``rows`` (positions in ``batch``, in replay order) for one quota type."""
        out = np.zeros(len(rows), dtype=np.int32)
        config = self._configs[scenario]
        if not len(rows) or not config.quotas(quota_type):  # Kafka measures nothing then
            return out
        brokers = batch.broker_codes[rows]
        for code in np.unique(brokers).tolist():
            mine = np.flatnonzero(brokers == code) if len(batch.broker_names) > 1 else None
            picked = rows if mine is None else rows[mine]
            key = (scenario, batch.broker_names[code], quota_type)
            manager = self._managers.get(key)
            if manager is None:
                manager = self._managers[key] = config.manager(quota_type)
            drops = None
            if unrecord_if is not None:
                drops = unrecord_if if mine is None else unrecord_if[mine]
            throttles = manager.record_batch(
                batch.times[picked],
                batch.pair_codes[picked],
                values if mine is None else values[mine],
                batch.pairs,
                drops,
            )
            if mine is None:
                out[:] = throttles
            else:
                out[mine] = throttles
        return out

    def request_throttles(self, frame: pd.DataFrame) -> list[Int32Array]:
        """Per scenario, the request-quota throttle of every row (0 without :data:`THREAD`)."""
        batch = self._batch(frame)
        outs = []
        known = (
            np.flatnonzero(frame[THREAD].notna().to_numpy())
            if THREAD in frame.columns
            else np.empty(0, dtype=np.int64)
        )
        values = (
            frame[THREAD].to_numpy(dtype=np.float64, na_value=np.nan)[known]
            if len(known)
            else np.empty(0)
        )
        for scenario in range(self.scenarios):
            out = np.zeros(len(frame), dtype=np.int32)
            out[known] = self._record(scenario, "request", batch, known, values)
            outs.append(out)
        return outs

    def byte_throttles(
        self, frame: pd.DataFrame, requests: Sequence[npt.ArrayLike] | None = None
    ) -> list[tuple[Int32Array, Int32Array]]:
        """Per scenario, the produce and fetch throttles of every row.

        :data:`BYTES` of ``produce`` requests go to the produce quota, of ``fetch`` requests
        to the fetch quota (other APIs get 0 for both). A fetch throttled by either quota is
        unrecorded; ``requests`` are each scenario's request-quota throttles (default: none).
        """
        batch = self._batch(frame)
        n = len(frame)
        kind = kind_codes(frame[API]) if n else np.empty(0, dtype=np.int8)
        size = frame[BYTES].to_numpy(dtype=np.float64) if n else np.empty(0)
        produce_rows = np.flatnonzero(kind == 0)
        fetch_rows = np.flatnonzero(kind == 1)
        outs = []
        for scenario in range(self.scenarios):
            produce = np.zeros(n, dtype=np.int32)
            fetch = np.zeros(n, dtype=np.int32)
            produce[produce_rows] = self._record(
                scenario, "produce", batch, produce_rows, size[produce_rows]
            )
            throttled = (
                np.zeros(len(fetch_rows), dtype=np.bool_)
                if requests is None
                else _unrecord_if(np.asarray(requests[scenario])[fetch_rows])
            )
            fetch[fetch_rows] = self._record(
                scenario, "fetch", batch, fetch_rows, size[fetch_rows], throttled
            )
            outs.append((produce, fetch))
        return outs


class _Batch:
    """The columns of a batch every quota type needs, converted once."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.times = frame[TS].to_numpy(dtype=np.int64)
        self.pair_codes, self.pairs = _pair_codes(frame[USER], frame[CLIENT])
        if BROKER in frame.columns:
            self.broker_codes, self.broker_names = _factorize(frame[BROKER])
            self.broker_names = self.broker_names or [""]
        else:
            self.broker_codes = np.zeros(len(frame), dtype=np.int64)
            self.broker_names = [""]


def applied_throttle(
    produce: npt.ArrayLike, fetch: npt.ArrayLike, request: npt.ArrayLike
) -> Int32Array:
    """What the broker applies and returns, per request, from its three quotas' throttles:
    the core's rule (:func:`kquota._core.applied_throttles`, the throttle
    :class:`kquota.RequestPath` applies): the larger, 0 when none is positive."""
    return applied_throttles(
        np.asarray(produce, dtype=np.int32),
        np.asarray(fetch, dtype=np.int32),
        np.asarray(request, dtype=np.int32),
    )


def _unrecord_if(request_throttles: npt.ArrayLike) -> BoolArray:
    """Which fetches the request quota throttled, for the fetch manager's batch call.

    The open loop records each quota type as one batch, so it cannot call the core's
    per-request :class:`kquota.RequestPath`; it applies the same rule in two halves.
    :class:`~kquota.RequestPath` unrecords a fetch when its fetch or its request throttle
    is > 0 (a throttle <= 0, wrapped or not, is none): ``record_batch`` on the fetch
    manager takes the fetch half itself, and this is the request half, passed as its
    ``unrecord_if``. The property tests check the open loop against the core's path.
    """
    return np.asarray(request_throttles) > 0


def replay_open(frame: pd.DataFrame, config: QuotaConfig) -> pd.DataFrame:
    """Open loop: every request of one broker (or several) replayed at its recorded time.

    Rows may come in any order. Returns one row per input row (same index) with
    :data:`PRODUCE_THROTTLE`, :data:`FETCH_THROTTLE`, :data:`REQUEST_THROTTLE` (each the
    manager's value, Kafka's int: a pathological quota can make it wrap negative, which
    means "not throttled") and :data:`THROTTLE` (the applied one). The request quota
    records :data:`THREAD` where it is known (a request without it is not
    request-throttled); a fetch throttled by either quota is unrecorded, as Kafka does.
    """
    order = time_order(frame)
    needed = [c for c in (BROKER, TS, USER, CLIENT, API, BYTES, THREAD) if c in frame.columns]
    ordered = frame[needed].iloc[order]
    loop = OpenLoop([config])
    request = loop.request_throttles(ordered)[0]
    produce, fetch = loop.byte_throttles(ordered, [request])[0]
    columns = {}
    for name, values in (
        (PRODUCE_THROTTLE, produce),
        (FETCH_THROTTLE, fetch),
        (REQUEST_THROTTLE, request),
    ):
        column = np.empty(len(frame), dtype=np.int32)
        column[order] = values
        columns[name] = column
    columns[THROTTLE] = applied_throttle(*columns.values())
    return pd.DataFrame(columns, index=frame.index)


def replay_closed(frame: pd.DataFrame, config: QuotaConfig) -> pd.DataFrame:
    """Closed loop: clients honour KIP-219, so a throttle delays the client's later requests.

    One broker's requests, replayed through the core's :class:`~kquota.ReplayKernel` in
    closed loop (Kafka's request handling one request at a time, as
    :class:`~kquota.RequestPath`). A client is a ``(user, client_id)`` connection to this
    broker. When a request sent at ``t`` is throttled for ``T`` ms (the applied throttle),
    the client sends nothing more to the broker until ``t + T``; a later request that would
    have gone out before then waits, and the client's timeline shifts: every later request
    goes out that much later too (``sent = max(recorded + shift, mute end)``, the shift
    never shrinks). Returns the throttle columns of :func:`replay_open` plus :data:`SENT`
    (when the request reached the broker) and :data:`ADDED_LATENCY` (``sent - recorded``),
    one row per input row.
    """
    n = len(frame)
    produce = np.zeros(n, dtype=np.int32)
    fetch = np.zeros(n, dtype=np.int32)
    request = np.zeros(n, dtype=np.int32)
    sent = frame[TS].to_numpy(dtype=np.int64).copy()
    if n == 0:
        return _closed_frame(frame, produce, fetch, request, sent)

    order = time_order(frame)
    ordered = frame.iloc[order]
    codes, pairs = _pair_codes(ordered[USER], ordered[CLIENT])
    thread = (
        ordered[THREAD].to_numpy(dtype=np.float64, na_value=np.nan)
        if THREAD in frame.columns
        else np.full(n, np.nan)
    )
    path = RequestPath(
        config.manager("produce"), config.manager("fetch"), config.manager("request")
    )
    replay = ReplayKernel(pairs, [path], closed_loop=True, expiry_task_ms=None)
    parts = [
        replay.feed(
            ordered[TS].to_numpy(dtype=np.int64),
            codes.astype(np.int32),
            kind_codes(ordered[API]),
            ordered[BYTES].to_numpy(dtype=np.float64),
            thread,
            np.full(n, -1, dtype=np.int16),  # a produce with acks=0 has no thread time
        ),
        replay.finish(),
    ]
    position = order[np.concatenate([p["seq"] for p in parts]).astype(np.int64)]
    for name, column in (
        (PRODUCE_THROTTLE, produce),
        (FETCH_THROTTLE, fetch),
        (REQUEST_THROTTLE, request),
        (SENT, sent),
    ):
        column[position] = np.concatenate([p[name] for p in parts])
    return _closed_frame(frame, produce, fetch, request, sent)


def _closed_frame(
    frame: pd.DataFrame,
    produce: Int32Array,
    fetch: Int32Array,
    request: Int32Array,
    sent: Int64Array,
) -> pd.DataFrame:
    return pd.DataFrame(
        {
            PRODUCE_THROTTLE: produce,
            FETCH_THROTTLE: fetch,
            REQUEST_THROTTLE: request,
            THROTTLE: applied_throttle(produce, fetch, request),
            SENT: sent,
            ADDED_LATENCY: sent - frame[TS].to_numpy(dtype=np.int64),
        },
        index=frame.index,
    )


# -- entity summaries ------------------------------------------------------------------------

SENSOR_USER: Final = "sensor_user"
"""The ``user`` metric tag of a sensor (sanitized; empty when the sensor is not per user)."""
SENSOR_CLIENT: Final = "sensor_client_id"
"""The ``client-id`` metric tag of a sensor (empty when the sensor is not per client id)."""
USAGE: Final = "usage"
"""A request's usage in its quota's unit: bytes, or handler-thread nanoseconds."""
RECORDED: Final = "recorded"
"""Whether the usage stayed recorded (false for a throttled, hence unrecorded, fetch)."""
TIME: Final = "time_ms"
"""When the usage was recorded: :data:`SENT` (equal to :data:`TS` in open loop)."""

SUMMARY_COLUMNS: Final = (
    "quota_type",
    BROKER,
    SENSOR_USER,
    SENSOR_CLIENT,
    "entity",
    "quota",
    "requests",
    BYTES,
    USAGE,
    "throttled_requests",
    "throttled_fraction",
    "total_throttle_ms",
    "mean_throttle_ms",
    "p99_throttle_ms",
    "max_throttle_ms",
    "peak_rate",
    "utilization",
    "mean_added_latency_ms",
    "max_added_latency_ms",
)
"""The columns of :func:`summarize`, one row per sensor."""


def entity_label(user_tag: str, client_tag: str) -> str:
    """A sensor's tags as Kafka names the entity: ``user=alice, client-id=app-1``."""
    parts = []
    if user_tag:
        parts.append(f"user={user_tag}")
    if client_tag:
        parts.append(f"client-id={client_tag}")
    return ", ".join(parts) if parts else "(empty user and client id)"


def rate_unit(quota_type: QuotaType) -> float:
    """What one unit of usage is in the quota's unit: 1 byte, or :data:`NANOS_TO_PERCENT`."""
    return NANOS_TO_PERCENT if quota_type == "request" else 1.0


def _rate_units(quota_type: QuotaType, usage: FloatArray) -> FloatArray:
    """Usage in the unit the quota bounds: bytes, or percent of a thread for ``request``."""
    return usage * NANOS_TO_PERCENT if quota_type == "request" else usage


def rate_span_seconds(window: Window) -> float:
    """The length of the windowed rate of :func:`peak_rates`: ``num_samples - 1`` windows."""
    return max(window.num_samples - 1, 1) * window.window_ms / 1000.0


def _window_peaks(
    codes: Int64Array, times: Int64Array, amounts: Int64Array, window: Window, k: int
) -> Int64Array:
    """Per sensor code ``0..k-1``: the largest usage in ``num_samples - 1`` consecutive windows."""
    peaks = np.zeros(k, dtype=np.int64)
    if not len(codes):
        return peaks
    span = max(window.num_samples - 1, 1)
    index = times // window.window_ms
    index = index - index.min()
    stride = int(index.max()) + span + 1
    key = codes * stride + index
    windows, inverse = np.unique(key, return_inverse=True)
    sums = np.zeros(len(windows), dtype=np.int64)
    np.add.at(sums, inverse.ravel(), np.asarray(amounts, dtype=np.int64))
    running = np.concatenate((np.zeros(1, dtype=np.int64), np.cumsum(sums)))
    first = np.searchsorted(windows, windows - (span - 1), side="left")
    np.maximum.at(peaks, windows // stride, running[1:] - running[first])
    return peaks


def peak_rates(
    sensor: Int64Array, times: Int64Array, amounts: Int64Array, window: Window, unit: float = 1.0
) -> FloatArray:
    """Per sensor code ``0..k-1``, the peak of its windowed rate (per second).

    The rate over ``num_samples - 1`` whole windows of ``window_ms``, as a Kafka quota
    sensor measures it in steady state: windows are ``floor(t / window_ms)``, and the peak
    is the largest sum over any run of ``num_samples - 1`` consecutive windows (one window
    when ``num_samples`` is 1), as ``float(sum) * unit / seconds``. ``amounts`` are whole
    units of usage (bytes, nanoseconds; 0 for usage that was unrecorded), so the sums are
    exact and any implementation that follows this definition gets the same doubles.
    """
    k = int(sensor.max()) + 1 if len(sensor) else 0
    peaks = _window_peaks(sensor, times, amounts, window, k)
    return peaks.astype(np.float64) * unit / rate_span_seconds(window)


def sensor_peaks(
    sensor: Int64Array,
    times: Int64Array,
    amounts: Int64Array,
    throttles: Int64Array,
    window: Window,
) -> tuple[Int64Array, Int64Array, Int64Array]:
    """For sensors given by arbitrary ids: ``(ids, peak usage, p99 throttle)``.

    The peak is the integer sum behind :func:`peak_rates` (multiply by the unit, divide by
    :func:`rate_span_seconds`); the p99 is :func:`nearest_rank` of the throttles (negative
    ones count as 0). The Spark job runs this on every partition of sensor usage.
    """
    ids, codes = np.unique(np.asarray(sensor, dtype=np.int64), return_inverse=True)
    codes = codes.ravel().astype(np.int64)
    peaks = _window_peaks(codes, times, amounts, window, len(ids))
    clamped = np.maximum(np.asarray(throttles, dtype=np.int64), 0)
    order = np.lexsort((clamped, codes))
    counts = np.bincount(codes, minlength=len(ids))
    starts = np.concatenate((np.zeros(1, dtype=np.int64), np.cumsum(counts)[:-1]))
    ranks = (99 * counts + 99) // 100
    p99 = clamped[order][starts + ranks - 1] if len(ids) else np.zeros(0, dtype=np.int64)
    return ids, peaks, p99.astype(np.int64)


def nearest_rank(values: Int64Array, percent: int) -> int:
    """The ``percent``-th percentile by nearest rank: the ``ceil(percent * n / 100)``-th value."""
    if not len(values):
        return 0
    rank = (percent * len(values) + 99) // 100
    return int(np.partition(values, rank - 1)[rank - 1])


def pair_sensors(
    users: pd.Series, clients: pd.Series, managers: Mapping[QuotaType, QuotaManager]
) -> pd.DataFrame:
    """For ``(user, client_id)`` pairs: every sensor they record to and its bound.

    One row per pair and quota type of ``managers``: ``quota_type``, :data:`SENSOR_USER`,
    :data:`SENSOR_CLIENT` and ``quota`` (the bound, NaN when unlimited). Every pair with the
    same tags has the same bound (it is looked up from the tags), so this gives each
    sensor's bound from any of its clients.
    """
    codes, pairs = _pair_codes(users, clients)
    del codes
    rows: list[tuple[str, str, str, float]] = []
    for quota_type, manager in managers.items():
        for user, client in pairs:
            user_tag, client_tag = manager.tags(user, client)
            bound = manager.quota_for(user, client)
            rows.append((quota_type, user_tag, client_tag, math.nan if bound is None else bound))
    return pd.DataFrame(rows, columns=["quota_type", SENSOR_USER, SENSOR_CLIENT, "quota"])


def sensor_bounds(
    quota_types: Sequence[str],
    users: Sequence[str],
    clients: Sequence[str],
    config: QuotaConfig,
) -> FloatArray:
    """The bound each sensor enforces under ``config`` (NaN when unlimited), from one of its
    requests' ``(user, client_id)`` (every request of a sensor gives the same bound)."""
    managers: dict[str, QuotaManager] = {}
    out = np.full(len(quota_types), math.nan, dtype=np.float64)
    for i, (quota_type, user, client) in enumerate(zip(quota_types, users, clients, strict=True)):
        manager = managers.get(quota_type)
        if manager is None:
            manager = managers[quota_type] = config.manager(_quota_type(quota_type))
        bound = manager.quota_for(user, client)
        if bound is not None:
            out[i] = bound
    return out


def _quota_type(name: str) -> QuotaType:
    for quota_type in QUOTA_TYPES:
        if name == quota_type:
            return quota_type
    raise ValueError(f"invalid quota type {name!r}: expected one of {', '.join(QUOTA_TYPES)}")


def summarize(usage: pd.DataFrame, config: QuotaConfig, quota_type: QuotaType) -> pd.DataFrame:
    """One row per sensor of one quota type: the entity summary (:data:`SUMMARY_COLUMNS`).

    ``usage`` holds one row per request recorded by a ``quota_type`` sensor, possibly of
    several sensors (and brokers), each complete: :data:`BROKER`, :data:`SENSOR_USER`,
    :data:`SENSOR_CLIENT`, :data:`USER`, :data:`CLIENT` (any request of the sensor; they
    give its quota), :data:`TIME`, :data:`USAGE` (whole bytes or nanoseconds),
    :data:`BYTES`, :data:`RECORDED`, :data:`THROTTLE` (this quota type's throttle; a
    negative, wrapped one counts as 0) and optionally :data:`ADDED_LATENCY`.

    Per sensor: ``requests``, ``bytes``, ``usage``; ``throttled_requests`` and
    ``throttled_fraction``; ``total_throttle_ms``, ``mean_throttle_ms`` (total / requests),
    ``p99_throttle_ms`` (:func:`nearest_rank`) and ``max_throttle_ms`` over all its requests;
    ``peak_rate`` (:func:`peak_rates`), ``quota`` (the bound under ``config``, NaN when
    unlimited) and ``utilization`` (peak rate / quota); the mean and largest added latency.
    """
    if usage.empty:
        return pd.DataFrame({name: pd.Series(dtype=object) for name in SUMMARY_COLUMNS})
    keys = [BROKER, SENSOR_USER, SENSOR_CLIENT]
    latency = (
        usage[ADDED_LATENCY].to_numpy(dtype=np.int64)
        if ADDED_LATENCY in usage.columns
        else np.zeros(len(usage), dtype=np.int64)
    )
    frame = pd.DataFrame(
        {
            BROKER: usage[BROKER].astype(object).to_numpy(),
            SENSOR_USER: usage[SENSOR_USER].astype(object).to_numpy(),
            SENSOR_CLIENT: usage[SENSOR_CLIENT].astype(object).to_numpy(),
            "throttle": usage[THROTTLE].to_numpy(dtype=np.int64).clip(min=0),
            BYTES: usage[BYTES].to_numpy(dtype=np.int64),
            USAGE: usage[USAGE].to_numpy(dtype=np.int64),
            "latency": latency,
            USER: usage[USER].astype(object).to_numpy(),
            CLIENT: usage[CLIENT].astype(object).to_numpy(),
        }
    )
    frame["throttled"] = (frame["throttle"] > 0).astype(np.int64)
    grouped = frame.groupby(keys, sort=True, dropna=False, observed=True)
    out = grouped.agg(
        requests=("throttle", "size"),
        bytes=(BYTES, "sum"),
        usage=(USAGE, "sum"),
        throttled_requests=("throttled", "sum"),
        total_throttle_ms=("throttle", "sum"),
        max_throttle_ms=("throttle", "max"),
        latency=("latency", "sum"),
        max_added_latency_ms=("latency", "max"),
        first_user=(USER, "first"),
        first_client=(CLIENT, "first"),
    )
    out["p99_throttle_ms"] = grouped["throttle"].agg(
        lambda v: nearest_rank(v.to_numpy(dtype=np.int64), 99)
    )
    out = out.reset_index()
    requests = out["requests"].to_numpy(dtype=np.float64)
    out["throttled_fraction"] = out["throttled_requests"].to_numpy(dtype=np.float64) / requests
    out["mean_throttle_ms"] = out["total_throttle_ms"].to_numpy(dtype=np.float64) / requests
    out["mean_added_latency_ms"] = out["latency"].to_numpy(dtype=np.float64) / requests

    sensor = grouped.ngroup().to_numpy(dtype=np.int64)
    amounts = np.where(usage[RECORDED].to_numpy(dtype=np.bool_), frame[USAGE].to_numpy(), 0)
    out["peak_rate"] = peak_rates(
        sensor,
        usage[TIME].to_numpy(dtype=np.int64),
        amounts,
        config.window,
        rate_unit(quota_type),
    )
    out["quota"] = sensor_bounds(
        [quota_type] * len(out), list(out["first_user"]), list(out["first_client"]), config
    )
    out["utilization"] = out["peak_rate"] / out["quota"]
    out["quota_type"] = quota_type
    out["entity"] = [
        entity_label(u, c) for u, c in zip(out[SENSOR_USER], out[SENSOR_CLIENT], strict=True)
    ]
    return out[list(SUMMARY_COLUMNS)]


# -- recommendations -------------------------------------------------------------------------

RECOMMENDATION_COLUMNS: Final = (
    "quota_type",
    SENSOR_USER,
    SENSOR_CLIENT,
    "entity",
    "brokers",
    "requests",
    "recommended_quota",
    "throttled_fraction",
)
"""The columns of :func:`recommend`, one row per entity (sensor tags, across brokers)."""


def recommend(
    usage: pd.DataFrame, window: Window, quota_type: QuotaType, target: float
) -> pd.DataFrame:
    """Per entity, the smallest quota that keeps its throttled fraction at most ``target``.

    An entity is a sensor's tags (:data:`SENSOR_USER`, :data:`SENSOR_CLIENT`) of one quota
    type, on every broker it was seen (the quota applies per broker, the fraction is over
    all its requests). ``usage`` holds every request of the entities it contains, with
    :data:`BROKER`, :data:`TS` (the recorded time: recommendations replay the recorded
    timeline), :data:`USAGE`, optionally :data:`SEQ_COLUMNS` and, for fetch,
    ``unrecord_if`` (the request quota throttled it). The quota is found in the core
    (``kquota._core.recommend_quotas``, one call for all the entities, without the GIL): a
    bisection that replays the entity's traffic under each candidate, one sensor per
    broker; the fraction falls as the quota grows except for small wiggles (an unrecorded
    fetch changes what later requests see), and the result is checked to meet the target.
    ``recommended_quota`` is rounded up to whole bytes/s (hundredths of a percent for
    ``request``), within 0.1 % of the smallest found; ``throttled_fraction`` is at that value.
    """
    if not 0.0 <= target < 1.0:
        raise ValueError(f"invalid target {target!r}: expected a fraction in [0, 1)")
    if usage.empty:
        return pd.DataFrame(columns=list(RECOMMENDATION_COLUMNS))
    user_codes, user_tags = pd.factorize(usage[SENSOR_USER], sort=True, use_na_sentinel=False)
    client_codes, client_tags = pd.factorize(usage[SENSOR_CLIENT], sort=True, use_na_sentinel=False)
    broker_codes, _ = pd.factorize(usage[BROKER], sort=True, use_na_sentinel=False)
    keys: list[npt.NDArray[np.generic]] = [
        usage[name].to_numpy() for name in reversed(SEQ_COLUMNS) if name in usage.columns
    ]
    keys += [usage[TS].to_numpy(dtype=np.int64), broker_codes, client_codes, user_codes]
    order = np.lexsort(keys)
    users, clients, brokers = user_codes[order], client_codes[order], broker_codes[order]
    n = len(order)
    new_entity = np.ones(n, dtype=np.bool_)
    new_entity[1:] = (users[1:] != users[:-1]) | (clients[1:] != clients[:-1])
    new_run = new_entity.copy()
    new_run[1:] |= brokers[1:] != brokers[:-1]
    run_starts = np.flatnonzero(new_run)
    runs = np.append(run_starts, n).astype(np.int64)
    entity_runs = np.append(np.flatnonzero(new_entity[run_starts]), len(run_starts)).astype(
        np.int64
    )
    drops = (
        usage["unrecord_if"].to_numpy(dtype=np.bool_)[order]
        if quota_type == "fetch" and "unrecord_if" in usage.columns
        else None
    )
    quotas, fractions = recommend_quotas(
        quota_type,
        usage[TS].to_numpy(dtype=np.int64)[order],
        usage[USAGE].to_numpy(dtype=np.float64)[order],
        runs,
        entity_runs,
        target=target,
        num_samples=window.num_samples,
        window_ms=window.window_ms,
        unrecord_if=drops,
    )
    firsts = runs[entity_runs[:-1]]
    user_of = [user_tags[c] for c in users[firsts]]
    client_of = [client_tags[c] for c in clients[firsts]]
    return pd.DataFrame(
        {
            "quota_type": quota_type,
            SENSOR_USER: user_of,
            SENSOR_CLIENT: client_of,
            "entity": [
                entity_label(str(u), str(c)) for u, c in zip(user_of, client_of, strict=True)
            ],
            "brokers": np.diff(entity_runs),
            "requests": np.diff(np.append(firsts, n)),
            "recommended_quota": quotas,
            "throttled_fraction": fractions,
        },
        columns=list(RECOMMENDATION_COLUMNS),
    )


ReplayMode = Literal["open", "closed"]
"""Open loop replays recorded times; closed loop lets throttles delay the client."""
