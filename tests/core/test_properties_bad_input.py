"""Property tests of bad input: the Rust core (``kquota``) beside a twin, on traces of the
property tests (``tests/support/core_traces.py``).

Valid calls go to two managers (or two rates), invalid ones
(NaN, infinite and negative values, quotas <= 0, throttles <= 0, wrong types, empty
entities, unencodable names, out-of-range integers, broken batches, bad window configs)
to the first only. Each invalid call must raise the documented exception with a message
naming the bad value, and afterwards the two must be indistinguishable.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import kquota
import numpy as np
from core_traces import (
    CI,
    EntitySpec,
    ManagerConfig,
    Raised,
    RateConfig,
    Step,
    advance,
    channel_step,
    check_same,
    encodable_client_names,
    encodable_entities,
    encodable_user_names,
    finite_values,
    fmt_arg,
    lone_surrogate_text,
    manager_configs,
    observable_state,
    outcome,
    rate_traces,
    run_step,
    shown,
    surrogates_shown,
    timed_step,
    type_shown,
    untimed_step,
    valid_quotas,
    valid_throttles,
    valid_usages,
)
from hypothesis import event, given, note, settings
from hypothesis import strategies as st
from kquota import InvalidValueError
from value_pools import TINY_AND_HUGE, weighted


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
    (4, channel_step("handle", *_valid_client, valid_usages)),
    (2, untimed_step("set_quota", encodable_entities, valid_quotas)),
    (1, untimed_step("remove_quota", encodable_entities)),
    (1, timed_step("record", *_valid_client, valid_usages)),
    (1, timed_step("unrecord", *_valid_client, valid_usages)),
    (1, timed_step("record_no_throttle", *_valid_client, valid_usages)),
    (1, channel_step("throttle", *_valid_client, valid_throttles)),
    (1, timed_step("measure", *_valid_client)),
    (1, timed_step("expired_channels")),
    (1, timed_step("expire_sensors")),
)


@st.composite
def mixed_manager_traces(draw: st.DrawFn) -> tuple[ManagerConfig, list[Step | BadCall]]:
    config = draw(manager_configs())
    prelude = draw(
        st.lists(untimed_step("set_quota", encodable_entities, valid_quotas), max_size=2)
    )
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


_valid_rate_values = st.one_of(finite_values, st.sampled_from(TINY_AND_HUGE))
valid_rate_steps = weighted(
    (4, timed_step("record", _valid_rate_values)),
    (2, timed_step("record_no_check", _valid_rate_values)),
    (2, timed_step("measure")),
    (1, untimed_step("set_quota", st.one_of(st.none(), valid_quotas))),
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
