"""Property tests: the Rust core (``kquota``) against the pure-Python reference model.

Hypothesis generates traces of API calls; each trace runs through a fresh core object and a
fresh model object, and every return value must agree exactly (floats with ``==``, NaN equal
to NaN; an exception on one side must be an exception of the same class on the other).
After every manager step the observable state (``enabled``, ``queue_size``, ``sensor_names``,
``quotas``) is compared too, so a rejected call that changed something is caught at once.

The traces go where callers should not: clocks that go back and jump by up to 2**60 ms,
subnormal, zero, negative-zero and near-overflow values, and user and client names of any
Unicode (empty, NUL, astral planes). Names with a lone surrogate cannot cross into Rust:
there the core alone runs the call, which must raise a ValueError showing the surrogate
and leave the state equal to the model's (which did not run it).

Bad input (last section): valid calls go to two managers (or two rates), invalid ones
(NaN, infinite and negative values, quotas <= 0, throttles <= 0, wrong types, empty
entities, unencodable names, out-of-range integers, broken batches, bad window configs)
to the first only. Each invalid call must raise the documented exception with a message
naming the bad value, and afterwards the two must be indistinguishable.

On a failure, Hypothesis prints the shrunk trace and the notes: one line per step, written
as the Python call that was made (``m.record('alice', 'c1', 1e+18, now_ms=1000)``; ``handle``
is the broker's request handling, see :func:`handle`) followed by what it returned, and both
values where core and model differ. ``--hypothesis-show-statistics`` shows what the traces
exercised (throttles, wrapped throttles, expiry, errors, clocks going back).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Final, Literal

import kquota
import numpy as np
import numpy.typing as npt
import pytest
import reference_model as model
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from kquota import InvalidValueError
from value_pools import TINY_AND_HUGE, unit_ms, weighted

# A fixed, reproducible profile for CI: no example database, no per-example deadline.
CI: Final = settings(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

QuotaType = Literal["produce", "fetch", "request"]
QUOTA_TYPES: Final[tuple[QuotaType, ...]] = ("produce", "fetch", "request")
DEFAULT: Final = kquota.DEFAULT
assert model.DEFAULT == DEFAULT

# -- comparing outcomes ----------------------------------------------------------------------


@dataclass(frozen=True)
class Raised:
    """A call that raised: only the class takes part in comparisons."""

    cls: type[BaseException]
    message: str = field(compare=False)

    def __repr__(self) -> str:
        return f"raised {self.cls.__name__}({self.message!r})"


def normalize(value: object) -> object:
    """A plain, comparable form of a return value (entities and checks become tuples)."""
    if isinstance(value, (kquota.Check, model.Check)):
        return ("Check", value.violated, value.throttle_ms, value.rate)
    if isinstance(value, (kquota.Entity, model.Entity)):
        return ("Entity", value.user, value.client_id)
    if isinstance(value, np.ndarray):
        return ("ndarray", str(value.dtype), value.tolist())
    if isinstance(value, (list, tuple)):
        return type(value)(normalize(item) for item in value)
    return value


def same(a: object, b: object) -> bool:
    """Exact equality, NaN equal to NaN, and the types must match (``1`` is not ``1.0``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def outcome(fn: Callable[[], object]) -> object:
    """The normalized return value of ``fn()``, or :class:`Raised` (Rust panics included)."""
    try:
        return normalize(fn())
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # a Rust PanicException is a BaseException
        return Raised(type(error), str(error))


def check_same(what: str, core: object, ref: object) -> None:
    """Assert that ``core`` and ``ref`` agree; note the value (or both, when they differ)."""
    if same(core, ref):
        note(f"    -> {core!r}")
        return
    note(f"    DIFFERS: {what}\n      core:  {core!r}\n      model: {ref!r}")
    raise AssertionError(f"{what}: core returned {core!r}, model returned {ref!r}")


def fmt_float(value: float) -> str:
    return repr(value) if math.isfinite(value) else f"float({str(value)!r})"


def fmt_arg(value: object) -> str:
    if isinstance(value, float):
        return fmt_float(value)
    return repr(value)


# -- pools of names and values ------------------------------------------------------------


# Principals: the empty name, a principal literally called "<default>" (sanitized to
# %3Cdefault%3E, never the default entity), non-ASCII, and the characters the sanitizer
# treats specially (space -> %20, '+' -> %2B, '*' -> %2A, '%' -> %25).
FREQUENT_USERS: Final = ("alice", "bob")
USERS: Final = ("alice", "bob", "", "<default>", "é", "用户", "🦀 crab", "a b", "a+b*", "50%")
# Client ids are used raw; "<default>" here is a client *named* "<default>".
FREQUENT_CLIENTS: Final = ("c1", "c2")
CLIENTS: Final = ("c1", "c2", "", "<default>", "é", "用户", "🦀", "a b", "+*%")

# Any Unicode as well: every code point (NUL and other controls, astral planes, unassigned
# ones), and the empty string. A Python str with a lone surrogate has no UTF-8 form, so it
# cannot become a Rust string: the core must reject it with a clear error and change
# nothing (the model, like Java, would accept it; see replay_manager_trace).
any_text = st.text(st.characters(exclude_categories=()), max_size=6)
encodable_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=6)


def _join(*parts: str) -> str:
    return "".join(parts)


lone_surrogate_text = st.builds(_join, any_text, st.characters(categories=["Cs"]), any_text)


