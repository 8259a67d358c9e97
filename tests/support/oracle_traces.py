"""What the tests against Apache Kafka's quota classes share (``test_kafka_oracle*.py`` in
``tests/core``): the fixed seed and the open-ended mode, how answers are compared, the pools
of names and values, clock steps, and operations drafted before a trace gives them a time.

A trace is drawn as a list of independent drafts (an operation, its arguments and a clock
step), then resolved against the trace's own state, so that Hypothesis shrinks a failing
trace by deleting operations. Answers are compared bit for bit: doubles by their bits (a
NaN equal to any NaN), throttles as the same ints. On a failure the report lists the trace
up to the operation that differed, with Kafka's answer and kquota's.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import kquota
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from kafka_oracle import KafkaOracle, from_bits, to_bits
from value_pools import TINY_AND_HUGE, unit_ms, weighted

# -- the fixed seed and the open-ended mode -----------------------------------------------

_SEED: Final = os.environ.get("KQUOTA_ORACLE_SEED", "")
SCALE: Final = int(os.environ.get("KQUOTA_ORACLE_SCALE", "1"))


def profile(examples: int) -> settings:
    """Derandomized (the fixed seed of ``make test``) unless KQUOTA_ORACLE_SEED is set."""
    return settings(
        max_examples=examples * SCALE,
        derandomize=not _SEED,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def seeded(test: Callable[..., None]) -> Callable[..., None]:
    if _SEED and _SEED != "random":
        from hypothesis import seed

        return seed(int(_SEED))(test)
    return test


# -- comparing answers ------------------------------------------------------------------


@dataclass
class Tally:
    """What a test compared: traces, operations, and how often something happened."""

    traces: int = 0
    operations: int = 0
    events: dict[str, int] = field(default_factory=dict)

    def seen(self, what: str) -> None:
        self.events[what] = self.events.get(what, 0) + 1


def canon(value: float | None) -> int | str | None:
    """A double as compared: its bits, any NaN as ``"NaN"``, ``None`` as is."""
    if value is None:
        return None
    return "NaN" if math.isnan(value) else to_bits(value)


def kcanon(bits: int | None) -> int | str | None:
    """Kafka's double (sent as bits) as compared."""
    return None if bits is None else canon(from_bits(bits))


_DOUBLE_ANSWERS: Final = frozenset(
    {"quota", "bound", "rate", "tavg", "v", "tokens", "mrate", "broker"}
)


