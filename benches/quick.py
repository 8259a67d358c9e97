"""Full or quick run: ``make bench-quick`` sets ``KQUOTA_BENCH_QUICK=1`` and every Python
benchmark then runs the same contenders with fewer rounds (the Spark back-test also on
smaller inputs), so that the whole set fits in a few minutes. ``make bench`` leaves it unset.
"""

from __future__ import annotations

import os

QUICK = os.environ.get("KQUOTA_BENCH_QUICK", "") not in ("", "0")
MODE = "quick" if QUICK else "full"


def pick(full: int, quick: int) -> int:
    """``full`` in a full run, ``quick`` in a quick one (rounds, warm-up rounds, sizes)."""
    return quick if QUICK else full
