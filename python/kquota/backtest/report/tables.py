"""The report's tables: the scenario totals and the throttle histogram a run collects, and
how a table's columns are written (units in the header, one precision per column), as
text for the terminal or as HTML."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from kquota.backtest.frames import BROKER
from kquota.backtest.report import units

if TYPE_CHECKING:
    from kquota.backtest.options import BacktestResult

TOP_ENTITIES: Final = 10
"""How many of the most throttled sensors the report lists."""


def scenario_totals(
    counts: pd.DataFrame, scenarios: Sequence[str], scales: Sequence[float]
) -> pd.DataFrame:
    """Per scenario, from requests counted per applied throttle value (``throttle_ms``):
    requests, throttled requests (in all and per quota type) and their fraction, total,
    nearest-rank p99 and largest throttle, mean and largest added latency."""
    rows = []
    for scenario, scale in zip(scenarios, scales, strict=True):
        part = counts[counts["scenario"] == scenario].sort_values("throttle_ms")
        n = int(part["requests"].sum())
        if not n:
            continue
        throttle = part["throttle_ms"].to_numpy(dtype=np.int64)
        number = part["requests"].to_numpy(dtype=np.int64)
        rank = (99 * n + 99) // 100
        throttled = int(number[throttle > 0].sum())
        rows.append(
            {
                "scenario": scenario,
                "scale": scale,
                "requests": n,
                "throttled_requests": throttled,
                "throttled_fraction": throttled / n,
                "produce_throttled": int(part["produce_throttled"].sum()),
                "fetch_throttled": int(part["fetch_throttled"].sum()),
                "request_throttled": int(part["request_throttled"].sum()),
                "total_throttle_ms": int((throttle * number).sum()),
                "p99_throttle_ms": int(throttle[np.searchsorted(np.cumsum(number), rank)]),
                "max_throttle_ms": int(throttle.max()),
                "mean_added_latency_ms": float(part["added_latency_ms"].sum()) / n,
                "max_added_latency_ms": int(part["max_added_latency_ms"].max()),
            }
        )
    return pd.DataFrame(rows, columns=[*_TOTALS])


_TOTALS: Final = (
    "scenario",
    "scale",
    "requests",
    "throttled_requests",
    "throttled_fraction",
    "produce_throttled",
    "fetch_throttled",
    "request_throttled",
    "total_throttle_ms",
    "p99_throttle_ms",
    "max_throttle_ms",
    "mean_added_latency_ms",
    "max_added_latency_ms",
)


def throttle_histogram(counts: pd.DataFrame) -> pd.DataFrame:
    """Throttled requests per scenario and power-of-two bin ``b`` (``2**b <= throttle``)."""
    throttled = counts[counts["throttle_ms"] > 0]
    bins = np.floor(np.log2(throttled["throttle_ms"].to_numpy(dtype=np.float64))).astype(int)
    return (
        throttled.assign(bin=bins)
        .groupby(["scenario", "bin"], as_index=False, observed=True)["requests"]
        .sum()
        .rename(columns={"requests": "count"})
    )


def _fmt(value: Any, kind: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if kind == "pct":
        return f"{100 * float(value):.2f}%"
    if kind == "ms":
        return units.duration(float(value))
    if isinstance(value, float | np.floating):
        number = float(value)
        if abs(number) >= 1e15:
            return f"{number:.3g}"
        return f"{number:,.2f}" if abs(number) < 1000 else f"{number:,.0f}"
    if isinstance(value, int | np.integer):
        return f"{value:,}"
    return str(value)


def _number(value: float, largest: float) -> str:
    """``value`` with as many decimals as the column's ``largest`` value needs for three
    significant digits (one column, one precision)."""
    if math.isnan(value):
        return "-"
    decimals = 0 if largest >= 100 else 1 if largest >= 10 else 2
    return f"{value:,.{decimals}f}"


def _column(frame: pd.DataFrame, header: str, name: str, kind: str) -> tuple[str, list[str]]:
    """One column's header (with its unit where the column has one) and its cells.

    ``ms``: durations, in the unit of the column's largest (ms, s, min or h); ``size``:
    bytes, in the unit of the column's largest (kB, MB or GB); ``rate``: a
    quota or rate in its quota type's unit (kB/s or MB/s for bytes; the cells carry the
    unit when the types in the column differ); ``pct``: a fraction as a percentage."""
    values = frame[name].tolist() if name in frame.columns else [None] * len(frame)
    if kind not in ("ms", "rate", "size"):
        return header, [_fmt(v, kind) for v in values]
    numbers = [
        float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))
    ]
    largest = max((abs(v) for v in numbers), default=0.0)
    if kind == "ms":
        unit, size = units.duration_unit(largest)
        cells = ["-" if v is None else _number(float(v) / size, largest / size) for v in values]
        return f"{header} ({unit})", cells
    if kind == "size":
        unit, size = next(
            ((u, z) for u, z in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)) if largest >= z),
            ("bytes", 1.0),
        )
        cells = ["-" if v is None else _number(float(v) / size, largest / size) for v in values]
        return f"{header} ({unit})", cells
    if kind == "rate":
        types = frame["quota_type"].astype(str).tolist() if "quota_type" in frame else []
        types = types or ["produce"] * len(frame)
        kinds = {"bytes" if t in units.BYTE_TYPES else t for t in types}
        if len(kinds) == 1:
            unit, size = units.rate_unit(types[0], largest)
            cells = ["-" if v is None else _number(float(v) / size, largest / size) for v in values]
            return f"{header} ({unit})", cells
        cells = [
            "-"
            if v is None or (isinstance(v, float) and math.isnan(v))
            else units.amount(float(v), t)
            for v, t in zip(values, types, strict=True)
        ]
        return header, cells
    return header, [_fmt(v, kind) for v in values]


def columns(
    frame: pd.DataFrame, specs: Sequence[tuple[str, str, str]]
) -> tuple[list[str], list[list[str]]]:
    """A table's headers and rows, each column (header, frame column, kind) formatted by
    :func:`_column`."""
    made = [_column(frame, *spec) for spec in specs]
    header = [h for h, _ in made]
    rows = [list(row) for row in zip(*(cells for _, cells in made), strict=True)]
    return header, rows if len(frame) else []


def text_table(header: list[str], rows: list[list[str]]) -> str:
    """A table for the terminal: headers left-aligned, cells right-aligned."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(str(c).rjust(w) for c, w in zip(row, widths, strict=True)))
    return "\n".join(lines)


