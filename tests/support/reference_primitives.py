"""What the reference model (``reference_model.py``) is built on: its errors (kquota's, or
stand-ins with the same names when the compiled module is not built), Java's arithmetic,
argument checks and sampled windows (section 2 of ``shared/docs/kafka-quota-semantics.md``).
"""

from __future__ import annotations

import math
import numbers
import operator
import time
from dataclasses import dataclass
from typing import Final

try:
    from kquota.exceptions import (
        InvalidConfigError,
        InvalidQuotaError,
        InvalidUsageError,
        InvalidValueError,
        KquotaError,
    )
except ImportError:  # the compiled module is not built: stand-ins with the same names

    class KquotaError(Exception):  # type: ignore[no-redef]
        """The base of every error kquota raises."""

    class InvalidValueError(KquotaError, ValueError):  # type: ignore[no-redef]
        """A value outside what kquota (and Kafka) accepts; the message names it."""

    class InvalidConfigError(InvalidValueError):  # type: ignore[no-redef]
        """A malformed configuration: window, samples, quota type or entity."""

    class InvalidQuotaError(InvalidValueError):  # type: ignore[no-redef]
        """A quota value that is zero, negative, NaN or infinite."""

    class InvalidUsageError(InvalidValueError):  # type: ignore[no-redef]
        """A recorded usage that is negative, NaN or infinite."""


_INT32_SPAN: Final = 2**32
_INT64_MAX: Final = 2**63 - 1
_INT64_MIN: Final = -(2**63)


def monotonic_ms() -> int:
    """The clock used when ``now_ms`` is omitted: monotonic milliseconds."""
    return time.monotonic_ns() // 1_000_000


# -- Java arithmetic ---------------------------------------------------------------------


def java_round(x: float) -> int:
    """Java ``Math.round``: nearest long, ties toward +infinity, NaN -> 0, saturating."""
    if math.isnan(x):
        return 0
    if x >= 2.0**63:
        return _INT64_MAX
    if x <= -(2.0**63):
        return _INT64_MIN
    floor = math.floor(x)
    return floor + 1 if x - floor >= 0.5 else floor


def to_int32(value: int) -> int:
    """Java's ``(int)`` cast of a long: the low 32 bits as a two's-complement int."""
    return (value + 2**31) % _INT32_SPAN - 2**31


def _div_truncating(dividend: int, divisor: int) -> int:
    """Java's long division (truncates toward zero) for a positive divisor."""
    quotient = abs(dividend) // divisor
    return quotient if dividend >= 0 else -quotient


# -- argument checks ----------------------------------------------------------------------


def checked_int(name: str, value: object) -> int:
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int, got {value!r}") from None


def _as_float(name: str, value: object) -> float:
    if not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    return float(value)


def checked_str(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {value!r}")
    return value


def now_or_clock(now_ms: int | None) -> int:
    return monotonic_ms() if now_ms is None else checked_int("now_ms", now_ms)


def checked_quota(value: object) -> float:
    bound = _as_float("quota", value)
    if not (math.isfinite(bound) and bound > 0.0):
        raise InvalidQuotaError(f"a quota must be a finite number > 0, got {bound!r}")
    return bound


def checked_sample(value: object) -> float:
    amount = _as_float("value", value)
    if not math.isfinite(amount):
        raise InvalidUsageError(f"a recorded value must be finite, got {amount!r}")
    return amount


def checked_usage(value: object) -> float:
    amount = _as_float("value", value)
    if not (math.isfinite(amount) and amount >= 0.0):
        raise InvalidUsageError(f"usage must be a finite number >= 0, got {amount!r}")
    return amount


def checked_window(num_samples: object, window_ms: object) -> tuple[int, int]:
    samples = checked_int("num_samples", num_samples)
    window = checked_int("window_ms", window_ms)
    if samples < 1:
        raise InvalidConfigError(f"num_samples must be >= 1, got {samples}")
    if window < 1:
        raise InvalidConfigError(f"window_ms must be >= 1, got {window}")
    return samples, window


# -- sampled windows (section 2) ----------------------------------------------------------


@dataclass(slots=True)
class _Sample:
    start_ms: int
    last_ms: int
    value: float = 0.0
    count: int = 0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_ms = now_ms
        self.value = 0.0
        self.count = 0


class Samples:
    """Kafka's sampled windows: a lazily grown ring of at most ``num_samples + 1`` samples."""

    def __init__(self, num_samples: int, window_ms: int) -> None:
        self.num_samples = num_samples
        self.window_ms = window_ms
        self.samples: list[_Sample] = []
        self.current = 0

    def record(self, value: float, now_ms: int) -> None:
        """Section 2.2: roll over when the current sample is a window old, then add."""
        if not self.samples:
            self.samples.append(_Sample(now_ms, now_ms))
        sample = self.samples[self.current]
        if now_ms - sample.start_ms >= self.window_ms:
            self.current = (self.current + 1) % (self.num_samples + 1)
            if self.current >= len(self.samples):
                sample = _Sample(now_ms, now_ms)
                self.samples.append(sample)
            else:
                sample = self.samples[self.current]
                sample.reset(now_ms)
        sample.value += value
        sample.count += 1
        sample.last_ms = now_ms

    def purge(self, now_ms: int) -> None:
        """Section 2.3: restart every sample whose last event is ``num_samples`` windows old."""
        horizon = self.num_samples * self.window_ms
        for sample in self.samples:
            if now_ms - sample.last_ms >= horizon:
                sample.reset(now_ms)

    def total(self, now_ms: int) -> float:
        """Purge, then add the sample values in index order (not with ``sum``: bit-exact)."""
        self.purge(now_ms)
        total = 0.0
        for sample in self.samples:
            total += sample.value
        return total

    def elapsed_window_ms(self, now_ms: int) -> int:
        """Section 2.4: the measured window, padded to ``num_samples - 1`` whole windows."""
        self.purge(now_ms)
        if not self.samples:
            self.samples.append(_Sample(now_ms, now_ms))
        elapsed = now_ms - min(sample.start_ms for sample in self.samples)
        full_windows = to_int32(_div_truncating(elapsed, self.window_ms))
        min_full_windows = self.num_samples - 1
        if full_windows < min_full_windows:
            elapsed += to_int32(min_full_windows - full_windows) * self.window_ms
        return max(elapsed, 1)

    def rate(self, now_ms: int) -> float:
        """Kafka's ``Rate``: the total per second of the elapsed window."""
        total = self.total(now_ms)
        return total / (self.elapsed_window_ms(now_ms) / 1000.0)

    def average(self, now_ms: int) -> float:
        """Kafka's ``Avg``: total over event count, NaN with no events."""
        self.purge(now_ms)
        total = 0.0
        count = 0
        for sample in self.samples:
            total += sample.value
            count += sample.count
        return total / count if count else math.nan