def _texts(value: object) -> list[str]:
    """The strs in ``value``: a str, an EntitySpec, or a tuple of them."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, EntitySpec):
        return [t for t in (value.user, value.client_id) if t is not None]
    if isinstance(value, tuple):
        return [t for v in value for t in _texts(v)]
    return []


def has_lone_surrogate(value: object) -> bool:
    """Whether ``value`` (a str, an EntitySpec or a tuple of them) holds a lone surrogate."""
    return any(0xD800 <= ord(c) <= 0xDFFF for t in _texts(value) for c in t)


# The frequent names come up more often, so that requests meet the overrides set for them.
# ``encodable_*`` leave out lone surrogates (for record_batch, compared with the model).
encodable_user_names = weighted(
    (8, st.sampled_from(FREQUENT_USERS * 4 + USERS)), (1, encodable_text)
)
encodable_client_names = weighted(
    (8, st.sampled_from(FREQUENT_CLIENTS * 4 + CLIENTS)), (1, encodable_text)
)
user_names = weighted((25, encodable_user_names), (1, lone_surrogate_text))
client_names = weighted((25, encodable_client_names), (1, lone_surrogate_text))

# Entity names: "<default>" would be the default marker, so it is left out of the names.
ENTITY_USERS: Final = tuple(u for u in USERS if u != DEFAULT)
ENTITY_CLIENTS: Final = tuple(c for c in CLIENTS if c != DEFAULT)
_odd_names = weighted((6, any_text), (1, lone_surrogate_text))


@dataclass(frozen=True)
class EntitySpec:
    """An entity, built with the ``Entity`` class of whichever side runs the call."""

    user: str | None
    client_id: str | None

    def build(self, entity_cls: Any) -> object:
        return entity_cls(user=self.user, client_id=self.client_id)

    def __repr__(self) -> str:
        parts = []
        if self.user is not None:
            parts.append("user=DEFAULT" if self.user == DEFAULT else f"user={self.user!r}")
        if self.client_id is not None:
            client = self.client_id
            parts.append("client_id=DEFAULT" if client == DEFAULT else f"client_id={client!r}")
        return f"Entity({', '.join(parts)})"


def _entity(shape: tuple[str, str], user: str, client_id: str) -> EntitySpec:
    pick = {"name": None, "default": DEFAULT, "absent": None}
    return EntitySpec(
        user if shape[0] == "name" else pick[shape[0]],
        client_id if shape[1] == "name" else pick[shape[1]],
    )


# All 8 shapes: (name | DEFAULT | absent) x (name | DEFAULT | absent), minus absent x absent.
ENTITY_SHAPES: Final = tuple(
    (u, c)
    for u in ("name", "default", "absent")
    for c in ("name", "default", "absent")
    if (u, c) != ("absent", "absent")
)


def entity_specs(odd_names: st.SearchStrategy[str]) -> st.SearchStrategy[EntitySpec]:
    """Entities of every shape, named from the pools and sometimes by ``odd_names``."""
    return st.builds(
        _entity,
        st.sampled_from(ENTITY_SHAPES),
        weighted(
            (4, st.sampled_from(FREQUENT_USERS)),
            (4, st.sampled_from(ENTITY_USERS)),
            (1, odd_names),
        ),
        weighted(
            (4, st.sampled_from(FREQUENT_CLIENTS)),
            (4, st.sampled_from(ENTITY_CLIENTS)),
            (1, odd_names),
        ),
    )


entities = entity_specs(_odd_names)
encodable_entities = entity_specs(encodable_text)

valid_quotas = st.one_of(
    st.sampled_from([1e-9, 1.0, 10.0, 100.0, 500.0, 1024.0, 1e6, 1e15]),
    st.floats(min_value=1e-9, max_value=1e15),
    st.floats(min_value=1e-3, max_value=1e4),  # small enough to be violated often
    st.sampled_from(TINY_AND_HUGE),
    st.floats(min_value=0.0, exclude_min=True, allow_infinity=False),
)
invalid_quotas = st.sampled_from([0.0, -0.0, -1.0, -1e-9, math.nan, math.inf, -math.inf])
quota_values = weighted((6, valid_quotas), (1, invalid_quotas))

valid_usages: st.SearchStrategy[float | int] = st.one_of(
    st.sampled_from([0.0, -0.0, 1e-9, 1.0, 100.0, 600.0, 1000.0, 1e6, 1e9, 1e18]),
    st.floats(min_value=0.0, max_value=1e7),
    st.integers(min_value=0, max_value=10**10),
    st.sampled_from(TINY_AND_HUGE),  # two of the largest ones sum to inf
    st.floats(min_value=0.0, allow_infinity=False),
)
invalid_usages = st.sampled_from([-1.0, -1e-9, -1e18, math.nan, math.inf, -math.inf])
usages = weighted((8, valid_usages), (1, invalid_usages))

channels = st.integers(min_value=0, max_value=3)


@dataclass(frozen=True)
class Gap:
    """A clock step, symbolic in the config so that strategies are built once: ``count``
    units (ms, W = window, (N-1)W, NW = the purge horizon, E = sensor expiry) plus
    ``offset`` ms, backwards when ``back``."""

    unit: Literal["ms", "W", "(N-1)W", "NW", "E"]
    count: int = 1
    offset: int = 0
    back: bool = False

    def ms(self, window_ms: int, num_samples: int, expiry_ms: int, monotonic: bool) -> int:
        step = self.count * unit_ms(self.unit, window_ms, num_samples, expiry_ms) + self.offset
        return -step if self.back and not monotonic else step

    def __repr__(self) -> str:
        text = f"{self.count}ms" if self.unit == "ms" else f"{self.count}*{self.unit}"
        if self.offset:
            text += f"{self.offset:+d}ms"
        return f"-({text})" if self.back else f"+{text}"


# Clock steps: mostly forward, on and around window and horizon boundaries; sometimes
# backwards (the clock may go back; nothing may fail). Repeats in the list are weights.
_FIXED_GAPS: Final = (
    *[Gap("ms", 0)] * 8,
    *[Gap("ms", 1), Gap("W", 1, -1), Gap("W", 1), Gap("W", 1, 1), Gap("W", 2)] * 2,
    *[Gap("(N-1)W", 1), Gap("(N-1)W", 1, 1), Gap("NW", 1, -1), Gap("NW", 1), Gap("NW", 1, 1)] * 2,
    Gap("NW", 2, 1),
    Gap("E"),
    Gap("E", 1, 1),
    Gap("ms", 30_000),
    Gap("ms", 3_600_000),
    Gap("ms", 3_600_001),
    Gap("ms", 1, back=True),
    Gap("W", 1, -1, back=True),
    Gap("W", 1, back=True),
    Gap("W", 1, 1, back=True),
    Gap("NW", 1, back=True),
    Gap("ms", 3_600_000, back=True),
)
small_gaps = weighted(
    (6, st.sampled_from(_FIXED_GAPS)),
    (2, st.builds(Gap, st.just("ms"), st.integers(min_value=0, max_value=2500))),
    (1, st.builds(Gap, st.just("W"), st.integers(0, 3), st.integers(-1, 1))),
    (1, st.builds(Gap, st.just("ms"), st.integers(1, 2500), back=st.just(True))),
)
# Traces also jump by years and by up to 2**60 ms either way (see advance()).
_HUGE_JUMPS: Final = tuple(2**k for k in (31, 40, 52, 53, 60))
gaps = weighted(
    (30, small_gaps),
    (1, st.builds(Gap, st.just("ms"), st.sampled_from(_HUGE_JUMPS), back=st.booleans())),
    (1, st.builds(Gap, st.just("ms"), st.integers(2**31, 2**60), back=st.booleans())),
)

TIME_LIMIT: Final = 2**61
"""Trace clocks stay within +-2**61 ms, so that no difference of two times (nor a time
plus a throttle) leaves Java's long: there the core follows Java's wrapping arithmetic
and the model computes with unbounded ints, so they would differ by design."""


def advance(now: int, gap: int, monotonic: bool) -> int:
    """``now + gap``, turned around (or, for a monotonic clock, not taken) if it would
    leave +-TIME_LIMIT; every gap is at most 2**60, so the result stays inside."""
    if abs(now + gap) <= TIME_LIMIT:
        return now + gap
    return now if monotonic else now - gap


# -- manager traces ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One call. ``gap`` moves the simulated clock before the call (every step, timed or not)."""

    method: str
    args: tuple[object, ...] = ()
    gap: Gap = Gap("ms", 0)
    timed: bool = False
    channel: int | None = None

    def __repr__(self) -> str:
        args = ", ".join(fmt_arg(a) for a in self.args)
        channel = "" if self.channel is None else f" channel={self.channel}"
        return f"<{self.gap!r} {self.method}({args}){channel}>"

    def source(self, now_ms: int, receiver: str = "m") -> str:
        """The step as the Python call that runs it on ``receiver``."""
        args = [fmt_arg(a) for a in self.args]
        if self.timed:
            args.append(f"now_ms={now_ms}")
        if self.channel is not None:
            args.append(f"channel={self.channel}")
        if self.method == "enabled":
            return f"{receiver}.enabled"
        if self.method == "handle":
            return f"handle({receiver}, {', '.join(args)})"
        return f"{receiver}.{self.method}({', '.join(args)})"


