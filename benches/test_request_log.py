"""Reading Kafka's request log on Spark (``local[2]``), against its baselines in the same run.

* ``request_log_import``: ``kquota traffic import`` (:func:`requestlog.import_log`) of N
  generated lines into traffic Parquet, against a Spark job that reads the same text
  files and writes them unchanged as Parquet. Target: at most 2x (ratio >= 0.5).
* ``request_log_backtest``: ``kquota backtest`` straight from the log, against the import
  plus the same back-test from the imported Parquet. Target: at most 1.5x (ratio >= 0.67).
  (The job imports the log into ``DIR/traffic/`` and back-tests from there, so the two
  sides run the same steps; the ratio shows what the log path adds.)

The lines are those of ``tests/support/requestlog_gen.py`` (kio messages: Produce and
Fetch of every version, other APIs, TRACE lines) repeated with new times and correlation
ids: 10^7 in ``make bench``, 2 * 10^5 with ``KQUOTA_BENCH_QUICK`` (benches/quick.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import requestlog_gen as gen
from kquota.backtest import requestlog, synthetic
from kquota.backtest.job import run
from kquota.backtest.options import BacktestOptions
from kquota.config import QuotaConfig
from quick import pick

pytest.importorskip("kio", reason='the generator needs kio: pip install "kquota[proxy]"')

LINES = pick(10_000_000, 200_000)
ROUNDS = pick(2, 1)


@pytest.fixture(scope="module")
def log(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, QuotaConfig]:
    folder = tmp_path_factory.mktemp("request-log")
    gen.write_repeated(gen.LogSpec(requests=2_000, brokers=3, seed=5), folder / "logs", LINES, 2)
    requestlog.import_log(spark, str(folder / "logs"), str(folder / "once"))
    config = synthetic.suggest_quotas(pq.read_table(folder / "once"))
    return folder / "logs", config


@pytest.mark.parametrize("role", ["kquota", "baseline"])
def test_import(
    benchmark: Any, spark: Any, log: tuple[Path, QuotaConfig], tmp_path: Path, role: str
) -> None:
    logs, _ = log
    benchmark.group = "request_log_import"
    benchmark.extra_info["role"] = role
    benchmark.extra_info["calls"] = LINES
    files = list(requestlog.log_files(str(logs)).files)
    if role == "kquota":
        out = str(tmp_path / "traffic")
        summary = benchmark.pedantic(
            requestlog.import_log, (spark, str(logs), out), rounds=ROUNDS, warmup_rounds=1
        )
        benchmark.extra_info["rows"] = summary.rows
        assert summary.rows > LINES // 2
        return

    def copy() -> None:
        spark.read.text(files).write.mode("overwrite").parquet(str(tmp_path / "text"))

    benchmark.pedantic(copy, rounds=ROUNDS, warmup_rounds=1)
    assert pq.read_metadata(next((tmp_path / "text").glob("*.parquet"))).num_rows > 0


@pytest.mark.parametrize("role", ["kquota", "baseline"])
def test_backtest(
    benchmark: Any, spark: Any, log: tuple[Path, QuotaConfig], tmp_path: Path, role: str
) -> None:
    logs, config = log
    benchmark.group = "request_log_backtest"
    benchmark.extra_info["role"] = role
    benchmark.extra_info["calls"] = LINES
    if role == "kquota":
        options = BacktestOptions(
            traffic=str(logs), quotas=config, out=str(tmp_path / "out"), report=False
        )
        result = benchmark.pedantic(run, (spark, options), rounds=ROUNDS, warmup_rounds=1)
        assert result.rows_valid > LINES // 2
        return

    def import_then_backtest() -> None:
        requestlog.import_log(spark, str(logs), str(tmp_path / "traffic"))
        options = BacktestOptions(
            traffic=str(tmp_path / "traffic"),
            quotas=config,
            out=str(tmp_path / "out"),
            report=False,
        )
        run(spark, options)

    benchmark.pedantic(import_then_backtest, rounds=ROUNDS, warmup_rounds=1)