def show(value: object, key: str = "") -> str:
    """A compared value for a person: a double's bits with the double they hold."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {show(v, k)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(show(v) for v in value) + "]"
    if key in _DOUBLE_ANSWERS and isinstance(value, int):
        return f"{from_bits(value)!r} (bits {value})"
    return repr(value)


def readable(op: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in op.items())


@dataclass
class Trace:
    """One trace: ``ops`` hold Python floats; :meth:`wire` is what the oracle gets."""

    family: str
    config: dict[str, Any]
    start: int
    ops: list[dict[str, Any]]

    def wire(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "config": {k: _wire_value(k, v) for k, v in self.config.items()},
            "start": self.start,
            "ops": [{k: _wire_value(k, v) for k, v in op.items()} for op in self.ops],
        }


_DOUBLE_INPUTS: Final = frozenset({"v", "q"})


def _wire_value(key: str, value: Any) -> Any:
    if key in _DOUBLE_INPUTS and value is not None:
        return to_bits(float(value))
    return value


Events = Callable[[Trace, dict[str, Any], dict[str, Any], Tally], None]


def compare_batch(
    oracle: KafkaOracle,
    traces: list[Trace],
    run_kquota: Callable[[Trace, str], list[dict[str, Any]]],
    kafka_view: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]],
    tally: Tally,
    events: Events | None = None,
) -> None:
    """Run ``traces`` through Kafka and kquota (following the oracle's Kafka release);
    every answer must be the same."""
    kafka_answers = oracle.run([trace.wire() for trace in traces])
    for number, (trace, kafka) in enumerate(zip(traces, kafka_answers, strict=True)):
        ours = run_kquota(trace, oracle.version)
        assert len(ours) == len(trace.ops) == len(kafka)
        for index, (op, theirs, mine) in enumerate(zip(trace.ops, kafka, ours, strict=True)):
            assert "err" not in theirs, f"Kafka raised on {readable(op)}: {theirs['err']}"
            expected = kafka_view(op, theirs)
            if expected != mine:
                lines = [
                    f"{trace.family} trace {number}: config {trace.config}, start {trace.start}"
                ]
                lines += [f"  [{i}] {readable(o)}" for i, o in enumerate(trace.ops[: index + 1])]
                lines.append(f"  Kafka:  {show(expected)}")
                lines.append(f"  kquota: {show(mine)}")
                note("\n".join(lines))
                raise AssertionError("\n".join(lines[-3:]))
            tally.operations += 1
            for key in ("th", "d", "last"):
                value = mine.get(key)
                if isinstance(value, int) and value != 0:
                    tally.seen(f"{op['op']} {'throttled' if value > 0 else 'wrapped negative'}")
                if value == 2**31 - 1 and key == "th":
                    tally.seen(f"{op['op']} saturated")
            for key in ("removed", "ch"):
                if mine.get(key):
                    tally.seen(f"{op['op']} returned something")
            if events is not None:
                events(trace, op, mine, tally)
        tally.traces += 1


def attempt(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``fn()``, or ``{"err": class name}`` when kquota raises."""
    try:
        return fn()
    except kquota.KquotaError as error:
        return {"err": type(error).__name__}


def kinds(**weights: int) -> st.SearchStrategy[str]:
    """An operation name, drawn with the given weights (the first is the simplest)."""
    return st.sampled_from([name for name, weight in weights.items() for _ in range(weight)])


# -- shared pools -------------------------------------------------------------------------

DEFAULT: Final = kquota.DEFAULT
UNLIMITED: Final = kquota.UNLIMITED

# Principals: the empty name, one literally called "<default>" (sanitized to
# %3Cdefault%3E, never the default entity), non-ASCII, NUL, astral planes and the
# characters Kafka's sanitizer treats specially.
FREQUENT_USERS: Final = ("alice", "bob")
USERS: Final = (
    "alice",
    "bob",
    "",
    "<default>",
    "é",
    "用户",
    "🦀 crab",
    "a b",
    "a+b*",
    "50%",
    "\x00",
)
FREQUENT_CLIENTS: Final = ("c1", "c2")
CLIENTS: Final = ("c1", "c2", "", "<default>", "é", "用户", "🦀", "a b", "+*%", ":")
# "<default>" as an entity name would be the default marker.
ENTITY_USERS: Final = tuple(u for u in USERS if u != DEFAULT)
ENTITY_CLIENTS: Final = tuple(c for c in CLIENTS if c != DEFAULT)

# Sometimes any text but a lone surrogate (which kquota refuses: it has no UTF-8 form).
any_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=6)
users = weighted((30, st.sampled_from(FREQUENT_USERS * 4 + USERS)), (1, any_text))
clients = weighted((30, st.sampled_from(FREQUENT_CLIENTS * 4 + CLIENTS)), (1, any_text))
_SHAPES: Final = tuple(
    (u, c)
    for u in ("name", "default", "absent")
    for c in ("name", "default", "absent")
    if (u, c) != ("absent", "absent")
)


def _entity(shape: tuple[str, str], user: str, client: str) -> dict[str, str | None]:
    """An entity of one of the 8 shapes as it travels: ``"N:<name>"``, ``"D"`` or ``None``."""

    def spec(kind: str, name: str) -> str | None:
        return {"name": f"N:{name}", "default": "D", "absent": None}[kind]

    return {"eu": spec(shape[0], user), "ec": spec(shape[1], client)}


entities = st.builds(
    _entity,
    st.sampled_from(_SHAPES),
    st.sampled_from(FREQUENT_USERS * 3 + ENTITY_USERS),
    st.sampled_from(FREQUENT_CLIENTS * 3 + ENTITY_CLIENTS),
)


def entity_of(op: dict[str, Any]) -> kquota.Entity:
    def back(spec: str | None) -> str | None:
        if spec is None:
            return None
        return DEFAULT if spec == "D" else spec[2:]

    return kquota.Entity(user=back(op["eu"]), client_id=back(op["ec"]))


