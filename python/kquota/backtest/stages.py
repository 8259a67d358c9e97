"""What runs on the executors: the functions Spark's ``mapInArrow`` and Arrow UDFs call,
each a thin adapter from Arrow batches to the core's :class:`~kquota.ReplayKernel`
(:func:`replay`) or a plain function of :mod:`kquota.backtest.kernel`.

They are module-level functions with the configuration passed as JSON (parsed once per
executor and cached), so Spark ships them by name: the executors need ``kquota`` installed.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from kquota import QuotaManager, ReplayKernel, RequestPath
from kquota.backtest import kernel, outputs
from kquota.backtest.options import REQUEST_SENSOR_CLIENT, REQUEST_SENSOR_USER, RESULT_COLUMNS
from kquota.config import QuotaConfig
from kquota.quota_types import QuotaType
from kquota.traffic_schema import KAFKA_THROTTLE

__all__ = [
    "KIND",
    "TAGS",
    "UNSERVED_COLUMNS",
    "PeakSink",
    "ReplayPlan",
    "StreamPlan",
    "SummarySink",
    "Tally",
    "label_batches",
    "pair_batches",
    "peak_batches",
    "recommend_partition",
    "replay",
    "request_column",
    "resolve_arrays",
    "stream",
    "tally_frames",
    "unserved_frame",
    "worker_peak_rss",
]

KIND: Final = "_kq_kind"
"""By-sensor replay: a request's kind (:func:`resolve_arrays`), for the byte-rate pass."""


@functools.lru_cache(maxsize=16)
def _config(text: str) -> QuotaConfig:
    # kquota's own texts, scaled ones among them: bounds (a scaled byte rate need not be whole)
    return QuotaConfig.from_json(json.loads(text), bounds=True)


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


TAGS: Final = (
    (kernel.SENSOR_USER, "byte_user"),
    (kernel.SENSOR_CLIENT, "byte_client"),
    (REQUEST_SENSOR_USER, "request_user"),
    (REQUEST_SENSOR_CLIENT, "request_client"),
)
"""Output columns of the sensor tags and their :func:`kernel.resolve_sensors` keys."""


def resolve_arrays(
    config_json: str, users: pa.Array, clients: pa.Array, apis: pa.Array
) -> pa.Array:
    """Scalar Arrow UDF: each request's kind and sensor tags, as a struct."""
    frame = pd.DataFrame(
        {
            kernel.USER: _categorical(users),
            kernel.CLIENT: _categorical(clients),
            kernel.API: _categorical(apis),
        }
    )
    resolved = kernel.resolve_sensors(frame, _managers(config_json))
    fields = [(KIND, "kind"), *TAGS]
    return pa.StructArray.from_arrays(
        [_string_column(resolved[key]) for _, key in fields], names=[name for name, _ in fields]
    )


def request_column(index: int) -> str:
    return f"_kq_r{index}"


@dataclass(frozen=True)
class StreamPlan:
    """What one streaming pass over a time-sorted partition does."""

    configs: tuple[str, ...]
    labels: tuple[str, ...]
    base: str
    resolve: bool
    request: bool
    replay_bytes: bool
    final: bool


_KERNEL_COLUMNS: Final = (
    kernel.BROKER,
    kernel.TS,
    kernel.USER,
    kernel.CLIENT,
    kernel.API,
    kernel.BYTES,
    kernel.THREAD,
)


