"""``kquota backtest`` on the worst skew (the memory target): every request from one
client of one user on one broker, so one Spark task and one sensor hold all of it.

* ``backtest_memory_one_entity``: the back-test (one scenario, Spark's default memory
  settings: no ``spark.*.memory`` option is set) against the floor job
  (benches/floor_job.py) on the same traffic, both timed as whole processes on
  ``local[2]``, one after the other in the same run. The target is that it completes; the
  row also carries the peak resident set of the Python workers that replayed
  (``worker_peak_rss_mib``, from ``VmHWM`` in each worker, the job's summary line
  "Python workers' peak RSS").

``make bench`` uses 30 M requests, ``make bench-quick`` 300 000;
``KQUOTA_BENCH_MEMORY_ROWS`` overrides both. Not part of ``make test`` (too long).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kquota.backtest import synthetic
from quick import pick

ROWS = int(os.environ.get("KQUOTA_BENCH_MEMORY_ROWS", "0")) or pick(30_000_000, 300_000)
FLOOR_JOB = Path(__file__).resolve().parent / "floor_job.py"
MASTER_ARGS = ("--master", "local[2]")
PEAK = re.compile(r"Python workers' peak RSS: ([\d,]+) MiB")


@pytest.fixture(scope="module")
def one_entity(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Generated traffic made into one entity: one broker, one user, one client id."""
    folder = tmp_path_factory.mktemp("memory")
    spec = synthetic.TrafficSpec(requests=ROWS, brokers=1, users=1, clients=2, seed=14)
    table = synthetic.generate(spec)
    for name, value in (("user", "tenant-000"), ("client_id", "app-0")):
        index = table.schema.get_field_index(name)
        table = table.set_column(index, name, pa.repeat(pa.scalar(value, pa.string()), ROWS))
    quotas = folder / "quotas.json"
    quotas.write_text(synthetic.suggest_quotas(table).dumps())
    path = synthetic.write(table, folder / "traffic.parquet")
    del table
    return path, quotas


def timed(command: list[str]) -> tuple[float, str]:
    """Wall-clock seconds of one process, from start to exit (it must succeed), and its
    standard output."""
    started = time.monotonic()
    done = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True)
    return time.monotonic() - started, done.stdout


@pytest.mark.parametrize("role", ["baseline", "kquota"])
def test_backtest_one_entity_memory(
    benchmark: Any, one_entity: tuple[Path, Path], tmp_path: Path, role: str
) -> None:
    path, quotas = one_entity
    benchmark.group = "backtest_memory_one_entity"
    benchmark.extra_info["role"] = "kquota" if role == "kquota" else "floor_job"
    benchmark.extra_info["calls"] = ROWS
    if role == "kquota":
        command = [sys.executable, "-m", "kquota", "backtest", "--traffic", str(path)]
        command += ["--quotas", str(quotas), "--out", str(tmp_path / "out"), "--scale", "1"]
        command += [*MASTER_ARGS, "--quiet"]
    else:
        command = [sys.executable, str(FLOOR_JOB), "--traffic", str(path)]
        command += ["--out", str(tmp_path / "floor"), *MASTER_ARGS]
    outputs: list[str] = []

    def once() -> float:
        seconds, stdout = timed(command)
        outputs.append(stdout)
        return seconds

    seconds = benchmark.pedantic(once, rounds=1, warmup_rounds=0)
    benchmark.extra_info["seconds"] = seconds
    if role == "kquota":
        found = PEAK.search(outputs[-1])
        assert found, f"no peak RSS line in the back-test's summary:\n{outputs[-1]}"
        benchmark.extra_info["worker_peak_rss_mib"] = int(found.group(1).replace(",", ""))
