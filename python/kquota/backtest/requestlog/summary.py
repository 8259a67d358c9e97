"""What reading a log found (:class:`LogSummary`): lines, rows, and the lines skipped by
reason with their first examples, aggregated on the same pass that reads the rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from kquota.backtest.frames import SEQ_COLUMNS
from kquota.backtest.requestlog.files import _LOCAL_SCHEME
from kquota.backtest.requestlog.lines import (
    _EXAMPLE,
    _PLAIN,
    _POSITION,
    _REASON,
    _SHARE,
    FILE_RANK_SHIFT,
    MAX_LINE_BYTES,
    REASONS,
    TOO_LONG,
    _controller_line,
    _file_key,
    _Lines,
)
from kquota.exceptions import TrafficError
from kquota.traffic_schema import KAFKA_THROTTLE, STRICT

if TYPE_CHECKING:
    from pyspark.sql import Column


EXAMPLES: Final = 5
"""Examples kept per reason."""
UNKNOWN_COUNT: Final = (
    "partition count of a deleted or grown topic unknown (no earlier CreateTopics, "
    "CreatePartitions or Metadata line for it)"
)
"""Why a mutation request has no :data:`PARTITIONS` (it still gives a row)."""
SHARE_FETCH_BYTES: Final = (
    "ShareFetch bytes count against Kafka's fetch byte quota, but the log does not give "
    "their size: imported with 0 bytes, so fetch-quota usage is undercounted"
)
"""What the summary says of ShareFetch requests (:attr:`LogSummary.share_fetches`)."""


@dataclass
class LogSummary:
    """What reading the log found: lines, rows, and lines skipped by reason."""

    path: str
    files: int
    empty_files: tuple[str, ...]
    lines: int
    rows: int
    skipped: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    seconds: float = 0.0
    mutations: int = 0
    """CreateTopics, CreatePartitions and DeleteTopics requests read."""
    unknown_counts: int = 0
    """Of those, requests whose partition count is unknown (a DeleteTopics or CreatePartitions
    of a topic no earlier CreateTopics, CreatePartitions or Metadata line gave the count of):
    imported without :data:`PARTITIONS`, so not replayed on the mutation quota."""
    unknown_topics: list[str] = field(default_factory=list)
    """Up to :data:`EXAMPLES` of the topics whose count was unknown."""
    share_fetches: int = 0
    """ShareFetch requests read (rows with 0 bytes): their fetch bytes are not in the log
    (:data:`SHARE_FETCH_BYTES`)."""
    controller_lines: int = 0
    """Controllers' lines of forwarded CreateTopics, CreatePartitions and DeleteTopics
    requests (skipped as :data:`~kquota.backtest.requestlog.lines.FORWARDED`)."""
    controller_timed: int = 0
    """Mutation requests timed by their controller's line (when the controller recorded
    them) rather than by the broker's."""
    throttled_fetches: int = 0
    """Consumer fetches the broker throttled: answered empty, so the line has no size."""
    rebuilt_fetches: int = 0
    """Of those, the ones whose size was rebuilt from a later fetch from the same position
    (:func:`~kquota.backtest.requestlog.import_job.fetch_sizes`)."""
    bounded_fetches: int = 0
    """Of the others, the ones sized from what the produce lines show their partitions held
    (:func:`~kquota.backtest.requestlog.import_job.fetch_bounds`); the rest are imported
    with 0 bytes, as logged (:meth:`fetch_note`)."""

    @property
    def lines_skipped(self) -> int:
        return sum(self.skipped.values())

    def notes(self) -> list[str]:
        """One line per skip reason with its count and first example (for the report)."""
        out = [
            f"request log {self.path}: {self.lines:,} lines in {self.files:,} file(s), "
            f"{self.rows:,} requests, {self.lines_skipped:,} lines skipped"
            + (f", {len(self.empty_files):,} empty file(s)" if self.empty_files else "")
        ]
        for reason, count in self.skipped.items():
            example = self.examples.get(reason, [""])[0]
            out.append(f"skipped {count:,} line(s): {reason}, e.g. {example!r}")
        if self.share_fetches:
            out.append(f"{self.share_fetches:,} ShareFetch request(s): {SHARE_FETCH_BYTES}")
        if self.throttled_fetches:
            out.append(self.fetch_note())
        if self.mutations:
            out.append(self.controller_note())
        if self.unknown_counts:
            topics = ", ".join(repr(t) for t in self.unknown_topics)
            out.append(
                f"{self.unknown_counts:,} of {self.mutations:,} mutation request(s) not replayed "
                f"on the controller-mutation quota: {UNKNOWN_COUNT} (e.g. {topics})"
            )
        return out

    def fetch_note(self) -> str:
        """What the import did with the throttled fetches' sizes, in one sentence."""
        unbounded = self.throttled_fetches - self.rebuilt_fetches - self.bounded_fetches
        return (
            f"{self.throttled_fetches:,} throttled fetch(es), answered empty by the broker: "
            f"{self.rebuilt_fetches:,} sized as the connection's next unthrottled fetch from "
            "the same partitions and offsets (what the broker would have sent, plus what "
            f"arrived meanwhile), {self.bounded_fetches:,} with no such fetch sized from the "
            "produce lines (what the partitions held from the fetch offsets on, read within "
            f"the fetch's limits), {unbounded:,} that neither sizes kept at 0 bytes, as "
            "logged"
        )

    def controller_note(self) -> str:
        """How the mutation requests were timed, in one sentence."""
        return (
            f"{self.controller_timed:,} of {self.mutations:,} mutation request(s) timed by "
            "their controller's line (when the controller recorded them), the others by the "
            "broker's, later by the forwarding and the metadata commit"
        )