@dataclass(frozen=True)
class ManagerConfig:
    quota_type: QuotaType
    num_samples: int
    window_ms: int
    sensor_expiry_ms: int
    start_ms: int
    monotonic: bool
    """When set, backward gaps step forward instead: the clock never goes back."""

    def make(self, module: Any) -> Any:
        return module.QuotaManager(
            self.quota_type,
            num_samples=self.num_samples,
            window_ms=self.window_ms,
            sensor_expiry_ms=self.sensor_expiry_ms,
        )

    def gap_ms(self, gap: Gap) -> int:
        return gap.ms(self.window_ms, self.num_samples, self.sensor_expiry_ms, self.monotonic)


@st.composite
def manager_configs(draw: st.DrawFn) -> ManagerConfig:
    num_samples = draw(st.integers(min_value=1, max_value=12))
    window_ms = 1000 * draw(st.integers(min_value=1, max_value=5))
    # Mostly Kafka's hour; sometimes small, so that sensors expire within a trace.
    expiry = draw(
        st.one_of(
            st.just(3_600_000),
            st.sampled_from([0, 1, window_ms, 2 * window_ms, num_samples * window_ms, 30_000]),
        )
    )
    return ManagerConfig(
        quota_type=draw(st.sampled_from(QUOTA_TYPES)),
        num_samples=num_samples,
        window_ms=window_ms,
        sensor_expiry_ms=expiry,
        start_ms=draw(st.sampled_from([0, 5_000, 1_700_000_000_000, -(2**60), 2**60])),
        monotonic=draw(st.booleans()),
    )


def _timed(method: str, *args: st.SearchStrategy[Any]) -> st.SearchStrategy[Step]:
    return st.builds(Step, st.just(method), st.tuples(*args), gaps, timed=st.just(True))


def _untimed(method: str, *args: st.SearchStrategy[Any]) -> st.SearchStrategy[Step]:
    return st.builds(Step, st.just(method), st.tuples(*args), gaps)


def _with_channel(method: str, *args: st.SearchStrategy[Any]) -> st.SearchStrategy[Step]:
    return st.builds(
        Step, st.just(method), st.tuples(*args), gaps, timed=st.just(True), channel=channels
    )


_valid_throttles = st.one_of(
    st.sampled_from([1, 2, 100, 999, 1000, 1001, 5000, 30_000, 2**31 - 1, 2**40]),
    st.integers(min_value=1, max_value=50_000),
)
throttles = weighted((5, _valid_throttles), (1, st.sampled_from([0, -1, -(2**31)])))

_client = (user_names, client_names)
_configuration = weighted(
    (2, _untimed("set_quota", entities, quota_values)), (1, _untimed("remove_quota", entities))
)
# The broker's handling of a request (see handle()).
_handling = _with_channel("handle", *_client, valid_usages)
_recording = st.one_of(
    _timed("record", *_client, usages),
    _timed("unrecord", *_client, usages),
    _timed("record_no_throttle", *_client, usages),
    _with_channel("throttle", *_client, throttles),
)
_reading = st.one_of(
    _timed("measure", *_client),
    _timed("throttle_time_avg", *_client),
    _timed("max_value_in_quota_window", *_client),
    _timed("expired_channels"),
    _timed("expire_sensors"),
    _untimed("bound", *_client),
    _untimed("tags", *_client),
    _untimed("quota_for", *_client),
    _untimed("quota", entities),
    _untimed("queue_size"),
    _untimed("sensor_names"),
    _untimed("enabled"),
)
manager_steps = weighted(
    (6, _handling),
    (2, _configuration),
    (4, _recording),
    (4, _reading),
    (1, _timed("expire_sensors")),
    (1, _timed("measure", *_client)),
)

MAX_STEPS: Final = 40


@st.composite
def manager_traces(draw: st.DrawFn) -> tuple[ManagerConfig, list[Step]]:
    config = draw(manager_configs())
    # A few valid quotas first, so that most traces have quotas enabled from the start.
    prelude = draw(st.lists(_untimed("set_quota", entities, valid_quotas), min_size=0, max_size=3))
    # Lists drawn by Hypothesis are short on average: draw the length first (it shrinks).
    length = draw(st.integers(min_value=1, max_value=MAX_STEPS))
    return config, prelude + draw(st.lists(manager_steps, min_size=length, max_size=length))


def handle(
    manager: Any, user: str, client_id: str, value: float, now_ms: int, channel: int
) -> tuple[int, int | None]:
    """The broker's handling of one request (the conformance op ``record``): record with a
    check; a throttled fetch is unrecorded; a positive throttle mutes the channel."""
    throttle: int = manager.record(user, client_id, value, now_ms)
    end_ms = None
    if throttle > 0:
        if manager.quota_type == "fetch":
            manager.unrecord(user, client_id, value, now_ms)
        end_ms = manager.throttle(user, client_id, throttle, now_ms, channel=channel)
    return throttle, end_ms


