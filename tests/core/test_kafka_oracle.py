"""kquota against Apache Kafka's own quota classes, on random traces.

Hypothesis generates traces of operations; each batch of traces goes to one JVM running
Kafka's ``ClientQuotaManager`` (produce, fetch), ``ClientRequestQuotaManager``,
``ControllerMutationQuotaManager``, ``ConnectionQuotas`` and bare ``Sensor``s with a
``Rate`` or a ``TokenBucket`` (``apache-kafka/oracle/QuotaOracle.java``, driven by
``tests/support/kafka_oracle.py``), and the same traces run through fresh kquota objects. Every
operation must get the same answer from both, bit for bit: throttles as the same ints,
rates, bounds, averages and token counts as the same doubles (compared by their bits, a
NaN equal to any NaN), tags, sensor names, drained channels and queue sizes equal.

A trace is drawn as a list of independent drafts (an operation, its arguments and a
clock step), then resolved against the trace's own state (which requests await their
response, which listeners exist, which managers have quotas): so Hypothesis shrinks a
failing trace by deleting operations. On a failure the report lists the trace up to the
operation that differed, with Kafka's answer and kquota's.

Each random-trace test prints what it compared (``pytest -s`` shows it) and requires a
number of traces and operations, and that throttles, wrapped throttles, expiry and the
other rarer paths were met. The fixed-seed run (derandomized) is what ``make test`` runs.
``KQUOTA_ORACLE_SEED`` (an int, or ``random``) runs another seed and
``KQUOTA_ORACLE_SCALE`` that many times the examples: ``make fuzz-oracle`` sets both.

Where kquota departs from Kafka on purpose, at its validation boundary, traces do not go;
the last tests show Kafka's answer and kquota's refusal side by side.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import kquota
import paths
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from kafka_oracle import (
    ORACLE_VERSIONS,
    KafkaOracle,
    from_bits,
    missing_tools,
    release,
    start_oracle,
    to_bits,
)
from value_pools import TINY_AND_HUGE, unit_ms, weighted

# -- the fixed seed and the open-ended mode -----------------------------------------------

_SEED: Final = os.environ.get("KQUOTA_ORACLE_SEED", "")
_SCALE: Final = int(os.environ.get("KQUOTA_ORACLE_SCALE", "1"))


def _profile(examples: int) -> settings:
    """Derandomized (the fixed seed of ``make test``) unless KQUOTA_ORACLE_SEED is set."""
    return settings(
        max_examples=examples * _SCALE,
        derandomize=not _SEED,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def _seeded(test: Callable[..., None]) -> Callable[..., None]:
    if _SEED and _SEED != "random":
        from hypothesis import seed

        return seed(int(_SEED))(test)
    return test


@pytest.fixture(scope="session", params=ORACLE_VERSIONS)
def oracle(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaOracle]:
    """One oracle JVM per pinned Kafka version for the session: compiled into a temp
    folder, stopped at the end. Every test here runs against each. Skipped only when Kafka's
    jars or a JDK are missing (``make tools`` fetches the jars)."""
    version: str = request.param
    why = missing_tools(version)
    if why is not None:
        pytest.skip(why)
    running = start_oracle(tmp_path_factory.mktemp(f"kafka-oracle-{version}-"), version)
    try:
        yield running
    finally:
        assert running.close() == 0, "the Kafka oracle exited with an error"


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


# == produce, fetch and request ============================================================

TYPES: Final = ("produce", "fetch", "request")
types = st.sampled_from(TYPES)
_client = {"u": users, "c": clients}
client_drafts = weighted(
    (
        14,
        draft(
            "record",
            m=st.sampled_from(("produce", "fetch")),
            **_client,
            v=usages,
            auto=st.integers(0, 3),
            unrec=st.integers(0, 3),
            ch=channels,
        ),
    ),
    (
        8,
        draft(
            "record", m=st.just("request"), **_client, ns=nanos, auto=st.integers(0, 3), ch=channels
        ),
    ),
    (6, draft("set", m=types, e=entities, q=quotas)),
    (2, draft("remove", m=types, e=entities)),
    (8, draft("read", m=types, **_client)),
    (3, draft("throttle", m=types, **_client, ms=throttles, ch=channels)),
    (4, draft("drain", m=types)),
    (1, draft("qsize", m=types)),
    (2, draft("maxval", m=types, **_client)),
    (2, draft("expire")),
    (2, draft("sensors")),
    (1, draft("snapshot", m=types)),
    (1, draft("enabled", m=types)),
    (2, draft("unrecord", m=st.sampled_from(("produce", "fetch")), **_client, v=usages)),
    (2, draft("nothrottle", m=st.sampled_from(("produce", "fetch")), **_client, v=usages)),
    (3, draft("network", ns=nanos, pick=picks)),
    (1, draft("exempt", **_client, ns=nanos)),
)


@st.composite
def client_traces(draw: st.DrawFn) -> Trace:
    samples, window_s = draw(samples_counts), draw(window_seconds)
    start = draw(st.sampled_from(STARTS))
    # Most traces configure something first, so that most records are measured.
    prelude = draw(st.lists(draft("set", m=types, e=entities, q=quotas), max_size=3))
    return resolve_client(samples, window_s, start, prelude + draw(drafts(client_drafts)))


def resolve_client(samples: int, window_s: int, start: int, plan: list[dict[str, Any]]) -> Trace:
    now = start
    enabled = dict.fromkeys(TYPES, False)  # before 4.2: any quota ever set or removed
    quotas: dict[str, set[tuple[Any, Any]]] = {m: set() for m in TYPES}  # from 4.2: any now
    pending: list[int] = []  # requests whose response is not sent yet
    rids = 0
    ops: list[dict[str, Any]] = []
    for item in plan:
        op, now = timed(item, now, 1000 * window_s, samples)
        kind = op["op"]
        if kind in ("set", "remove"):
            op.update(op.pop("e"))
            enabled[op["m"]] = True
            entity = (op.get("eu"), op.get("ec"))
            if kind == "set":
                quotas[op["m"]].add(entity)
            else:
                quotas[op["m"]].discard(entity)
        elif kind == "record":
            # The broker's handling: a throttled fetch is unrecorded, a throttle mutes
            # the channel (most of the time; sometimes the bare manager call).
            if not op.pop("auto"):
                del op["ch"]
            if op.pop("unrec", 0) and op["m"] == "fetch":
                op["unrec"] = True
            if op["m"] == "request":
                op["rid"] = rids
                pending.append(rids)
                rids += 1
        elif kind == "exempt":
            op.update(m="request", rid=rids)
            pending.append(rids)
            rids += 1
        elif kind == "network":
            if not pending or not quotas["request"]:
                # (From 4.2 a response sent after the last request quota went records
                # into a level no longer enabled: Kafka does, kquota does not.)
                continue
            op.update(m="request", rid=pending.pop(item["pick"] % len(pending)))
        elif kind in ("unrecord", "nothrottle") and not (enabled[op["m"]] and quotas[op["m"]]):
            # Kafka's broker calls these only while a quota level is enabled; kquota
            # ignores them otherwise (test_unrecord_before_any_quota_is_ignored shows the
            # difference), and from 4.2 a level is enabled only while a quota exists.
            continue
        ops.append(op)
    return Trace("client", {"samples": samples, "window_s": window_s}, start, ops)


READ_FIELDS: Final = ("tags", "quota", "bound", "rate", "tavg")
"""What a client ``read`` answers, in the order Kafka's oracle reads them."""


