"""Hypothesis traces of calls for the Rust core (``kquota``) and the pure-Python reference
model, and how they run and compare: shared by the property tests
(``tests/core/test_properties.py`` and ``tests/core/test_properties_bad_input.py``).

Outcomes are compared exactly (floats with ``==``, NaN equal to NaN; an exception must be of
the same class on both sides). The pools of names and values go where callers should not:
clocks that go back and jump by up to 2**60 ms, subnormal, zero, negative-zero and
near-overflow values, and names of any Unicode (with lone surrogates, which cannot cross into
Rust)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import kquota
import numpy as np
import reference_model as model
from hypothesis import HealthCheck, event, note, settings
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


def timed_step(method: str, *args: st.SearchStrategy[Any]) -> st.SearchStrategy[Step]:
    return st.builds(Step, st.just(method), st.tuples(*args), gaps, timed=st.just(True))


def untimed_step(method: str, *args: st.SearchStrategy[Any]) -> st.SearchStrategy[Step]:
    return st.builds(Step, st.just(method), st.tuples(*args), gaps)


def channel_step(method: str, *args: st.SearchStrategy[Any]) -> st.SearchStrategy[Step]:
    return st.builds(
        Step, st.just(method), st.tuples(*args), gaps, timed=st.just(True), channel=channels
    )


valid_throttles = st.one_of(
    st.sampled_from([1, 2, 100, 999, 1000, 1001, 5000, 30_000, 2**31 - 1, 2**40]),
    st.integers(min_value=1, max_value=50_000),
)
throttles = weighted((5, valid_throttles), (1, st.sampled_from([0, -1, -(2**31)])))

_client = (user_names, client_names)
_configuration = weighted(
    (2, untimed_step("set_quota", entities, quota_values)),
    (1, untimed_step("remove_quota", entities)),
)
# The broker's handling of a request (see handle()).
_handling = channel_step("handle", *_client, valid_usages)
_recording = st.one_of(
    timed_step("record", *_client, usages),
    timed_step("unrecord", *_client, usages),
    timed_step("record_no_throttle", *_client, usages),
    channel_step("throttle", *_client, throttles),
)
_reading = st.one_of(
    timed_step("measure", *_client),
    timed_step("throttle_time_avg", *_client),
    timed_step("max_value_in_quota_window", *_client),
    timed_step("expired_channels"),
    timed_step("expire_sensors"),
    untimed_step("bound", *_client),
    untimed_step("tags", *_client),
    untimed_step("quota_for", *_client),
    untimed_step("quota", entities),
    untimed_step("queue_size"),
    untimed_step("sensor_names"),
    untimed_step("enabled"),
)
manager_steps = weighted(
    (6, _handling),
    (2, _configuration),
    (4, _recording),
    (4, _reading),
    (1, timed_step("expire_sensors")),
    (1, timed_step("measure", *_client)),
)

MAX_STEPS: Final = 40


@st.composite
def manager_traces(draw: st.DrawFn) -> tuple[ManagerConfig, list[Step]]:
    config = draw(manager_configs())
    # A few valid quotas first, so that most traces have quotas enabled from the start.
    prelude = draw(
        st.lists(untimed_step("set_quota", entities, valid_quotas), min_size=0, max_size=3)
    )
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


finite_values = st.one_of(
    st.sampled_from([0.0, -0.0, 1e-9, -1e-9, 1.0, -1.0, 600.0, 1e18, -1e18, 1e300]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=-1e6, max_value=1e6),
    st.floats(min_value=-1e6, max_value=1e6),
    st.integers(min_value=-(10**6), max_value=10**6),
)
rate_values = weighted((12, finite_values), (1, st.sampled_from([math.nan, math.inf, -math.inf])))
rate_bounds = weighted((1, st.none()), (3, valid_quotas), (1, invalid_quotas))
rate_steps = weighted(
    (4, timed_step("record", rate_values)),
    (2, timed_step("record_no_check", rate_values)),
    (2, timed_step("measure")),
    (1, untimed_step("set_quota", rate_bounds)),
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


# -- how a rejected value is shown ---------------------------------------------------------


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