def stream(plan: StreamPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition sorted by time (whole sensors in it): open-loop replay.

    With ``plan.final``, every row comes out with every scenario's results; without
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
                batch.column(names.index(request_column(i))).to_numpy(zero_copy_only=False)
                if request_column(i) in names
                else np.zeros(n, dtype=np.int32)
                for i in range(len(plan.configs))
            ]
        if not plan.final:
            yield pa.RecordBatch.from_arrays(
                [*batch.columns, *(pa.array(r, pa.int32()) for r in requests)],
                names=[*names, *(request_column(i) for i in range(len(requests)))],
            )
            continue
        kept = [i for i, name in enumerate(names) if not name.startswith("_kq_r")]
        base = [batch.column(i) for i in kept]
        base_names = [names[i] for i in kept]
        if plan.resolve:
            resolved = kernel.resolve_sensors(frame, managers)
            base += [_string_column(resolved[key]) for _, key in TAGS]
            base_names += [name for name, _ in TAGS]
        if plan.replay_bytes:
            byte_results = loop.byte_throttles(frame, requests)
        else:
            zeros = np.zeros(n, dtype=np.int32)
            byte_results = [(zeros, zeros)] * len(plan.configs)
        ts = batch.column(names.index(kernel.TS)).to_numpy(zero_copy_only=False).astype(np.int64)
        no_latency = np.zeros(n, dtype=np.int64)
        per = [
            {
                kernel.PRODUCE_THROTTLE: produce,
                kernel.FETCH_THROTTLE: fetch,
                kernel.REQUEST_THROTTLE: request,
                kernel.THROTTLE: kernel.applied_throttle(produce, fetch, request),
                kernel.SENT: ts,
                kernel.ADDED_LATENCY: no_latency,
                kernel.UNSERVED: np.zeros(n, dtype=np.int32),
            }
            for request, (produce, fetch) in zip(requests, byte_results, strict=True)
        ]
        column = outputs.wide_results(pa.array(plan.labels, pa.string()), per, False)
        yield pa.RecordBatch.from_arrays([*base, column], names=[*base_names, outputs.RESULTS])


# -- the replay through the core's sequential kernel --------------------------------------------


@dataclass(frozen=True)
class ReplayPlan:
    """What :func:`replay` does: every scenario in one pass, open or closed loop.

    ``summaries``, a Spark accumulator of :class:`SummarySink`, receives the kernel's
    entity summaries of every broker replayed (its ``add`` of ``{broker: columns}``).
    """

    configs: tuple[str, ...]
    labels: tuple[str, ...]
    base: str
    closed: bool
    summaries: Any = None
    peak_rss: Any = None
    """A Spark accumulator of :class:`PeakSink`: the Python worker's peak RSS is added at the
    end of each partition (see :func:`worker_peak_rss`)."""
    mutations: bool = False
    """The traffic has :data:`~kquota.backtest.kernel.PARTITIONS` (and ``strict``): mutation
    requests are replayed on each scenario's ``controller_mutation_rate`` quotas and the rows
    get :data:`~kquota.backtest.kernel.MUTATION_RESULTS`."""
    tallies: Any = None
    """A Spark accumulator of :class:`SummarySink`: each broker's :class:`Tally` (the
    report's counts per applied throttle, and the broker comparison), taken while the rows
    go out, so that no pass over ``DIR/requests/`` is needed for them."""
    clients: tuple[int, int, int] | None = None
    """Closed loop: the bounded clients' limits (:meth:`kernel.ClientLimits.as_tuple`), or
    ``None`` for unbounded clients."""