class ClientRun:
    """kquota's produce, fetch and request managers driven by one client trace."""

    def __init__(self, trace: Trace, kafka_version: str) -> None:
        config = trace.config
        self.managers = {
            m: kquota.QuotaManager(
                m,
                num_samples=config["samples"],
                window_ms=1000 * config["window_s"],
                kafka_version=kafka_version,
            )
            for m in TYPES
        }
        # rid -> user, client, whether Kafka installs a network-thread callback, exempt
        self.requests: dict[int, tuple[str, str, bool, bool]] = {}

    def apply(self, op: dict[str, Any]) -> dict[str, Any]:
        kind, t = op["op"], op["t"]
        mgr = self.managers[op.get("m", "produce")]
        u, c = op.get("u", ""), op.get("c", "")
        match kind:
            case "set":
                mgr.set_quota(entity_of(op), op["q"])
            case "remove":
                mgr.remove_quota(entity_of(op))
            case "record":
                value = float(op["ns"]) if mgr.quota_type == "request" else op["v"]
                if mgr.quota_type == "request":
                    # Kafka installs the network-thread callback only with quotas on.
                    self.requests[op["rid"]] = (u, c, mgr.enabled, False)
                throttle = mgr.record(u, c, value, t)
                if throttle > 0:
                    if op.get("unrec"):
                        mgr.unrecord(u, c, value, t)
                    if "ch" in op:
                        mgr.throttle(u, c, throttle, t, channel=op["ch"])
                return {"th": throttle}
            case "exempt":
                # Kafka records exempt time (and installs its callback) only with request
                # quotas on, into exempt-request-time: kquota keeps no such metric.
                self.requests[op["rid"]] = (u, c, mgr.enabled, True)
            case "network":
                user, client, installed, exempt = self.requests.pop(op["rid"])
                if installed and not exempt:
                    mgr.record_no_throttle(user, client, float(op["ns"]), t)
                return {"cb": installed}
            case "unrecord":
                mgr.unrecord(u, c, op["v"], t)
            case "nothrottle":
                # request: the network thread's nanoseconds, as Kafka's callback records
                value = float(op["ns"]) if mgr.quota_type == "request" else op["v"]
                mgr.record_no_throttle(u, c, value, t)
            case "throttle":
                mgr.throttle(u, c, op["ms"], t, channel=op["ch"])
            case "drain":
                return {"ch": sorted(mgr.expired_channels(t))}
            case "read":
                # Only the fields asked, in Kafka's order (a rate or an average read
                # purges, as a JMX read does).
                quota = mgr.quota_for(u, c)
                readers = {
                    "tags": lambda: list(mgr.tags(u, c)),
                    "quota": lambda: canon(UNLIMITED if quota is None else quota),
                    "bound": lambda: canon(mgr.bound(u, c)),
                    "rate": lambda: canon(mgr.measure(u, c, t)),
                    "tavg": lambda: canon(mgr.throttle_time_avg(u, c, t)),
                }
                fields = op.get("fields", READ_FIELDS)
                return {k: readers[k]() for k in READ_FIELDS if k in fields}
            case "qsize":
                return {"n": mgr.queue_size()}
            case "maxval":
                return {"v": canon(mgr.max_value_in_quota_window(u, c, t))}
            case "expire":
                return {
                    "removed": sorted(
                        n for m in self.managers.values() for n in m.expire_sensors(t)
                    )
                }
            case "sensors":
                return {
                    "names": sorted(n for m in self.managers.values() for n in m.sensor_names())
                }
            case "snapshot":
                rows = [
                    [r.user, r.client_id, canon(r.rate), canon(r.bound), canon(r.throttle_time_avg)]
                    for r in mgr.snapshot(t)
                ]
                return {"rows": sorted(rows, key=lambda row: (row[0], row[1]))}
            case "enabled":
                return {"on": mgr.enabled}
        return {}


def run_client_trace(trace: Trace, kafka_version: str) -> list[dict[str, Any]]:
    run = ClientRun(trace, kafka_version)
    return [attempt(lambda op=op: run.apply(op)) for op in trace.ops]


