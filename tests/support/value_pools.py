"""Hypothesis building blocks shared by the property tests and the Kafka-oracle tests."""

from __future__ import annotations

from typing import Final, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")

# Huge and tiny: subnormals (5e-324 is the smallest double > 0), the smallest normal,
# 1e300 and the largest finite double.
TINY_AND_HUGE: Final = (
    5e-324,
    1e-310,
    2.2250738585072014e-308,
    1e-300,
    1e300,
    1.7976931348623157e308,
)


def weighted(*options: tuple[int, st.SearchStrategy[T]]) -> st.SearchStrategy[T]:
    """Draw from ``options`` with the given integer weights, simplest option first.

    ``st.one_of`` cannot do this: it flattens nested ``one_of`` arguments into their
    branches and drops repeated ones, so its weights are per distinct branch.
    """
    table = [strategy for weight, strategy in options for _ in range(weight)]
    return st.sampled_from(table).flatmap(_itself)


def _itself(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[T]:
    return strategy


def unit_ms(unit: str, window_ms: int, num_samples: int, expiry_ms: int) -> int:
    """One unit of a clock step in ms: ``ms``, the window ``W``, ``(N-1)W``, the purge
    horizon ``NW`` or the sensor expiry ``E``."""
    return {
        "ms": 1,
        "W": window_ms,
        "(N-1)W": (num_samples - 1) * window_ms,
        "NW": num_samples * window_ms,
        "E": expiry_ms,
    }[unit]
