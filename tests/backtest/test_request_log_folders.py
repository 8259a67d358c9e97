"""A request-log folder as operators find it: one folder per broker, the hourly rolled files
(``kafka-request.log.YYYY-MM-dd-HH``, some gzipped), other loggers' lines at other levels
with a stack trace in between, CRLF line ends and a half-written last line. The lines are
those of the real logs in ``tests/backtest/data/``; importing the messy folder gives the
same rows as importing each clean log alone, and every odd line is counted by its kind."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from kquota.backtest import requestlog
from kquota.cli import main
from kquota.traffic_schema import BROKER

DATA = Path(__file__).resolve().parent / "data"
LOGS = {"broker-1": DATA / "kafka-4.1.2", "broker-2": DATA / "kafka-3.9.2"}

# Lines a broker's log4j appender can interleave when the request logger shares a file with
# others (a misconfigured log4j, or files concatenated by a collector): another logger at
# each level, a stack trace's lines, a blank line.
OTHER_LOGGERS = [
    "[2026-11-27 06:23:52,800] INFO [BrokerServer id=1] Transition from STARTING to STARTED "
    "(kafka.server.BrokerServer)",
    "[2026-11-27 06:23:53,001] WARN [SocketServer listenerType=BROKER, nodeId=1] Unexpected "
    "error from /127.0.0.1 (channelId=127.0.0.1:9092-127.0.0.1:50001-0); closing connection "
    "(org.apache.kafka.common.network.Selector)",
    "java.io.IOException: Connection reset by peer",
    "\tat java.base/sun.nio.ch.SocketDispatcher.read0(Native Method)",
    "\tat org.apache.kafka.common.network.Selector.poll(Selector.java:481)",
    "[2026-11-27 06:23:53,002] ERROR Closing socket for 127.0.0.1:50001 because of error "
    "(kafka.network.Processor)",
    "",
]


def _lines(folder: Path) -> list[str]:
    return (folder / "kafka-request.log").read_text(encoding="utf-8").splitlines()


def _messy(root: Path) -> dict[str, int]:
    """Writes the messy folder under ``root``; returns the odd lines added, by reason."""
    added = {requestlog.OTHER_LINE: 0, requestlog.CORRUPT: 0}
    for broker, source in LOGS.items():
        lines = _lines(source)
        folder = root / broker
        folder.mkdir(parents=True)
        third = len(lines) // 3
        parts = [lines[:third], lines[third : 2 * third], lines[2 * third :]]
        # noise in the middle of the rolled files, each odd line once per broker
        parts[1] = [*parts[1][:10], *OTHER_LOGGERS, *parts[1][10:]]
        added[requestlog.OTHER_LINE] += len(OTHER_LOGGERS)
        oldest, older, current = (
            folder / "kafka-request.log.2026-11-27-05.gz",
            folder / "kafka-request.log.2026-11-27-06",
            folder / "kafka-request.log",
        )
        oldest.write_bytes(gzip.compress(("\n".join(parts[0]) + "\n").encode()))
        older.write_bytes(("\r\n".join(parts[1]) + "\r\n").encode())  # written on Windows
        # the broker is writing its current file: the last line is cut short, no newline
        last = parts[2][-1]
        current.write_text("\n".join([*parts[2][:-1], last[: len(last) // 2]]))
        added[requestlog.CORRUPT] += 1
    return added


def _rows(path: Path) -> list[tuple[Any, ...]]:
    table = pq.read_table(path).select(list(requestlog.COLUMNS))
    return sorted(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))


@pytest.mark.slow
def test_a_messy_folder_gives_the_rows_of_the_clean_logs(
    spark: Any, tmp_path: Path, capsys: Any
) -> None:
    added = _messy(tmp_path / "logs")
    expected: list[tuple[Any, ...]] = []
    clean_skipped: dict[str, int] = {}
    for broker, source in LOGS.items():
        # the same lines less the half-written one, clean, in one file named after the broker
        clean = tmp_path / "clean" / broker
        clean.mkdir(parents=True)
        (clean / "kafka-request.log").write_text("\n".join(_lines(source)[:-1]) + "\n")
        summary = requestlog.import_log(spark, str(clean), str(tmp_path / f"clean-{broker}"))
        expected += _rows(tmp_path / f"clean-{broker}")
        for reason, count in summary.skipped.items():
            clean_skipped[reason] = clean_skipped.get(reason, 0) + count

    out = tmp_path / "traffic"
    assert main(["traffic", "import", str(tmp_path / "logs"), "--out", str(out)]) == 0
    report = capsys.readouterr()
    got = _rows(out)
    assert len(got) == len(expected)
    assert got == sorted(expected)
    assert {r[requestlog.COLUMNS.index(BROKER)] for r in got} == set(LOGS)

    # every odd line counted by its kind, in the command's own words
    wanted = dict(clean_skipped)
    for reason, count in added.items():
        wanted[reason] = wanted.get(reason, 0) + count
    for reason, count in wanted.items():
        assert f"skipped {count:,} line(s): {reason}" in report.err, report.err
    assert report.err.count("skipped ") == len(wanted), report.err


@pytest.mark.slow
def test_the_messy_folder_describes_each_broker(spark: Any, tmp_path: Path, capsys: Any) -> None:
    _messy(tmp_path / "logs")
    assert main(["traffic", "describe", str(tmp_path / "logs")]) == 0
    text = capsys.readouterr().out
    assert "brokers: 2 (broker-1, broker-2)" in text
    assert "files: 6 read, 0 empty" in text, text