def kafka_client_view(op: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    """Kafka's answer in the terms kquota's is written in."""
    match op["op"]:
        case "read":
            return {
                k: answer[k] if k == "tags" else kcanon(answer[k])
                for k in READ_FIELDS
                if k in answer
            }
        case "qsize":
            return {"n": int(answer["n"])}
        case "maxval":
            return {"v": kcanon(answer["v"])}
        case "snapshot":
            return {
                "rows": [
                    [u, c, kcanon(r), kcanon(b), kcanon(a)] for u, c, r, b, a in answer["rows"]
                ]
            }
    return answer


def client_events(trace: Trace, op: dict[str, Any], answer: dict[str, Any], tally: Tally) -> None:
    cap = 1000 * trace.config["window_s"]
    if op["op"] == "record" and op["m"] == "request" and answer.get("th") == cap:
        tally.seen("request throttle at its one-window cap")
    if op["op"] == "read" and answer.get("rate") not in (None, "NaN", 0):
        tally.seen("read a rate")


@pytest.mark.slow
def test_client_quotas_agree_with_kafka(oracle: KafkaOracle) -> None:
    """Produce, fetch and request managers: records (with the broker's unrecord of a
    throttled fetch and its throttle), network-thread and exempt time, quota changes at
    all 8 entity levels, throttles and the delay queue, reads, expiry, snapshots."""
    tally = Tally()

    @_seeded
    @_profile(examples=560)
    @given(st.lists(client_traces(), min_size=1, max_size=4))
    def check(traces: list[Trace]) -> None:
        compare_batch(oracle, traces, run_client_trace, kafka_client_view, tally, client_events)

    check()
    print(tally)
    assert tally.traces >= 1000 * _SCALE and tally.operations >= 50_000 * _SCALE, tally
    # A throttle past the int range wraps before 4.4 and saturates from 4.4.
    beyond = "record saturated" if release(oracle.version) >= (4, 4) else "record wrapped negative"
    for seen in (
        "record throttled",
        beyond,
        "request throttle at its one-window cap",
        "expire returned something",
        "drain returned something",
        "read a rate",
    ):
        assert tally.events.get(seen, 0) > 0, (seen, tally.events)


# == controller mutations ==================================================================

permits = weighted(
    (4, st.sampled_from([0.0, 1.0, 5.0, 10.0, 90.0, 100.0, 1000.0, 1e9])),
    (4, st.integers(min_value=0, max_value=200).map(float)),
    (2, st.floats(min_value=0.0, max_value=500.0)),
    (1, st.sampled_from(TINY_AND_HUGE)),
)
mutation_drafts = weighted(
    (10, draft("record", **_client, v=permits)),
    (8, draft("strict", **_client, v=permits)),
    (8, draft("permissive", **_client, v=permits)),
    (6, draft("set", e=entities, q=quotas)),
    (2, draft("remove", e=entities)),
    (
        8,
        draft(
            "rq_open",
            **_client,
            strict=st.booleans(),
            topics=st.lists(permits, min_size=1, max_size=4),
        ),
    ),
    (3, draft("rq_throttle", pick=picks)),
    (4, draft("rq_later", pick=picks, v=permits)),
    (8, draft("read", **_client)),
    (2, draft("throttle", **_client, ms=throttles, ch=channels)),
    (2, draft("drain")),
    (1, draft("qsize")),
    (2, draft("expire")),
    (2, draft("sensors")),
    (1, draft("enabled")),
)


@st.composite
def mutation_traces(draw: st.DrawFn) -> Trace:
    samples, window_s = draw(samples_counts), draw(window_seconds)
    start = draw(st.sampled_from(STARTS))
    prelude = draw(st.lists(draft("set", e=entities, q=quotas), max_size=3))
    now = start
    opened = 0
    ops: list[dict[str, Any]] = []
    for item in prelude + draw(drafts(mutation_drafts)):
        op, now = timed(item, now, 1000 * window_s, samples)
        if op["op"] in ("set", "remove"):
            op.update(op.pop("e"))
        elif op["op"] == "rq_open":
            # As the controller uses one: made for a request, its topics recorded one
            # after the other at once; ``rq_later`` records into it again after other
            # operations (quota changes, expiry), which must not move its sensor.
            op["rid"] = opened
            topics = [
                {"op": "rq_record", "t": op["t"], "rid": opened, "v": v} for v in op.pop("topics")
            ]
            opened += 1
            ops += [op, *topics]
            continue
        elif op["op"] == "rq_throttle":
            if not opened:
                continue
            op["rid"] = item["pick"] % opened
        elif op["op"] == "rq_later":
            if not opened:
                continue
            op = {"op": "rq_record", "t": op["t"], "rid": item["pick"] % opened, "v": op["v"]}
        ops.append(op)
    return Trace("mutation", {"samples": samples, "window_s": window_s}, start, ops)


def run_mutation_trace(trace: Trace, kafka_version: str) -> list[dict[str, Any]]:
    mgr = kquota.ControllerMutationQuotaManager(
        num_samples=trace.config["samples"],
        window_ms=1000 * trace.config["window_s"],
        kafka_version=kafka_version,
    )
    requests: dict[int, kquota.MutationRequestQuota] = {}

    def apply(op: dict[str, Any]) -> dict[str, Any]:
        kind, t = op["op"], op["t"]
        u, c = op.get("u", ""), op.get("c", "")
        match kind:
            case "set":
                mgr.set_quota(entity_of(op), op["q"])
            case "remove":
                mgr.remove_quota(entity_of(op))
            case "record":
                return {"th": mgr.record(u, c, op["v"], t)}
            case "strict" | "permissive":
                record = mgr.record_strict if kind == "strict" else mgr.record_permissive
                check = record(u, c, op["v"], t)
                return {"ok": check.accepted, "last": check.throttle_ms}
            case "rq_open":
                request = mgr.request_quota(u, c, op["strict"], t)
                requests[op["rid"]] = request
                return {"exc": request.is_exceeded}
            case "rq_record":
                request = requests[op["rid"]]
                check = request.record(op["v"], t)
                return {
                    "ok": check.accepted,
                    "last": request.last_throttle_ms,
                    "exc": request.is_exceeded,
                    "th": request.throttle_time(t),
                }
            case "rq_throttle":
                return {"th": requests[op["rid"]].throttle_time(t)}
            case "throttle":
                mgr.throttle(u, c, op["ms"], t, channel=op["ch"])
            case "drain":
                return {"ch": sorted(mgr.expired_channels(t))}
            case "read":
                quota = mgr.quota_for(u, c)
                return {
                    "tags": list(mgr.tags(u, c)),
                    "quota": canon(UNLIMITED if quota is None else quota),
                    "tokens": canon(mgr.tokens(u, c, t)),
                    "mrate": canon(mgr.mutation_rate(u, c, t)),
                    "tavg": canon(mgr.throttle_time_avg(u, c, t)),
                }
            case "qsize":
                return {"n": mgr.queue_size}
            case "expire":
                return {"removed": sorted(mgr.expire_sensors(t))}
            case "sensors":
                return {"names": sorted(mgr.sensor_names())}
            case "enabled":
                return {"on": mgr.enabled}
        return {}

    return [attempt(lambda op=op: apply(op)) for op in trace.ops]


def kafka_mutation_view(op: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    match op["op"]:
        case "read":
            return {
                "tags": answer["tags"],
                **{k: kcanon(answer[k]) for k in ("quota", "tokens", "mrate", "tavg")},
            }
        case "qsize":
            return {"n": int(answer["n"])}
        case "strict" | "permissive":
            # A fresh quota object per record: accepted, and the throttle it computed
            # (an unbounded quota, while quotas are off, computes none).
            return {"ok": answer["ok"], "last": answer.get("last", 0)}
        case "rq_record":
            return {
                "ok": answer["ok"],
                "last": answer.get("last", 0),
                "exc": answer["exc"],
                "th": answer["th"],
            }
    return answer


@pytest.mark.slow
def test_controller_mutation_quotas_agree_with_kafka(oracle: KafkaOracle) -> None:
    """The token-bucket quota: strict and permissive records, request quotas that record
    topic after topic, bursts up to the bucket, quota changes, throttles and expiry."""
    tally = Tally()

    @_seeded
    @_profile(examples=180)
    @given(st.lists(mutation_traces(), min_size=1, max_size=4))
    def check(traces: list[Trace]) -> None:
        compare_batch(oracle, traces, run_mutation_trace, kafka_mutation_view, tally)

    check()
    print(tally)
    assert tally.traces >= 300 * _SCALE and tally.operations >= 16_000 * _SCALE, tally
    for seen in (
        "record throttled",
        "strict throttled",
        "permissive throttled",
        "rq_record throttled",
    ):
        assert tally.events.get(seen, 0) > 0, (seen, tally.events)


@pytest.mark.slow
def test_a_mutation_request_keeps_its_sensor_through_quota_changes_and_expiry(
    oracle: KafkaOracle,
) -> None:
    """A request's quota records into the sensor it got when it was made: after a quota
    change moves its client to other tags, and after expiry removed that sensor and the
    quota it enforced was removed (a removed sensor's quota no longer follows the
    configuration). Each step's answer must be Kafka's."""
    hour = 3_600_000
    moved = [
        {"op": "set", "t": 1, "q": 1.0, "eu": "N:alice", "ec": None},
        {"op": "rq_open", "t": 1000, "u": "alice", "c": "c1", "strict": False, "rid": 0},
        {"op": "set", "t": 1000, "q": 100.0, "eu": "N:alice", "ec": "N:c1"},
        {"op": "rq_record", "t": 2000, "rid": 0, "v": 9.0},
        {"op": "read", "t": 2000, "u": "alice", "c": "c1"},
    ]
    expired = [
        {"op": "set", "t": 1, "q": 1.0, "eu": "N:alice", "ec": None},
        {"op": "rq_open", "t": 1000, "u": "alice", "c": "c1", "strict": False, "rid": 0},
        {"op": "expire", "t": 2 * hour},
        {"op": "remove", "t": 2 * hour, "eu": "N:alice", "ec": None},
        {"op": "rq_record", "t": 2 * hour + 1000, "rid": 0, "v": 90.0},
        {"op": "strict", "t": 2 * hour + 1000, "u": "alice", "c": "c1", "v": 90.0},
        {"op": "sensors", "t": 2 * hour + 1000},
    ]
    traces = [Trace("mutation", {"samples": 5, "window_s": 1}, 0, ops) for ops in (moved, expired)]
    tally = Tally()
    compare_batch(oracle, traces, run_mutation_trace, kafka_mutation_view, tally)
    assert tally.operations == len(moved) + len(expired)
    # the point of each trace: the held sensor throttles where a fresh one would not
    (moved_answers, expired_answers) = (run_mutation_trace(t, oracle.version) for t in traces)
    assert moved_answers[3]["last"] > 0 and expired_answers[4]["last"] > 0
    assert expired_answers[5] == {"ok": True, "last": 0}


# == connection creation rates =============================================================

LISTENERS: Final = ("EXTERNAL", "REPLICATION", "ADMIN")
# "::1" and "0:0:0:0:0:0:0:1" are one address; so are the two spellings of 2001:db8::1.
IPS: Final = ("192.168.1.1", "10.0.0.1", "::1", "0:0:0:0:0:0:0:1", "2001:db8::1", "2001:DB8:0::1")
ips = st.sampled_from(IPS[:1] * 6 + IPS)  # mostly one address: its quota is reached
ip_rates = weighted(
    (3, st.integers(min_value=1, max_value=5)),
    (2, st.integers(min_value=1, max_value=40)),
    (1, st.just(2**31 - 1)),
)
listener_rates = weighted(
    (2, st.none()),
    (3, st.integers(min_value=1, max_value=5)),
    (1, st.integers(min_value=1, max_value=40)),
    (1, st.just(2**31 - 1)),
)
broker_rates = weighted(
    (3, st.integers(min_value=0, max_value=5)),
    (1, st.integers(min_value=0, max_value=40)),
    (1, st.just(2**31 - 1)),
)
# Rates are whole connections per second: they are reached over short horizons.
connection_samples = weighted((4, st.integers(min_value=1, max_value=3)), (1, samples_counts))
connection_windows = weighted((4, st.just(1)), (1, window_seconds))
connection_drafts = weighted(
    (20, draft("connect", pick=picks, ip=ips)),
    (6, draft("accept", pick=picks)),
    (6, draft("admit", pick=picks, ip=ips)),
    (5, draft("set_ip", ip=st.one_of(st.none(), ips), rate=st.one_of(st.none(), ip_rates))),
    (1, draft("set_broker", rate=broker_rates)),
    (2, draft("set_listener", pick=picks, rate=listener_rates)),
    (1, draft("add_listener", pick=picks, rate=listener_rates)),
    (1, draft("remove_listener", pick=picks)),
    (6, draft("read")),
    (2, draft("expire")),
    (2, draft("sensors")),
)


@st.composite
def connection_traces(draw: st.DrawFn) -> Trace:
    samples, window_s = draw(connection_samples), draw(connection_windows)
    start = draw(st.sampled_from(STARTS))
    broker_rate = draw(st.one_of(st.none(), broker_rates))
    initial = draw(st.lists(st.sampled_from(LISTENERS), min_size=1, max_size=3, unique=True))
    config = {
        "samples": samples,
        "window_s": window_s,
        "broker_rate": broker_rate,
        "ibl": draw(st.sampled_from([None, "REPLICATION"])),
        "listeners": [[name, draw(listener_rates)] for name in initial],
    }
    prelude = draw(
        st.lists(
            draft("set_ip", ip=st.one_of(st.none(), ips), rate=ip_rates), min_size=1, max_size=2
        )
    )
    live = set(initial)
    now = start
    ops: list[dict[str, Any]] = []
    for item in prelude + draw(drafts(connection_drafts)):
        op, now = timed(item, now, 1000 * window_s, samples)
        kind = op["op"]
        if kind in ("connect", "accept", "admit", "set_listener", "remove_listener"):
            if not live:
                continue
            op["l"] = sorted(live)[item["pick"] % len(live)]
            if kind == "remove_listener":
                live.discard(op["l"])
        elif kind == "add_listener":
            absent = sorted(set(LISTENERS) - live)
            if not absent:
                continue
            op["l"] = absent[item["pick"] % len(absent)]
            live.add(op["l"])
        elif kind == "read":
            op.update(ips=list(IPS), ls=sorted(live))
        ops.append(op)
    return Trace("connection", config, start, ops)


def run_connection_trace(trace: Trace, kafka_version: str) -> list[dict[str, Any]]:
    del kafka_version  # the same in every release kquota follows
    config = trace.config
    broker_rate = config["broker_rate"]
    q = kquota.ConnectionQuotas(
        num_samples=config["samples"],
        window_ms=1000 * config["window_s"],
        max_connection_creation_rate=kquota.UNLIMITED_CONNECTION_RATE
        if broker_rate is None
        else broker_rate,
        inter_broker_listener=config["ibl"],
    )
    for name, rate in config["listeners"]:
        q.add_listener(name, rate)

    def apply(op: dict[str, Any]) -> dict[str, Any]:
        kind, t = op["op"], op["t"]
        match kind:
            case "set_ip":
                q.set_ip_quota(op["ip"], op["rate"])
            case "set_broker":
                q.set_broker_max_rate(op["rate"])
            case "add_listener":
                q.add_listener(op["l"], op["rate"])
            case "set_listener":
                q.set_listener_max_rate(op["l"], op["rate"])
            case "remove_listener":
                q.remove_listener(op["l"])
            case "accept":
                return {"d": q.accept_delay(op["l"], t)}
            case "admit":
                return {"th": q.admit_ip(op["l"], op["ip"], t)}
            case "connect":
                decision = q.on_new_connection(op["l"], op["ip"], t)
                return {"d": decision.accept_delay_ms, "th": decision.ip_throttle_ms}
            case "read":
                return {
                    "broker": canon(q.broker_rate(t)),
                    "listeners": {
                        name: [
                            canon(q.listener_rate(name, t)),
                            *map(canon, q.listener_throttle_avgs(name, t)),
                        ]
                        for name in op["ls"]
                    },
                    "ips": {
                        ip: [canon(q.ip_rate(ip, t)), canon(q.ip_bound(ip)), q.ip_quota(ip)]
                        for ip in op["ips"]
                    },
                }
            case "expire":
                return {"removed": sorted(q.expire_sensors(t))}
            case "sensors":
                return {"names": sorted(q.ip_sensor_names())}
        return {}

    return [attempt(lambda op=op: apply(op)) for op in trace.ops]


def kafka_connection_view(op: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    if op["op"] != "read":
        return answer
    return {
        "broker": kcanon(answer["broker"]),
        "listeners": {name: [kcanon(b) for b in row] for name, row in answer["listeners"].items()},
        "ips": {ip: [kcanon(r), kcanon(b), quota] for ip, (r, b, quota) in answer["ips"].items()},
    }


def connection_events(
    trace: Trace, op: dict[str, Any], answer: dict[str, Any], tally: Tally
) -> None:
    if op["op"] == "connect" and answer.get("th", 0) > 0:
        tally.seen("connection over its IP quota")
    if op["op"] == "connect" and answer.get("d", 0) > 0:
        tally.seen("acceptor delayed")


@pytest.mark.slow
def test_connection_rate_quotas_agree_with_kafka(oracle: KafkaOracle) -> None:
    """KIP-612: broker-wide and per-listener accept delays, per-IP throttles with
    overrides and a <default>, the protected inter-broker listener, listeners added,
    reconfigured and removed, IP sensor expiry."""
    tally = Tally()

    @_seeded
    @_profile(examples=200)
    @given(st.lists(connection_traces(), min_size=1, max_size=4))
    def check(traces: list[Trace]) -> None:
        compare_batch(
            oracle, traces, run_connection_trace, kafka_connection_view, tally, connection_events
        )

    check()
    print(tally)
    assert tally.traces >= 300 * _SCALE and tally.operations >= 14_000 * _SCALE, tally
    for seen in ("connection over its IP quota", "acceptor delayed", "expire returned something"):
        assert tally.events.get(seen, 0) > 0, (seen, tally.events)


# == one bare Rate, one bare TokenBucket ===================================================

finite_values = weighted(
    (3, st.sampled_from([0.0, -0.0, 1e-9, -1e-9, 1.0, -1.0, 600.0, 1e18, -1e18, 1e300])),
    (1, st.floats(allow_nan=False, allow_infinity=False)),
    (3, st.floats(min_value=-1e6, max_value=1e6)),
    (3, st.integers(min_value=-(10**6), max_value=10**6).map(float)),
)
window_millis = st.one_of(
    st.sampled_from([100, 250, 999, 1000, 1001, 3000, 30_000]),
    st.integers(min_value=100, max_value=30_000),
)


def bare_drafts(family: str) -> st.SearchStrategy[dict[str, Any]]:
    if family == "sensor":
        bounds = st.one_of(st.none(), quotas)
        table = weighted(
            (8, draft("rec", v=finite_values)),
            (3, draft("rec_nc", v=finite_values)),
            (4, draft("measure")),
            (1, draft("setq", q=bounds)),
        )
    else:
        table = weighted(
            (3, draft("rec", v=finite_values)),
            (4, draft("measure")),
            (6, draft("strict", v=permits)),
            (6, draft("permissive", v=permits)),
            (1, draft("setq", q=quotas)),
        )
    # The clock may go back a little: Kafka's classes take any time they are given.
    return st.tuples(table, st.integers(0, 19), back_gaps).map(
        lambda t: {**t[0], "gap": t[2]} if t[1] == 0 else t[0]
    )


@st.composite
def bare_traces(draw: st.DrawFn, family: str) -> Trace:
    samples, window_ms = draw(samples_counts), draw(window_millis)
    start = draw(st.sampled_from(STARTS))
    bound = draw(quotas) if family == "bucket" else draw(st.one_of(st.none(), quotas))
    now = start
    ops: list[dict[str, Any]] = []
    for item in draw(drafts(bare_drafts(family))):
        op, now = timed(item, now, window_ms, samples)
        if family == "bucket" and now < 0:
            # Kafka's mutation quota objects count their throttle from time 0 (one that
            # never throttled reports -now before it): bucket clocks stay at or after 0.
            now = op["t"] = 0
        ops.append(op)
    return Trace(family, {"samples": samples, "window_ms": window_ms, "q": bound}, start, ops)


def run_sensor_trace(trace: Trace, kafka_version: str) -> list[dict[str, Any]]:
    del kafka_version  # the same in every release kquota follows
    config = trace.config
    rate = kquota.SampledRate(config["samples"], config["window_ms"], config["q"])

    def apply(op: dict[str, Any]) -> dict[str, Any]:
        match op["op"]:
            case "rec":
                check = rate.record(op["v"], op["t"])
                return {"viol": check.violated, "th": check.throttle_ms, "rate": canon(check.rate)}
            case "rec_nc":
                rate.record_no_check(op["v"], op["t"])
            case "measure":
                return {"rate": canon(rate.measure(op["t"]))}
            case "setq":
                rate.set_quota(op["q"])
        return {}

    return [attempt(lambda op=op: apply(op)) for op in trace.ops]


def run_bucket_trace(trace: Trace, kafka_version: str) -> list[dict[str, Any]]:
    del kafka_version  # the same in every release kquota follows
    config = trace.config
    bucket = kquota.TokenBucket(
        config["q"], num_samples=config["samples"], window_ms=config["window_ms"]
    )

    def apply(op: dict[str, Any]) -> dict[str, Any]:
        match op["op"]:
            case "rec":
                bucket.record(op["v"], op["t"])
            case "measure":
                return {"tokens": canon(bucket.measure(op["t"]))}
            case "strict" | "permissive":
                record = bucket.record_strict if op["op"] == "strict" else bucket.record_permissive
                check = record(op["v"], op["t"])
                return {"ok": check.accepted, "th": check.throttle_ms}
            case "setq":
                bucket.set_quota(op["q"])
        return {}

    return [attempt(lambda op=op: apply(op)) for op in trace.ops]


def kafka_bare_view(op: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    if "rate" in answer:
        return {**answer, "rate": kcanon(answer["rate"])}
    if "tokens" in answer:
        return {"tokens": kcanon(answer["tokens"])}
    return answer


@pytest.mark.slow
def test_sampled_rate_agrees_with_kafka(oracle: KafkaOracle) -> None:
    """A bare Rate: windows of 100 ms to 30 s, 1 to 30 samples, negative values, bounds
    changed and removed, the 64-bit throttle, a clock that goes back."""
    tally = Tally()

    @_seeded
    @_profile(examples=180)
    @given(st.lists(bare_traces("sensor"), min_size=1, max_size=4))
    def check(traces: list[Trace]) -> None:
        compare_batch(oracle, traces, run_sensor_trace, kafka_bare_view, tally)

    check()
    print(tally)
    assert tally.traces >= 250 * _SCALE and tally.operations >= 10_000 * _SCALE, tally
    assert tally.events.get("rec throttled", 0) > 0, tally.events


@pytest.mark.slow
def test_token_bucket_agrees_with_kafka(oracle: KafkaOracle) -> None:
    """A bare TokenBucket under Kafka's strict and permissive mutation quotas: bursts up
    to num_samples x window x quota, refills, buckets that start empty at time 0."""
    tally = Tally()

    @_seeded
    @_profile(examples=120)
    @given(st.lists(bare_traces("bucket"), min_size=1, max_size=4))
    def check(traces: list[Trace]) -> None:
        compare_batch(oracle, traces, run_bucket_trace, kafka_bare_view, tally)

    check()
    print(tally)
    assert tally.traces >= 250 * _SCALE and tally.operations >= 10_000 * _SCALE, tally
    assert tally.events.get("strict throttled", 0) > 0, tally.events


# == the vectors, through Kafka ==============================================================
#
# Every expected value of the frozen vectors (``../shared/conformance`` and kquota's
# ``tests/vectors`` of the controller-mutation quota) is asked of Kafka again: each
# scenario becomes a trace of the oracle, and Kafka's answers must be the file's.

ROOT: Final = paths.ROOT
SHARED_VECTORS: Final = ROOT.parent / "shared" / "conformance"
KQUOTA_VECTORS: Final = ROOT / "tests" / "vectors"

Reader = Callable[[list[dict[str, Any]]], Any]
"""Reads one expected field from Kafka's answers to the operations of one step."""


def java_int(value: float) -> int:
    """Java's ``(int)`` cast of a double: NaN to 0, truncation, saturation."""
    if math.isnan(value):
        return 0
    if value >= 2**31 - 1:
        return 2**31 - 1
    if value <= -(2**31):
        return -(2**31)
    return math.trunc(value)


def _scenario_entity(user: str | None, client_id: str | None) -> dict[str, str | None]:
    def spec(name: str | None) -> str | None:
        return None if name is None else ("D" if name == DEFAULT else f"N:{name}")

    return {"eu": spec(user), "ec": spec(client_id)}


def _double(answer_key: str, op_index: int) -> Reader:
    def read(answers: list[dict[str, Any]]) -> Any:
        value = answers[op_index][answer_key]
        return (
            None if value is None else ("NaN" if math.isnan(from_bits(value)) else from_bits(value))
        )

    return read


def _plain(answer_key: str, op_index: int, convert: Callable[[Any], Any] = lambda v: v) -> Reader:
    return lambda answers: convert(answers[op_index][answer_key])


class ScenarioTrace:
    """A vector's steps as oracle operations, and where each expected field is answered."""

    def __init__(self, family: str, config: dict[str, Any], start: int) -> None:
        self.trace = Trace(family, config, start, [])
        self.readers: list[tuple[int, dict[str, Reader]]] = []  # (step, field -> reader)

    def add(self, op: dict[str, Any]) -> int:
        self.trace.ops.append(op)
        return len(self.trace.ops) - 1


def client_scenario(doc: dict[str, Any]) -> ScenarioTrace:
    """Section 12's produce, fetch and request ops as the broker does them."""
    qt, steps = doc["quota_type"], doc["steps"]
    start = steps[0]["t_ms"]
    run = ScenarioTrace(
        "client",
        {"samples": doc["config"]["num_samples"], "window_s": doc["config"]["window_ms"] // 1000},
        start,
    )
    for quota in doc["quotas"]:
        run.add(
            {
                "op": "set",
                "t": start,
                "m": qt,
                **_scenario_entity(quota["user"], quota["client_id"]),
                "q": quota["value"],
            }
        )
    enabled = bool(doc["quotas"])
    rids = 0
    for number, step in enumerate(steps):
        t, kind, expect = step["t_ms"], step["op"], step.get("expect", {})
        client = {"u": step.get("user"), "c": step.get("client_id")}
        run.add({"op": "drain", "t": t, "m": qt})  # the reaper, before every step
        readers: dict[str, Reader] = {}
        if kind in ("record", "record_raw"):
            op: dict[str, Any] = {"op": "record", "t": t, "m": qt, **client}
            if qt == "request":
                op.update(ns=int(step["value"]), rid=rids)
                rids += 1
            else:
                op["v"] = step["value"]
            if kind == "record":
                op["ch"] = 1
                if qt == "fetch":
                    op["unrec"] = True
            readers["throttle_ms"] = _plain("th", run.add(op))
        elif kind == "unrecord":
            run.add({"op": "unrecord", "t": t, "m": qt, **client, "v": step["value"]})
        elif kind == "record_no_throttle":
            if enabled:  # Kafka installs the network-thread callback only with quotas on
                value = {"ns": int(step["value"])} if qt == "request" else {"v": step["value"]}
                run.add({"op": "nothrottle", "t": t, "m": qt, **client, **value})
        elif kind in ("set_quota", "remove_quota"):
            op = {"op": "set" if kind == "set_quota" else "remove", "t": t, "m": qt}
            op.update(_scenario_entity(step["user"], step["client_id"]))
            if kind == "set_quota":
                op["q"] = step["value"]
            run.add(op)
            enabled = True
        elif kind == "max_value_in_quota_window":
            index = run.add({"op": "maxval", "t": t, "m": qt, **client})
            readers["value"] = _double("v", index)
            readers["as_int"] = lambda answers, index=index: java_int(
                from_bits(answers[index]["v"])
            )
        elif kind == "expire_sensors":
            readers["removed"] = _plain("removed", run.add({"op": "expire", "t": t}))
        elif kind == "metrics":
            index = run.add({"op": "read", "t": t, "m": qt, **client, "fields": ["tavg"]})
            readers["throttle_time_avg"] = _double("tavg", index)
            readers["queue_size"] = _plain("n", run.add({"op": "qsize", "t": t, "m": qt}))
        if kind in ("record", "record_raw", "measure", "metrics"):
            wanted = [
                f
                for f in ("tags", "bound", "rate")
                if {"tags": "tags", "bound": "quota", "rate": "rate"}[f] in expect
            ]
            if kind in ("measure", "metrics") and "rate" not in wanted:
                wanted.append("rate")  # the op itself measures
            index = run.add({"op": "read", "t": t, "m": qt, **client, "fields": wanted})
            if "tags" in wanted:
                readers["tags"] = lambda answers, index=index: dict(
                    zip(("user", "client-id"), answers[index]["tags"], strict=True)
                )
            if "bound" in wanted:
                readers["quota"] = _double("bound", index)
            if "rate" in wanted:
                readers["rate"] = _double("rate", index)
        if expect:
            run.readers.append((number, {k: readers[k] for k in expect}))
    return run


def sensor_scenario(doc: dict[str, Any]) -> ScenarioTrace:
    steps = doc["steps"]
    bound = doc["quotas"][0]["value"] if doc["quotas"] else None
    config = {
        "samples": doc["config"]["num_samples"],
        "window_ms": doc["config"]["window_ms"],
        "q": bound,
    }
    run = ScenarioTrace("sensor", config, steps[0]["t_ms"])
    for number, step in enumerate(steps):
        t, kind, expect = step["t_ms"], step["op"], step.get("expect", {})
        readers: dict[str, Reader] = {}
        if kind == "record":
            index = run.add({"op": "rec", "t": t, "v": step["value"]})
            readers["throttle_ms"] = _plain("th", index)
            readers["violated"] = _plain("viol", index)
            readers["rate"] = _double("rate", run.add({"op": "measure", "t": t}))
        elif kind == "record_no_check":
            run.add({"op": "rec_nc", "t": t, "v": step["value"]})
        elif kind == "measure":
            readers["rate"] = _double("rate", run.add({"op": "measure", "t": t}))
        else:
            run.add({"op": "setq", "t": t, "q": step.get("value") if kind == "set_quota" else None})
        if expect:
            run.readers.append((number, {k: readers[k] for k in expect}))
    return run


def mutation_scenario(doc: dict[str, Any]) -> ScenarioTrace:
    steps = doc["steps"]
    start = steps[0]["t_ms"]
    config = {
        "samples": doc["config"]["num_samples"],
        "window_s": doc["config"]["window_ms"] // 1000,
    }
    run = ScenarioTrace("mutation", config, start)
    for quota in doc["quotas"]:
        run.add(
            {
                "op": "set",
                "t": start,
                **_scenario_entity(quota["user"], quota["client_id"]),
                "q": quota["value"],
            }
        )
    requests: dict[str, int] = {}
    for number, step in enumerate(steps):
        t, kind, expect = step["t_ms"], step["op"], step.get("expect", {})
        client = {"u": step.get("user"), "c": step.get("client_id")}
        readers: dict[str, Reader] = {}
        if kind == "record":
            readers["throttle_ms"] = _plain(
                "th", run.add({"op": "record", "t": t, **client, "v": step["value"]})
            )
        elif kind == "request":
            requests[step["request"]] = len(requests)
            index = run.add(
                {
                    "op": "rq_open",
                    "t": t,
                    **client,
                    "strict": step["strict"],
                    "rid": requests[step["request"]],
                }
            )
            readers["exceeded"] = _plain("exc", index)
        elif kind == "request_record":
            index = run.add(
                {"op": "rq_record", "t": t, "rid": requests[step["request"]], "v": step["value"]}
            )
            readers.update(
                accepted=_plain("ok", index),
                exceeded=_plain("exc", index),
                throttle_time_ms=_plain("th", index),
            )
        elif kind == "request_throttle_time":
            readers["throttle_time_ms"] = _plain(
                "th", run.add({"op": "rq_throttle", "t": t, "rid": requests[step["request"]]})
            )
        elif kind == "throttle":
            run.add(
                {
                    "op": "throttle",
                    "t": t,
                    **client,
                    "ms": step["throttle_ms"],
                    "ch": step["channel"],
                }
            )
            readers["queue_size"] = _plain("n", run.add({"op": "qsize", "t": t}), int)
        elif kind == "drain":
            readers["channels"] = _plain("ch", run.add({"op": "drain", "t": t}))
            readers["queue_size"] = _plain("n", run.add({"op": "qsize", "t": t}), int)
        elif kind == "sensors":
            readers["names"] = _plain("names", run.add({"op": "sensors", "t": t}))
        elif kind in ("set_quota", "remove_quota"):
            op = {"op": "set" if kind == "set_quota" else "remove", "t": t}
            op.update(_scenario_entity(step["user"], step["client_id"]))
            if kind == "set_quota":
                op["q"] = step["value"]
            run.add(op)
        if expect:
            run.readers.append((number, {k: readers[k] for k in expect}))
    return run


def _vector_files() -> list[Path]:
    shared = sorted(SHARED_VECTORS.glob("*.json"))
    mutation = [
        path
        for path in sorted(KQUOTA_VECTORS.glob("*.json"))
        if json.loads(path.read_text(encoding="utf-8"))["quota_type"] == "controller_mutation"
    ]
    return shared + mutation


def _expected(value: Any) -> Any:
    if value == "NaN" or (isinstance(value, float) and math.isnan(value)):
        return "NaN"
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        return sorted(value)
    return value


def _changed_in(doc: dict[str, Any]) -> tuple[int, int] | None:
    """The first Kafka release whose answers to a vector differ from its expectations, or
    None. The vectors record Kafka at one commit (4.1's behaviour); the spec marks those
    that KAFKA-19282 (4.2: a quota level turns off with its last quota) changes
    "Version-sensitive"; from 4.4 a produce or fetch throttle past 2**31 - 1 ms saturates
    instead of wrapping, which changes the int-overflow vector."""
    if "Version-sensitive" in doc["description"]:
        return (4, 2)
    if doc["name"] == "produce_tiny_quota_int_overflow":
        return (4, 4)
    return None


_RUNNERS: Final = {
    "client": lambda: (run_client_trace, kafka_client_view),
    "mutation": lambda: (run_mutation_trace, kafka_mutation_view),
    "sensor": lambda: (run_sensor_trace, kafka_bare_view),
}


@pytest.mark.parametrize("path", _vector_files(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_vector_expectations_are_kafkas_answers(oracle: KafkaOracle, path: Path) -> None:
    """The vector's every expected value is what Kafka's classes answer, on every release
    before the one that changed the behaviour it records; from that release on Kafka
    answers otherwise somewhere. Either way kquota, following the oracle's release,
    answers every operation of the vector's scenario as Kafka does."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    build = {"sensor": sensor_scenario, "controller_mutation": mutation_scenario}.get(
        doc["quota_type"], client_scenario
    )
    run = build(doc)
    (answers,) = oracle.run([run.trace.wire()])
    assert not [a for a in answers if "err" in a], answers
    changed = _changed_in(doc)
    still = changed is None or release(oracle.version) < changed
    compared, differing = 0, []
    for number, readers in run.readers:
        for key, read in readers.items():
            want, got = _expected(doc["steps"][number]["expect"][key]), _expected(read(answers))
            step = f"step {number} ({doc['steps'][number]['op']})"
            if still:
                assert got == want, f"{step}: {key}: Kafka says {got!r}, the vector {want!r}"
            elif got != want:
                differing.append(f"{step}: {key}: Kafka {oracle.version} {got!r}, vector {want!r}")
            compared += 1
    assert compared > 0
    assert still or differing, f"Kafka {oracle.version} answers every expectation as the vector"
    runner, view = _RUNNERS[run.trace.family]()
    tally = Tally()
    compare_batch(oracle, [run.trace], runner, view, tally)
    assert tally.operations == len(run.trace.ops)


# == where kquota refuses what Kafka's classes take ==========================================
#
# kquota validates at its entry points what Kafka's controller and broker never hand the
# quota managers (section 4.1 of the spec): Kafka's classes take such values and answer
# something; kquota raises and changes nothing. These tests show both answers.

T0: Final = 1_700_000_000_000


def _kafka(
    oracle: KafkaOracle, family: str, config: dict[str, Any], ops: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    (answers,) = oracle.run([Trace(family, config, T0, ops).wire()])
    assert not [a for a in answers if "err" in a], answers
    return answers


@pytest.mark.parametrize(
    ("quota", "kafka_throttle"),
    [
        # (60 - 0) / 0 * 10000 = inf: Math.round gives Long.MAX, the int -1 from 3.8 (the
        # oldest release kquota follows); from 4.4 capped at Integer.MAX first
        (0.0, {(3, 8): -1, (4, 4): 2**31 - 1}),
        (-0.0, 0),  # -inf: Long.MIN, the int 0
        (-1.0, -610_000),  # 60 > -1: (60 + 1) / -1 * 10000
        (math.nan, 0),  # never acceptable; Math.round(NaN) is 0
        (math.inf, 0),  # always acceptable
        (-math.inf, 0),  # violated; (60 + inf) / -inf is NaN
    ],
)
def test_kafka_takes_quotas_kquota_refuses(
    oracle: KafkaOracle, quota: float, kafka_throttle: int | dict[tuple[int, int], int]
) -> None:
    """A quota <= 0, NaN or infinite: Kafka's manager enforces it (600 B on a fresh
    11 x 1 s sensor measures 60 B/s); kquota's set_quota raises InvalidQuotaError."""
    ops = [
        {"op": "set", "t": T0, "m": "produce", "eu": None, "ec": "D", "q": quota},
        {"op": "record", "t": T0, "m": "produce", "u": "alice", "c": "app1", "v": 600.0},
        {"op": "read", "t": T0, "m": "produce", "u": "alice", "c": "app1", "fields": ["rate"]},
    ]
    answers = _kafka(oracle, "client", {"samples": 11, "window_s": 1}, ops)
    if isinstance(kafka_throttle, dict):
        since = max(r for r in kafka_throttle if r <= release(oracle.version))
        kafka_throttle = kafka_throttle[since]
    assert answers[1] == {"th": kafka_throttle}
    assert from_bits(answers[2]["rate"]) == 60.0
    manager = kquota.QuotaManager("produce", kafka_version=oracle.version)
    with pytest.raises(kquota.InvalidQuotaError):
        manager.set_quota(kquota.Entity(client_id=DEFAULT), quota)
    assert not manager.enabled and manager.quotas() == []


def test_kafka_takes_negative_usage_kquota_refuses(oracle: KafkaOracle) -> None:
    """A negative usage: Kafka records it (the rate goes negative); kquota's record raises
    InvalidUsageError (a negative value is unrecord's, which takes it without a check)."""
    ops = [
        {"op": "set", "t": T0, "m": "produce", "eu": None, "ec": "D", "q": 100.0},
        {"op": "record", "t": T0, "m": "produce", "u": "alice", "c": "app1", "v": -600.0},
        {"op": "read", "t": T0, "m": "produce", "u": "alice", "c": "app1", "fields": ["rate"]},
    ]
    answers = _kafka(oracle, "client", {"samples": 11, "window_s": 1}, ops)
    assert answers[1] == {"th": 0}
    assert from_bits(answers[2]["rate"]) == -60.0
    manager = kquota.QuotaManager("produce")
    manager.set_quota(kquota.Entity(client_id=DEFAULT), 100.0)
    with pytest.raises(kquota.InvalidUsageError):
        manager.record("alice", "app1", -600.0, T0)
    assert manager.measure("alice", "app1", T0) is None


@pytest.mark.parametrize("throttle_ms", [0, -5])
def test_kafka_ignores_throttles_kquota_refuses(oracle: KafkaOracle, throttle_ms: int) -> None:
    """A throttle <= 0: Kafka's throttle does nothing (no sensor, nothing queued); kquota's
    raises InvalidUsageError and does nothing."""
    ops = [
        {"op": "set", "t": T0, "m": "produce", "eu": None, "ec": "D", "q": 100.0},
        {
            "op": "throttle",
            "t": T0,
            "m": "produce",
            "u": "alice",
            "c": "app1",
            "ms": throttle_ms,
            "ch": 1,
        },
        {"op": "qsize", "t": T0, "m": "produce"},
        {"op": "sensors", "t": T0},
    ]
    answers = _kafka(oracle, "client", {"samples": 11, "window_s": 1}, ops)
    assert answers[2:] == [{"n": 0.0}, {"names": []}]
    manager = kquota.QuotaManager("produce")
    manager.set_quota(kquota.Entity(client_id=DEFAULT), 100.0)
    with pytest.raises(kquota.InvalidUsageError):
        manager.throttle("alice", "app1", throttle_ms, T0, channel=1)
    assert manager.queue_size() == 0 and manager.sensor_names() == []


@pytest.mark.parametrize("kind", ["unrecord", "nothrottle"])
def test_unrecord_before_any_quota_is_ignored(oracle: KafkaOracle, kind: str) -> None:
    """Before any quota is set, Kafka's unrecordQuotaSensor and recordNoThrottle create the
    client's sensors and record (its broker never calls them then: a fetch is unrecorded
    only when throttled, network time is recorded only with quotas on); kquota's unrecord
    and record_no_throttle do nothing until quotas are enabled, as its README says."""
    ops = [
        {"op": kind, "t": T0, "m": "fetch", "u": "alice", "c": "app1", "v": 600.0},
        {"op": "sensors", "t": T0},
        {
            "op": "read",
            "t": T0,
            "m": "fetch",
            "u": "alice",
            "c": "app1",
            "fields": ["tags", "rate"],
        },
    ]
    answers = _kafka(oracle, "client", {"samples": 11, "window_s": 1}, ops)
    assert answers[1] == {"names": ["Fetch-:app1", "FetchThrottleTime-:app1"]}
    assert from_bits(answers[2]["rate"]) == (-60.0 if kind == "unrecord" else 60.0)
    manager = kquota.QuotaManager("fetch", kafka_version=oracle.version)
    getattr(manager, "unrecord" if kind == "unrecord" else "record_no_throttle")(
        "alice", "app1", 600.0, T0
    )
    assert manager.sensor_names() == [] and manager.measure("alice", "app1", T0) is None


def test_exempt_request_time_is_kept_by_kafka_only(oracle: KafkaOracle) -> None:
    """Requests exempt from throttling (cluster-internal APIs) go to Kafka's untagged
    exempt-request-time rate, handler and network time alike, once request quotas are on;
    kquota keeps no such metric, and no client's sensor sees them in either."""
    ops = [
        {"op": "set", "t": T0, "m": "request", "eu": "N:alice", "ec": None, "q": 50.0},
        {
            "op": "exempt",
            "t": T0,
            "m": "request",
            "u": "alice",
            "c": "app1",
            "ns": 600_000_000,
            "rid": 0,
        },
        {"op": "network", "t": T0, "m": "request", "rid": 0, "ns": 400_000_000},
        {"op": "exempt_rate", "t": T0},
        {"op": "sensors", "t": T0},
    ]
    answers = _kafka(oracle, "client", {"samples": 11, "window_s": 1}, ops)
    assert answers[2] == {"cb": True}
    # 60 + 40 percent of a thread over the broker's metric windows (2 x 30 s, padded to 30 s).
    assert from_bits(answers[3]["rate"]) == 100.0 / 30.0
    assert answers[4] == {"names": []}
    manager = kquota.QuotaManager("request")
    manager.set_quota(kquota.Entity(user="alice"), 50.0)
    assert manager.sensor_names() == []
