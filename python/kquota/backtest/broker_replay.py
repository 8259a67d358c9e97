"""The by-broker replay (``mapInArrow`` over partitions of whole brokers): every request
through the core's sequential :class:`~kquota.ReplayKernel`, every scenario in one pass,
open or closed loop; each row comes out once with every scenario's results, and is
tallied for the report on its way out (:class:`~kquota.backtest.tally.Tally`)."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from kquota import ReplayKernel, RequestPath
from kquota.backtest import frames, outputs
from kquota.backtest.options import RESULT_COLUMNS
from kquota.backtest.stages import TAGS, parsed_config, parsed_managers
from kquota.backtest.tally import Tally, worker_peak_rss
from kquota.traffic_schema import KAFKA_THROTTLE

__all__ = ["ReplayPlan", "replay"]


@dataclass(frozen=True)
class ReplayPlan:
    """What :func:`replay` does: every scenario in one pass, open or closed loop.

    ``summaries``, a Spark accumulator of :class:`~kquota.backtest.tally.SummarySink`,
    receives the kernel's entity summaries of every broker replayed (its ``add`` of
    ``{broker: columns}``).
    """

    configs: tuple[str, ...]
    labels: tuple[str, ...]
    base: str
    closed: bool
    summaries: Any = None
    peak_rss: Any = None
    """A Spark accumulator of :class:`~kquota.backtest.tally.PeakSink`: the Python worker's
    peak RSS is added at the end of each partition (see
    :func:`~kquota.backtest.tally.worker_peak_rss`)."""
    mutations: bool = False
    """The traffic has :data:`~kquota.backtest.frames.PARTITIONS` (and ``strict``): mutation
    requests are replayed on each scenario's ``controller_mutation_rate`` quotas and the rows
    get :data:`~kquota.backtest.frames.MUTATION_RESULTS`."""
    tallies: Any = None
    """A Spark accumulator of :class:`~kquota.backtest.tally.SummarySink`: each broker's
    :class:`Tally` (the report's counts per applied throttle, and the broker comparison),
    taken while the rows go out, so that no pass over ``DIR/requests/`` is needed for
    them."""
    clients: tuple[int, int, int] | None = None
    """Closed loop: the bounded clients' limits (:meth:`frames.ClientLimits.as_tuple`), or
    ``None`` for unbounded clients."""


@functools.lru_cache(maxsize=16)
def _paths(configs: tuple[str, ...]) -> list[RequestPath]:
    """One request path per scenario: the broker's three managers, as configured."""
    return [frames.request_path(parsed_config(text)) for text in configs]


def _topic_columns(
    topics: Any, kind: npt.NDArray[np.int8], mine: npt.NDArray[np.int64] | None
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]] | tuple[()]:
    """The kernel's ``topic_offsets`` and ``topic_partitions`` of the rows ``mine`` (all when
    ``None``) from the :data:`~kquota.backtest.frames.TOPIC_PARTITIONS` column: the lists of
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
            self.kernel.set_mutation_manager(scenario, parsed_config(text).mutation_manager())
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
        self.managers = parsed_managers(base)
        self.cache: dict[tuple[str, str], tuple[str | None, ...]] = {}

    def of(self, pair: tuple[str, str]) -> tuple[str | None, ...]:
        """Produce user/client, fetch user/client, request user/client (None: no quota)."""
        tags = self.cache.get(pair)
        if tags is None:
            found: list[str | None] = []
            for quota_type in frames.QUOTA_TYPES:
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
    names = {frames.KIND_PRODUCE: 0, frames.KIND_FETCH: 1}
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
        broker_codes, broker_names = _encode(batch.column(names.index(frames.BROKER)))
        user_codes, users = _encode(batch.column(names.index(frames.USER)))
        client_codes, clients = _encode(batch.column(names.index(frames.CLIENT)))
        api_codes, apis = _encode(batch.column(names.index(frames.API)))
        kind = _kind_codes(apis)[api_codes]
        keys = user_codes.astype(np.int64) * max(len(clients), 1) + client_codes
        distinct, pair_index = _dense_codes(keys, max(len(users) * len(clients), 1))
        pairs = [(users[k // len(clients)], clients[k % len(clients)]) for k in distinct.tolist()]
        times = batch.column(names.index(frames.TS)).to_numpy(zero_copy_only=False)
        size = pc.cast(batch.column(names.index(frames.BYTES)), pa.float64()).to_numpy(
            zero_copy_only=False
        )
        thread = pc.cast(batch.column(names.index(frames.THREAD)), pa.float64()).to_numpy(
            zero_copy_only=False
        )
        acks = np.full(n, -1, dtype=np.int16)  # a produce with acks=0 has no thread time
        partitions = strict = None
        topics: Any = None
        if plan.mutations:
            # a mutation: partitions given on CreateTopics, CreatePartitions or DeleteTopics
            given = batch.column(names.index(frames.PARTITIONS))
            is_api = np.array(
                [a.lower().replace("_", "") in frames.MUTATION_APIS for a in apis] or [False]
            )[api_codes]
            is_mutation = is_api & ~given.is_null().to_numpy(zero_copy_only=False)
            kind = np.where(is_mutation, np.int8(3), kind).astype(np.int8)
            partitions = (
                pc.fill_null(pc.cast(given, pa.int32()), 0).to_numpy(zero_copy_only=False)
            ).astype(np.int32)
            strict = pc.fill_null(batch.column(names.index(frames.STRICT)), False).to_numpy(
                zero_copy_only=False
            )
            if frames.TOPIC_PARTITIONS in names:
                topics = batch.column(names.index(frames.TOPIC_PARTITIONS))
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
    return (*names, *frames.MUTATION_RESULTS) if plan.mutations else names


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