def _metrics() -> list[Column]:
    """Aggregates over classified lines: lines, rows, and per reason its count and the first
    :data:`EXAMPLES` examples in input order (bounded: ``min_by`` keeps only ``k``)."""
    from pyspark.sql import functions as F

    reason = F.col(_REASON)
    metrics = [
        F.count(F.lit(1)).alias("lines"),
        F.count_if(reason.isNull()).alias("rows"),
        # files by their rank in the input (see lines.read), numbers being cheaper to
        # gather than names
        F.collect_set(_rank()).alias("files_with_lines"),
        F.collect_set(F.when(reason.isNull(), _rank())).alias("files_with_rows"),
        F.sum(F.col(_PLAIN)).alias("plain_bytes"),
        F.count_if(reason.isNull() & F.col(_SHARE)).alias("share_fetches"),
        F.count_if(
            reason.isNull() & F.col(_POSITION).isNotNull() & (F.col(KAFKA_THROTTLE) > 0)
        ).alias("throttled_fetches"),
        F.count_if(reason.isNull() & F.col(STRICT).isNotNull()).alias("mutations"),
        F.count_if(_controller_line()).alias("controller_lines"),
    ]
    for i, name in enumerate(REASONS):
        hit = reason == name
        metrics.append(F.count_if(hit).alias(f"n{i}"))
        order = F.when(hit, F.struct(*SEQ_COLUMNS))
        metrics.append(F.min_by(F.col(_EXAMPLE), order, EXAMPLES).alias(f"e{i}"))
    return metrics


def _rank() -> Column:
    """The rank of a line's file among the files read, from its position column."""
    from pyspark.sql import functions as F

    return F.shiftright(F.col(SEQ_COLUMNS[0]), FILE_RANK_SHIFT)


def _summary(lines: _Lines, values: dict[str, Any]) -> LogSummary:
    """The :class:`LogSummary` of :func:`_metrics`' values; raises
    :class:`~kquota.exceptions.TrafficError` naming the files that have lines but no
    usable one (or saying that no file has a line)."""
    skipped: dict[str, int] = {}
    examples: dict[str, list[str]] = {}
    for i, name in enumerate(REASONS):
        count = int(values.get(f"n{i}") or 0)
        if count:
            skipped[name] = count
            examples[name] = [e for e in (values.get(f"e{i}") or []) if e is not None]
    read_bytes = int(values.get("plain_bytes") or 0)
    missing = (lines.files.plain_bytes or 0) - read_bytes
    if lines.files.plain_bytes is not None and missing >= MAX_LINE_BYTES:
        skipped = {TOO_LONG: 1, **skipped}
        examples[TOO_LONG] = [f"{missing:,} bytes of the input are in lines not read"]
    summary = LogSummary(
        path=lines.files.path,
        files=len(lines.read),
        empty_files=lines.files.empty,
        lines=int(values.get("lines") or 0),
        rows=int(values.get("rows") or 0),
        skipped=skipped,
        examples=examples,
        share_fetches=int(values.get("share_fetches") or 0),
        throttled_fetches=int(values.get("throttled_fetches") or 0),
        mutations=int(values.get("mutations") or 0),
        controller_lines=int(values.get("controller_lines") or 0),
    )
    by_rank = [_file_key(name) for name in lines.read]
    with_lines = {by_rank[rank] for rank in values.get("files_with_lines") or ()}
    with_rows = {by_rank[rank] for rank in values.get("files_with_rows") or ()}
    useless = sorted(with_lines - with_rows)
    if useless:
        names = ", ".join(repr(_LOCAL_SCHEME.sub("/", f)) for f in useless[:3])
        more = f" and {len(useless) - 3:,} more" if len(useless) > 3 else ""
        detail = "; ".join(f"{n:,} {r}" for r, n in skipped.items())
        raise TrafficError(
            f"traffic file {names}{more}: no usable Completed request line ({detail}); "
            "expected Kafka's request log (kafka.request.logger at DEBUG, Kafka 2.8 or later)"
        )
    if summary.rows == 0:
        raise TrafficError(
            f"traffic {lines.files.path!r} has no line in its {len(lines.read):,} file(s)"
        )
    return summary


def _spark_call(path: str) -> Any:
    from kquota.backtest.session import reading_traffic as _reading

    return _reading(path)
