"""The report's plots: which sensors get a rate-against-quota plot, what each draws
(the windowed rate, the quota, the throttled windows' marks) and says under it, and the
throttle-time histogram, drawn with matplotlib into PNGs."""

from __future__ import annotations

import datetime
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from kquota.backtest.frames import BROKER, SENSOR_CLIENT, SENSOR_USER
from kquota.backtest.report import units

if TYPE_CHECKING:
    from kquota.backtest.options import BacktestResult
    from kquota.config import Window

PLOTTED_ENTITIES: Final = 4
"""How many of the most throttled sensors get a rate-against-quota plot."""
MAX_POINTS: Final = 2000
"""Points per plotted line (peaks are kept when a series is longer)."""

_THROTTLED_MARK: Final = (".", 3, "throttled")
"""How a rate plot marks a throttled window: marker, size and legend."""
_THROTTLED_MARKS: Final = {
    # a throttled fetch is answered empty: its mark sits on the quota, not on a rate
    "fetch": ("|", 6, "throttled (empty response, bytes not counted)"),
}
"""The quota types whose marks differ from :data:`_THROTTLED_MARK`."""


def rate_over_time(
    windows: Sequence[int] | np.ndarray, amounts: Sequence[float] | np.ndarray, num_samples: int
) -> tuple[np.ndarray, np.ndarray]:
    """The windowed rate at the end of every window from the first to the last.

    ``windows`` are window indices (``floor(t / window_ms)``) that had usage and
    ``amounts`` the usage per window in the quota's unit. The rate at window ``w`` is
    the usage of ``w`` and the ``num_samples - 2`` windows before it over their length
    (per window; multiply by ``1000 / window_ms`` for per second), as in
    :func:`kquota.backtest.frames.peak_rates`. Returns ``(window indices, rate per window)``.
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


def plot_choice(candidates: pd.DataFrame, limit: int = PLOTTED_ENTITIES) -> pd.DataFrame:
    """Which sensors get a rate plot: at most ``limit`` of ``candidates`` (throttled sensors,
    most throttle time first), chosen to cover the quota types present, then as many
    entities as can be, each a different one where possible.

    First a sensor of each quota type (the types in the order of their most throttled
    sensor), of as many different entities as can be, the most throttled where that
    leaves a choice; then the next sensors of entities not yet chosen; then the rest in
    order."""
    if candidates.empty:
        return candidates
    rows = candidates.reset_index(drop=True)
    entity = rows["entity"].astype(str).tolist()
    kinds = rows["quota_type"].astype(str).tolist()
    # per type, its most throttled sensor of each of its first entities (a few types and
    # a few entities each: every combination is tried)
    options = []
    for quota_type in list(dict.fromkeys(kinds))[:limit]:
        firsts: dict[str, int] = {}
        for i, kind in enumerate(kinds):
            if kind == quota_type:
                firsts.setdefault(entity[i], i)
        options.append(list(firsts.values())[:limit])
    best = max(
        itertools.product(*options),
        key=lambda combo: (len({entity[i] for i in combo}), tuple(-i for i in combo)),
    )
    chosen = list(best)
    seen = {entity[i] for i in chosen}
    for i in range(len(rows)):
        if len(chosen) < limit and i not in chosen and entity[i] not in seen:
            chosen.append(i)
            seen.add(entity[i])
    chosen += [i for i in range(len(rows)) if i not in chosen][: limit - len(chosen)]
    return rows.loc[chosen].reset_index(drop=True)


def _caption(quota_type: str, quota: str | None, window: Window, marked: bool) -> str:
    """What a rate plot's marks mean, in words (under the plot)."""
    n, seconds = window.num_samples, window.window_ms / 1000
    span = max(n - 1, 1)
    line = f"The dashed red line is the quota, {quota} on this broker. " if quota else ""
    curve = (
        f"The blue curve is the rate this plot computes at the end of each {seconds:g} s "
        f"window: the usage of the last {span} whole windows over their {span * seconds:g} s"
        " (where there are more windows than points, a point is the highest of the windows"
        " it stands for). "
    )
    if quota_type == "fetch":
        marks = (
            "A red tick on the quota line is a window with a throttled fetch: Kafka answers "
            "it empty and does not count its bytes, so that window has no rate (a gap in the "
            "curve) rather than a rate of 0."
        )
    else:
        marks = (
            "A red dot is a window in which a request was throttled, drawn at the curve's "
            "value for that window. Kafka decided at the request, on the usage of its "
            "samples up to that moment (the window in progress included; its samples start "
            "at requests, not on the plot's whole seconds) over the time since the oldest "
            f"began, at least {span * seconds:g} s: another stretch than the curve's, which "
            "averages whole windows up to the window's end. So the rate Kafka measured can "
            "be over the quota while the curve is under it: a dot under the line is that "
            "difference in averaging."
        )
    return line + curve + (marks if marked else "No request of the plotted span was throttled.")