def run_step(target: Any, module: Any, step: Step, now_ms: int) -> object:
    """Run ``step`` on ``target`` (a manager or rate of ``module``); its outcome (building
    an entity is part of the call: the core's ``Entity`` rejects unencodable names)."""

    def call() -> object:
        args: list[Any] = [
            a.build(module.Entity) if isinstance(a, EntitySpec) else a for a in step.args
        ]
        if step.method == "enabled":
            return target.enabled
        if step.method == "handle":
            user, client_id, value = args
            channel = step.channel
            assert channel is not None
            return handle(target, user, client_id, value, now_ms, channel)
        kwargs: dict[str, object] = {}
        if step.timed:
            kwargs["now_ms"] = now_ms
        if step.channel is not None:
            kwargs["channel"] = step.channel
        return getattr(target, step.method)(*args, **kwargs)

    return outcome(call)


def check_unencodable_rejected(what: str, step: Step, result: object) -> None:
    """A call naming a str with a lone surrogate must raise kquota's InvalidValueError (a
    KquotaError and a ValueError) that says so (it
    then changed nothing: the caller compares the state with the model's, which did not
    run the call). See surrogates_shown for what the message shows."""
    shows = surrogates_shown(*step.args)
    if (
        isinstance(result, Raised)
        and issubclass(result.cls, InvalidValueError)
        and any(s in result.message for s in shows)
    ):
        note(f"    -> {result!r}")
        return
    note(f"    NOT REJECTED: {what}: {result!r}")
    raise AssertionError(
        f"{what}: expected an InvalidValueError showing one of {shows}, got {result!r}"
    )


def observable_state(manager: Any) -> object:
    """What can be read without side effects (no purge, no sensor creation)."""
    quotas = sorted(
        (e.user is None, e.user or "", e.client_id is None, e.client_id or "", v)
        for e, v in manager.quotas()
    )
    return (manager.enabled, manager.queue_size(), manager.sensor_names(), quotas)


def replay_manager_trace(config: ManagerConfig, steps: Sequence[Step]) -> None:
    core, ref = config.make(kquota), config.make(model)
    note(
        f"m = QuotaManager({config.quota_type!r}, num_samples={config.num_samples}, "
        f"window_ms={config.window_ms}, sensor_expiry_ms={config.sensor_expiry_ms})"
    )
    now = config.start_ms
    seen: set[str] = set()
    for index, step in enumerate(steps):
        before, now = now, advance(now, config.gap_ms(step.gap), config.monotonic)
        if now < before:
            seen.add("clock went backwards")
        if abs(now - before) >= 2**31:
            seen.add("clock jumped by 2**31 ms or more")
        source = step.source(now)
        note(f"[{index}] {source}")
        result = run_step(core, kquota, step, now)
        if has_lone_surrogate(step.args):
            check_unencodable_rejected(f"step {index}: {source}", step, result)
            seen.add("name with a lone surrogate rejected")
        else:
            check_same(f"step {index}: {source}", result, run_step(ref, model, step, now))
        seen.update(_events(step, result))
        core_state, ref_state = observable_state(core), observable_state(ref)
        if core_state != ref_state:  # no NaN in there: plain equality is exact
            check_same(f"state after step {index}", core_state, ref_state)
    for what in sorted(seen):
        event(what)


def _events(step: Step, result: object) -> list[str]:
    """What a step exercised, for ``--hypothesis-show-statistics``."""
    if isinstance(result, Raised):
        return [f"{step.method} raised {result.cls.__name__}"]
    if step.method == "handle" and isinstance(result, tuple):
        result = result[0]
    events = []
    texts = [t for a in step.args for t in _texts(a)]
    if any("\x00" in t for t in texts):
        events.append("a name with NUL")
    if any(ord(c) > 0xFFFF for t in texts for c in t):
        events.append("a name beyond the BMP")
    if step.method in ("record", "handle") and isinstance(result, int) and result != 0:
        events.append("throttled" if result > 0 else "throttle wrapped negative")
    if step.method in ("expire_sensors", "expired_channels") and result:
        events.append(f"{step.method} returned something")
    if step.method == "measure" and isinstance(result, float) and not math.isnan(result):
        events.append("measured a sensor")
    return events


@pytest.mark.slow
@settings(CI, max_examples=400)
@given(manager_traces())
def test_manager_traces_agree(trace: tuple[ManagerConfig, list[Step]]) -> None:
    replay_manager_trace(*trace)


# -- SampledRate --------------------------------------------------------------------------------


@dataclass(frozen=True)
class RateConfig:
    num_samples: int
    window_ms: int
    quota: float | None
    start_ms: int
    monotonic: bool

    def gap_ms(self, gap: Gap) -> int:
        return gap.ms(self.window_ms, self.num_samples, 3_600_000, self.monotonic)


_finite_values = st.one_of(
    st.sampled_from([0.0, -0.0, 1e-9, -1e-9, 1.0, -1.0, 600.0, 1e18, -1e18, 1e300]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1e6, max_value=1e6),
    st.floats(min_value=-1e6, max_value=1e6),
    st.integers(min_value=-(10**6), max_value=10**6),
)
rate_values = weighted((12, _finite_values), (1, st.sampled_from([math.nan, math.inf, -math.inf])))
rate_bounds = weighted((1, st.none()), (3, valid_quotas), (1, invalid_quotas))
rate_steps = weighted(
    (4, _timed("record", rate_values)),
    (2, _timed("record_no_check", rate_values)),
    (2, _timed("measure")),
    (1, _untimed("set_quota", rate_bounds)),
)


@st.composite
def rate_traces(draw: st.DrawFn) -> tuple[RateConfig, list[Step]]:
    config = RateConfig(
        num_samples=draw(st.integers(min_value=1, max_value=30)),
        window_ms=draw(
            st.one_of(st.sampled_from([1, 2, 1000, 5000]), st.integers(min_value=1, max_value=5000))
        ),
        quota=draw(st.one_of(st.none(), valid_quotas)),
        start_ms=draw(st.sampled_from([0, 1_700_000_000_000, -(2**60), 2**60])),
        monotonic=draw(st.booleans()),
    )
    length = draw(st.integers(min_value=1, max_value=MAX_STEPS))
    return config, draw(st.lists(rate_steps, min_size=length, max_size=length))