quotas = weighted(
    (6, st.sampled_from([1.0, 10.0, 100.0, 500.0, 1024.0, 1e4, 1e6, 1e15])),
    (6, st.floats(min_value=1e-2, max_value=1e5)),
    (1, st.floats(min_value=1e-9, max_value=1e15)),
    (1, st.sampled_from((1e-9, *TINY_AND_HUGE))),
    (1, st.floats(min_value=0.0, exclude_min=True, allow_infinity=False)),
)
usages = weighted(
    (6, st.sampled_from([0.0, -0.0, 1.0, 100.0, 600.0, 1000.0, 1e6, 1e9, 1e18])),
    (6, st.floats(min_value=0.0, max_value=1e5)),
    (4, st.integers(min_value=0, max_value=10**7).map(float)),
    (1, st.sampled_from(TINY_AND_HUGE)),
    (1, st.floats(min_value=0.0, allow_infinity=False)),
)
nanos = weighted(
    (2, st.sampled_from([0, 1, 1_000_000, 10_000_000, 1_000_000_000, 2**53, 2**62])),
    (6, st.integers(min_value=0, max_value=5 * 10**9)),
)
throttles = st.one_of(
    st.sampled_from([1, 2, 100, 999, 1000, 1001, 30_000, 2**31 - 1]),
    st.integers(min_value=1, max_value=50_000),
)
channels = st.integers(min_value=0, max_value=5)
picks = st.integers(min_value=0, max_value=7)  # which pending request, listener, ...
STARTS: Final = (0, 1_000, 1_700_000_000_000, 2**40 + 123)
EXPIRY_MS: Final = 3_600_000
MAX_OPS: Final = 100
samples_counts = st.one_of(
    st.integers(min_value=2, max_value=12), st.integers(min_value=1, max_value=30)
)
window_seconds = st.one_of(
    st.sampled_from([1, 1, 1, 2, 3, 5, 10, 30]), st.integers(min_value=1, max_value=30)
)

# -- clock steps ----------------------------------------------------------------------------

# A step is (unit, count, offset): count units plus offset ms. Units are ms, the window W,
# (N-1) windows, the purge horizon N*W and the hour of sensor expiry E; mostly 0, on and
# around window edges and the horizon, sometimes a long idle gap. "back" steps go back.
_FIXED_GAPS: Final = (
    *[("ms", 0, 0)] * 10,
    *[("ms", 1, 0), ("W", 1, -1), ("W", 1, 0), ("W", 1, 1), ("W", 2, 0)] * 2,
    *[("(N-1)W", 1, 0), ("(N-1)W", 1, 1), ("NW", 1, -1), ("NW", 1, 0), ("NW", 1, 1)] * 2,
    ("NW", 2, 1),
    ("ms", 30_000, 0),
    ("E", 1, 0),
    ("E", 1, 1),
)
gaps = weighted(
    (12, st.sampled_from(_FIXED_GAPS)),
    (4, st.builds(lambda n: ("ms", n, 0), st.integers(min_value=0, max_value=2_500))),
    (2, st.builds(lambda k, o: ("W", k, o), st.integers(0, 3), st.integers(-1, 1))),
    (1, st.builds(lambda n: ("ms", n, 0), st.integers(min_value=0, max_value=10**8))),
)
back_gaps = st.sampled_from([("back", 1, 0), ("backW", 1, -1), ("backW", 1, 0), ("backNW", 1, 0)])


def step_ms(step: tuple[str, int, int], window_ms: int, samples: int) -> int:
    unit, count, offset = step
    size = unit_ms(unit.removeprefix("back") or "ms", window_ms, samples, EXPIRY_MS)
    if unit.startswith("back"):
        size = -size
    ms = count * size + (-offset if size < 0 else offset)
    return ms if size < 0 else max(ms, 0)


def draft(kind: str, **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """An operation before the trace gives it its time: its name, arguments and clock step."""
    return st.fixed_dictionaries({"op": st.just(kind), "gap": gaps, **fields})


def drafts(table: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[list[dict[str, Any]]]:
    """A trace's drafts: the length first (it shrinks), then that many."""
    return st.integers(min_value=1, max_value=MAX_OPS).flatmap(
        lambda n: st.lists(table, min_size=n, max_size=n)
    )


def timed(
    draft_op: dict[str, Any], now: int, window_ms: int, samples: int
) -> tuple[dict[str, Any], int]:
    """The draft as an operation at its time (the clock stepped first)."""
    now += step_ms(draft_op["gap"], window_ms, samples)
    op = {"op": draft_op["op"], "t": now}
    op.update((k, v) for k, v in draft_op.items() if k not in ("op", "gap", "pick"))
    return op, now


# The client quota managers a trace drives.
TYPES: Final = ("produce", "fetch", "request")
