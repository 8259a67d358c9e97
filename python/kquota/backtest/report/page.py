"""The HTML page: ``DIR/report.html``, its summary first (the opening paragraphs and the
entities that matter), then the provenance, the tables and the plots."""

from __future__ import annotations

import datetime
import html
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pandas as pd  # type: ignore[import-untyped]

from kquota.backtest.frames import BROKER
from kquota.backtest.report import units
from kquota.backtest.report.plots import plot_histogram, plot_rates
from kquota.backtest.report.summary import (
    Ranking,
    limits_text,
    opening_paragraphs,
    ranked_columns,
    ranked_entities,
    read_entities,
    recommendation_paragraphs,
)
from kquota.backtest.report.tables import (
    BROKER_COLUMNS,
    BROKER_TITLE,
    ENTITY_COLUMNS,
    RECOMMEND_COLUMNS,
    TOP_ENTITIES,
    TOTAL_COLUMNS,
    UNSERVED_COLUMNS,
    broker_table,
    columns,
    html_table,
    unserved_of,
)

if TYPE_CHECKING:
    from kquota.backtest.options import BacktestResult


def _ranked_table(ranked: list[tuple[Ranking, pd.DataFrame]]) -> str:
    """The summary's table: a group of rows per ranking, each with its own header (the
    units of its columns follow its values)."""
    esc = html.escape
    groups = []
    for ranking, frame in ranked:
        header, rows = columns(frame, ranked_columns(ranking))
        title = f'<tr class="ranking"><th colspan="{len(header)}">{esc(ranking.title)}</th></tr>'
        head = "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr>"
        body = "".join(
            "<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in row) + "</tr>" for row in rows
        )
        groups.append(f"<tbody>{title}{head}{body}</tbody>")
    return f'<div class="table"><table class="ranked">{"".join(groups)}</table></div>'


_STYLE: Final = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; padding: 0 1em; color: #222;
  max-width: 1100px; line-height: 1.45; }
