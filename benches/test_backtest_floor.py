"""``kquota backtest`` against the floor job (benches/floor_job.py): the Spark targets.

Both run as whole processes (``python -m kquota backtest ... --master local[2]`` and
``python benches/floor_job.py ... --master local[2]``: JVM start, Spark session, read,
shuffle, Python workers, write, exit) on the same generated Parquet traffic, one after the
other in the same run:

* ``backtest_floor_1_scenario``: the back-test with one scenario (report off) against the
  floor job; target: at most 2x its time;
* ``backtest_floor_3_scenarios``: ``--scale 0.5,1,2``; target: at most 3x.

The floor job runs again before each back-test, so every ratio compares runs made side by
side. ``extra_info["calls"]`` is the number of requests, so values are per request.
``make bench`` uses 30 M requests (the size the targets are set for), ``make bench-quick``
300 000 (there the fixed costs of starting Spark weigh most); ``KQUOTA_BENCH_FLOOR_ROWS``
overrides both.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from kquota.backtest import synthetic
from processes import MASTER_ARGS, timed
from quick import pick

ROWS = int(os.environ.get("KQUOTA_BENCH_FLOOR_ROWS", "0")) or pick(30_000_000, 300_000)
FLOOR_JOB = Path(__file__).resolve().parent / "floor_job.py"
SCALES = {"1_scenario": "1", "3_scenarios": "0.5,1,2"}


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The traffic (Parquet) and a quota file for it, from ``kquota gen-traffic``."""
    folder = tmp_path_factory.mktemp("floor")
    table = synthetic.generate(synthetic.TrafficSpec(requests=ROWS, seed=14))
    quotas = folder / "quotas.json"
    quotas.write_text(synthetic.suggest_quotas(table).dumps())
    path = synthetic.write(table, folder / "traffic.parquet")
    del table
    return path, quotas


def floor(path: Path, out: Path) -> float:
    return timed(
        [sys.executable, str(FLOOR_JOB), "--traffic", str(path), "--out", str(out), *MASTER_ARGS]
    )


def backtest(path: Path, quotas: Path, out: Path, scales: str) -> float:
    command = [sys.executable, "-m", "kquota", "backtest", "--traffic", str(path)]
    return timed(
        [
            *command,
            "--quotas",
            str(quotas),
            "--out",
            str(out),
            "--scale",
            scales,
            *MASTER_ARGS,
            "--quiet",
        ]
    )


@pytest.mark.parametrize("role", ["baseline", "kquota"])
@pytest.mark.parametrize("scenarios", list(SCALES))
def test_backtest_against_the_floor_job(
    benchmark: Any, generated: tuple[Path, Path], tmp_path: Path, scenarios: str, role: str
) -> None:
    path, quotas = generated
    benchmark.group = f"backtest_floor_{scenarios}"
    benchmark.extra_info["role"] = "kquota" if role == "kquota" else "floor_job"
    benchmark.extra_info["calls"] = ROWS
    if role == "kquota":
        run = (backtest, (path, quotas, tmp_path / "out", SCALES[scenarios]))
    else:
        run = (floor, (path, tmp_path / "floor"))
    seconds = benchmark.pedantic(run[0], run[1], rounds=1, warmup_rounds=0)
    benchmark.extra_info["seconds"] = seconds
