"""The back-test report: ``DIR/report.html`` with PNG plots, and the terminal summary.

Both open with a few sentences in words (:func:`opening`): who would have been throttled,
how long they would have waited, what the other scenarios and the recommended quotas
change. Everything here works on the small tables a
:class:`~kquota.backtest.options.BacktestResult` holds and on ``DIR/entities/`` (one row
per sensor and scenario; collected aggregates, never the traffic), so it is plain pandas
and matplotlib.
"""

from __future__ import annotations

import html
import math
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from kquota.backtest.kernel import BROKER, SENSOR_CLIENT, SENSOR_USER

if TYPE_CHECKING:
    from kquota.backtest.options import BacktestResult, RecommendedFile
    from kquota.config import Window

__all__ = [
    "PLOTTED_ENTITIES",
    "TOP_ENTITIES",
    "RatePlot",
    "opening",
    "rate_over_time",
    "rate_plot",
    "read_entities",
    "scenario_totals",
    "summary_text",
    "throttle_histogram",
    "write_report",
]

TOP_ENTITIES: Final = 10
"""How many of the most throttled sensors the report lists."""
PLOTTED_ENTITIES: Final = 4
"""How many of them get a rate-against-quota plot."""
WIDTH: Final = 100
"""The terminal summary's sentences are wrapped at this width."""
MAX_POINTS: Final = 2000
"""Points per plotted line (peaks are kept when a series is longer)."""

_UNIT: Final = {
    "produce": "bytes/s",
    "fetch": "bytes/s",
    "request": "% of a thread",
    "controller_mutation": "partitions/s",
}


def rate_over_time(
    windows: Sequence[int] | np.ndarray, amounts: Sequence[float] | np.ndarray, num_samples: int
) -> tuple[np.ndarray, np.ndarray]:
    """The windowed rate at the end of every window from the first to the last.

    ``windows`` are window indices (``floor(t / window_ms)``) that had usage and
    ``amounts`` the usage per window in the quota's unit. The rate at window ``w`` is
    the usage of ``w`` and the ``num_samples - 2`` windows before it over their length
    (per window; multiply by ``1000 / window_ms`` for per second), as in
    :func:`kquota.backtest.kernel.peak_rates`. Returns ``(window indices, rate per window)``.
    """
    index = np.asarray(windows, dtype=np.int64)
    if not len(index):
        return np.empty(0, dtype=np.int64), np.empty(0)
    span = max(num_samples - 1, 1)
    first, last = int(index.min()), int(index.max())
    dense = np.zeros(last - first + 1)
    np.add.at(dense, index - first, np.asarray(amounts, dtype=np.float64))
    running = np.concatenate(([0.0], np.cumsum(dense)))
    ends = np.arange(1, len(dense) + 1)
    totals = running[ends] - running[np.maximum(ends - span, 0)]
    return np.arange(first, last + 1, dtype=np.int64), totals / span


@dataclass(frozen=True)
class RatePlot:
    """What a rate-against-quota plot draws: the line (``times``, ``rate`` per second, NaN
    for a gap) and the throttled windows' marks (``mark_times``, ``mark_rates``)."""

    times: np.ndarray
    rate: np.ndarray
    mark_times: np.ndarray
    mark_rates: np.ndarray


def rate_plot(
    series: pd.DataFrame,
    window: Window,
    quota_type: str,
    quota: float | None,
    points: int = MAX_POINTS,
) -> RatePlot:
    """One sensor's rate against its quota, as the report draws it.

    ``series`` is the sensor's usage per window (:func:`kquota.backtest.summaries.rate_series`:
    ``window``, ``amount``, ``throttled`` and ``unrecorded``, the requests whose bytes were
    unrecorded). The line is the windowed rate at the end of every window
    (:func:`rate_over_time`), zoomed on the throttled stretch when it is short, at most
    ``points`` points (each the largest of its stretch of windows).

    A throttled fetch gets an empty response and its bytes are not counted (as Kafka
    does), so the rate that remains says nothing of what the client asked for: a window
    with an unrecorded fetch has no rate (a gap in the line), rather than the rate the
    sensor keeps, often 0. Its mark sits on the quota it went over; other throttled
    windows are marked at their rate.
    """
    windows, per_window = rate_over_time(series["window"], series["amount"], window.num_samples)
    rate = per_window * (1000.0 / window.window_ms)
    throttled = np.isin(windows, series.loc[series["throttled"] > 0, "window"])
    fetch = quota_type == "fetch"
    if fetch:
        unrecorded = series["unrecorded"] if "unrecorded" in series else series["throttled"]
        rate[np.isin(windows, series.loc[unrecorded > 0, "window"])] = np.nan
    zoomed = _zoom(windows, windows[throttled], window.window_ms)
    windows, rate, throttled = windows[zoomed], rate[zoomed], throttled[zoomed]
    times = np.asarray(pd.to_datetime(windows * window.window_ms, unit="ms"))
    x, y = _peaks(times, rate, points)
    if fetch:
        bound = quota if quota is not None and not math.isnan(quota) else None
        marked = throttled if bound is not None else np.zeros(len(throttled), dtype=np.bool_)
        heights = np.full(int(marked.sum()), bound if bound is not None else 0.0)
    else:
        marked = throttled
        heights = rate[marked]
    return RatePlot(x, y, times[marked], heights)