def worker_peak_rss() -> int:
    """This process's peak resident set size in bytes (Linux ``VmHWM``), 0 if unknown.

    A Python worker that Spark reuses across tasks reports its peak over all of them."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return 0


class PeakSink:
    """A Spark ``AccumulatorParam`` keeping the largest value added (peak RSS, bytes)."""

    def zero(self, value: int) -> int:
        del value
        return 0

    def addInPlace(self, value: int, other: int) -> int:  # Spark's name
        return max(value, other)


class SummarySink:
    """A Spark ``AccumulatorParam`` of ``{broker: what its replay found}`` (the kernel's
    ``summaries()`` columns, or its :class:`Tally`).

    A broker is replayed whole by one task: a task that runs again (a retry, a speculative
    copy) sends the same broker's values again, and they replace the first ones.
    """

    def zero(self, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        del value
        return {}

    def addInPlace(  # Spark's name
        self, value: dict[str, dict[str, Any]], other: dict[str, dict[str, Any]]
    ) -> dict[str, dict[str, Any]]:
        value.update(other)
        return value


TALLY_COLUMNS: Final = (
    "requests",
    "produce_throttled",
    "fetch_throttled",
    "request_throttled",
    "added_latency_ms",
    "max_added_latency_ms",
)
"""Counted per (scenario, applied throttle) by :class:`Tally`, as
:func:`~kquota.backtest.summaries.throttle_counts` counts them from ``DIR/requests/``."""

COMPARISON_COLUMNS: Final = (
    "requests",
    "broker_throttled",
    "replay_throttled",
    "both_throttled",
    "agree",
    "broker_throttle_ms",
    "replay_throttle_ms",
)
"""Counted per scenario by :class:`Tally` when the traffic has ``kafka_throttle_ms``, as
:func:`~kquota.backtest.summaries.broker_comparison` counts them."""


class Tally:
    """One broker's counts for the report, taken from the rows as they go out: per
    (scenario, applied throttle) :data:`TALLY_COLUMNS`, and per scenario
    :data:`COMPARISON_COLUMNS` (when the rows say what the broker did). Exact integers.

    Each batch is reduced to one row per distinct throttle with NumPy; those rows are
    merged again (``by_throttle``) once they add up to :data:`_TALLY_COMPACT` rows, and
    when the counts are read."""

    def __init__(self) -> None:
        self.pending: list[npt.NDArray[np.int64]] = []  # rows: scenario, throttle, columns
        self.comparison: dict[int, list[int]] = {}
        # (scenario, user, client id, unserved code): requests, bytes
        self.unserved: dict[tuple[int, str, str, int], list[int]] = {}

    def add(
        self,
        scenario: int,
        out: dict[str, npt.NDArray[Any]],
        live: pa.Array | None,
        rows_out: pa.RecordBatch | None = None,
    ) -> None:
        """Count one scenario's results ``out`` of a batch (``live``: the broker's own
        throttle of each row, when the traffic has it; ``rows_out``: the requests, whose
        clients the requests not served are counted by)."""
        throttle = np.asarray(out[kernel.THROTTLE], dtype=np.int64)
        n = len(throttle)
        if not n:
            return
        if rows_out is not None and kernel.UNSERVED in out:
            self._add_unserved(scenario, np.asarray(out[kernel.UNSERVED]), rows_out)
        rows = np.empty((n, 2 + len(TALLY_COLUMNS)), dtype=np.int64)
        rows[:, 0] = scenario
        rows[:, 1] = throttle
        rows[:, 2] = 1
        for i, name in enumerate(_TYPE_THROTTLES):
            rows[:, 3 + i] = np.asarray(out[name]) > 0
        rows[:, 6] = rows[:, 7] = np.asarray(out[kernel.ADDED_LATENCY], dtype=np.int64)
        self.pending.append(_grouped(rows))
        if sum(len(p) for p in self.pending) >= _TALLY_COMPACT:
            self.pending = [_grouped(np.concatenate(self.pending))]
        if live is None:
            return
        broker = pc.fill_null(live, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        replayed, said = throttle > 0, broker > 0
        row = [
            n,
            int(said.sum()),
            int(replayed.sum()),
            int((said & replayed).sum()),
            int((said == replayed).sum()),
            int(np.maximum(broker, 0).sum()),
            int(throttle.sum()),
        ]
        self.comparison[scenario] = _summed(self.comparison.get(scenario), row)

    def _add_unserved(
        self, scenario: int, codes: npt.NDArray[Any], rows_out: pa.RecordBatch
    ) -> None:
        picked = np.flatnonzero(codes > 0)
        if not len(picked):
            return
        names = rows_out.schema.names
        taken = pa.array(picked)

        def column(name: str) -> list[Any]:
            return list(rows_out.column(names.index(name)).take(taken).to_pylist())

        size = column(kernel.BYTES)
        for user, client, code, b in zip(
            column(kernel.USER), column(kernel.CLIENT), codes[picked].tolist(), size, strict=True
        ):
            key = (scenario, user or "", client or "", int(code))
            counts = self.unserved.setdefault(key, [0, 0])
            counts[0] += 1
            counts[1] += int(b or 0)

    @property
    def by_throttle(self) -> npt.NDArray[np.int64]:
        """Rows of scenario, applied throttle and :data:`TALLY_COLUMNS`, one per distinct
        (scenario, throttle), in that order."""
        if not self.pending:
            return _NO_TALLY
        self.pending = [_grouped(np.concatenate(self.pending))]
        return self.pending[0]


_TALLY_COMPACT: Final = 100_000
_NO_TALLY: Final = np.empty((0, 2 + len(TALLY_COLUMNS)), dtype=np.int64)


def _summed(old: list[int] | None, row: list[int]) -> list[int]:
    return row if old is None else [a + b for a, b in zip(old, row, strict=True)]


def _grouped(rows: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Tally rows (scenario, throttle, then :data:`TALLY_COLUMNS`) merged per (scenario,
    throttle), sorted: the counts and sums added, the last column (a largest) the max."""
    if not len(rows):
        return rows
    key = (rows[:, 0] << 32) + rows[:, 1]  # scenario, then throttle (0 <= throttle < 2^31)
    order = np.argsort(key, kind="stable")  # fast on long runs of equal keys (mostly 0)
    ordered = rows.take(order, axis=0)
    ordered_key = key[order]
    starts = np.flatnonzero(np.r_[True, ordered_key[1:] != ordered_key[:-1]])
    out = np.empty((len(starts), rows.shape[1]), dtype=np.int64)
    out[:, :2] = ordered[starts, :2]
    out[:, 2:-1] = np.add.reduceat(ordered[:, 2:-1], starts, axis=0)
    out[:, -1] = np.maximum.reduceat(ordered[:, -1], starts)
    return out


