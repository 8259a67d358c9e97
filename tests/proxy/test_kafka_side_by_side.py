"""The same clients held by Apache Kafka's own quotas and by ``kquota proxy``, side by side
on one real Kafka 4.1 broker (tests/support/side_by_side_support.py).

Each workload runs twice on the same broker, one run after the other: (A) straight to
Kafka, with the quota set by Kafka's ``kafka-configs`` on the client id of (A); (B) through
``kquota proxy`` (its own process, as a user runs it) in front of a second listener of the
same broker, with the same quota set by ``kquota configs`` on the client id of (B), and none
in Kafka. What the clients saw (acknowledged or consumed bytes per second, the throttle of
each response) and what each side wrote down (Kafka's request log in A, the proxy's
``--capture`` in B) must agree within :class:`~side_by_side_runs.Tolerances`.

The quota is 256 KiB/s and each run 20 s. Kafka measures a rate over 11 one-second
samples and pads a new client's window to 10 s, so a greedy client gets ~10 s of quota at
once, then next to nothing (seconds 3-10 here: ~0.1 of the quota) until that burst's sample
leaves the window at ~11 s, then another burst: over 20 s ~1.15 times the quota. Measured
here (A / B): the greedy librdkafka producer 1.144 / 1.144 of the quota, 35 / 36
throttled responses in its 20 s, mean throttle 563 / 550 ms, largest 1109 / 1112 ms; the
consumer 0.984 / 0.984, 26 / 27, 766 / 773 ms, 1999 / 1997 ms; kafka-python and aiokafka
alike (15 s runs: 1.494 / 1.494 and 1.488 / 1.488 of the quota).

Tolerances and why (``Tolerances``' defaults): the rate over the run within x0.8-x1.25,
the first three seconds x0.67-x1.5, the rate in seconds 3-10 within 0.3 of the quota, the
count, mean and largest throttle within x0.67-x1.5, x0.67-x1.5 and x0.5-x2. Both runs see
the same arithmetic, so they agree far closer than that (above); the slack is for timing on
a shared two-core machine: a mute that ends some ms late moves a response past a sample
boundary, which can shift the second burst by a second and with it the last throttles of a
run (measured: a consumer's last three throttles of ~2 s in A, one in B: its p90 halves,
so p90 is reported but not compared).

A Metadata storm under ``request_percentage`` (20 s, each side after 3 s of an unthrottled
storm of its own: Kafka's Metadata path compiled, the proxy's estimate learned) has
Kafka's shape through the proxy (a burst, about one request a second with throttles of
about a second, a second burst once the first has left the window at ~11 s), and about
its size. Kafka charges its handler threads' time and its network threads'; the proxy
sees neither, and charges an estimate per kind of request: the kind's low percentile of
round trips over the broker's path's, plus Kafka's network-thread cost of a small request
(the proxy guide says how). Measured here (requests in 20 s, Kafka / the proxy, the
machine otherwise quiet): 6655 / 7191, 6587 / 7192, 6831 / 7215: x1.06 to x1.09, the
throttles in all within x0.94-x0.95; the whole round trip, charged before, made x0.19 to
x0.31. On a machine kept busy by two processes spinning, 1931 / 1012 (x0.52): Kafka's
charge grows with the wait for a CPU more than the estimate. The test's bound
(``STORM_REQUESTS``) leaves room for a busy machine and refuses both simpler charges.

Two producers logged in as one user with SASL/PLAIN, on a second broker whose client
listeners require it, are held by that user's quota alike: Kafka's, and the proxy's, which
takes the user from the login passing through it to Kafka.

CreateTopics of 30 one-partition topics at once under ``controller_mutation_rate`` 2 gets
the same answer on both sides, topic for topic: strict (kafka-python's v7) 23 created and 7
refused with THROTTLING_QUOTA_EXCEEDED and a throttle of about 0.5 s; permissive
(librdkafka's v4) all created and a throttle of about 4 s (measured 458 / 462 ms and
3966 / 3959 ms). Kafka forwards the request to its controller, which computes that
throttle; its request log then shows it only in the response (the line's own
``throttleTimeMs`` is the request quota's, 0), and the broker mutes the client for it.

The teeth: the same comparison fails a plain relay (the same proxy with no quota for the
client: no throttle at all, 4 times the quota, all of it at once) and a proxy holding the
same rate with a token bucket (:class:`~side_by_side_support.TokenBucketPlugin`, the
bucket Kafka uses for KIP-599, with its burst of 11 s of quota and full at the start): its
first burst is Kafka's, but then it lets the quota through steadily (~1.0 of it in seconds
3-10 where Kafka lets ~0.1), with ~110 ms throttles on ~5 times as many responses (Kafka's
are up to ~1.1 s), and over 20 s it lets ~1.5 times the quota through.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from side_by_side_runs import (
    Run,
    Tolerances,
    capture_rows,
    compare,
    report,
    request_log,
    storm_report,
    storm_totals,
    timeline,
)
from side_by_side_support import (
    LOG_LAG_S,
    SIDES,
    WAIT_S,
    SideBySideBroker,
    greedy_aiokafka_producer,
    greedy_kafka_python_producer,
    greedy_librdkafka_producer,
    librdkafka_consumer,
    measure,
    metadata_storm,
    prefill,
    side,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings(
        # kafka-python 3.0.12 loads its schemas with importlib.resources' legacy API
        "ignore:(open_text|read_text) is deprecated:DeprecationWarning",
    ),
]

THROTTLING_QUOTA_EXCEEDED = 89
"""The error code of a topic refused by a strict mutation quota."""
QUOTA = 256 * 1024
"""producer_byte_rate and consumer_byte_rate, bytes/s."""
RUN_S = 20.0
"""Seconds per run: Kafka's first burst, its trough and its second burst at ~11-12 s."""
SHORT_S = 14.0
"""Seconds per run of the later workloads, which repeat the first one with other clients
(the same burst, trough and second burst; it keeps the file within ~5 minutes)."""
CAP = int(4 * QUOTA * RUN_S)
"""A producer's bytes at most: 4 times what the quota allows over a run, far above what
any quota here lets through, so that it binds only a run without one (the relay)."""
PREFILL = int(3 * QUOTA * (RUN_S + 10))
"""What the consumer's topic holds: more than a consumer held to its quota can read in a
run (burst included), so that it never runs dry."""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideBySideBroker]:
    """One Kafka 4 KRaft node with a PLAINTEXT listener for (A) and a PROXIED one,
    advertising the proxy's address, for (B)."""
    from kafka_support import running_kafka

    yield from running_kafka(SideBySideBroker(tmp_path_factory.mktemp("side-by-side-kafka")))


