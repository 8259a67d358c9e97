"""Reading Kafka's request log on Spark, against its baselines in the same run. Every side
runs as whole processes on ``local[2]`` (JVM start, Spark session, read, Python workers,
write, exit), one after the other:

* ``request_log_import``: ``kquota traffic import`` of N generated lines into traffic
  Parquet, against ``benches/text_copy_job.py``, which reads the same text files and
  writes their lines unchanged as Parquet. Target: at most 2x its time.
* ``request_log_backtest``: ``kquota backtest`` straight from the log, against ``kquota
  traffic import`` then ``kquota backtest`` of the imported Parquet (two processes, their
  times added). Target: at most 1.1x.

The lines are those of ``tests/support/requestlog_gen.py`` (kio messages: Produce and
Fetch of every version, other APIs, TRACE lines) repeated with new times and correlation
ids: 10^7 in ``make bench``, 2 * 10^5 with ``KQUOTA_BENCH_QUICK`` (benches/quick.py);
``KQUOTA_BENCH_LOG_LINES`` overrides both. ``extra_info["calls"]`` is the number of lines,
so values are per line.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import requestlog_gen as gen
from kquota.backtest import requestlog, synthetic
from processes import MASTER_ARGS, timed
from quick import pick

pytest.importorskip("kio", reason='the generator needs kio: pip install "kquota[proxy]"')

LINES = int(os.environ.get("KQUOTA_BENCH_LOG_LINES", "0")) or pick(10_000_000, 200_000)
COPY_JOB = Path(__file__).resolve().parent / "text_copy_job.py"
KQUOTA = (sys.executable, "-m", "kquota")


def import_log(logs: Path, out: Path) -> float:
    return timed([*KQUOTA, "traffic", "import", str(logs), "--out", str(out), *MASTER_ARGS])


def backtest(traffic: Path, quotas: Path, out: Path) -> float:
    command = [*KQUOTA, "backtest", "--traffic", str(traffic), "--quotas", str(quotas)]
    return timed([*command, "--out", str(out), *MASTER_ARGS, "--quiet"])


@pytest.fixture(scope="module")
def log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The log folder and a quota file for its traffic (from one import, which also warms
    the file cache for every timed run)."""
    folder = tmp_path_factory.mktemp("request-log")
    gen.write_repeated(gen.LogSpec(requests=2_000, brokers=3, seed=5), folder / "logs", LINES, 2)
    import_log(folder / "logs", folder / "once")
    quotas = folder / "quotas.json"
    quotas.write_text(synthetic.suggest_quotas(pq.read_table(folder / "once")).dumps())
    return folder / "logs", quotas


@pytest.mark.parametrize("role", ["baseline", "kquota"])
def test_import(benchmark: Any, log: tuple[Path, Path], tmp_path: Path, role: str) -> None:
    logs, _ = log
    benchmark.group = "request_log_import"
    benchmark.extra_info["role"] = "kquota" if role == "kquota" else "text_copy_job"
    benchmark.extra_info["calls"] = LINES
    if role == "kquota":
        seconds = benchmark.pedantic(import_log, (logs, tmp_path / "traffic"), rounds=1)
        assert pq.read_metadata(next((tmp_path / "traffic").glob("*.parquet"))).num_rows > 0
    else:
        files = list(requestlog.log_files(str(logs)).files)
        command = [sys.executable, str(COPY_JOB), *files, "--out", str(tmp_path / "text")]
        seconds = benchmark.pedantic(timed, ([*command, *MASTER_ARGS],), rounds=1)
        assert pq.read_metadata(next((tmp_path / "text").glob("*.parquet"))).num_rows > 0
    benchmark.extra_info["seconds"] = seconds


@pytest.mark.parametrize("role", ["baseline", "kquota"])
def test_backtest(benchmark: Any, log: tuple[Path, Path], tmp_path: Path, role: str) -> None:
    logs, quotas = log
    benchmark.group = "request_log_backtest"
    benchmark.extra_info["role"] = "kquota" if role == "kquota" else "import_then_backtest"
    benchmark.extra_info["calls"] = LINES
    if role == "kquota":
        seconds = benchmark.pedantic(backtest, (logs, quotas, tmp_path / "out"), rounds=1)
    else:

        def import_then_backtest() -> float:
            traffic = tmp_path / "traffic"
            return import_log(logs, traffic) + backtest(traffic, quotas, tmp_path / "out")

        seconds = benchmark.pedantic(import_then_backtest, rounds=1)
    assert (tmp_path / "out" / "report.html").is_file()
    benchmark.extra_info["seconds"] = seconds
