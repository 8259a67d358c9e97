"""Timing whole processes: the Spark benchmarks run ``kquota`` and their baselines as
separate processes (JVM start, Spark session, work, exit) on the same master."""

from __future__ import annotations

import subprocess
import time
from typing import Final

MASTER_ARGS: Final = ("--master", "local[2]")


def timed(command: list[str]) -> float:
    """Wall-clock seconds of one process, from start to exit (it must succeed)."""
    started = time.monotonic()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started