TOTAL_COLUMNS: Final = (
    ("scenario", "scenario", ""),
    ("requests", "requests", ""),
    ("throttled", "throttled_requests", ""),
    ("fraction", "throttled_fraction", "pct"),
    ("produce", "produce_throttled", ""),
    ("fetch", "fetch_throttled", ""),
    ("request", "request_throttled", ""),
    ("throttle in all", "total_throttle_ms", "ms"),
    ("p99 throttle", "p99_throttle_ms", "ms"),
    ("longest", "max_throttle_ms", "ms"),
    ("mean added latency", "mean_added_latency_ms", "ms"),
)

BROKER_COLUMNS: Final = (
    ("scenario", "scenario", ""),
    ("requests", "requests", ""),
    ("throttled by the broker", "broker_throttled", ""),
    ("throttled in the replay", "replay_throttled", ""),
    ("both", "both_throttled", ""),
    ("agree", "agree_fraction", "pct"),
    ("broker throttle", "broker_throttle_ms", "ms"),
    ("replay throttle", "replay_throttle_ms", "ms"),
)
BROKER_TITLE: Final = "What the broker did (the throttles in the traffic) beside this replay"


def broker_table(result: BacktestResult) -> pd.DataFrame | None:
    """What the broker did beside the replay, with the fraction that agrees (``None``
    when the traffic did not say what the broker did)."""
    if result.broker is None:
        return None
    table = result.broker.copy()
    table["agree_fraction"] = table["agree"] / table["requests"].where(table["requests"] > 0)
    return table


ENTITY_COLUMNS: Final = (
    ("type", "quota_type", ""),
    ("broker", BROKER, ""),
    ("entity", "entity", ""),
    ("quota", "quota", "rate"),
    ("requests", "requests", ""),
    ("throttled", "throttled_fraction", "pct"),
    ("throttle in all", "total_throttle_ms", "ms"),
    ("p99 throttle", "p99_throttle_ms", "ms"),
    ("longest", "max_throttle_ms", "ms"),
    ("peak rate", "peak_rate", "rate"),
    ("utilization", "utilization", "pct"),
)

UNSERVED_COLUMNS: Final = (
    ("client", "client", ""),
    ("requests not served", "requests", ""),
    ("not served", "bytes", "size"),
    ("buffer full", "buffer_full", ""),
    ("timed out", "timed_out", ""),
)

RECOMMEND_COLUMNS: Final = (
    ("type", "quota_type", ""),
    ("entity", "entity", ""),
    ("brokers", "brokers", ""),
    ("requests", "requests", ""),
    ("quota", "current_quota", "rate"),
    ("throttled", "current_throttled_fraction", "pct"),
    ("meets target at", "recommended_quota", "rate"),
    ("throttled at that", "recommended_throttled_fraction", "pct"),
    ("in the file", "applied_quota", "rate"),
    ("change", "change", ""),
)


def unserved_of(result: BacktestResult) -> pd.DataFrame | None:
    """The base scenario's clients with demand not served, most bytes first (``None``
    unless the run had bounded clients)."""
    if result.unserved is None:
        return None
    mine = result.unserved[result.unserved["scenario"] == result.base_scenario]
    return mine.assign(
        client=[
            f"user={u or '(none)'}, client-id={c or '(none)'}"
            for u, c in zip(mine["user"], mine["client_id"], strict=True)
        ]
    )


def html_table(frame: pd.DataFrame, specs: Sequence[tuple[str, str, str]]) -> str:
    """``frame``'s columns ``specs`` (as :func:`columns` takes them) as an HTML table."""
    header, rows = columns(frame, specs)
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>" for row in rows
    )
    table = f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    return f'<div class="table">{table}</div>'