def _peaks(x: np.ndarray, y: np.ndarray, points: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``points`` points, keeping each chunk's maximum.

    A gap (NaN) stays a gap: a chunk of gaps only is one, and so is a chunk whose other
    windows are all 0 (else a stretch of throttled fetches would be drawn at 0).
    """
    if len(x) <= points:
        return x, y
    chunk = math.ceil(len(x) / points)
    pad = (-len(y)) % chunk
    y_pad = np.concatenate((y, np.full(pad, np.nan))).reshape(-1, chunk)
    peak = np.fmax.reduce(y_pad, axis=1)
    gaps = np.concatenate((np.isnan(y), np.zeros(pad, dtype=np.bool_))).reshape(-1, chunk)
    peak[gaps.any(axis=1) & (peak == 0)] = np.nan
    return x[::chunk], peak


def _zoom(windows: np.ndarray, throttled: np.ndarray, window_ms: int) -> np.ndarray:
    """Which windows to plot: the throttled stretch with some margin, when it is short."""
    if not len(throttled) or not len(windows):
        return np.ones(len(windows), dtype=np.bool_)
    first, last = int(throttled.min()), int(throttled.max())
    margin = max((last - first) // 2, 600_000 // window_ms)
    keep: np.ndarray = (windows >= first - margin) & (windows <= last + margin)
    return keep


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
        return f"{float(value):,.0f}"
    if isinstance(value, float | np.floating):
        number = float(value)
        if abs(number) >= 1e15:
            return f"{number:.3g}"
        return f"{number:,.2f}" if abs(number) < 1000 else f"{number:,.0f}"
    if isinstance(value, int | np.integer):
        return f"{value:,}"
    return str(value)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(str(c).rjust(w) for c, w in zip(row, widths, strict=True)))
    return "\n".join(lines)


_TOTAL_COLUMNS: Final = (
    ("scenario", "scenario", ""),
    ("requests", "requests", ""),
    ("throttled", "throttled_requests", ""),
    ("fraction", "throttled_fraction", "pct"),
    ("produce", "produce_throttled", ""),
    ("fetch", "fetch_throttled", ""),
    ("request", "request_throttled", ""),
    ("throttle ms", "total_throttle_ms", "ms"),
    ("p99 ms", "p99_throttle_ms", "ms"),
    ("max ms", "max_throttle_ms", "ms"),
    ("mean added latency ms", "mean_added_latency_ms", "ms"),
)

_BROKER_COLUMNS: Final = (
    ("scenario", "scenario", ""),
    ("requests", "requests", ""),
    ("throttled by the broker", "broker_throttled", ""),
    ("throttled in the replay", "replay_throttled", ""),
    ("both", "both_throttled", ""),
    ("agree", "agree_fraction", "pct"),
    ("broker throttle ms", "broker_throttle_ms", "ms"),
    ("replay throttle ms", "replay_throttle_ms", "ms"),
)
_BROKER_TITLE: Final = "What the broker did (the throttles in the traffic) beside this replay"


def _broker_table(result: BacktestResult) -> pd.DataFrame | None:
    if result.broker is None:
        return None
    table = result.broker.copy()
    table["agree_fraction"] = table["agree"] / table["requests"].where(table["requests"] > 0)
    return table


_ENTITY_COLUMNS: Final = (
    ("type", "quota_type", ""),
    ("broker", BROKER, ""),
    ("entity", "entity", ""),
    ("quota", "quota", ""),
    ("requests", "requests", ""),
    ("throttled", "throttled_fraction", "pct"),
    ("throttle ms", "total_throttle_ms", "ms"),
    ("p99 ms", "p99_throttle_ms", "ms"),
    ("max ms", "max_throttle_ms", "ms"),
    ("peak rate", "peak_rate", ""),
    ("utilization", "utilization", "pct"),
)

_RECOMMEND_COLUMNS: Final = (
    ("type", "quota_type", ""),
    ("entity", "entity", ""),
    ("brokers", "brokers", ""),
    ("requests", "requests", ""),
    ("quota", "current_quota", ""),
    ("throttled", "current_throttled_fraction", "pct"),
    ("meets target at", "recommended_quota", ""),
    ("throttled at that", "recommended_throttled_fraction", "pct"),
    ("in the file", "applied_quota", ""),
    ("change", "change", ""),
)


def _rows(frame: pd.DataFrame, columns: Sequence[tuple[str, str, str]]) -> list[list[str]]:
    return [
        [_fmt(record.get(name), kind) for _, name, kind in columns]
        for record in frame.to_dict("records")
    ]


_TYPE_WORDS: Final = {
    "produce": "produce",
    "fetch": "fetch",
    "request": "request-time",
    "controller_mutation": "controller-mutation",
}
_REQUESTS_OF: Final = {
    "produce": "produce requests",
    "fetch": "fetch requests",
    "request": "requests",
    "controller_mutation": "controller mutations",
}
_HEADLINE: Final = {
    "closed": "Under {quotas} ({scenario}), clients that honour throttles (closed loop, as "
    "Kafka clients do) would have had {count} requests ({share}) throttled{counted}.",
    "open": "Replayed at their recorded times, as if clients ignored throttles (open loop), "
    "{count} requests ({share}) would have been throttled under {quotas} ({scenario})"
    "{counted}.",
}
_UNTHROTTLED: Final = {
    "closed": "Under {quotas} ({scenario}), clients that honour throttles (closed loop, as "
    "Kafka clients do) would have had none of their {requests} requests throttled.",
    "open": "Replayed at their recorded times (open loop), none of the {requests} requests "
    "would have been throttled under {quotas} ({scenario}).",
}
NAMED_PER_TYPE: Final = 3
"""How many throttled entities of each quota type the opening sentences name."""


def read_entities(out: str | Path) -> pd.DataFrame | None:
    """``DIR/entities/`` (one row per sensor and scenario) of a local output folder, or
    ``None`` when it is not there (a remote output, or no back-test wrote it)."""
    text = str(out)
    if "://" in text and not text.startswith("file://"):
        return None
    folder = Path(text.removeprefix("file://")) / "entities"
    if not folder.is_dir():
        return None
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    frame: pd.DataFrame = pq.read_table(str(folder)).to_pandas()
    return frame


def _duration(ms: float) -> str:
    if ms < 1000:
        return f"{ms:,.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    if ms < 3_600_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:,.1f} h"


def _share(fraction: float) -> str:
    if 0 < fraction < 0.0001:
        return "under 0.01%"
    return f"{100 * fraction:.2f}%" if fraction < 0.1 else f"{100 * fraction:.0f}%"


def _amount(value: float, quota_type: str) -> str:
    """A quota or rate in words: ``44 kB/s``, ``1.5% of a thread``."""
    if quota_type == "request":
        return f"{value:.3g}% of a thread"
    if quota_type == "controller_mutation":
        return f"{value:.3g} partitions/s"
    for unit, size in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.3g} bytes/s"


def _listed(items: Sequence[str], more: int = 0, what: str = "more") -> str:
    words = list(items) + ([f"{more:,} {what}"] if more else [])
    if len(words) <= 1:
        return "".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _throttled_entities(
    result: BacktestResult, entities: pd.DataFrame | None
) -> tuple[pd.DataFrame, bool]:
    """Per throttled entity (quota type and entity, across brokers) of the base scenario:
    ``requests`` (all its requests of that type), ``throttled_requests``,
    ``total_throttle_ms``, ``max_throttle_ms`` and ``brokers`` (where it was throttled),
    most throttle time first; and whether that is every throttled entity (from
    ``entities``) or only the most throttled sensors (``result.top_entities``)."""
    complete = entities is not None
    rows = entities if entities is not None else result.top_entities
    if "scenario" in rows.columns:
        rows = rows[rows["scenario"] == result.base_scenario]
    keys = ["quota_type", "entity"]
    columns = [*keys, "requests", "throttled_requests", "total_throttle_ms"]
    columns += ["max_throttle_ms", "brokers"]
    if rows.empty:
        return pd.DataFrame(columns=columns), complete
    rows = rows.assign(
        throttled_requests=rows["throttled_requests"].fillna(0).astype(np.int64),
        hit=(rows["throttled_requests"] > 0).astype(np.int64),
    )
    per = rows.groupby(keys, as_index=False, observed=True, sort=False).agg(
        requests=("requests", "sum"),
        throttled_requests=("throttled_requests", "sum"),
        total_throttle_ms=("total_throttle_ms", "sum"),
        max_throttle_ms=("max_throttle_ms", "max"),
        brokers=("hit", "sum"),
    )
    per = per[per["throttled_requests"] > 0]
    per = per.sort_values(["total_throttle_ms", *keys], ascending=[False, True, True])
    return per.reset_index(drop=True)[columns], complete


def opening(result: BacktestResult, entities: pd.DataFrame | None = None) -> list[str]:
    """The few sentences the report and the terminal summary open with, computed from the
    results: who would have been throttled (entities, by quota type), how long they would
    have waited, what the other scenarios change and, after ``--recommend``, what the
    recommended quotas change.

    ``entities``: ``DIR/entities/`` (:func:`read_entities`). Without it the sentences name
    the most throttled sensors' entities (``result.top_entities``) and do not count them.
    """
    totals = result.totals.set_index("scenario") if not result.totals.empty else None
    if totals is None or result.base_scenario not in totals.index:
        return ["No request was replayed."]
    base = totals.loc[result.base_scenario]
    requests, throttled = int(base["requests"]), int(base["throttled_requests"])
    mode = result.mode if result.mode in _HEADLINE else "open"
    scale = f"{float(base['scale']):g}"
    words = {
        "quotas": "these quotas" if scale == "1" else f"these quotas scaled by {scale}",
        "scenario": result.base_scenario,
        "requests": f"{requests:,}",
    }
    if not throttled:
        sentences = [_UNTHROTTLED[mode].format(**words)]
    else:
        per, complete = _throttled_entities(result, entities)
        counted = f", from {len(per):,} entities" if complete and len(per) != 1 else ""
        if complete and len(per) == 1:
            counted = ", all from one entity"
        headline = _HEADLINE[mode].format(
            count=f"{throttled:,} of {requests:,}",
            share=_share(throttled / requests),
            counted=counted,
            **words,
        )
        sentences = [headline, *_who(per, complete), _delay(result, base, per)]
    sentences.extend(_other_scenarios(result, totals))
    sentences.extend(_recommended(result))
    return sentences


def _who(per: pd.DataFrame, complete: bool) -> list[str]:
    """Who was throttled, per quota type (the type with the most throttle time first)."""
    time_per_type = per.groupby("quota_type", observed=True)["total_throttle_ms"].sum()
    parts: list[str] = []
    for quota_type in time_per_type.sort_values(ascending=False, kind="stable").index:
        mine = per[per["quota_type"] == quota_type]
        requests = _REQUESTS_OF.get(str(quota_type), "requests")
        named = []
        for record in mine.head(NAMED_PER_TYPE).to_dict("records"):
            share = int(record["throttled_requests"]) / max(int(record["requests"]), 1)
            named.append(
                f"{record['entity']} ({int(record['throttled_requests']):,} requests, "
                f"{_share(share)} of its {requests}, up to "
                f"{_duration(float(record['max_throttle_ms']))})"
            )
        more = len(mine) - len(named) if complete else 0
        what = "other entity" if more == 1 else "other entities"
        quotas = f"the {_TYPE_WORDS.get(str(quota_type), str(quota_type))} quotas"
        verb = " would throttle " if not parts else ", "
        parts.append(quotas + verb + _listed(named, more, what))
    lead = "" if complete else "Among the most throttled sensors, "
    text = lead + "; ".join(parts)
    return [f"{text[0].upper()}{text[1:]}."]


def _delay(result: BacktestResult, base: pd.Series, per: pd.DataFrame) -> str:
    """How long the throttled requests would have waited (closed loop) or how far the
    demand exceeds the quotas (open loop)."""
    throttled = int(base["throttled_requests"])
    mean = float(base["total_throttle_ms"]) / throttled
    p99, longest = float(base["p99_throttle_ms"]), float(base["max_throttle_ms"])
    where = ""
    if not per.empty:
        top = per.sort_values("max_throttle_ms", ascending=False, kind="stable").iloc[0]
        if float(top["max_throttle_ms"]) == longest:  # else not among the rows at hand
            quota_type = str(top["quota_type"])
            where = f" ({top['entity']}, {_TYPE_WORDS.get(quota_type, quota_type)})"
    spread = (
        f"{_duration(mean)} on average; over all requests the p99 throttle is "
        f"{_duration(p99)} and the longest {_duration(longest)}{where}"
    )
    if result.mode == "closed":
        lag = float(base["mean_added_latency_ms"])
        most = float(base.get("max_added_latency_ms", 0) or 0)
        return (
            f"A throttled request was held back {spread}. Waiting, clients fell behind: "
            f"their requests went out {_duration(lag)} late on average, at most "
            f"{_duration(most)}."
        )
    return (
        f"The brokers would have answered the throttled requests with throttles of {spread}: "
        "this measures how far the recorded demand exceeds the quotas, not what clients "
        "would wait (a closed-loop run, --mode closed, tells that)."
    )


def _other_scenarios(result: BacktestResult, totals: pd.DataFrame) -> list[str]:
    """The other scenarios in one sentence: their throttled share, p99 and longest."""
    parts: list[str] = []
    for scenario in result.scenarios:
        if scenario == result.base_scenario or scenario not in totals.index:
            continue
        row = totals.loc[scenario]
        share = _share(int(row["throttled_requests"]) / max(int(row["requests"]), 1))
        parts.append(
            f"scaled by {float(row['scale']):g} ({scenario}), "
            + ("the quotas would throttle " if not parts else "")
            + f"{share} of requests (p99 {_duration(float(row['p99_throttle_ms']))}, longest "
            f"{_duration(float(row['max_throttle_ms']))})"
        )
    if not parts:
        return []
    text = "; ".join(parts)
    return [f"{text[0].upper()}{text[1:]}."]


def _recommended(result: BacktestResult) -> list[str]:
    """What the recommended quota file changes and gives, when ``--recommend`` ran."""
    recommended = result.recommendations
    file = result.recommended
    if recommended is None or recommended.empty or file is None:
        return []
    change = recommended["change"]
    raised = recommended[change == "raise"].sort_values(
        ["current_throttled_fraction", "quota_type", "entity"], ascending=[False, True, True]
    )
    examples = []
    for record in raised.head(2).to_dict("records"):
        quota_type = str(record["quota_type"])
        examples.append(
            f"{record['entity']}'s {_TYPE_WORDS.get(quota_type, quota_type)} quota from "
            f"{_amount(float(record['current_quota']), quota_type)} to "
            f"{_amount(float(record['applied_quota']), quota_type)} "
            f"({_share(float(record['current_throttled_fraction']))} of its requests "
            "throttled)"
        )
    changes = []
    if len(raised) > len(examples):
        changes.append(f"raises {len(raised):,} quotas, such as {_listed(examples)}")
    elif len(raised):
        changes.append(f"raises {_listed(examples)}")
    lowered = int((change == "lower").sum())
    if lowered:
        changes.append(f"lowers {lowered:,} that are more than their entities need")
    added = int((change == "add").sum())
    if added:
        changes.append(f"sets {added:,} where there is none")
    sentences = [_method(file, result)]
    if not changes:
        sentences.append("The recommended quota file is the quotas as they are.")
        return sentences
    # named within the output folder: the sentence reads the same wherever that is
    sentences.append(
        f"The recommended quota file (recommendations/quotas.json) {_listed(changes)}."
    )
    before = result.totals[result.totals["scenario"] == result.base_scenario]
    after = file.totals
    if len(before) and len(after):
        b, a = before.iloc[0], after.iloc[0]
        sentences.append(
            "Back-tested on the same traffic, it throttles "
            f"{int(a['throttled_requests']):,} requests ({_share(float(a['throttled_fraction']))}"
            f") where the quotas of {result.base_scenario} throttle "
            f"{int(b['throttled_requests']):,} ({_share(float(b['throttled_fraction']))}), "
            f"{_duration(float(a['total_throttle_ms']))} of throttle in all against "
            f"{_duration(float(b['total_throttle_ms']))}."
        )
    return sentences


def _method(file: RecommendedFile, result: BacktestResult) -> str:
    """What the recommendations optimise, in words."""
    kept = [] if file.lower else ["a quota is never lowered (--lower allows it)"]
    if not file.add_quotas:
        kept.append("an entity without a quota gets none (--add-quotas gives it one)")
    rules = f"; {_listed(kept)}" if kept else ""
    return (
        "Each entity's recommended quota is the smallest that keeps the share of its "
        f"requests throttled at or under the target on this traffic ({result.base_scenario}), "
        f"plus {file.headroom:.0%} headroom{rules}."
    )


def summary_text(result: BacktestResult) -> str:
    """The terminal summary: the opening sentences (:func:`opening`, from ``DIR/entities/``
    when it is a local folder), scenarios, the most throttled entities, recommendations."""
    parts = [
        f"{result.rows_read:,} requests read, {result.rows_valid:,} replayed, "
        f"{result.rows_quarantined:,} quarantined; {result.mode} loop; "
        f"{result.seconds:.1f} s",
    ]
    for reason, count in result.quarantined.items():
        parts.append(f"  quarantined: {count:,} {reason}")
    if result.worker_peak_rss:
        parts.append(f"  Python workers' peak RSS: {result.worker_peak_rss / 2**20:,.0f} MiB")
    parts.extend(f"  note: {note}" for note in result.notes)
    parts.append("")
    parts.append(textwrap.fill(" ".join(opening(result, read_entities(result.out))), WIDTH))
    parts.append("")
    parts.append(_table(_rows(result.totals, _TOTAL_COLUMNS), [c[0] for c in _TOTAL_COLUMNS]))
    broker = _broker_table(result)
    if broker is not None:
        parts.append("")
        parts.append(f"{_BROKER_TITLE}:")
        parts.append(_table(_rows(broker, _BROKER_COLUMNS), [c[0] for c in _BROKER_COLUMNS]))
    if not result.top_entities.empty:
        parts.append("")
        parts.append(f"Most throttled sensors ({result.base_scenario}):")
        parts.append(
            _table(_rows(result.top_entities, _ENTITY_COLUMNS), [c[0] for c in _ENTITY_COLUMNS])
        )
    if result.recommendations is not None and not result.recommendations.empty:
        shown = result.recommendations.head(TOP_ENTITIES)
        parts.append("")
        parts.append(
            f"Recommended quotas ({len(result.recommendations):,} entities, first {len(shown)}):"
        )
        parts.append(_table(_rows(shown, _RECOMMEND_COLUMNS), [c[0] for c in _RECOMMEND_COLUMNS]))
    return "\n".join(parts)


def _html_table(frame: pd.DataFrame, columns: Sequence[tuple[str, str, str]]) -> str:
    head = "".join(f"<th>{html.escape(c[0])}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(cell)}</td>" for cell in row) + "</tr>"
        for row in _rows(frame, columns)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _plot_rates(result: BacktestResult, folder: Path) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    window = result.config.window
    plots = []
    top = result.top_entities
    for number, record in enumerate(top.head(PLOTTED_ENTITIES).to_dict("records")):
        key = "|".join(str(record[k]) for k in ("quota_type", BROKER, SENSOR_USER, SENSOR_CLIENT))
        series = result.rate_series.get(key)
        if series is None or series.empty:
            continue
        quota_type = str(record["quota_type"])
        quota = record.get("quota")
        known = quota is not None and not math.isnan(quota)
        plot = rate_plot(series, window, quota_type, float(quota) if known else None)
        fig, ax = plt.subplots(figsize=(9, 3.2))
        ax.plot(plot.times, plot.rate, lw=0.8, label="windowed rate")
        if known:
            ax.axhline(quota, color="tab:red", lw=1, ls="--", label=f"quota {_fmt(quota)}")
        if len(plot.mark_times) and quota_type == "fetch":
            ax.plot(
                plot.mark_times,
                plot.mark_rates,
                "|",
                color="tab:red",
                ms=6,
                label="throttled (empty response, bytes not counted)",
            )
        elif len(plot.mark_times):
            ax.plot(plot.mark_times, plot.mark_rates, ".", color="tab:red", ms=3, label="throttled")
        unit = _UNIT[quota_type]
        title = f"{record['quota_type']} · {record['entity']} · broker {record[BROKER]}"
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
        # headroom above the rate and the quota, for the legend not to hide either
        top = np.fmax.reduce(np.append(plot.rate, float(quota) if known else np.nan))
        if np.isfinite(top) and top > 0:
            ax.set_ylim(0, 1.3 * top)
        ax.legend(loc="upper right", fontsize=8, ncol=3)
        fig.autofmt_xdate()
        fig.tight_layout()
        name = f"rate_{number + 1}.png"
        fig.savefig(folder / name, dpi=110)
        plt.close(fig)
        plots.append((name, title))
    return plots


def _plot_histogram(result: BacktestResult, folder: Path) -> str | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hist = result.histogram
    if hist.empty:
        return None
    bins = np.arange(int(hist["bin"].min()), int(hist["bin"].max()) + 1)
    scenarios = [s for s in result.scenarios if s in set(hist["scenario"])]
    width = 0.8 / max(len(scenarios), 1)
    fig, ax = plt.subplots(figsize=(9, 3.2))
    for i, scenario in enumerate(scenarios):
        part = hist[hist["scenario"] == scenario].set_index("bin")["count"]
        counts = part.reindex(bins, fill_value=0).to_numpy()
        ax.bar(bins + i * width - 0.4 + width / 2, counts, width=width, label=scenario)
    ax.set_xticks(bins)
    ax.set_xticklabels(
        [f"{2**b:,}" if b >= 0 else f"{2.0**b:g}" for b in bins], rotation=45, fontsize=8
    )
    ax.set_yscale("log")
    ax.set_xlabel("throttle time (ms, power-of-two bins)")
    ax.set_ylabel("throttled requests")
    ax.set_title("Throttle-time distribution", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    name = "throttle_histogram.png"
    fig.savefig(folder / name, dpi=110)
    plt.close(fig)
    return name


_STYLE: Final = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1100px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; }
td:first-child, th:first-child { text-align: left; }
code { background: #f3f3f3; padding: 0 0.2em; }
p.opening { font-size: 1.05em; line-height: 1.5; }
dl.provenance { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dl.provenance dt { font-weight: 600; }
dl.provenance dd { margin: 0; }
"""


def _provenance(result: BacktestResult) -> str:
    """Where the report comes from: inputs, span, quotas, scenarios, target, kquota's
    version and Kafka release, and when it was written, as a definition list."""
    import datetime

    from kquota import __version__

    def utc(ms: int) -> str:
        moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
        return moment.strftime("%Y-%m-%d %H:%M:%S UTC")

    config = result.config
    span = "no request"
    if result.span_ms is not None:
        first, last = result.span_ms
        span = f"{utc(first)} to {utc(last)} ({_duration(float(last - first))})"
    quotas = (
        f"{len(config.entries):,} entities; windows of {config.window.num_samples} samples "
        f"of {config.window.window_ms / 1000:g} s"
        + (f"; quota callback {config.quota_callback}" if config.quota_callback else "")
    )
    release = config.kafka_version or "4.1, the default"
    items = [
        ("traffic", result.traffic or "(given as a table)"),
        ("span", span),
        ("quotas", quotas),
        ("scenarios", f"{', '.join(result.scenarios)}, {result.mode} loop"),
    ]
    if result.target is not None:
        items.append(("target", f"{_share(result.target)} of each entity's requests throttled"))
    written = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    items += [
        ("rules", f"the quota arithmetic of Kafka {release}; kquota {__version__}"),
        ("written", written),
    ]
    esc = html.escape
    rows = "".join(f"<dt>{esc(k)}</dt><dd>{esc(v)}</dd>" for k, v in items)
    return f'<dl class="provenance">{rows}</dl>'


def write_report(result: BacktestResult, out: Path) -> Path:
    """Write ``out/report.html`` and its PNGs (in ``out/report/``); return the HTML path."""
    folder = out / "report"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):
        old.unlink()
    rate_plots = _plot_rates(result, folder)
    histogram = _plot_histogram(result, folder)
    esc = html.escape
    sentences = opening(result, read_entities(out))
    body = [
        "<h1>kquota back-test</h1>",
        f'<p class="opening">{esc(" ".join(sentences))}</p>',
        f"<p>{result.rows_read:,} requests read, {result.rows_valid:,} replayed "
        f"({result.mode} loop) under {len(result.scenarios)} scenario(s): "
        f"{esc(', '.join(result.scenarios))} (quotas scaled by that factor). "
        f"Took {result.seconds:.1f} s.</p>",
    ]
    if result.quarantined:
        items = "".join(f"<li>{n:,} {esc(r)}</li>" for r, n in result.quarantined.items())
        body.append(
            f"<p>{result.rows_quarantined:,} rows were quarantined to "
            f"<code>quarantine/</code>:</p><ul>{items}</ul>"
        )
    body.extend(f"<p>Note: {esc(note)}</p>" for note in result.notes)
    body.append("<h2>What was back-tested</h2>")
    body.append(_provenance(result))
    body.append("<h2>Scenarios</h2>")
    body.append(_html_table(result.totals, _TOTAL_COLUMNS))
    broker = _broker_table(result)
    if broker is not None:
        body.append(f"<h2>{esc(_BROKER_TITLE)}</h2>")
        body.append(
            "<p>The traffic records the throttle each request got "
            "(<code>kafka_throttle_ms</code>: Kafka's request log, or "
            "<code>kquota proxy --capture</code>). <i>Agree</i> is the fraction of requests "
            "throttled in both or in neither. The replay sees only these requests: a broker "
            "whose log misses some, or whose quotas differed, disagrees.</p>"
        )
        body.append(_html_table(broker, _BROKER_COLUMNS))
    body.append(f"<h2>Most throttled sensors ({esc(result.base_scenario)})</h2>")
    if result.top_entities.empty:
        body.append("<p>No request was throttled.</p>")
    else:
        body.append(
            "<p>A sensor is one quota entity on one broker (Kafka's metric tags). Rates are "
            "over the quota's sampled windows; utilization is peak rate / quota.</p>"
        )
        body.append(_html_table(result.top_entities, _ENTITY_COLUMNS))
    if not result.comparison.empty and len(result.scenarios) > 1:
        pivot = result.comparison.pivot_table(
            index=["quota_type", BROKER, "entity"],
            columns="scenario",
            values="throttled_fraction",
            aggfunc="first",
        ).reindex(columns=result.scenarios)
        columns = [("type", "quota_type", ""), ("broker", BROKER, ""), ("entity", "entity", "")]
        columns += [(s, s, "pct") for s in result.scenarios]
        body.append("<h2>What-if: throttled fraction of these sensors per scenario</h2>")
        body.append(_html_table(pivot.reset_index(), columns))
    if rate_plots:
        body.append("<h2>Rate against quota</h2>")
        body.extend(f'<p><img src="report/{n}" alt="{esc(t)}"></p>' for n, t in rate_plots)
    if histogram:
        body.append("<h2>Throttle-time distribution</h2>")
        body.append(f'<p><img src="report/{histogram}" alt="throttle-time distribution"></p>')
    if result.recommendations is not None:
        body.append("<h2>Recommended quotas</h2>")
        if result.recommendations.empty:
            body.append("<p>No entity to recommend a quota for.</p>")
        else:
            body.append(
                "<p>Per entity, across brokers: the smallest quota that keeps the throttled "
                "fraction at or under the target, found by replaying its traffic through "
                "the core (<em>meets target at</em>), and what the recommended quota file "
                "sets (<em>in the file</em>: that with the headroom, where it changes the "
                "quota). Full table: <code>recommendations/entities/</code>; the file: "
                "<code>recommendations/quotas.json</code>, for <code>kquota configs "
                "--import</code> or the next back-test.</p>"
            )
            body.append(_html_table(result.recommendations.head(50), _RECOMMEND_COLUMNS))
    body.append(
        "<h2>Outputs</h2><ul><li><code>requests/</code>: every request once, with every "
        "scenario's throttles in <code>results</code> (<code>kquota.backtest.outputs</code> "
        "reads it back per scenario)</li><li><code>entities/</code>: one row per sensor "
        "and scenario</li></ul>"
    )
    page = (
        '<!doctype html><html><head><meta charset="utf-8"><title>kquota back-test</title>'
        f"<style>{_STYLE}</style></head><body>{''.join(body)}</body></html>\n"
    )
    target = out / "report.html"
    target.write_text(page, encoding="utf-8")
    return target