def _create_topics(broker: SideBySideBroker, *topics: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, 1) for topic in topics])
    for future in futures.values():
        future.result(60)


def _runs(
    broker: SideBySideBroker,
    folder: Path,
    workload: str,
    sides: tuple[str, ...],
    config: str,
    make: Any,
) -> dict[str, Run]:
    """``make(client_id)`` run on each side, one after the other, each with its own client
    id (``WORKLOAD-SIDE``, also the topic of a producer)."""
    runs = {}
    for name in sides:
        client_id = f"{workload}-{name}"
        runs[name] = measure(
            name, broker, folder / name, client_id, f"{config}={QUOTA}", QUOTA, make(client_id)
        )
    return runs


# -- 1. a greedy librdkafka producer, and the teeth ---------------------------------------


@pytest.fixture(scope="module")
def greedy(broker: SideBySideBroker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """The greedy librdkafka producer on every side: Kafka, kquota, relay, token bucket."""
    _create_topics(broker, *(f"greedy-{name}" for name in SIDES))
    return _runs(
        broker,
        tmp_path_factory.mktemp("greedy"),
        "greedy",
        SIDES,
        "producer_byte_rate",
        lambda topic: greedy_librdkafka_producer(topic, RUN_S, cap_bytes=CAP),
    )


def _seen_as_logged(run: Run, api: str) -> None:
    """Every throttle the client reported is one its side wrote down for it (the side may
    have more: responses of the run the client no longer read, once it stopped)."""
    assert run.failures == [], run.failures[:5]
    logged = collections.Counter(run.logged_throttles(api, after_the_run=True))
    seen = collections.Counter(run.client_throttles_ms)
    assert seen <= logged, (seen - logged, run.label)
    assert seen.total() >= logged.total() - 2, (seen.total(), logged.total(), run.label)


def _alike(a: Run, b: Run, api: str, tolerances: Tolerances | None = None) -> None:
    print(f"\n{report(a, b, api=api)}\n{timeline(a, api)}\n{timeline(b, api)}")
    for run in (a, b):
        _seen_as_logged(run, api)
    differences = compare(a, b, api, tolerances)
    assert differences == [], differences


def test_a_greedy_librdkafka_producer_is_held_alike(greedy: dict[str, Run]) -> None:
    _alike(greedy["kafka"], greedy["kquota"], "produce")
    # Kafka's shape, seen in both: the first burst, then the trough
    for run in (greedy["kafka"], greedy["kquota"]):
        assert run.cumulative_at(3) >= 5, run.per_second()
        assert run.per_second()[3:10] == pytest.approx([0] * 7, abs=0.5)


def test_a_plain_relay_fails_the_comparison(greedy: dict[str, Run]) -> None:
    """The same proxy with no quota for the client: nothing is throttled, the producer
    sends its cap (4 times the quota over the run) at once."""
    relay = greedy["relay"]
    print(f"\n{report(greedy['kafka'], relay, api='produce')}")
    assert relay.failures == []
    differences = compare(greedy["kafka"], relay, "produce")
    print("\n".join(differences))
    failed = {d.split(":", 1)[0] for d in differences}
    assert {
        "relay",  # no response carried a throttle
        "rate over the run (x quota)",
        "first 3 s (s of quota)",
        "throttled responses",
    } <= failed, differences


def test_a_token_bucket_at_the_same_rate_fails_the_comparison(greedy: dict[str, Run]) -> None:
    """A token bucket (Kafka's KIP-599 bucket: 11 s of quota, full at the start) lets the
    first burst through as Kafka does, then the quota steadily: small throttles on many
    responses, no trough."""
    bucket = greedy["token-bucket"]
    print(f"\n{report(greedy['kafka'], bucket, api='produce')}")
    _seen_as_logged(bucket, "produce")
    differences = compare(greedy["kafka"], bucket, "produce")
    print("\n".join(differences))
    failed = {d.split(":", 1)[0] for d in differences}
    assert {
        "throttled responses",
        "mean throttle (ms)",
        "largest throttle (ms)",
        "rate in seconds 3-10 (x quota)",
    } <= failed, differences


# -- 2. a consumer group reading a filled topic -------------------------------------------


@pytest.fixture(scope="module")
def consumer(broker: SideBySideBroker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    _create_topics(broker, "filled")
    prefill(broker.bootstrap, "filled", PREFILL)
    return _runs(
        broker,
        tmp_path_factory.mktemp("consumer"),
        "consumer",
        ("kafka", "kquota"),
        "consumer_byte_rate",
        lambda _client_id: librdkafka_consumer("filled", RUN_S),
    )


def test_a_consumer_group_is_held_alike(consumer: dict[str, Run]) -> None:
    """Rates over the whole run; throttles up to Kafka's second burst (12 s). After it the
    consumer gets a small burst and then throttles of ~2 s every other second, and where
    that burst falls turns on a mute ending some ms later (measured: at 13 s in A, 14 s in
    B). Once B's came so late that its run held no throttle of ~2 s, and its largest
    throttle was A's halved. Before 12 s both runs have the same four throttles of ~250 ms,
    then one of ~1 s a second, then four of ~250 ms again."""
    a, b = consumer["kafka"], consumer["kquota"]
    _alike(a, b, "fetch", Tolerances(throttles_until_s=12))
    # a throttled fetch is answered empty, by Kafka (its request log has the response)
    throttled = [r for r in a.logged("fetch") if r.throttle_ms > 0]
    assert throttled and all(r.size == 0 for r in throttled)
    # ... and by the proxy: the consumer got next to nothing in the trough in either run
    for run in (a, b):
        assert max(run.per_second()[3:10]) < 0.5, run.per_second()


# -- 3. kafka-python and aiokafka producers -------------------------------------------------

PYTHON_CLIENTS = {
    "kafka-python": greedy_kafka_python_producer,
    # aiokafka ignores throttle_time_ms: only the mute of its connection holds it back
    "aiokafka": greedy_aiokafka_producer,
}


@pytest.fixture(scope="module", params=list(PYTHON_CLIENTS))
def python_producer(
    request: pytest.FixtureRequest,
    broker: SideBySideBroker,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Run]:
    client = request.param
    _create_topics(broker, f"{client}-kafka", f"{client}-kquota")
    make = PYTHON_CLIENTS[client]
    return _runs(
        broker,
        tmp_path_factory.mktemp(client),
        client,
        ("kafka", "kquota"),
        "producer_byte_rate",
        lambda topic: make(topic, SHORT_S, cap_bytes=CAP),
    )


def test_a_python_producer_is_held_alike(python_producer: dict[str, Run]) -> None:
    """Rates over the whole run; throttles up to Kafka's second burst (12 s), as for the
    shared quota below. A 14 s run ends inside that burst (6 to 10 throttles of ~110 ms in a
    second), so how many of them fall inside the run turns on where the burst begins, to
    the hundred ms: measured 29-31 throttled responses on both sides in most runs, once 33
    on Kafka against 22 through the proxy. Before it, the runs agree to a throttle or two."""
    _alike(
        python_producer["kafka"],
        python_producer["kquota"],
        "produce",
        Tolerances(throttles_until_s=12),
    )


# -- 4. two producers sharing one client id's quota ----------------------------------------


@pytest.fixture(scope="module")
def shared(broker: SideBySideBroker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """Two librdkafka producers (two connections) with one client id and its one quota."""
    _create_topics(broker, "shared-kafka", "shared-kquota")
    return _runs(
        broker,
        tmp_path_factory.mktemp("shared"),
        "shared",
        ("kafka", "kquota"),
        "producer_byte_rate",
        lambda topic: greedy_librdkafka_producer(topic, SHORT_S, cap_bytes=CAP, producers=2),
    )


def test_two_producers_sharing_a_quota_are_held_alike(shared: dict[str, Run]) -> None:
    """Rates over the whole run; throttles up to Kafka's second burst (12 s). After it,
    librdkafka's batching of two producers turns erratic (from full 28 KiB batches to one
    4 KiB message a request, or not, from run to run), and with it the count of throttled
    responses: measured on Kafka alone 46, 54, 73, 78 and 128 in five runs, on kquota 46,
    61, 86, 98 and 105; before it, 24-26 throttles of the same values on both sides."""
    _alike(shared["kafka"], shared["kquota"], "produce", Tolerances(throttles_until_s=12))


@pytest.fixture(scope="module")
def sasl_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideBySideBroker]:
    """A second Kafka node whose client listeners take SASL/PLAIN logins of
    :data:`SASL_USERS`, so that a user's quota applies (the proxy learns the user from the
    authentication passing through it)."""
    from kafka_support import running_kafka

    folder = tmp_path_factory.mktemp("side-by-side-sasl")
    yield from running_kafka(SideBySideBroker(folder, sasl_users=SASL_USERS))


SASL_USERS = {f"tenant-{name}": f"{name}-secret" for name in ("kafka", "kquota")}
"""One user per side, so that Kafka's quota of (A)'s user never applies in (B)."""


@pytest.fixture(scope="module")
def shared_user(
    sasl_broker: SideBySideBroker, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Run]:
    """Two librdkafka producers logged in as one user, held by that user's quota."""
    _create_topics(sasl_broker, "tenant-kafka", "tenant-kquota")
    folder = tmp_path_factory.mktemp("shared-user")
    return {
        name: measure(
            name,
            sasl_broker,
            folder / name,
            f"tenant-{name}",
            f"producer_byte_rate={QUOTA}",
            QUOTA,
            greedy_librdkafka_producer(f"tenant-{name}", SHORT_S, cap_bytes=CAP, producers=2),
            user=f"tenant-{name}",
        )
        for name in ("kafka", "kquota")
    }


def test_two_producers_sharing_a_users_quota_over_sasl_are_held_alike(
    shared_user: dict[str, Run],
) -> None:
    """The same as two producers sharing a client id's quota, with the quota on the user
    they log in as with SASL/PLAIN, through the proxy's pass-through of the login."""
    a, b = shared_user["kafka"], shared_user["kquota"]
    _alike(a, b, "produce", Tolerances(throttles_until_s=12))
    # (A) logged in on Kafka's own SASL listener; (B) through the proxy, unthrottled by Kafka
    assert {r.listener for r in a.responses} == {SideBySideBroker.SASL}
    assert {r.listener for r in b.responses} == {""}  # the proxy's capture


# -- 5. a Metadata storm under request_percentage ------------------------------------------

STORM_PERCENTAGE = 1
"""request_percentage: 1 % of one thread, 10 ms of request time a second (100 ms at once
for a new client, Kafka's padded 10 s window)."""
STORM_S = 20.0
"""Kafka's first burst, its trough and its second burst (at ~11 s)."""
STORM_WARM_UP_S = 3.0
"""An unthrottled storm first on each side (``metadata_storm``'s ``warm_up_s``)."""


@pytest.fixture(scope="module")
def storm(broker: SideBySideBroker, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    folder = tmp_path_factory.mktemp("storm")
    return {
        name: measure(
            name,
            broker,
            folder / name,
            f"storm-{name}",
            f"request_percentage={STORM_PERCENTAGE}",
            1.0,  # the run's data are answers: its rates are requests per second
            metadata_storm(STORM_S, warm_up_s=STORM_WARM_UP_S),
        )
        for name in ("kafka", "kquota")
    }


def test_a_metadata_storm_has_kafkas_shape_through_the_proxy(storm: dict[str, Run]) -> None:
    """Both sides let a burst through, then hold the client to about one request a second
    with throttles of about one second (the window's span), then let a second burst
    through once the first has left the window (~11 s), and log every throttle the client
    saw."""
    print(f"\n{report(storm['kafka'], storm['kquota'], api='metadata')}")
    kafka, kquota = storm["kafka"], storm["kquota"]
    # not the many times Kafka's burst that a proxy charging only its own time lets by
    assert kquota.cumulative_at(3) <= 2 * kafka.cumulative_at(3), kquota.per_second()
    for run in storm.values():
        _seen_as_logged(run, "metadata")
        assert run.cumulative_at(3) > 50, run.per_second()
        assert max(run.per_second()[3:10]) <= 3, run.per_second()
        assert max(run.per_second()[10:15]) > 50, run.per_second()
        assert 900 <= max(run.logged_throttles("metadata")) <= 1100


def test_a_metadata_storm_makes_about_as_many_requests_through_the_proxy(
    storm: dict[str, Run],
) -> None:
    """By totals over the run: the requests the client made through the proxy, which
    charges an estimate of Kafka's handler time, against those Kafka let it make
    (:data:`~side_by_side_runs.STORM_REQUESTS`), and the throttles its client saw in
    all (:data:`~side_by_side_runs.STORM_THROTTLED`)."""
    kafka, kquota = storm["kafka"], storm["kquota"]
    print(f"\n{storm_report(kafka, kquota)}")
    assert storm_totals(kafka, kquota) == []


# -- 6. CreateTopics under controller_mutation_rate -----------------------------------------

MUTATION_RATE = 2
"""controller_mutation_rate: partitions a second. Kafka's default 11 one-second samples
give a new client a bucket of 22 partitions."""
MUTATION_TOPICS = 30
"""One-partition topics in one CreateTopics request: 8 over the bucket."""


@dataclass
class Creation:
    """One CreateTopics request of 30 topics on one side: what the client was answered and
    what the side wrote down."""

    codes: list[int]  # each topic's error code, in the request's order
    client_throttles_ms: list[int]  # as the client read them (librdkafka only)
    logged_throttles_ms: list[int]  # each CreateTopics response's, in the log or capture
    # Kafka's totalTimeMs of each CreateTopics request it logged of this side (through
    # the proxied listener on kquota's side): how long the topics took to create
    broker_ms: list[float]


def _create_many(
    name: str, broker: SideBySideBroker, folder: Path, client_id: str, strict: bool
) -> Creation:
    """Ask for :data:`MUTATION_TOPICS` topics at once with ``controller_mutation_rate`` set
    on ``client_id`` on side ``name``: kafka-python's v7 request (strict) or librdkafka's
    v4 (permissive)."""
    names = [f"{client_id}-{i:02d}" for i in range(MUTATION_TOPICS)]
    quota = f"controller_mutation_rate={MUTATION_RATE}"
    seen: list[int] = []
    started_ms = time.time_ns() // 1_000_000
    with side(name, broker, folder, client_id, quota) as where:
        if strict:
            from kafka.admin import KafkaAdminClient

            admin = KafkaAdminClient(bootstrap_servers=where.bootstrap, client_id=client_id)
            try:
                spec = {"num_partitions": 1, "replication_factor": 1}
                answer = admin.create_topics({n: spec for n in names}, raise_errors=False)
            finally:
                admin.close()
            by_name = {t["name"]: t["error_code"] for t in answer["topics"]}
            codes = [by_name[n] for n in names]
        else:
            from confluent_kafka import KafkaException
            from confluent_kafka.admin import AdminClient, NewTopic

            client = AdminClient(
                {
                    "bootstrap.servers": where.bootstrap,
                    "client.id": client_id,
                    "throttle_cb": lambda e: seen.append(round(e.throttle_time * 1000)),
                }
            )
            futures = client.create_topics([NewTopic(n, 1, 1) for n in names])
            codes = []
            for n in names:
                try:
                    futures[n].result(timeout=WAIT_S)
                    codes.append(0)
                except KafkaException as error:
                    codes.append(error.args[0].code())
            deadline = time.monotonic() + 10
            while not seen and time.monotonic() < deadline:
                client.poll(0.1)  # throttle_cb runs from poll
            del client  # before the proxy stops, or librdkafka reconnects to it
    ended_ms = time.time_ns() // 1_000_000
    time.sleep(LOG_LAG_S)
    in_kafka = request_log(broker, [client_id], started_ms - 1000, ended_ms + 1000)
    logged = in_kafka if name == "kafka" else capture_rows(folder / "capture", [client_id])
    throttles = [r.throttle_ms for r in logged if r.api == "create_topics"]
    took = [r.total_ms for r in in_kafka if r.api == "create_topics"]
    return Creation(codes, seen, throttles, took)


@pytest.fixture(scope="module", params=["strict", "permissive"])
def creations(
    request: pytest.FixtureRequest,
    broker: SideBySideBroker,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, Creation]:
    pytest.importorskip("kafka.admin")
    folder = tmp_path_factory.mktemp(f"create-{request.param}")
    return {
        name: _create_many(
            name, broker, folder / name, f"{request.param}-{name}", request.param == "strict"
        )
        for name in ("kafka", "kquota")
    }


def test_create_topics_under_a_mutation_rate_are_answered_alike(
    request: pytest.FixtureRequest, creations: dict[str, Creation]
) -> None:
    """Strict (v6+): the topics within the bucket are created and the rest refused with
    THROTTLING_QUOTA_EXCEEDED, the same topics on both sides; permissive (v4): every topic
    created. Either way one response, throttled for the partitions over the bucket at the
    rate (strict: the one that took it below zero; permissive: all 8), less the ms that
    pass between the partition's record and the response (the bucket refills meanwhile):
    at most the time Kafka took over the request, plus 100 ms for the sides' own work."""
    a, b = creations["kafka"], creations["kquota"]
    print(f"\n{request.node.callspec.id}: Kafka {a}\nkquota {b}")
    burst = 11 * MUTATION_RATE
    if request.node.callspec.id == "strict":
        # Kafka admits while the bucket is not below zero: the 23rd partition takes it to -1
        expected = [0] * (burst + 1) + [THROTTLING_QUOTA_EXCEEDED] * (MUTATION_TOPICS - burst - 1)
        throttle_ms = 1000 / MUTATION_RATE
    else:
        expected = [0] * MUTATION_TOPICS
        throttle_ms = (MUTATION_TOPICS - burst) * 1000 / MUTATION_RATE
    for creation in (a, b):
        assert creation.codes == expected
        assert len(creation.logged_throttles_ms) == 1, creation
        assert len(creation.broker_ms) == 1, creation
        refilled_ms = 100 + creation.broker_ms[0]
        assert throttle_ms - refilled_ms <= creation.logged_throttles_ms[0] <= throttle_ms
        # what librdkafka read is what the side wrote down
        assert creation.client_throttles_ms in ([], creation.logged_throttles_ms)
    if request.node.callspec.id == "permissive":
        assert a.client_throttles_ms and b.client_throttles_ms


# -- what Kafka itself did in (B) ------------------------------------------------------------


def test_kafka_throttled_none_of_the_proxied_clients(
    broker: SideBySideBroker,
    greedy: dict[str, Run],
    consumer: dict[str, Run],
    shared: dict[str, Run],
) -> None:
    """Every request of a (B) client reached Kafka through its PROXIED listener and Kafka
    throttled none: the throttles those clients saw were kquota's alone."""
    for runs in (greedy, consumer, shared):
        run = runs["kquota"]
        seen = request_log(broker, [run.client_id], 0, 2**62)
        assert seen, f"Kafka logged no request of {run.client_id}"
        assert {r.listener for r in seen} == {SideBySideBroker.PROXIED}
        assert [r for r in seen if r.throttle_ms] == []
        direct = request_log(broker, [runs["kafka"].client_id], 0, 2**62)
        assert {r.listener for r in direct} == {"PLAINTEXT"}