_TYPE_THROTTLES: Final = (kernel.PRODUCE_THROTTLE, kernel.FETCH_THROTTLE, kernel.REQUEST_THROTTLE)


UNSERVED_COLUMNS: Final = (
    "scenario",
    "user",
    "client_id",
    "requests",
    "bytes",
    "buffer_full",
    "timed_out",
)
"""The columns of :func:`unserved_frame`."""


def unserved_frame(parts: dict[str, Tally], labels: Sequence[str]) -> pd.DataFrame:
    """The requests bounded clients could not have served, per scenario and client (user,
    client id): how many, their bytes, and how many found the buffer full or timed out;
    most bytes first."""
    merged: dict[tuple[int, str, str], list[int]] = {}
    for tally in parts.values():
        for (scenario, user, client, code), (requests, size) in tally.unserved.items():
            row = merged.setdefault((scenario, user, client), [0, 0, 0, 0])
            row[0] += requests
            row[1] += size
            row[2 if code == kernel.UNSERVED_BUFFER_FULL else 3] += requests
    frame = pd.DataFrame(
        [(labels[s], u, c, *row) for (s, u, c), row in merged.items()],
        columns=list(UNSERVED_COLUMNS),
    ).astype({c: np.int64 for c in UNSERVED_COLUMNS[3:]})
    return frame.sort_values(
        ["scenario", "bytes", "requests", "user", "client_id"],
        ascending=[True, False, False, True, True],
        ignore_index=True,
    )


