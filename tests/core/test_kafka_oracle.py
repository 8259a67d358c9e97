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
``test_kafka_oracle_refusals.py`` shows Kafka's answer and kquota's refusal side by side.
``test_kafka_oracle_vectors.py`` asks Kafka for the conformance vectors' expectations. What
these modules share is in ``tests/support/oracle_traces.py`` (drafts, pools, comparing) and
``tests/support/oracle_runs.py`` (kquota's side of each trace); the ``oracle`` fixture, one
JVM per pinned Kafka version for the session, is in ``tests/core/conftest.py``.
"""

from __future__ import annotations

from typing import Any, Final

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka_oracle import KafkaOracle, release
from oracle_runs import (
    kafka_bare_view,
    kafka_client_view,
    kafka_connection_view,
    kafka_mutation_view,
    run_bucket_trace,
    run_client_trace,
    run_connection_trace,
    run_mutation_trace,
    run_sensor_trace,
)
from oracle_traces import (
    SCALE,
    STARTS,
    TYPES,
    Tally,
    Trace,
    back_gaps,
    channels,
    clients,
    compare_batch,
    draft,
    drafts,
    entities,
    nanos,
    picks,
    profile,
    quotas,
    samples_counts,
    seeded,
    throttles,
    timed,
    usages,
    users,
    window_seconds,
)
from value_pools import TINY_AND_HUGE, weighted

# Hypothesis draws a derandomized test's examples from its source text, decorators
# included: the tests keep these names, so that the fixed seed draws the same traces.
_SCALE, _profile, _seeded = SCALE, profile, seeded

# == produce, fetch and request ============================================================

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
