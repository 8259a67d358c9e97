"""The terminal summary ``kquota backtest`` prints: the opening paragraphs, the entities
that matter and the report's tables, as text."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING, Final

from kquota.backtest.report.summary import (
    opening_paragraphs,
    ranked_columns,
    ranked_entities,
    read_entities,
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
    text_table,
    unserved_of,
)

if TYPE_CHECKING:
    from kquota.backtest.options import BacktestResult

WIDTH: Final = 100
"""The terminal summary's sentences are wrapped at this width."""


def summary_text(result: BacktestResult) -> str:
    """The terminal summary: the opening paragraphs (:func:`opening_paragraphs`, from
    ``DIR/entities/`` when it is a local folder), the entities that matter
    (:func:`ranked_entities`), scenarios, the most throttled sensors, recommendations."""
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
    entities = read_entities(result.out)
    for paragraph in opening_paragraphs(result, entities):
        parts.append("")
        parts.append(textwrap.fill(" ".join(paragraph), WIDTH))
    for ranking, frame in ranked_entities(result, entities):
        parts.append("")
        parts.append(f"{ranking.title} ({result.base_scenario}):")
        parts.append(text_table(*columns(frame, ranked_columns(ranking))))
    parts.append("")
    parts.append(text_table(*columns(result.totals, TOTAL_COLUMNS)))
    broker = broker_table(result)
    if broker is not None:
        parts.append("")
        parts.append(f"{BROKER_TITLE}:")
        parts.append(text_table(*columns(broker, BROKER_COLUMNS)))
    if not result.top_entities.empty:
        parts.append("")
        parts.append(f"Most throttled sensors ({result.base_scenario}):")
        parts.append(text_table(*columns(result.top_entities, ENTITY_COLUMNS)))
    unserved = unserved_of(result)
    if unserved is not None and not unserved.empty:
        parts.append("")
        parts.append(f"Demand not served, by client ({result.base_scenario}):")
        parts.append(text_table(*columns(unserved.head(TOP_ENTITIES), UNSERVED_COLUMNS)))
    if result.recommendations is not None and not result.recommendations.empty:
        shown = result.recommendations.head(TOP_ENTITIES)
        parts.append("")
        parts.append(
            f"Recommended quotas ({len(result.recommendations):,} entities, first {len(shown)}):"
        )
        parts.append(text_table(*columns(shown, RECOMMEND_COLUMNS)))
    return "\n".join(parts)