@settings(CI, max_examples=300)
@given(rate_traces())
def test_sampled_rate_traces_agree(trace: tuple[RateConfig, list[Step]]) -> None:
    config, steps = trace
    core = kquota.SampledRate(config.num_samples, config.window_ms, config.quota)
    ref = model.SampledRate(config.num_samples, config.window_ms, config.quota)
    note(
        f"r = SampledRate(num_samples={config.num_samples}, window_ms={config.window_ms}, "
        f"quota={config.quota!r})"
    )
    now = config.start_ms
    seen: set[str] = set()
    for index, step in enumerate(steps):
        now = advance(now, config.gap_ms(step.gap), config.monotonic)
        source = step.source(now, receiver="r")
        note(f"[{index}] {source}")
        result = run_step(core, kquota, step, now)
        check_same(f"step {index}: {source}", result, run_step(ref, model, step, now))
        if isinstance(result, Raised):
            seen.add(f"{step.method} raised {result.cls.__name__}")
        elif isinstance(result, tuple) and result[0] == "Check" and result[1]:
            seen.add("violated" if result[2] < 2**63 - 1 else "violated, throttle saturated")
        check_same(
            f"config after step {index}",
            (core.num_samples, core.window_ms, core.quota),
            (ref.num_samples, ref.window_ms, ref.quota),
        )
    for what in sorted(seen):
        event(what)


# -- record_batch -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    config: ManagerConfig
    quotas: tuple[tuple[EntitySpec, float], ...]
    keys: tuple[tuple[str, str], ...]
    now_ms: tuple[int, ...]
    key_index: tuple[int, ...]
    values: tuple[float, ...]
    unrecord_if: tuple[bool, ...] | None

    def arrays(
        self,
    ) -> tuple[
        npt.NDArray[np.int64],
        npt.NDArray[np.int64],
        npt.NDArray[np.float64],
        npt.NDArray[np.bool_] | None,
    ]:
        return (
            np.array(self.now_ms, dtype=np.int64),
            np.array(self.key_index, dtype=np.int64),
            np.array(self.values, dtype=np.float64),
            None if self.unrecord_if is None else np.array(self.unrecord_if, dtype=np.bool_),
        )

    def configured(self, module: Any) -> Any:
        manager = self.config.make(module)
        for entity, value in self.quotas:
            manager.set_quota(entity.build(module.Entity), value)
        return manager


MAX_EVENTS: Final = 400


@st.composite
def batches(draw: st.DrawFn) -> Batch:
    config = draw(manager_configs())
    quotas = draw(st.lists(st.tuples(encodable_entities, valid_quotas), max_size=6))
    keys = draw(
        st.lists(st.tuples(encodable_user_names, encodable_client_names), min_size=1, max_size=6)
    )
    # Events pick their clock step and value from small drawn palettes with a drawn seed:
    # long batches at a small drawing cost (Hypothesis still shrinks n, palettes and seed).
    n = draw(st.integers(min_value=0, max_value=MAX_EVENTS))
    gap_palette = [config.gap_ms(g) for g in draw(st.lists(small_gaps, min_size=1, max_size=4))]
    value_palette = draw(st.lists(valid_usages.map(float), min_size=1, max_size=4))
    rng = np.random.default_rng(draw(st.integers(min_value=0, max_value=2**32 - 1)))
    steps = [gap_palette[i] for i in rng.integers(0, len(gap_palette), n).tolist()]
    now_ms = [config.start_ms + int(t) for t in np.cumsum(steps, dtype=np.int64).tolist()]
    values = [value_palette[i] for i in rng.integers(0, len(value_palette), n).tolist()]
    key_index = rng.integers(0, len(keys), n).tolist()
    # Only a fetch manager takes unrecord_if (the others refuse it: test_core.py).
    with_unrecord = config.quota_type == "fetch" and draw(st.booleans())
    unrecord_if = (rng.random(n) < 0.2).tolist() if with_unrecord else None
    return Batch(
        config,
        tuple(quotas),
        tuple(keys),
        tuple(now_ms),
        tuple(key_index),
        tuple(values),
        None if unrecord_if is None else tuple(unrecord_if),
    )


def _read_client(manager: Any, user: str, client_id: str, now_ms: int) -> object:
    def read() -> object:
        return (manager.measure(user, client_id, now_ms), manager.bound(user, client_id))

    return outcome(read)


@settings(CI, max_examples=200)
@given(batches())
def test_record_batch_equals_one_at_a_time(batch: Batch) -> None:
    note(repr(batch))
    arrays = batch.arrays()
    core_batch = batch.configured(kquota)
    result = outcome(lambda: core_batch.record_batch(*arrays[:3], list(batch.keys), arrays[3]))

    # The same events one at a time on a second core manager, as the broker does them.
    core_single = batch.configured(kquota)
    fetch = batch.config.quota_type == "fetch"
    expected: list[int] = []
    for i, (t, k, v) in enumerate(zip(batch.now_ms, batch.key_index, batch.values, strict=True)):
        user, client = batch.keys[k]
        throttle = core_single.record(user, client, v, now_ms=t)
        if fetch and (throttle > 0 or (batch.unrecord_if is not None and batch.unrecord_if[i])):
            core_single.unrecord(user, client, v, now_ms=t)
        expected.append(throttle)
    check_same("core batch vs core one at a time", result, ("ndarray", "int32", expected))
    event(f"throttled {'no' if not any(t > 0 for t in expected) else 'some'} events")

    # The model's batch.
    ref_batch = batch.configured(model)
    ref_result = outcome(lambda: ref_batch.record_batch(*arrays[:3], list(batch.keys), arrays[3]))
    check_same("core batch vs model batch", result, ref_result)

    # Afterwards the three managers are in the same state.
    end = batch.now_ms[-1] if batch.now_ms else batch.config.start_ms
    for user, client in batch.keys:
        reads = [_read_client(m, user, client, end) for m in (core_batch, core_single, ref_batch)]
        check_same(f"({user!r}, {client!r}) batch vs one at a time", reads[0], reads[1])
        check_same(f"({user!r}, {client!r}) core vs model", reads[0], reads[2])
    state = observable_state(core_batch)
    check_same("state: batch vs one at a time", state, observable_state(core_single))
    check_same("state: core vs model", state, observable_state(ref_batch))


@settings(CI, max_examples=100)
@given(batches(), st.integers(min_value=0, max_value=MAX_EVENTS), invalid_usages)
def test_record_batch_rejects_bad_usage_before_recording(
    batch: Batch, position: int, bad: float
) -> None:
    """A bad value anywhere in a batch: both raise the same class and record nothing."""
    if not batch.values:
        return
    now, index, values, drops = batch.arrays()
    values[position % len(values)] = bad
    core, ref = batch.configured(kquota), batch.configured(model)
    check_same(
        "bad batch",
        outcome(lambda: core.record_batch(now, index, values, list(batch.keys), drops)),
        outcome(lambda: ref.record_batch(now, index, values, list(batch.keys), drops)),
    )
    check_same("state after a bad batch", observable_state(core), observable_state(ref))
    assert core.sensor_names() == []


# -- bad input: a clear error, and nothing changes ------------------------------------------


