"""What a back-test takes and what it gives: :class:`BacktestOptions`, :class:`BacktestResult`
and the names of the columns the back-test adds to every request.

Nothing here imports Spark or the command line: the report (:mod:`kquota.backtest.report`)
and the job (:mod:`kquota.backtest.job`) both build on this module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import numpy as np
import pandas as pd  # type: ignore[import-untyped]

from kquota.backtest import requestlog
from kquota.backtest.frames import (
    ADDED_LATENCY,
    FETCH_THROTTLE,
    MUTATION_RESULTS,
    PRODUCE_THROTTLE,
    REQUEST_THROTTLE,
    SENSOR_CLIENT,
    SENSOR_USER,
    SENT,
    THROTTLE,
    UNSERVED,
    ClientLimits,
    ReplayMode,
)
from kquota.config import QuotaConfig
from kquota.exceptions import TrafficError

__all__ = [
    "OUTPUT_COLUMNS",
    "REASON",
    "REQUEST_SENSOR_CLIENT",
    "REQUEST_SENSOR_USER",
    "RESULT_COLUMNS",
    "SCENARIO",
    "BacktestOptions",
    "BacktestResult",
    "PartitionBy",
    "scenario_label",
]

SCENARIO: Final = "scenario"
"""The what-if scenario of a result row: ``x<scale>`` (``x1`` is the configuration as given)."""
REQUEST_SENSOR_USER: Final = "request_sensor_user"
REQUEST_SENSOR_CLIENT: Final = "request_sensor_client_id"
REASON: Final = "reason"
"""Why a quarantined row was refused."""

RESULT_COLUMNS: Final = (
    SCENARIO,
    PRODUCE_THROTTLE,
    FETCH_THROTTLE,
    REQUEST_THROTTLE,
    THROTTLE,
    SENT,
    ADDED_LATENCY,
    UNSERVED,
)
"""The per-request results of a replay, in output order."""

OUTPUT_COLUMNS: Final = (
    *RESULT_COLUMNS,
    SENSOR_USER,
    SENSOR_CLIENT,
    REQUEST_SENSOR_USER,
    REQUEST_SENSOR_CLIENT,
    *MUTATION_RESULTS,
)
"""Columns the back-test adds to every request (they must not be in the input)."""

PartitionBy = Literal["broker", "sensor"]
"""How open-loop replay splits the work: whole brokers (one pass over the traffic), or
sensors (hash of the sensor tags: more parallel, a second pass when request quotas apply)."""


@dataclass(frozen=True)
class BacktestOptions:
    """What to back-test and where the results go."""

    traffic: str
    quotas: QuotaConfig
    out: str
    mode: ReplayMode = "open"
    scales: tuple[float, ...] = (1.0,)
    recommend: bool = False
    target: float = 0.01
    headroom: float = 0.2
    """With ``recommend``: the recommended file's quotas are the demand that meets ``target``
    plus this fraction."""
    lower: bool = False
    """With ``recommend``: the recommended file may lower quotas (else only raises them)."""
    add_quotas: bool = False
    """With ``recommend``: entities without a quota get one in the recommended file."""
    strict: bool = False
    input_format: str = "auto"
    buckets: int | None = None
    report: bool = True
    partition: PartitionBy = "broker"
    log: requestlog.LogOptions = field(default_factory=requestlog.LogOptions)
    """How to read Kafka's request log (``input_format`` ``kafka-request-log``)."""
    clients: ClientLimits | None = field(default_factory=ClientLimits)
    """Closed loop: what bounds each client (Kafka's Java client defaults unless given);
    ``None``: unbounded clients, whose later requests shift by what they waited."""

    def __post_init__(self) -> None:
        if self.mode not in ("open", "closed"):
            raise TrafficError(f"invalid mode {self.mode!r}: expected 'open' or 'closed'")
        if not self.scales or any(not (s > 0 and np.isfinite(s)) for s in self.scales):
            raise TrafficError(f"invalid scales {self.scales!r}: expected numbers > 0")
        if len(set(self.scales)) != len(self.scales):
            raise TrafficError(f"invalid scales {self.scales!r}: each scale once")
        if not 0.0 <= self.target < 1.0:
            raise TrafficError(f"invalid target {self.target!r}: expected a fraction in [0, 1)")
        if not (0.0 <= self.headroom <= 10.0):
            raise TrafficError(
                f"invalid headroom {self.headroom!r}: expected a fraction from 0 to 10, e.g. 0.2"
            )
        if self.input_format not in ("auto", "parquet", "csv", requestlog.FORMAT):
            raise TrafficError(
                f"invalid format {self.input_format!r}: expected auto, parquet, csv or "
                f"{requestlog.FORMAT}"
            )
        if self.partition not in ("broker", "sensor"):
            raise TrafficError(
                f"invalid partition {self.partition!r}: expected 'broker' or 'sensor'"
            )
        if self.buckets is not None and self.buckets < 1:
            raise TrafficError(f"invalid buckets {self.buckets!r}: expected a number >= 1")

    @property
    def scenarios(self) -> list[str]:
        """Scenario labels, one per scale: ``x0.5``, ``x1``, ``x2``."""
        return [scenario_label(s) for s in self.scales]

    @property
    def base_index(self) -> int:
        """The scenario recommendations and the report use: ``x1`` if present, else the first."""
        return self.scales.index(1.0) if 1.0 in self.scales else 0


