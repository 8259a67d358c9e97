"""``kquota traffic describe``: what a request log holds, from one pass over its lines,
nothing written."""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kquota.backtest.requestlog.files import LogOptions
from kquota.backtest.requestlog.lines import _REASON, _Lines, read
from kquota.backtest.requestlog.summary import (
    SHARE_FETCH_BYTES,
    LogSummary,
    _metrics,
    _spark_call,
    _summary,
)
from kquota.traffic_schema import (
    API,
    BROKER,
    BYTES,
    CLIENT,
    TS,
    USER,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


@dataclass
class Description:
    """``kquota traffic describe``: what a request log (or traffic table) holds."""

    summary: LogSummary
    start_ms: int | None
    end_ms: int | None
    brokers: list[str]
    clients: int
    users: int
    apis: dict[str, tuple[int, int]]
    """Per API: (requests, bytes)."""

    def text(self) -> str:
        """The description as the terminal shows it."""
        s = self.summary
        span = "none"
        if self.start_ms is not None and self.end_ms is not None:
            span = (
                f"{_utc(self.start_ms)} to {_utc(self.end_ms)} "
                f"({(self.end_ms - self.start_ms) / 1000:,.3f} s)"
            )
        lines = [
            f"traffic: {s.path}",
            f"files: {s.files:,} read, {len(s.empty_files):,} empty",
            f"lines: {s.lines:,} ({s.rows:,} requests, {s.lines_skipped:,} skipped)",
            f"span: {span}",
            f"brokers: {len(self.brokers):,} ({', '.join(self.brokers[:10])}"
            + (", ..." if len(self.brokers) > 10 else "")
            + ")",
            f"clients: {self.clients:,}",
            f"users: {self.users:,}",
            "APIs:",
        ]
        total = sum(b for _, b in self.apis.values())
        lines += [
            f"  {api:<24} {n:>14,} requests {b:>18,} bytes" for api, (n, b) in self.apis.items()
        ]
        lines.append(f"bytes: {total:,}")
        if s.share_fetches:
            lines.append(f"ShareFetch requests: {s.share_fetches:,} ({SHARE_FETCH_BYTES})")
        if s.throttled_fetches:
            lines.append(
                f"throttled fetches: {s.throttled_fetches:,} (answered empty; the import "
                "sizes them from the next fetch from the same position, else from the "
                "produce lines)"
            )
        if s.skipped:
            lines.append("lines skipped:")
            for reason, count in s.skipped.items():
                lines.append(f"  {count:>14,}  {reason}")
                lines += [f"                  e.g. {e!r}" for e in s.examples.get(reason, [])]
        return "\n".join(lines)


def _utc(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def _describe_apis(lines: _Lines, observation: Any) -> DataFrame:
    """Requests and bytes per API (a null API gathers the skipped lines), with
    :func:`_metrics`, the span, brokers, clients and users observed on the same pass."""
    from pyspark.sql import functions as F

    row = F.col(_REASON).isNull()
    observed = lines.frame.observe(
        observation,
        *_metrics(),
        F.min(F.when(row, F.col(TS))).alias("start"),
        F.max(F.when(row, F.col(TS))).alias("end"),
        F.collect_set(F.when(row, F.col(BROKER))).alias("brokers"),
        F.size(F.collect_set(F.when(row, F.col(CLIENT)))).alias("clients"),
        F.size(F.collect_set(F.when(row, F.col(USER)))).alias("users"),
    )
    return observed.groupBy(F.when(row, F.col(API)).alias(API)).agg(
        F.count_if(row).alias("n"), F.sum(F.when(row, F.col(BYTES))).alias("b")
    )


def describe(spark: SparkSession, path: str, options: LogOptions | None = None) -> Description:
    """What the request log ``path`` holds: requests, span, brokers, clients, users, APIs,
    bytes, and the lines skipped by reason (one pass over the lines, nothing written).

    The per-API counts are the one action (grouped by the API of a row, null for a skipped
    line); everything else is observed on the same pass, so each line is parsed once.
    """
    from pyspark.sql import Observation

    started = time.monotonic()
    lines = read(spark, path, options)
    observation = Observation(f"kquota-request-log-{uuid.uuid4().hex}")
    with _spark_call(path):
        grouped = _describe_apis(lines, observation).collect()
        values = observation.get
        summary = _summary(lines, values)
    apis = sorted(
        ((r[API], int(r["n"]), int(r["b"] or 0)) for r in grouped if r[API] is not None),
        key=lambda a: (-a[1], a[0]),
    )
    summary.seconds = time.monotonic() - started
    return Description(
        summary=summary,
        start_ms=values["start"],
        end_ms=values["end"],
        brokers=sorted(values["brokers"] or [], key=_natural),
        clients=int(values["clients"]),
        users=int(values["users"]),
        apis={api: (n, b) for api, n, b in apis},
    )


def _natural(text: str) -> tuple[Any, ...]:
    """``broker-2`` before ``broker-10``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))