def shown(value: float) -> tuple[str, ...]:
    """How a message may show a rejected number: Python's repr of it as a float, or Rust's
    (``1e-9`` for ``1e-09``, ``1e300`` for ``1e+300``, ``NaN``)."""
    number = float(value)
    if math.isnan(number):
        return ("NaN",)
    text = repr(number)
    return tuple(dict.fromkeys((text, re.sub(r"e\+?(-?)0*(\d)", r"e\1\2", text))))


def type_shown(value: object) -> tuple[str, ...]:
    """How a TypeError names a value of the wrong type: by its type (``None`` by itself)."""
    return ("None",) if value is None else (type(value).__name__,)


def surrogates_shown(*values: object) -> tuple[str, ...]:
    """What a rejection of the lone surrogates in ``values`` shows: the reason, after the
    parameter's name and the value's repr (which escapes the surrogate, ``\\ud800``)."""
    del values  # the message quotes the value; the reason is what every one shares
    return ("is not valid Unicode text",)


@dataclass(frozen=True)
class BadCall:
    """A call that must raise ``expect`` with a message showing one of ``shows`` (any
    message when ``shows`` is empty). ``QuotaManager``, ``SampledRate`` and ``Entity``
    are constructor calls; any other method is called on the object under test."""

    method: str
    args: tuple[object, ...]
    kwargs: tuple[tuple[str, object], ...]
    expect: type[BaseException]
    shows: tuple[str, ...]

    def __repr__(self) -> str:
        args = [fmt_arg(a) for a in self.args] + [f"{k}={fmt_arg(v)}" for k, v in self.kwargs]
        receiver = "kquota." if self.method in ("QuotaManager", "SampledRate", "Entity") else "x."
        return f"{receiver}{self.method}({', '.join(args)}) must raise {self.expect.__name__}"

    def run(self, target: Any) -> object:
        def call() -> object:
            args = [a.build(kquota.Entity) if isinstance(a, EntitySpec) else a for a in self.args]
            kwargs = dict(self.kwargs)
            if self.method in ("QuotaManager", "SampledRate", "Entity"):
                return getattr(kquota, self.method)(*args, **kwargs)
            return getattr(target, self.method)(*args, **kwargs)

        return outcome(call)

    def check(self, result: object) -> None:
        if (
            isinstance(result, Raised)
            and issubclass(result.cls, self.expect)
            and (not self.shows or any(s in result.message for s in self.shows))
        ):
            note(f"    -> {result!r}")
            event(f"{self.method} raised {result.cls.__name__}")
            return
        note(f"    WRONG: {result!r}")
        shows = f" naming one of {self.shows}" if self.shows else ""
        raise AssertionError(f"{self!r}{shows}; got {result!r}")


def _bad(
    method: str,
    *args: object,
    expect: type[BaseException],
    shows: tuple[str, ...] = (),
    **kwargs: object,
) -> BadCall:
    return BadCall(method, args, tuple(kwargs.items()), expect, shows)


_times = st.integers(min_value=-(2**62), max_value=2**62)
_bad_usages = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -1, -(2**70), -5e-324, -1e300]),
    st.floats(max_value=0.0, exclude_max=True, allow_infinity=False),
)
_bad_quotas = st.one_of(
    st.sampled_from([0, 0.0, -0.0, -1, math.nan, math.inf, -math.inf, -5e-324]),
    st.floats(max_value=0.0, allow_infinity=False),
)
_non_str: st.SearchStrategy[object] = st.sampled_from(
    [None, 1, 1.5, b"alice", ["alice"], ("alice",)]
)
_non_number: st.SearchStrategy[object] = st.sampled_from(["1", None, b"1", [1.0], 1j, {}])
_non_int: st.SearchStrategy[object] = st.sampled_from(
    [1.5, 5.0, "5", b"5", [5]]
)  # (None means "the clock": valid)
_non_entity: st.SearchStrategy[object] = st.sampled_from(
    ["alice", None, ("alice", None), {"user": "alice"}, 1]
)
# Integers outside what the core's i64 / u64 parameters hold.
_outside_i64 = st.sampled_from([2**63, -(2**63) - 1, 2**64, -(2**70)])
_outside_u64 = st.sampled_from([-1, -(2**63), 2**64])
_names = st.tuples(encodable_user_names, encodable_client_names)
_USAGE_METHODS: Final = ("record", "unrecord", "record_no_throttle")
_CLIENT_METHODS: Final = (*_USAGE_METHODS, "measure", "tags", "quota_for", "bound")


