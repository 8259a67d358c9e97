"""How the report writes numbers: durations, shares, rates and sizes in words, the unit a
column of them is shown in, and the quota types' names in sentences."""

from __future__ import annotations

from typing import Final

BYTE_TYPES: Final = frozenset({"produce", "fetch"})
"""The quota types whose rates are bytes per second."""

TYPE_WORDS: Final = {
    "produce": "produce",
    "fetch": "fetch",
    "request": "request-time",
    "controller_mutation": "controller-mutation",
}
"""A quota type in a sentence or a title."""

_UNIT: Final = {
    "produce": "bytes/s",
    "fetch": "bytes/s",
    "request": "% of a thread",
    "controller_mutation": "partitions/s",
}


def duration(ms: float) -> str:
    """A duration in words, in the unit that suits it: ``950 ms``, ``2.5 s``, ``1.2 h``."""
    if ms < 1000:
        return f"{ms:,.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    if ms < 3_600_000:
        return f"{ms / 60_000:.1f} min"
    return f"{ms / 3_600_000:,.1f} h"


def share(fraction: float) -> str:
    """A fraction as a percentage, with fewer decimals when large."""
    if 0 < fraction < 0.0001:
        return "under 0.01%"
    return f"{100 * fraction:.2f}%" if fraction < 0.1 else f"{100 * fraction:.0f}%"


def amount(value: float, quota_type: str) -> str:
    """A quota or rate in words: ``44 kB/s``, ``1.5% of a thread``."""
    if quota_type == "request":
        return f"{value:.3g}% of a thread"
    if quota_type == "controller_mutation":
        return f"{value:.3g} partitions/s"
    for unit, size in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if value >= size:
            return f"{value / size:.3g} {unit}"
    return f"{value:.3g} bytes/s"


def size(value: float) -> str:
    """Bytes in words: ``1.5 MB``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:,.0f} bytes"


def duration_unit(largest_ms: float) -> tuple[str, float]:
    """The unit a column of durations is shown in, from its largest value."""
    for unit, size in (("h", 3_600_000.0), ("min", 60_000.0), ("s", 1000.0)):
        if largest_ms >= size:
            return unit, size
    return "ms", 1.0


def rate_unit(quota_type: str, largest: float) -> tuple[str, float]:
    """The unit a rate or quota of ``quota_type`` is shown in: kB/s, or MB/s when large."""
    if quota_type in BYTE_TYPES:
        return ("MB/s", 1e6) if largest >= 1e6 else ("kB/s", 1e3)
    return _UNIT.get(quota_type, ""), 1.0
