"""What the executors count while the rows go out and hand back to the driver through
Spark accumulators: each broker's :class:`Tally` (the report's counts per applied
throttle, the broker comparison, the requests bounded clients could not serve), the
Python workers' peak RSS, and the frames the driver merges them into."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]

from kquota.backtest import frames

__all__ = [
    "COMPARISON_COLUMNS",
    "TALLY_COLUMNS",
    "UNSERVED_COLUMNS",
    "PeakSink",
    "SummarySink",
    "Tally",
    "tally_frames",
    "unserved_frame",
    "worker_peak_rss",
]


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
        throttle = np.asarray(out[frames.THROTTLE], dtype=np.int64)
        n = len(throttle)
        if not n:
            return
        if rows_out is not None and frames.UNSERVED in out:
            self._add_unserved(scenario, np.asarray(out[frames.UNSERVED]), rows_out)
        rows = np.empty((n, 2 + len(TALLY_COLUMNS)), dtype=np.int64)
        rows[:, 0] = scenario
        rows[:, 1] = throttle
        rows[:, 2] = 1
        for i, name in enumerate(_TYPE_THROTTLES):
            rows[:, 3 + i] = np.asarray(out[name]) > 0
        rows[:, 6] = rows[:, 7] = np.asarray(out[frames.ADDED_LATENCY], dtype=np.int64)
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

        size = column(frames.BYTES)
        for user, client, code, b in zip(
            column(frames.USER), column(frames.CLIENT), codes[picked].tolist(), size, strict=True
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


_TYPE_THROTTLES: Final = (frames.PRODUCE_THROTTLE, frames.FETCH_THROTTLE, frames.REQUEST_THROTTLE)


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
            row[2 if code == frames.UNSERVED_BUFFER_FULL else 3] += requests
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
    counts.insert(0, frames.THROTTLE, merged[:, 1])
    counts.insert(0, "scenario", np.asarray(labels, dtype=object)[merged[:, 0]])
    if not compared:
        return counts, None
    comparison = pd.DataFrame(
        [(labels[s], *row) for s, row in sorted(compared.items(), key=lambda i: labels[i[0]])],
        columns=["scenario", *COMPARISON_COLUMNS],
    ).astype({c: np.int64 for c in COMPARISON_COLUMNS})
    return counts, comparison