@st.composite
def bad_manager_calls(draw: st.DrawFn) -> BadCall:
    """One invalid call on a QuotaManager, or an invalid constructor call."""
    kind = draw(st.integers(min_value=0, max_value=15))
    user, client = draw(_names)
    now = draw(_times)
    wrong: object
    args: tuple[object, ...]
    if kind == 0:
        value = draw(_bad_usages)
        method = draw(st.sampled_from(_USAGE_METHODS))
        return _bad(
            method,
            user,
            client,
            value,
            now_ms=now,
            expect=kquota.InvalidUsageError,
            shows=shown(value),
        )
    if kind == 1:
        value = draw(_bad_quotas)
        return _bad(
            "set_quota",
            draw(encodable_entities),
            value,
            expect=kquota.InvalidQuotaError,
            shows=shown(value),
        )
    if kind == 2:
        throttle = draw(st.integers(min_value=-(2**63), max_value=0))
        return _bad(
            "throttle",
            user,
            client,
            throttle,
            now_ms=now,
            expect=kquota.InvalidUsageError,
            shows=(f"throttle_ms {throttle}",),
        )
    if kind == 3:  # a name that is not a str
        wrong = draw(_non_str)
        method = draw(st.sampled_from(_CLIENT_METHODS))
        args = (wrong, client) if draw(st.booleans()) else (user, wrong)
        if method in _USAGE_METHODS:
            args += (1.0,)
        return _bad(method, *args, expect=TypeError, shows=type_shown(wrong))
    if kind == 4:  # a usage that is not a number
        wrong = draw(_non_number)
        method = draw(st.sampled_from(_USAGE_METHODS))
        return _bad(
            method, user, client, wrong, now_ms=now, expect=TypeError, shows=type_shown(wrong)
        )
    if kind == 5:  # a time, throttle or channel that is not an int
        wrong = draw(_non_int)
        return draw(
            st.sampled_from(
                [
                    _bad(
                        "record",
                        user,
                        client,
                        1.0,
                        now_ms=wrong,
                        expect=TypeError,
                        shows=type_shown(wrong),
                    ),
                    _bad(
                        "measure",
                        user,
                        client,
                        now_ms=wrong,
                        expect=TypeError,
                        shows=type_shown(wrong),
                    ),
                    _bad("expire_sensors", now_ms=wrong, expect=TypeError, shows=type_shown(wrong)),
                    _bad(
                        "throttle",
                        user,
                        client,
                        wrong,
                        now_ms=now,
                        expect=TypeError,
                        shows=type_shown(wrong),
                    ),
                    _bad(
                        "throttle",
                        user,
                        client,
                        10,
                        now_ms=now,
                        channel=wrong,
                        expect=TypeError,
                        shows=type_shown(wrong),
                    ),
                ]
            )
        )
    if kind == 6:  # an entity that is not an Entity, or a quota that is not a number
        wrong = draw(_non_entity)
        method = draw(st.sampled_from(["set_quota", "remove_quota", "quota"]))
        if method == "set_quota" and draw(st.booleans()):
            number = draw(_non_number)
            return _bad(
                "set_quota",
                draw(encodable_entities),
                number,
                expect=TypeError,
                shows=type_shown(number),
            )
        args = (wrong, 1.0) if method == "set_quota" else (wrong,)
        return _bad(method, *args, expect=TypeError, shows=type_shown(wrong))
    if kind == 7:  # an entity with neither dimension, or a dimension that is not a str
        wrong = draw(st.sampled_from([1, 1.5, b"alice", ["alice"]]))
        return draw(
            st.sampled_from(
                [
                    _bad("Entity", expect=kquota.InvalidConfigError, shows=("entity",)),
                    _bad(
                        "Entity",
                        user=None,
                        client_id=None,
                        expect=kquota.InvalidConfigError,
                        shows=("entity",),
                    ),
                    _bad("Entity", user=wrong, expect=TypeError, shows=type_shown(wrong)),
                    _bad("Entity", "alice", wrong, expect=TypeError, shows=type_shown(wrong)),
                ]
            )
        )
    if kind == 8:  # a name with a lone surrogate: not representable in Rust
        text = draw(lone_surrogate_text)
        method = draw(st.sampled_from([*_CLIENT_METHODS, "throttle", "set_quota", "quota"]))
        if method in ("set_quota", "quota"):
            spec = EntitySpec(text, None) if draw(st.booleans()) else EntitySpec("bob", text)
            args = (spec, 5.0) if method == "set_quota" else (spec,)
        else:
            args = (text, client) if draw(st.booleans()) else (user, text)
            if method in _USAGE_METHODS:
                args += (1.0,)
            elif method == "throttle":
                args += (10,)
        return _bad(method, *args, expect=InvalidValueError, shows=surrogates_shown(text))
    if kind == 9:  # an integer outside the core's range
        return draw(
            st.sampled_from(
                [
                    _bad(
                        "record",
                        user,
                        client,
                        1.0,
                        now_ms=draw(_outside_i64),
                        expect=InvalidValueError,
                        shows=("invalid now_ms",),
                    ),
                    _bad(
                        "expire_sensors",
                        now_ms=draw(_outside_i64),
                        expect=InvalidValueError,
                        shows=("invalid now_ms",),
                    ),
                    _bad(
                        "throttle",
                        user,
                        client,
                        2**63,
                        now_ms=now,
                        expect=InvalidValueError,
                        shows=("invalid throttle_ms 9223372036854775808",),
                    ),
                    _bad(
                        "throttle",
                        user,
                        client,
                        10,
                        now_ms=now,
                        channel=draw(_outside_u64),
                        expect=InvalidValueError,
                        shows=("invalid channel",),
                    ),
                ]
            )
        )
    if kind in (10, 11):  # a bad batch
        return draw(bad_batches(kind == 11))
    # kind 12..15: constructors with a bad configuration
    n = draw(st.sampled_from([0, -1, 65_536, 2**40]))
    window = draw(st.sampled_from([0, -1000, 1, 999, 1500]))
    expiry = draw(st.integers(max_value=-1, min_value=-(2**63)))
    name = draw(st.sampled_from(["Produce", "bytes", "", "produce "]))
    if kind == 12:
        return _bad("QuotaManager", name, expect=kquota.InvalidConfigError, shows=(f'"{name}"',))
    quota_type, setting, value = [
        ("fetch", "num_samples", n),
        ("request", "window_ms", window),
        ("produce", "sensor_expiry_ms", expiry),
    ][kind - 13]
    return _bad(
        "QuotaManager",
        quota_type,
        **{setting: value},
        expect=kquota.InvalidConfigError,
        shows=(f"{setting} {value}",),
    )


@st.composite
def bad_batches(draw: st.DrawFn, wrong_length: bool) -> BadCall:
    keys = draw(st.lists(_names, min_size=1, max_size=3))
    n = draw(st.integers(min_value=1, max_value=6))
    now = np.arange(n, dtype=np.int64) * 100
    index = np.array(draw(st.lists(st.integers(0, len(keys) - 1), min_size=n, max_size=n)))
    values = np.ones(n)
    at = draw(st.integers(min_value=0, max_value=n - 1))
    if wrong_length:
        return _bad(
            "record_batch",
            now,
            index[: n - 1],
            values,
            keys,
            expect=kquota.InvalidUsageError,
            shows=("differ in length",),
        )
    problem = draw(st.sampled_from(["index", "value", "surrogate"]))
    if problem == "index":
        index[at] = draw(st.sampled_from([len(keys), -1, 2**40]))
        return _bad(
            "record_batch",
            now,
            index,
            values,
            keys,
            expect=kquota.InvalidUsageError,
            shows=(f"key_index {index[at]} at event {at}",),
        )
    if problem == "value":
        values[at] = draw(_bad_usages)
        return _bad(
            "record_batch",
            now,
            index,
            values,
            keys,
            expect=kquota.InvalidUsageError,
            shows=tuple(f"event {at}: invalid usage value {s}" for s in shown(values[at])),
        )
    text = draw(lone_surrogate_text)
    keys[index[at]] = (text, keys[index[at]][1])
    return _bad(
        "record_batch", now, index, values, keys, expect=ValueError, shows=surrogates_shown(text)
    )


_valid_client = (encodable_user_names, encodable_client_names)
valid_manager_steps = weighted(
    (4, _with_channel("handle", *_valid_client, valid_usages)),
    (2, _untimed("set_quota", encodable_entities, valid_quotas)),
    (1, _untimed("remove_quota", encodable_entities)),
    (1, _timed("record", *_valid_client, valid_usages)),
    (1, _timed("unrecord", *_valid_client, valid_usages)),
    (1, _timed("record_no_throttle", *_valid_client, valid_usages)),
    (1, _with_channel("throttle", *_valid_client, _valid_throttles)),
    (1, _timed("measure", *_valid_client)),
    (1, _timed("expired_channels")),
    (1, _timed("expire_sensors")),
)


