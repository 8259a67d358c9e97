"""The back-test report: ``DIR/report.html`` with PNG plots, and the terminal summary.

Everything here works on the small tables a :class:`~kquota.backtest.options.BacktestResult`
holds (collected aggregates, never the traffic), so it is plain pandas and matplotlib.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from kquota.backtest.kernel import BROKER, SENSOR_CLIENT, SENSOR_USER

if TYPE_CHECKING:
    from kquota.backtest.options import BacktestResult

__all__ = [
    "PLOTTED_ENTITIES",
    "TOP_ENTITIES",
    "rate_over_time",
    "scenario_totals",
    "summary_text",
    "throttle_histogram",
    "write_report",
]

TOP_ENTITIES: Final = 10
"""How many of the most throttled sensors the report lists."""
PLOTTED_ENTITIES: Final = 4
"""How many of them get a rate-against-quota plot."""
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


def _peaks(x: np.ndarray, y: np.ndarray, points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most ``points`` points, keeping each chunk's maximum."""
    if len(x) <= points:
        return x, y
    chunk = math.ceil(len(x) / points)
    pad = (-len(y)) % chunk
    y_pad = np.concatenate((y, np.full(pad, -np.inf))).reshape(-1, chunk)
    return x[::chunk], y_pad.max(axis=1)


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
    ("recommended", "recommended_quota", ""),
    ("throttled then", "recommended_throttled_fraction", "pct"),
)


def _rows(frame: pd.DataFrame, columns: Sequence[tuple[str, str, str]]) -> list[list[str]]:
    return [
        [_fmt(record.get(name), kind) for _, name, kind in columns]
        for record in frame.to_dict("records")
    ]


def summary_text(result: BacktestResult) -> str:
    """The terminal summary: scenarios, the most throttled entities, recommendations."""
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
        windows, per_window = rate_over_time(series["window"], series["amount"], window.num_samples)
        rate = per_window * (1000.0 / window.window_ms)
        throttled = series.loc[series["throttled"] > 0, "window"].to_numpy(dtype=np.int64)
        zoomed = _zoom(windows, throttled, window.window_ms)
        windows, rate = windows[zoomed], rate[zoomed]
        times = pd.to_datetime(windows * window.window_ms, unit="ms")
        x, y = _peaks(np.asarray(times), rate)
        fig, ax = plt.subplots(figsize=(9, 3.2))
        ax.plot(x, y, lw=0.8, label="windowed rate")
        quota = record.get("quota")
        if quota is not None and not math.isnan(quota):
            ax.axhline(quota, color="tab:red", lw=1, ls="--", label=f"quota {_fmt(quota)}")
        marks = np.isin(windows, throttled)
        if marks.any():
            ax.plot(
                np.asarray(times)[marks], rate[marks], ".", color="tab:red", ms=3, label="throttled"
            )
        unit = _UNIT[str(record["quota_type"])]
        title = f"{record['quota_type']} · {record['entity']} · broker {record[BROKER]}"
        ax.set_title(title, fontsize=10)
        ax.set_ylabel(unit)
        ax.legend(loc="upper right", fontsize=8)
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
"""


def write_report(result: BacktestResult, out: Path) -> Path:
    """Write ``out/report.html`` and its PNGs (in ``out/report/``); return the HTML path."""
    folder = out / "report"
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):
        old.unlink()
    rate_plots = _plot_rates(result, folder)
    histogram = _plot_histogram(result, folder)
    esc = html.escape
    body = [
        "<h1>kquota back-test</h1>",
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
                "the core. Full table: <code>recommendations/</code>.</p>"
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
