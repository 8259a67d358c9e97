"""The back-test report: ``DIR/report.html`` with PNG plots, and the terminal summary.

Both open with a few sentences in words (:func:`opening`): who would have been throttled,
how long they would have waited, what the other scenarios and the recommended quotas
change. Everything here works on the small tables a
:class:`~kquota.backtest.options.BacktestResult` holds and on ``DIR/entities/`` (one row
per sensor and scenario; collected aggregates, never the traffic), so it is plain pandas
and matplotlib.

One module a concern: :mod:`.summary` (the sentences and the rankings), :mod:`.tables`
(the tables, their columns and units), :mod:`.plots` (which sensors are plotted and how),
:mod:`.page` (the HTML page) and :mod:`.terminal` (the summary as text), over
:mod:`.units` (numbers in words).
"""

from kquota.backtest.report.page import write_report
from kquota.backtest.report.plots import (
    MAX_POINTS,
    PLOTTED_ENTITIES,
    RatePlot,
    plot_choice,
    rate_over_time,
    rate_plot,
)
from kquota.backtest.report.summary import (
    RANKINGS,
    Ranking,
    opening,
    opening_paragraphs,
    ranked_entities,
    read_entities,
)
from kquota.backtest.report.tables import TOP_ENTITIES, scenario_totals, throttle_histogram
from kquota.backtest.report.terminal import summary_text

__all__ = [
    "MAX_POINTS",
    "PLOTTED_ENTITIES",
    "RANKINGS",
    "TOP_ENTITIES",
    "Ranking",
    "RatePlot",
    "opening",
    "opening_paragraphs",
    "plot_choice",
    "ranked_entities",
    "rate_over_time",
    "rate_plot",
    "read_entities",
    "scenario_totals",
    "summary_text",
    "throttle_histogram",
    "write_report",
]