def plot_rates(result: BacktestResult, folder: Path) -> list[tuple[str, str, str]]:
    """Draw the chosen sensors' rate-against-quota plots into ``folder``; return each
    PNG's name, title and caption."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    window = result.config.window
    plots = []
    chosen = result.plotted if result.plotted is not None else plot_choice(result.top_entities)
    for number, record in enumerate(chosen.head(PLOTTED_ENTITIES).to_dict("records")):
        key = "|".join(str(record[k]) for k in ("quota_type", BROKER, SENSOR_USER, SENSOR_CLIENT))
        series = result.rate_series.get(key)
        if series is None or series.empty:
            continue
        quota_type = str(record["quota_type"])
        quota = record.get("quota")
        known = quota is not None and not math.isnan(quota)
        plot = rate_plot(series, window, quota_type, float(quota) if known else None)
        # one unit for the curve and the quota: the larger of them picks kB/s or MB/s
        top = np.fmax.reduce(np.append(plot.rate, float(quota) if known else np.nan))
        unit, size = units.rate_unit(quota_type, float(top) if np.isfinite(top) else 0.0)
        fig, ax = plt.subplots(figsize=(9, 3.4))
        ax.plot(plot.times, plot.rate / size, lw=0.8, color="tab:blue", label="rate")
        quota_words = units.amount(float(quota), quota_type) if known else None
        if known:
            ax.axhline(
                float(quota) / size, color="tab:red", lw=1, ls="--", label=f"quota {quota_words}"
            )
        if len(plot.mark_times):
            marker, ms, label = _THROTTLED_MARKS.get(quota_type, _THROTTLED_MARK)
            ax.plot(
                plot.mark_times, plot.mark_rates / size, marker, color="tab:red", ms=ms, label=label
            )
        kind = units.TYPE_WORDS.get(quota_type, quota_type)
        title = f"{kind} · {record['entity']} · {record[BROKER]}"
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(f"rate ({unit})" if unit else "rate")
        ax.set_xlabel("time (UTC)")
        # the times are UTC (epoch ms); matplotlib would show them in no named zone
        locator = mdates.AutoDateLocator(tz=datetime.UTC, minticks=4, maxticks=9)  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_locator(locator)
        formatter = mdates.ConciseDateFormatter(locator, tz=datetime.UTC)  # type: ignore[no-untyped-call]
        ax.xaxis.set_major_formatter(formatter)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.4g}"))
        # headroom above the rate and the quota, for the legend not to hide either
        if np.isfinite(top) and top > 0:
            ax.set_ylim(0, 1.3 * top / size)
        ax.legend(loc="upper right", fontsize=8, ncol=3)
        fig.tight_layout()
        name = f"rate_{number + 1}.png"
        fig.savefig(folder / name, dpi=110)
        plt.close(fig)
        caption = _caption(quota_type, quota_words, window, bool(len(plot.mark_times)))
        plots.append((name, title, caption))
    return plots


def plot_histogram(result: BacktestResult, folder: Path) -> str | None:
    """Draw the throttle-time histogram into ``folder``; return its PNG's name (``None``
    when no request was throttled)."""
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
    # a bin's label is its lower bound, 2**b ms, in the unit that suits it
    ax.set_xticklabels([units.duration(2.0**b) for b in bins], rotation=45, fontsize=8)
    ax.set_yscale("log")
    ax.set_xlabel("throttle time (power-of-two bins, from the labelled time to twice it)")
    ax.set_ylabel("throttled requests")
    ax.set_title("Throttle-time distribution", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    name = "throttle_histogram.png"
    fig.savefig(folder / name, dpi=110)
    plt.close(fig)
    return name