h1 { font-size: 1.6em; margin: 0 0 0.4em; }
h2 { font-size: 1.25em; margin: 1.4em 0 0.5em; }
div.table { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; }
td:first-child, th:first-child { text-align: left; }
table.ranked tr.ranking th { text-align: left; background: #e4e9f2; }
code { background: #f3f3f3; padding: 0 0.2em; }
section.summary p { margin: 0.35em 0; }
section.summary h2 { margin-top: 0.9em; }
section.summary p.note { font-size: 0.9em; color: #444; }
section.summary table { margin-bottom: 0.6em; }
figure { margin: 1em 0 1.8em; }
figure img { max-width: 100%; height: auto; display: block; }
figcaption { font-size: 0.9em; color: #444; max-width: 60em; }
dl.provenance { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 0.2em 1em; }
dl.provenance dt { font-weight: 600; }
dl.provenance dd { margin: 0; overflow-wrap: anywhere; }
@media (max-width: 900px) {
  body { padding: 0 0.6em; }
  table { font-size: 0.78em; }
  th, td { padding: 0.2em 0.3em; }
}
"""


def _provenance(result: BacktestResult) -> str:
    """Where the report comes from: inputs, span, quotas, scenarios, target, kquota's
    version and Kafka release, and when it was written, as a definition list."""
    from kquota import __version__

    def utc(ms: int) -> str:
        moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
        return moment.strftime("%Y-%m-%d %H:%M:%S UTC")

    config = result.config
    span = "no request"
    if result.span_ms is not None:
        first, last = result.span_ms
        span = f"{utc(first)} to {utc(last)} ({units.duration(float(last - first))})"
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
    if result.mode == "closed":
        limits = result.clients
        items.append(
            (
                "clients",
                "unbounded (every request held however late)"
                if limits is None
                else limits_text(limits),
            )
        )
    if result.target is not None:
        items.append(
            ("target", f"{units.share(result.target)} of each entity's requests throttled")
        )
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
    rate_plots = plot_rates(result, folder)
    histogram = plot_histogram(result, folder)
    esc = html.escape
    entities = read_entities(out)
    paragraphs = opening_paragraphs(result, entities)
    # the first paragraph is the opening (its class marks where the summary starts)
    marks = ['<p class="opening">', *["<p>"] * (len(paragraphs) - 1)]
    texts = [
        f"{mark}{esc(' '.join(sentences))}</p>"
        for mark, sentences in zip(marks, paragraphs, strict=True)
    ]
    # the findings, the entities they name, then what the recommendations change: the
    # table stays on the first screen
    split = len(texts) - recommendation_paragraphs(result)
    body = [
        "<h1>kquota back-test</h1>",
        '<section class="summary">',
        *texts[:split],
    ]
    ranked = ranked_entities(result, entities)
    if ranked:
        body.append(
            f'<h2>The entities that matter ({esc(result.base_scenario)})</h2><p class="note">'
            "Per entity and quota type, across brokers: the quota (per broker), its requests "
            "throttled and their share of its requests, and the longest throttle.</p>"
        )
        body.append(_ranked_table(ranked))
    body.extend(texts[split:])
    body.append("</section>")
    unserved = unserved_of(result)
    if unserved is not None and not unserved.empty:
        body.append(f"<h2>Demand not served ({esc(result.base_scenario)})</h2>")
        body.append(
            "<p>Clients that honour throttles hold what they cannot send yet, within "
            "Kafka's client limits: a produce that finds the buffer "
            "(<code>buffer.memory</code>) full fails, and a request still waiting when its "
            "timeout (<code>delivery.timeout.ms</code>, <code>default.api.timeout.ms</code>) "
            "runs out is given up. Per client, most bytes first; every scenario's in "
            "<code>requests/</code> (<code>unserved</code>).</p>"
        )
        body.append(html_table(unserved.head(TOP_ENTITIES), UNSERVED_COLUMNS))
    body.append(
        f"<p>{result.rows_read:,} requests read, {result.rows_valid:,} replayed "
        f"({result.mode} loop) under {len(result.scenarios)} scenario(s): "
        f"{esc(', '.join(result.scenarios))} (quotas scaled by that factor). "
        f"Took {result.seconds:.1f} s.</p>"
    )
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
    body.append(html_table(result.totals, TOTAL_COLUMNS))
    broker = broker_table(result)
    if broker is not None:
        body.append(f"<h2>{esc(BROKER_TITLE)}</h2>")
        body.append(
            "<p>The traffic records the throttle each request got "
            "(<code>kafka_throttle_ms</code>: Kafka's request log, or "
            "<code>kquota proxy --capture</code>). <i>Agree</i> is the fraction of requests "
            "throttled in both or in neither. The replay sees only these requests: a broker "
            "whose log misses some, or whose quotas differed, disagrees.</p>"
        )
        body.append(html_table(broker, BROKER_COLUMNS))
    body.append(f"<h2>Most throttled sensors ({esc(result.base_scenario)})</h2>")
    if result.top_entities.empty:
        body.append("<p>No request was throttled.</p>")
    else:
        body.append(
            "<p>A sensor is one quota entity on one broker (Kafka's metric tags). Rates are "
            "over the quota's sampled windows; utilization is peak rate / quota.</p>"
        )
        body.append(html_table(result.top_entities, ENTITY_COLUMNS))
    if not result.comparison.empty and len(result.scenarios) > 1:
        pivot = result.comparison.pivot_table(
            index=["quota_type", BROKER, "entity"],
            columns="scenario",
            values="throttled_fraction",
            aggfunc="first",
        ).reindex(columns=result.scenarios)
        specs = [("type", "quota_type", ""), ("broker", BROKER, ""), ("entity", "entity", "")]
        specs += [(s, s, "pct") for s in result.scenarios]
        body.append("<h2>What-if: throttled fraction of these sensors per scenario</h2>")
        body.append(html_table(pivot.reset_index(), specs))
    if rate_plots:
        body.append("<h2>Rate against quota</h2>")
        body.extend(
            f'<figure><img src="report/{n}" alt="{esc(t)}" width="990" height="374">'
            f"<figcaption>{esc(c)}</figcaption></figure>"
            for n, t, c in rate_plots
        )
    if histogram:
        body.append("<h2>Throttle-time distribution</h2>")
        body.append(
            f'<figure><img src="report/{histogram}" alt="throttle-time distribution" '
            'width="990" height="352"><figcaption>Throttled requests per throttle time, per '
            "scenario (a logarithmic scale: each step up is ten times as many).</figcaption>"
            "</figure>"
        )
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
            body.append(html_table(result.recommendations.head(50), RECOMMEND_COLUMNS))
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