def scenario_label(scale: float) -> str:
    """``x0.5``, ``x1``, ``x2``: the scenario of a scaled configuration."""
    return f"x{scale:g}"


@dataclass
class RecommendedFile:
    """The quota file made from the recommendations (``DIR/recommendations/quotas.json``)
    and what it gives: the same traffic back-tested with it."""

    config: QuotaConfig
    path: str
    headroom: float
    lower: bool
    add_quotas: bool
    totals: pd.DataFrame
    """The back-test of the file: :attr:`BacktestResult.totals` of its one scenario."""


@dataclass
class BacktestResult:
    """What a run produced: counts, output paths and the small tables for the report."""

    rows_read: int
    rows_valid: int
    quarantined: dict[str, int]
    out: str
    mode: ReplayMode
    scenarios: list[str]
    base_scenario: str
    totals: pd.DataFrame
    top_entities: pd.DataFrame
    comparison: pd.DataFrame
    histogram: pd.DataFrame
    rate_series: dict[str, pd.DataFrame]
    recommendations: pd.DataFrame | None
    config: QuotaConfig
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    report: Path | None = None
    broker: pd.DataFrame | None = None
    """What the broker did beside the replay, per scenario, when the traffic has the
    throttle each request got (see :func:`kquota.backtest.summaries.broker_comparison`)."""
    worker_peak_rss: int | None = None
    """The largest peak resident set (bytes, Linux ``VmHWM``) of the Python workers that
    replayed or recommended (by-broker and closed-loop replays, recommendations); ``None``
    when unknown."""
    recommended: RecommendedFile | None = None
    """With ``recommend``: the quota file to apply and its own back-test."""
    traffic: str = ""
    """The traffic the run read (``--traffic``)."""
    span_ms: tuple[int, int] | None = None
    """The first and last request's time (epoch ms, UTC), ``None`` with no request."""
    target: float | None = None
    """With ``recommend``: the throttled fraction the recommendations meet."""
    clients: ClientLimits | None = None
    """Closed loop: the bounded clients' limits (``None``: open loop, or unbounded)."""
    unserved: pd.DataFrame | None = None
    """Closed loop with bounded clients: the requests they could not have served, per
    scenario and client (:data:`~kquota.backtest.tally.UNSERVED_COLUMNS`), most bytes
    first; empty when every request was served."""
    plotted: pd.DataFrame | None = None
    """The sensors the report plots (:func:`kquota.backtest.report.plot_choice`), in rows
    like those of :attr:`top_entities`; ``None``: chosen from :attr:`top_entities`."""

    @property
    def rows_quarantined(self) -> int:
        """How many input rows were refused."""
        return sum(self.quarantined.values())