@st.composite
def mixed_manager_traces(draw: st.DrawFn) -> tuple[ManagerConfig, list[Step | BadCall]]:
    config = draw(manager_configs())
    prelude = draw(st.lists(_untimed("set_quota", encodable_entities, valid_quotas), max_size=2))
    length = draw(st.integers(min_value=1, max_value=30))
    calls = st.one_of(valid_manager_steps, bad_manager_calls())
    return config, prelude + draw(st.lists(calls, min_size=length, max_size=length))


def manager_state(manager: kquota.QuotaManager, now_ms: int) -> object:
    """Everything observable, the sensors' readings at ``now_ms`` included (which purges:
    both managers compared are read alike)."""
    readings = sorted(
        (r.user, r.client_id, r.rate, r.bound, r.throttle_time_avg)
        for r in manager.snapshot(now_ms=now_ms)
    )
    return (observable_state(manager), manager.next_unmute_ms(), readings)


def run_beside_twin(
    subject: Any,
    twin: Any,
    config: ManagerConfig | RateConfig,
    calls: list[Step | BadCall],
    state: Callable[[Any, int], object],
    receiver: str,
) -> int:
    """Valid calls go to ``subject`` and ``twin``, invalid ones to ``subject`` only: each
    invalid call must raise as documented and leave ``state`` as the twin's. The last time."""
    now = config.start_ms
    for index, call in enumerate(calls):
        if isinstance(call, Step):
            now = advance(now, config.gap_ms(call.gap), config.monotonic)
            source = call.source(now, receiver=receiver)
            note(f"[{index}] {source}")
            check_same(
                f"step {index}: {source}",
                run_step(subject, kquota, call, now),
                run_step(twin, kquota, call, now),
            )
            continue
        note(f"[{index}] {call!r}")
        call.check(call.run(subject))
        check_same(f"state after bad call {index}", state(subject, now), state(twin, now))
    return now


@settings(CI, max_examples=250)
@given(mixed_manager_traces())
def test_bad_manager_input_raises_clearly_and_changes_nothing(
    trace: tuple[ManagerConfig, list[Step | BadCall]],
) -> None:
    """Valid calls go to two managers, invalid ones to the first only: each invalid call
    raises the documented exception naming the bad value, and afterwards the two managers
    are indistinguishable."""
    config, calls = trace
    subject, twin = config.make(kquota), config.make(kquota)
    now = run_beside_twin(subject, twin, config, calls, manager_state, receiver="m")
    clients = {c.args[:2] for c in calls if isinstance(c, Step) and c.method == "measure"}
    for user, client in sorted(clients, key=repr):
        check_same(
            f"measure({user!r}, {client!r})",
            outcome(partial(subject.measure, user, client, now_ms=now)),
            outcome(partial(twin.measure, user, client, now_ms=now)),
        )


_valid_rate_values = st.one_of(_finite_values, st.sampled_from(TINY_AND_HUGE))
valid_rate_steps = weighted(
    (4, _timed("record", _valid_rate_values)),
    (2, _timed("record_no_check", _valid_rate_values)),
    (2, _timed("measure")),
    (1, _untimed("set_quota", st.one_of(st.none(), valid_quotas))),
)


@st.composite
def bad_rate_calls(draw: st.DrawFn) -> BadCall:
    """One invalid call on a SampledRate, or an invalid constructor call."""
    kind = draw(st.integers(min_value=0, max_value=7))
    now = draw(_times)
    method = draw(st.sampled_from(["record", "record_no_check"]))
    if kind == 0:
        value = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
        return _bad(
            method,
            value,
            now_ms=now,
            expect=kquota.InvalidUsageError,
            shows=tuple(f"recorded value {s}" for s in shown(value)),
        )
    if kind == 1:
        value = draw(_bad_quotas)
        return _bad(
            "set_quota",
            value,
            expect=kquota.InvalidQuotaError,
            shows=tuple(f"quota value {s}" for s in shown(value)),
        )
    if kind == 2:
        wrong = draw(st.sampled_from(["1", b"1", [1.0], 1j, {}]))
        which = draw(st.sampled_from([method, "set_quota"]))
        args = (wrong,) if which == "set_quota" else (wrong, now)
        return _bad(which, *args, expect=TypeError, shows=type_shown(wrong))
    if kind == 3:
        wrong = draw(_non_int)
        return draw(
            st.sampled_from(
                [
                    _bad(method, 1.0, now_ms=wrong, expect=TypeError, shows=type_shown(wrong)),
                    _bad("measure", now_ms=wrong, expect=TypeError, shows=type_shown(wrong)),
                ]
            )
        )
    if kind == 4:
        return _bad(
            method,
            1.0,
            now_ms=draw(_outside_i64),
            expect=InvalidValueError,
            shows=("invalid now_ms",),
        )
    n = draw(st.sampled_from([0, -1, 65_536, 2**40]))
    window = draw(st.sampled_from([0, -1, -(2**62), 2**62]))
    quota = draw(_bad_quotas)
    return [
        _bad("SampledRate", n, 1000, expect=kquota.InvalidConfigError, shows=(f"num_samples {n}",)),
        _bad(
            "SampledRate",
            11,
            window,
            expect=kquota.InvalidConfigError,
            shows=(f"window_ms {window}",),
        ),
        _bad(
            "SampledRate",
            11,
            1000,
            quota,
            expect=kquota.InvalidQuotaError,
            shows=tuple(f"quota value {s}" for s in shown(quota)),
        ),
    ][kind - 5]


@st.composite
def mixed_rate_traces(draw: st.DrawFn) -> tuple[RateConfig, list[Step | BadCall]]:
    config = draw(rate_traces())[0]
    length = draw(st.integers(min_value=1, max_value=30))
    calls = st.one_of(valid_rate_steps, bad_rate_calls())
    return config, draw(st.lists(calls, min_size=length, max_size=length))


@settings(CI, max_examples=150)
@given(mixed_rate_traces())
def test_bad_rate_input_raises_clearly_and_changes_nothing(
    trace: tuple[RateConfig, list[Step | BadCall]],
) -> None:
    config, calls = trace
    subject, twin = (
        kquota.SampledRate(config.num_samples, config.window_ms, config.quota) for _ in range(2)
    )
    run_beside_twin(subject, twin, config, calls, rate_state, receiver="r")


def rate_state(rate: Any, now_ms: int) -> object:
    return (rate.quota, rate.num_samples, rate.window_ms, rate.measure(now_ms=now_ms))
