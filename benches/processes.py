"""Timing whole processes: the Spark benchmarks run ``kquota`` and their baselines as
separate processes (JVM start, Spark session, work, exit) on the same master."""

from __future__ import annotations

import argparse
import subprocess
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

MASTER_ARGS: Final = ("--master", "local[2]")


def timed(command: list[str]) -> float:
    """Wall-clock seconds of one process, from start to exit (it must succeed)."""
    started = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def run_spark_job(
    argv: Sequence[str] | None,
    description: str,
    add_arguments: Callable[[argparse.ArgumentParser], None],
    app_name: str,
    job: Callable[[Any, argparse.Namespace], None],
    started: float,
) -> int:
    """The ``main`` of a baseline job: its options (``--out``, ``--master`` and those
    ``add_arguments`` adds), ``job`` on a Spark session started as ``kquota`` starts it,
    then the seconds since ``started`` (the process's start) on stdout."""
    parser = argparse.ArgumentParser(description=description)
    add_arguments(parser)
    parser.add_argument("--out", required=True, help="output folder (overwritten)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    args = parser.parse_args(argv)

    from kquota.backtest.session import spark_session

    spark, created = spark_session(args.master, app_name)
    job(spark, args)
    if created:
        spark.stop()
    print(f"{time.monotonic() - started:.1f}")
    return 0