def tally_frames(
    parts: dict[str, Tally], labels: Sequence[str]
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The brokers' tallies merged: the frame :func:`~kquota.backtest.summaries.
    throttle_counts` returns, and :func:`~kquota.backtest.summaries.broker_comparison`'s
    (``None`` when no broker had the live throttles)."""
    tables = [tally.by_throttle for tally in parts.values()]
    merged = _grouped(np.concatenate(tables)) if tables else _NO_TALLY
    compared: dict[int, list[int]] = {}
    for tally in parts.values():
        for scenario, row in tally.comparison.items():
            compared[scenario] = _summed(compared.get(scenario), row)
    counts = pd.DataFrame(merged[:, 2:], columns=list(TALLY_COLUMNS))
    counts.insert(0, kernel.THROTTLE, merged[:, 1])
    counts.insert(0, "scenario", np.asarray(labels, dtype=object)[merged[:, 0]])
    if not compared:
        return counts, None
    comparison = pd.DataFrame(
        [(labels[s], *row) for s, row in sorted(compared.items(), key=lambda i: labels[i[0]])],
        columns=["scenario", *COMPARISON_COLUMNS],
    ).astype({c: np.int64 for c in COMPARISON_COLUMNS})
    return counts, comparison


@functools.lru_cache(maxsize=16)
def _paths(configs: tuple[str, ...]) -> list[RequestPath]:
    """One request path per scenario: the broker's three managers, as configured."""
    paths = []
    for text in configs:
        config = _config(text)
        paths.append(
            RequestPath(
                config.manager("produce"), config.manager("fetch"), config.manager("request")
            )
        )
    return paths


def _topic_columns(
    topics: Any, kind: npt.NDArray[np.int8], mine: npt.NDArray[np.int64] | None
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]] | tuple[()]:
    """The kernel's ``topic_offsets`` and ``topic_partitions`` of the rows ``mine`` (all when
    ``None``) from the :data:`~kquota.backtest.kernel.TOPIC_PARTITIONS` column: the lists of
    the mutation rows (kind 3), none for the others; nothing without the column."""
    if topics is None:
        return ()
    if mine is not None:
        topics, kind = topics.take(pa.array(mine)), kind[mine]
    keep = pa.array(kind == 3)
    topics = pc.if_else(keep, topics, pa.nulls(len(topics), topics.type))
    lengths = pc.fill_null(pc.list_value_length(topics), 0).to_numpy(zero_copy_only=False)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = pc.cast(pc.list_flatten(topics), pa.int32()).to_numpy(zero_copy_only=False)
    return offsets, np.asarray(values, dtype=np.int32)


def _encode(column: pa.Array) -> tuple[npt.NDArray[np.int32], list[str]]:
    """A string column as dictionary codes (once per batch; a null is ``""``)."""
    if column.null_count:
        column = pc.fill_null(column, "")
    encoded = column.dictionary_encode()
    return (
        encoded.indices.to_numpy(zero_copy_only=False).astype(np.int32, copy=False),
        encoded.dictionary.to_pylist(),
    )


def _dense_codes(keys: npt.NDArray[np.int64], size: int) -> tuple[npt.NDArray[np.int64], ...]:
    """The distinct values of ``keys`` (all in ``[0, size)``) and each key's index in them."""
    if size <= 4 * len(keys) + 1024:
        seen = np.bincount(keys, minlength=size)
        distinct = np.flatnonzero(seen)
        index = np.full(size, -1, dtype=np.int64)
        index[distinct] = np.arange(len(distinct), dtype=np.int64)
        return distinct, index[keys]
    distinct, inverse = np.unique(keys, return_inverse=True)
    return distinct, inverse.ravel().astype(np.int64)


class _Broker:
    """One broker's replay: its kernel (every scenario) and the ids of its pairs."""

    def __init__(self, plan: ReplayPlan) -> None:
        self.kernel = ReplayKernel(
            [],
            _paths(plan.configs),
            closed_loop=plan.closed,
            expiry_task_ms=None,
            client_limits=plan.clients if plan.closed else None,
        )
        for scenario, text in enumerate(plan.configs):
            self.kernel.set_mutation_manager(scenario, _config(text).mutation_manager())
        self.ids: dict[tuple[str, str], int] = {}
        # closed loop: the rows fed and not all replayed yet, from seq ``self.first``
        self.held: list[pa.RecordBatch] = []
        self.results: list[dict[str, npt.NDArray[Any]]] = []  # theirs, per scenario
        self.done: list[int] = []
        self.first = 0
        self.tally = Tally()

    def pair_ids(self, pairs: Sequence[tuple[str, str]]) -> npt.NDArray[np.int32]:
        new = [p for p in dict.fromkeys(pairs) if p not in self.ids]
        if new:
            first = self.kernel.add_pairs(new)
            self.ids.update((p, first + i) for i, p in enumerate(new))
        return np.fromiter((self.ids[p] for p in pairs), dtype=np.int32, count=len(pairs))


class _Tags:
    """Each pair's sensor tags (the base configuration's; the same for every scale)."""

    def __init__(self, base: str) -> None:
        self.managers = _managers(base)
        self.cache: dict[tuple[str, str], tuple[str | None, ...]] = {}

    def of(self, pair: tuple[str, str]) -> tuple[str | None, ...]:
        """Produce user/client, fetch user/client, request user/client (None: no quota)."""
        tags = self.cache.get(pair)
        if tags is None:
            found: list[str | None] = []
            for quota_type in kernel.QUOTA_TYPES:
                manager = self.managers.get(quota_type)
                found += manager.tags(*pair) if manager is not None else (None, None)
            tags = self.cache[pair] = tuple(found)
        return tags

    def columns(
        self,
        pairs: Sequence[tuple[str, str]],
        pair_index: npt.NDArray[np.int64],
        kind: npt.NDArray[np.int8],
    ) -> list[pa.Array]:
        """The :data:`TAGS` columns of a batch whose rows have these pairs and kinds."""
        per_pair = [self.of(p) for p in pairs]
        n_pairs = len(pairs)
        by_kind = np.where(kind == 0, pair_index, np.where(kind == 1, pair_index + n_pairs, -1))
        has_bytes = by_kind >= 0
        byte_index = pa.array(by_kind, mask=None if has_bytes.all() else ~has_bytes)
        request_index = pa.array(pair_index)
        out = []
        for produce, fetch in ((0, 2), (1, 3)):
            values = [t[produce] for t in per_pair] + [t[fetch] for t in per_pair]
            out.append(pa.array(values, pa.string()).take(byte_index))
        for position in (4, 5):
            values = [t[position] for t in per_pair]
            out.append(pa.array(values, pa.string()).take(request_index))
        return out


def _kind_codes(apis: Sequence[str]) -> npt.NDArray[np.int8]:
    names = {kernel.KIND_PRODUCE: 0, kernel.KIND_FETCH: 1}
    return np.array([names.get(a.lower(), 2) for a in apis] or [2], dtype=np.int8)


def replay(plan: ReplayPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition holding whole brokers, sorted by time (ties by input
    position): every request through the core's :class:`~kquota.ReplayKernel`, every
    scenario in the same pass; each row comes out once, with its sensor tags and every
    scenario's results (:data:`outputs.RESULTS`). No pandas: strings become dictionary
    codes once per batch, columns go to NumPy, results come back as Arrow columns."""
    brokers: dict[str, _Broker] = {}
    tags = _Tags(plan.base)
    labels = pa.array(plan.labels, pa.string())
    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        names = batch.schema.names
        broker_codes, broker_names = _encode(batch.column(names.index(kernel.BROKER)))
        user_codes, users = _encode(batch.column(names.index(kernel.USER)))
        client_codes, clients = _encode(batch.column(names.index(kernel.CLIENT)))
        api_codes, apis = _encode(batch.column(names.index(kernel.API)))
        kind = _kind_codes(apis)[api_codes]
        keys = user_codes.astype(np.int64) * max(len(clients), 1) + client_codes
        distinct, pair_index = _dense_codes(keys, max(len(users) * len(clients), 1))
        pairs = [(users[k // len(clients)], clients[k % len(clients)]) for k in distinct.tolist()]
        times = batch.column(names.index(kernel.TS)).to_numpy(zero_copy_only=False)
        size = pc.cast(batch.column(names.index(kernel.BYTES)), pa.float64()).to_numpy(
            zero_copy_only=False
        )
        thread = pc.cast(batch.column(names.index(kernel.THREAD)), pa.float64()).to_numpy(
            zero_copy_only=False
        )
        acks = np.full(n, -1, dtype=np.int16)  # a produce with acks=0 has no thread time
        partitions = strict = None
        topics: Any = None
        if plan.mutations:
            # a mutation: partitions given on CreateTopics, CreatePartitions or DeleteTopics
            given = batch.column(names.index(kernel.PARTITIONS))
            is_api = np.array(
                [a.lower().replace("_", "") in kernel.MUTATION_APIS for a in apis] or [False]
            )[api_codes]
            is_mutation = is_api & ~given.is_null().to_numpy(zero_copy_only=False)
            kind = np.where(is_mutation, np.int8(3), kind).astype(np.int8)
            partitions = (
                pc.fill_null(pc.cast(given, pa.int32()), 0).to_numpy(zero_copy_only=False)
            ).astype(np.int32)
            strict = pc.fill_null(batch.column(names.index(kernel.STRICT)), False).to_numpy(
                zero_copy_only=False
            )
            if kernel.TOPIC_PARTITIONS in names:
                topics = batch.column(names.index(kernel.TOPIC_PARTITIONS))
        tag_columns = tags.columns(pairs, pair_index, kind)
        rows = batch
        for (name, _), column in zip(TAGS, tag_columns, strict=True):
            rows = rows.append_column(name, column)
        present = np.flatnonzero(np.bincount(broker_codes, minlength=len(broker_names)))
        for code in present.tolist():
            state = brokers.get(broker_names[code])
            if state is None:
                state = brokers[broker_names[code]] = _Broker(plan)
            mine = None if len(present) == 1 else np.flatnonzero(broker_codes == code)

            def part(values: npt.NDArray[Any], mine: npt.NDArray[np.int64] | None = mine) -> Any:
                return values if mine is None else values[mine]

            ids = state.pair_ids(pairs)
            out = state.kernel.feed(
                part(times),
                part(ids[pair_index]),
                part(kind),
                part(size),
                part(thread),
                part(acks),
                None if partitions is None else part(partitions),
                None if strict is None else part(strict).astype(np.bool_),
                *_topic_columns(topics, kind, mine),
            )
            own = rows if mine is None else rows.take(pa.array(mine))
            if plan.closed:
                state.held.append(own)
                state.results.append(_buffers(plan, own.num_rows))
                state.done.append(0)
            yield from _emit(plan, labels, state, own, out)
    for state in brokers.values():
        if plan.closed:
            yield from _emit(plan, labels, state, None, state.kernel.finish())
    if plan.summaries is not None and brokers:
        plan.summaries.add({name: state.kernel.summaries() for name, state in brokers.items()})
    if plan.tallies is not None and brokers:
        plan.tallies.add({name: state.tally for name, state in brokers.items()})
    if plan.peak_rss is not None:
        plan.peak_rss.add(worker_peak_rss())


def _result_names(plan: ReplayPlan) -> tuple[str, ...]:
    """The kernel's result arrays each scenario's entry of :data:`outputs.RESULTS` holds."""
    names = RESULT_COLUMNS[1:]
    return (*names, *kernel.MUTATION_RESULTS) if plan.mutations else names


def _buffers(plan: ReplayPlan, n: int) -> dict[str, npt.NDArray[Any]]:
    """Closed loop: room for every scenario's results of ``n`` held rows."""
    k = len(plan.labels)
    fields = list(outputs.results_type(plan.mutations).value_type)[1:]
    return {f.name: np.zeros((k, n), dtype=f.type.to_pandas_dtype()) for f in fields}


def _wide(
    plan: ReplayPlan,
    labels: pa.Array,
    rows: pa.RecordBatch,
    per_scenario: list[dict[str, npt.NDArray[Any]]],
) -> pa.RecordBatch:
    """``rows`` with their :data:`outputs.RESULTS` column (each scenario's results, in order)."""
    column = outputs.wide_results(labels, per_scenario, plan.mutations)
    return pa.RecordBatch.from_arrays(
        [*rows.columns, column], names=[*rows.schema.names, outputs.RESULTS]
    )


def _live_throttles(rows: pa.RecordBatch | pa.Table) -> pa.Array | None:
    """The throttle the broker gave each row (``kafka_throttle_ms``), if the traffic says
    it in whole numbers (other types, such as a CSV's text, are compared by Spark)."""
    names = rows.schema.names
    if KAFKA_THROTTLE not in names or not pa.types.is_integer(
        rows.schema.field(KAFKA_THROTTLE).type
    ):
        return None
    column = rows.column(names.index(KAFKA_THROTTLE))
    return column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column


def _emit(
    plan: ReplayPlan,
    labels: pa.Array,
    state: _Broker,
    own: pa.RecordBatch | None,
    out: dict[str, npt.NDArray[Any]],
) -> Iterator[pa.RecordBatch]:
    """The kernel's rows ``out`` joined to their requests: each request once, with every
    scenario's results, when every scenario has replayed it."""
    if not len(out["seq"]):
        return
    names = _result_names(plan)
    k = len(labels)
    if not plan.closed:  # every event of ``own``, scenario by scenario, in order
        assert own is not None
        m = own.num_rows
        per = [{name: out[name][s * m : (s + 1) * m] for name in names} for s in range(k)]
        if plan.tallies is not None:
            live = _live_throttles(own)
            for s, results in enumerate(per):
                state.tally.add(s, results, live)
        yield _wide(plan, labels, own, per)
        return
    # closed loop: each held row's results land in its batch's buffers as its scenarios
    # replay it; a batch goes out when all its rows are replayed in every scenario
    seq = out["seq"].astype(np.int64) - state.first
    scenario = out["scenario"].astype(np.int64)
    starts = np.cumsum([0, *(b.num_rows for b in state.held)])
    which = np.searchsorted(starts, seq, side="right") - 1
    for i in np.unique(which).tolist():
        pick = np.flatnonzero(which == i)
        at = (scenario[pick], seq[pick] - starts[i])
        for name in names:
            state.results[i][name][at] = out[name][pick]
        state.done[i] += len(pick)
    while state.held and state.done[0] == state.held[0].num_rows * k:
        rows, buffers = state.held.pop(0), state.results.pop(0)
        del state.done[0]
        state.first += rows.num_rows
        per = [{name: buffers[name][s] for name in names} for s in range(k)]
        if plan.tallies is not None:
            live = _live_throttles(rows)
            for s, results in enumerate(per):
                state.tally.add(s, results, live, rows)
        yield _wide(plan, labels, rows, per)


def peak_batches(window_json: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition holding whole sensors: peak usage and p99 throttle."""
    table = pa.Table.from_batches(list(batches))
    if not table.num_rows:
        return
    ids, peaks, p99 = kernel.sensor_peaks(
        table.column("_sid").to_numpy(),
        table.column(kernel.TIME).to_numpy(),
        table.column("_amount").to_numpy(),
        table.column(kernel.THROTTLE).to_numpy(),
        _config(window_json).window,
    )
    yield pa.RecordBatch.from_arrays(
        [pa.array(ids), pa.array(peaks), pa.array(p99)],
        names=["_sid", "_peak", "p99_throttle_ms"],
    )


def pair_batches(base_json: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over distinct (user, client_id) pairs: their sensors and bounds."""
    managers = _managers(base_json)
    for batch in batches:
        frame = _frame(batch, (kernel.USER, kernel.CLIENT))
        out = kernel.pair_sensors(frame[kernel.USER], frame[kernel.CLIENT], managers)
        yield pa.RecordBatch.from_pandas(out, preserve_index=False)


def label_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow over entity rows: the entity as Kafka names it."""
    for batch in batches:
        users = batch.column(batch.schema.names.index(kernel.SENSOR_USER)).to_pylist()
        clients = batch.column(batch.schema.names.index(kernel.SENSOR_CLIENT)).to_pylist()
        labels = [
            kernel.entity_label(u or "", c or "") for u, c in zip(users, clients, strict=True)
        ]
        index = batch.schema.names.index("entity")
        yield batch.set_column(index, "entity", pa.array(labels, pa.string()))


def recommend_partition(
    base_json: str,
    target: float,
    schema: pa.Schema,
    batches: Iterator[pa.RecordBatch],
    peak_rss: Any = None,
) -> Iterator[pa.RecordBatch]:
    """mapInArrow over a partition holding whole entities: their recommendations, each
    entity by its number (``_kq_entity``; ``_kq_type``: the index of its quota type), one
    search per quota type in it (``peak_rss``: a :class:`PeakSink` accumulator, told the
    worker's peak RSS)."""
    held = list(batches)
    if not any(b.num_rows for b in held):
        return
    table = pa.Table.from_batches(held)
    names = table.schema.names
    types = table.column("_kq_type").to_numpy()
    for code in np.unique(types).tolist():
        rows = table.filter(pa.array(types == code))
        frame = pd.DataFrame(
            {
                kernel.SENSOR_USER: rows.column("_kq_entity").to_numpy(),
                kernel.SENSOR_CLIENT: np.zeros(rows.num_rows, dtype=np.int64),
                kernel.BROKER: _categorical(rows.column(kernel.BROKER)),
                **{
                    name: rows.column(name).to_numpy()
                    for name in (kernel.TS, kernel.USAGE, "unrecord_if", *kernel.SEQ_COLUMNS)
                    if name in names
                },
            }
        )
        config = _config(base_json)
        out = kernel.recommend(
            frame, config.window, kernel.QUOTA_TYPES[code], target, config.kafka_version
        )
        result = out.drop(columns=["quota_type", kernel.SENSOR_CLIENT, "entity"]).rename(
            columns={kernel.SENSOR_USER: "_kq_entity"}
        )
        yield pa.RecordBatch.from_pandas(result, schema=schema, preserve_index=False)
    if peak_rss is not None:
        peak_rss.add(worker_peak_rss())
