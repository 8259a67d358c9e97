"""The real Apache Kafka brokers of tests/support/kafka_support.py, proved real and useful.

Three clients (librdkafka, kafka-python, aiokafka) produce and consume through one broker;
a ``producer_byte_rate`` set with Kafka's own ``kafka-configs`` throttles a greedy
librdkafka producer, which sees the throttle and is held near the quota, and each
throttle is in ``kafka-request.log`` (Kafka 4 and 3); three brokers keep serving while
one is stopped and started again; a stopped broker, or one whose test process dies, leaves
no JVM behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kafka_support import (
    KAFKA3_VERSION,
    KAFKA_NEWEST_VERSION,
    KAFKA_VERSION,
    POM,
    VERSIONS,
    KafkaBroker,
    KafkaCluster,
    KafkaNotInstalled,
    KafkaToolFailed,
    kafka_configs,
    kafka_home,
    kafka_libs,
    pinned_versions,
    random_cluster_id,
)

pytestmark = pytest.mark.filterwarnings(
    # kafka-python 3.0.12 loads its schemas with importlib.resources' legacy API
    "ignore:(open_text|read_text) is deprecated:DeprecationWarning",
)

WAIT_S = 60.0  # bounds a wait for Kafka to converge; never a measurement


def _until(what: str, check: Callable[[], Any], timeout: float = WAIT_S) -> Any:
    """Poll ``check`` until it returns something true; that value, or fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout:.0f} s: {what} (last: {value!r})")
        time.sleep(0.2)


# -- the pinned versions and jars ---------------------------------------------------------


def test_versions_are_read_from_the_pom_and_their_jars_are_there() -> None:
    text = POM.read_text(encoding="utf-8")
    assert pinned_versions() == {
        "kafka-4": KAFKA_VERSION,
        "kafka-3": KAFKA3_VERSION,
        "kafka-newest": KAFKA_NEWEST_VERSION,
    }
    assert VERSIONS == (KAFKA_VERSION, KAFKA3_VERSION, KAFKA_NEWEST_VERSION)
    assert KAFKA_VERSION.startswith("4.") and KAFKA3_VERSION.startswith("3.")
    newest = tuple(int(part) for part in KAFKA_NEWEST_VERSION.split("."))
    assert newest > tuple(int(part) for part in KAFKA_VERSION.split(".")), KAFKA_NEWEST_VERSION
    for version in VERSIONS:
        assert f"<kafka.version>{version}</kafka.version>" in text
        # what `make tools` copied is that version (fails with "run make tools" otherwise)
        libs = kafka_libs(version)
        assert (libs / f"kafka_2.13-{version}.jar").is_file()
        assert (libs / f"kafka-tools-{version}.jar").is_file()


def test_logging_binding_matches_the_slf4j_api_kafka_uses() -> None:
    """Kafka logs through SLF4J 1.7: only a 1.x binding makes it write any log at all."""
    three = {p.name for p in kafka_libs(KAFKA3_VERSION).glob("*.jar")}
    for version in (KAFKA_VERSION, KAFKA_NEWEST_VERSION):
        four = {p.name for p in kafka_libs(version).glob("*.jar")}
        assert any(n.startswith("slf4j-api-1.7.") for n in four), (version, sorted(four))
        assert any(n.startswith("log4j-slf4j-impl-2.") for n in four), (version, sorted(four))
        assert not any(n.startswith("log4j-slf4j2-impl-") for n in four), version
    assert any(n.startswith("slf4j-api-1.7.") for n in three), sorted(three)
    assert any(n.startswith("slf4j-reload4j-1.7.") for n in three), sorted(three)


def test_missing_jars_say_to_run_make_tools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert kafka_home(KAFKA_VERSION) == tmp_path / "kquota" / f"kafka-{KAFKA_VERSION}"
    with pytest.raises(KafkaNotInstalled, match=r"run `make tools`"):
        KafkaBroker(tmp_path / "broker").start()
    with pytest.raises(ValueError, match=r"'2\.8\.0' is not pinned"):
        KafkaBroker(tmp_path / "old", version="2.8.0")


def test_a_cluster_id_that_starts_with_a_dash_formats(tmp_path: Path) -> None:
    """One random id in 64 starts with ``-``; Kafka's own ids never do, and the storage
    tool must still take one (it would read it as an option after ``--cluster-id ``)."""
    assert not any(random_cluster_id().startswith("-") for _ in range(2000))
    broker = KafkaBroker(tmp_path / "broker", cluster_id="-LsW87eqSJOhG6uR1Tnbuw")
    broker.prepare()
    meta = (broker.data_dir / "meta.properties").read_text()
    assert "cluster.id=-LsW87eqSJOhG6uR1Tnbuw" in meta, meta


def test_the_request_log_is_read_across_its_hourly_rolls(tmp_path: Path) -> None:
    """The broker rolls kafka-request.log every hour, as a production broker does: a run
    that spans an hour's end has its first lines in the rolled file, read first."""
    broker = KafkaBroker(tmp_path / "broker")
    broker.log_dir.mkdir(parents=True)
    (broker.log_dir / "kafka-request.log.2026-11-27-06").write_text("a\nb\n")
    (broker.log_dir / "kafka-request.log.2026-11-27-05").write_text("0\n")
    broker.request_log.write_text("c\n")
    (broker.log_dir / "kafka-server.log.2026-11-27-06").write_text("not a request\n")
    assert list(broker.request_log_lines()) == ["0", "a", "b", "c"]


def test_kafka_configs_reports_the_tools_own_error() -> None:
    with pytest.raises(KafkaToolFailed, match=r"Invalid entity type planets"):
        kafka_configs("127.0.0.1:9", "--describe", "--entity-type", "planets")


# -- three clients through one broker -----------------------------------------------------

N_MESSAGES = 300
PARTITIONS = 3


def _messages(topic: str) -> list[tuple[bytes, bytes]]:
    """Keyed messages: a key's messages stay in order, whatever the partition."""
    return [(f"key-{i % 7}".encode(), f"{topic}-{i:05d}".encode() * 8) for i in range(N_MESSAGES)]


def _in_key_order(received: list[tuple[bytes, bytes]], topic: str) -> None:
    sent = _messages(topic)
    assert sorted(received) == sorted(sent)
    for key in {k for k, _ in sent}:
        assert [v for k, v in received if k == key] == [v for k, v in sent if k == key]


def create_topic(bootstrap: str, topic: str, partitions: int, replication: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, partitions, replication)])
    futures[topic].result(timeout=WAIT_S)


def _consume_librdkafka(bootstrap: str, topic: str, n: int, **extra: Any) -> list[Any]:
    from confluent_kafka import Consumer, KafkaException

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{topic}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            **extra,
        }
    )
    consumer.subscribe([topic])
    received: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(received) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            received.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return received


def _librdkafka_roundtrip(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    from confluent_kafka import Producer

    create_topic(bootstrap, topic, PARTITIONS, 1)
    failures: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "rdkafka-rt", "linger.ms": 5})
    for key, value in _messages(topic):
        producer.produce(topic, value, key, on_delivery=lambda e, _m: e and failures.append(e))
        producer.poll(0)
    assert producer.flush(WAIT_S) == 0
    assert failures == []
    return _consume_librdkafka(bootstrap, topic, N_MESSAGES, **{"client.id": "rdkafka-rt-c"})


def _kafka_python_roundtrip(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kp-admin")
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="kp-rt", linger_ms=5)
    try:
        futures = [producer.send(topic, value, key) for key, value in _messages(topic)]
        producer.flush(WAIT_S)
        for future in futures:
            future.get(timeout=WAIT_S)
    finally:
        producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"{topic}-group",
        client_id="kp-rt-c",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
        consumer_timeout_ms=3000,
    )
    received: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + WAIT_S
    try:
        while len(received) < N_MESSAGES and time.monotonic() < deadline:
            received.extend((m.key, m.value) for m in consumer)  # ends after 3 s idle
    finally:
        consumer.close()
    return received


def _aiokafka_roundtrip(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    async def run() -> list[tuple[bytes, bytes]]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="aio-admin")
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id="aio-rt", linger_ms=5)
        await producer.start()
        try:
            sent = [await producer.send(topic, value, key) for key, value in _messages(topic)]
            await asyncio.wait_for(asyncio.gather(*sent), WAIT_S)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=f"{topic}-group",
            client_id="aio-rt-c",
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        received: list[tuple[bytes, bytes]] = []
        try:
            deadline = time.monotonic() + WAIT_S
            while len(received) < N_MESSAGES and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    received.extend((r.key, r.value) for r in records)  # type: ignore[misc]
        finally:
            await consumer.stop()
        return received

    return asyncio.run(run())


CLIENTS = {
    "librdkafka": _librdkafka_roundtrip,
    "kafka-python": _kafka_python_roundtrip,
    "aiokafka": _aiokafka_roundtrip,
}
PRODUCER_IDS = {"librdkafka": "rdkafka-rt", "kafka-python": "kp-rt", "aiokafka": "aio-rt"}


@pytest.mark.slow
@pytest.mark.parametrize("client", list(CLIENTS))
def test_client_produces_and_consumes_through_the_broker(
    kafka_broker: KafkaBroker, client: str
) -> None:
    topic = f"roundtrip-{client}"
    received = CLIENTS[client](kafka_broker.bootstrap, topic)
    _in_key_order(received, topic)
    # the broker, not a stand-in, served it: the producer's requests are in its request log
    produced = [
        partition["recordsSizeInBytes"]
        for line in _request_lines(kafka_broker)
        if line.api == "PRODUCE" and line.client_id == PRODUCER_IDS[client]
        for data in line.body["request"]["topicData"]
        for partition in data["partitionData"]
    ]
    assert sum(produced) >= sum(len(v) for _, v in _messages(topic))


# -- the request log ----------------------------------------------------------------------

LINE = re.compile(r"^\[(.{23})\] (\w+) Completed request:(\{.*\}) \(kafka\.request\.logger\)$")
KEYS_IN_ORDER = [
    "isForwarded",
    "requestHeader",
    "request",
    "response",
    "connection",
    "totalTimeMs",
    "requestQueueTimeMs",
    "localTimeMs",
    "remoteTimeMs",
    "throttleTimeMs",
    "responseQueueTimeMs",
    "sendTimeMs",
    "securityProtocol",
    "principal",
    "listener",
    "clientInformation",
]


@dataclass(frozen=True)
class RequestLine:
    at: datetime  # UTC: the brokers log in UTC
    level: str
    body: dict[str, Any]

    @property
    def api(self) -> str:
        return str(self.body["requestHeader"]["requestApiKeyName"])

    @property
    def client_id(self) -> str:
        return str(self.body["requestHeader"].get("clientId", ""))


def _request_lines(broker: KafkaBroker) -> list[RequestLine]:
    """The ``Completed request`` lines of a broker's request log, across its hourly rolls,
    in log order."""
    lines = []
    for text in broker.request_log_lines():
        match = LINE.match(text)
        if match:
            at = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").replace(tzinfo=UTC)
            lines.append(RequestLine(at, match[2], json.loads(match[3])))
    return lines


# -- a quota set with kafka-configs throttles a greedy librdkafka producer -----------------

QUOTA = 256 * 1024  # producer_byte_rate, bytes/s
GREEDY_S = 20.0
VALUE = b"q" * 4096


@dataclass
class ProducerRun:
    """What a librdkafka producer saw: acknowledged bytes, throttles, wall-clock span."""

    client_id: str
    acked_bytes: int = 0
    seconds: float = 0.0
    throttles_ms: list[int] = field(default_factory=list)  # throttle_cb, in order
    stats_throttle_max_ms: int = 0  # the largest statistics window maximum
    failures: list[str] = field(default_factory=list)
    began: datetime = field(default_factory=lambda: datetime.now(UTC))
    ended: datetime = field(default_factory=lambda: datetime.now(UTC))

    @property
    def rate(self) -> float:
        return self.acked_bytes / self.seconds


def _produce_flat_out(bootstrap: str, topic: str, client_id: str, seconds: float) -> ProducerRun:
    """Produce as fast as librdkafka takes messages for ``seconds``; then drop what is still
    queued, let what is in flight finish, and count the bytes acknowledged by then."""
    from confluent_kafka import Producer

    run = ProducerRun(client_id)

    def on_stats(text: str) -> None:
        for broker in json.loads(text)["brokers"].values():
            run.stats_throttle_max_ms = max(run.stats_throttle_max_ms, broker["throttle"]["max"])

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            run.acked_bytes += len(msg.value())
        elif "purge" not in str(err).lower():
            run.failures.append(str(err))

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "acks": 1,
            "linger.ms": 5,
            "batch.size": 32 * 1024,  # many requests: the throttle follows the rate closely
            "queue.buffering.max.kbytes": 1024,  # a bounded backlog
            "statistics.interval.ms": 500,
            "stats_cb": on_stats,
            "throttle_cb": lambda event: run.throttles_ms.append(round(event.throttle_time * 1e3)),
        }
    )
    began = time.monotonic()
    while time.monotonic() - began < seconds:
        try:
            producer.produce(topic, VALUE, on_delivery=on_delivery)
        except BufferError:
            producer.poll(0.05)
            continue
        producer.poll(0)
    producer.purge(in_queue=True, in_flight=False)
    assert producer.flush(WAIT_S) == 0
    run.seconds = time.monotonic() - began
    run.ended = datetime.now(UTC)
    del producer  # its callbacks refer to run; collected with the test's garbage
    return run


@dataclass
class Throttled:
    broker: KafkaBroker
    quota_described: str
    greedy: ProducerRun
    free: ProducerRun


@pytest.fixture(scope="module", params=VERSIONS)
def throttled(request: pytest.FixtureRequest) -> Throttled:
    """For each pinned version: a ``producer_byte_rate`` on one client id, set with Kafka's
    own ``kafka-configs``, then a greedy producer with that id for 20 s and, for contrast,
    one without a quota for 2 s. The quota is deleted afterwards."""
    version = request.param
    broker = request.getfixturevalue(
        {KAFKA_VERSION: "kafka_broker", KAFKA3_VERSION: "kafka3_broker"}.get(
            version, "kafka_newest_broker"
        )
    )
    assert broker.version == version
    client_id = f"greedy-{version}"
    topic = f"throttled-{version}"
    entity = ("--entity-type", "clients", "--entity-name", client_id)
    quota = f"producer_byte_rate={QUOTA}"
    kafka_configs(broker.bootstrap, "--alter", "--add-config", quota, *entity, version=version)
    try:
        described = kafka_configs(broker.bootstrap, "--describe", *entity, version=version)
        create_topic(broker.bootstrap, topic, 1, 1)
        greedy = _produce_flat_out(broker.bootstrap, topic, client_id, GREEDY_S)
        free = _produce_flat_out(broker.bootstrap, topic, f"free-{version}", 2.0)
    finally:
        kafka_configs(
            broker.bootstrap, "--alter", "--delete-config", "producer_byte_rate", *entity,
            version=version,
        )  # fmt: skip
    return Throttled(broker, described, greedy, free)


@pytest.mark.slow
def test_quota_throttles_a_greedy_producer_near_its_rate(throttled: Throttled) -> None:
    greedy, free = throttled.greedy, throttled.free
    assert f"producer_byte_rate={QUOTA}" in throttled.quota_described
    assert greedy.failures == [] and free.failures == []
    # librdkafka saw Kafka's throttle, in its callback and in its statistics
    assert max(greedy.throttles_ms) > 0, greedy.throttles_ms
    assert greedy.stats_throttle_max_ms > 0
    assert free.throttles_ms == [] or max(free.throttles_ms) == 0
    # Held near the quota. Kafka's rate is over 11 one-second samples and counts a new
    # client's bytes over at least 10 s, so it lets ~10 s of quota through at once and the
    # client then moves in lumps ~11 s apart: over 20 s about 1.0-1.5 x the quota (measured
    # here: 1.14). The bounds 0.5-2 x leave room for a loaded machine and still fail
    # without the quota: the same producer with no quota ran at hundreds of times it.
    assert 0.5 * QUOTA <= greedy.rate <= 2.0 * QUOTA, greedy.rate / QUOTA
    assert free.rate > 4 * QUOTA, free.rate / QUOTA


@pytest.mark.slow
def test_request_log_has_each_produce_and_its_throttle(throttled: Throttled) -> None:
    broker, greedy = throttled.broker, throttled.greedy

    def greedy_produce_lines() -> list[RequestLine]:
        return [
            line
            for line in _request_lines(broker)
            if line.api == "PRODUCE" and line.client_id == greedy.client_id
        ]

    def logged_bytes(lines: list[RequestLine]) -> int:
        return sum(
            partition["recordsSizeInBytes"]
            for line in lines
            for topic in line.body["request"]["topicData"]
            for partition in topic["partitionData"]
        )

    # a line is written once the response is sent: wait until every acknowledged byte is in
    lines = _until(
        "the request log holds every byte the producer had acknowledged",
        lambda: (
            (found := greedy_produce_lines())
            and logged_bytes(found) >= greedy.acked_bytes
            and found
        ),
    )
    # record batches carry a few bytes per record besides the values
    assert logged_bytes(lines) <= 1.25 * greedy.acked_bytes
    for line in lines:
        assert line.level == "DEBUG"
        assert [k for k in line.body if k in KEYS_IN_ORDER] == KEYS_IN_ORDER
        assert line.body["listener"] == "PLAINTEXT"
        assert line.body["principal"] == "User:ANONYMOUS"
        # the throttle the client was sent is the one logged
        assert line.body["response"]["throttleTimeMs"] == line.body["throttleTimeMs"]
        assert greedy.began.timestamp() - 2 <= line.at.timestamp() <= greedy.ended.timestamp() + 2
    logged = [line.body["throttleTimeMs"] for line in lines]
    assert max(logged) > 0
    # every throttle librdkafka reported (>0) is one Kafka logged for this client
    assert {t for t in greedy.throttles_ms if t > 0} <= set(logged)


# -- three brokers: one stops, leaders move, clients carry on, it comes back --------------


def _partitions(bootstrap: str, topic: str) -> tuple[set[int], dict[int, Any]]:
    """The live brokers and ``{partition: metadata}`` as one node sees them."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    metadata = admin.list_topics(topic, timeout=10)
    return set(metadata.brokers), dict(metadata.topics[topic].partitions)


@pytest.mark.slow
def test_cluster_keeps_serving_while_a_broker_is_stopped_and_restarted(
    kafka_cluster: KafkaCluster,
) -> None:
    from confluent_kafka import Producer

    topic = "replicated"
    create_topic(kafka_cluster.bootstrap, topic, PARTITIONS, 3)
    everyone = {broker.node_id for broker in kafka_cluster.brokers}

    def settled() -> dict[int, Any] | None:
        brokers, partitions = _partitions(kafka_cluster.bootstrap, topic)
        full = all(set(p.isrs) == everyone and p.leader in everyone for p in partitions.values())
        return (
            partitions if brokers == everyone and len(partitions) == PARTITIONS and full else None
        )

    before = _until("every partition has three in-sync replicas", settled)
    assert all(sorted(p.replicas) == sorted(everyone) for p in before.values())

    failures: list[Any] = []
    producer = Producer(
        {"bootstrap.servers": kafka_cluster.bootstrap, "client.id": "survivor", "acks": "all"}
    )

    def produce(values: range) -> None:
        for i in values:
            key = f"key-{i % 7}".encode()
            producer.produce(
                topic, b"%05d" % i, key, on_delivery=lambda e, _m: e and failures.append(e)
            )
            producer.poll(0)
        assert producer.flush(WAIT_S) == 0
        assert failures == []

    produce(range(0, 100))

    # stop the leader of partition 0: leaders must move
    victim = before[0].leader
    node = kafka_cluster.broker(victim)
    pid = node.pid
    assert kafka_cluster.stop_broker(victim), node.describe()
    assert pid is not None and not _jvm_alive(pid)
    others = ",".join(b.bootstrap for b in kafka_cluster.brokers if b.node_id != victim)

    def moved() -> dict[int, Any] | None:
        brokers, partitions = _partitions(others, topic)
        ok = all(p.leader in everyone - {victim} for p in partitions.values())
        return partitions if victim not in brokers and ok else None

    after = _until(f"no partition led by the stopped node {victim}", moved)
    assert after[0].leader != victim
    assert all(victim not in p.isrs for p in after.values())

    # the same producer carries on through the move (acks=all: two in-sync replicas)
    produce(range(100, 200))

    kafka_cluster.start_broker(victim)
    assert kafka_cluster.broker(victim).running
    _until(f"node {victim} back in every in-sync replica set", settled)
    produce(range(200, 300))

    received = _consume_librdkafka(kafka_cluster.bootstrap, topic, 300)
    assert sorted(v for _, v in received) == [b"%05d" % i for i in range(300)]


# -- a stopped broker leaves nothing running ----------------------------------------------


def _jvm_alive(pid: int) -> bool:
    """Whether ``pid`` is a live Kafka JVM (not gone, not a zombie, not a reused pid)."""
    command = _processes().get(pid)
    return command is not None and "kafka.Kafka" in command


def _jvms_in(folder: Path) -> list[int]:
    """The live Kafka JVMs whose command line names ``folder`` (a broker's own)."""
    return sorted(
        pid
        for pid, command in _processes().items()
        if str(folder) in command and "kafka.Kafka" in command
    )


def _processes() -> dict[int, str]:
    """``{pid: command line}`` of every live process (zombies left out), from ``ps``."""
    listing = subprocess.run(
        ["ps", "-e", "-ww", "-o", "pid=,stat=,args="], capture_output=True, text=True, check=True
    ).stdout
    processes = {}
    for row in listing.splitlines():
        pid, stat, *command = row.split(None, 2)
        if not stat.startswith("Z"):
            processes[int(pid)] = command[0] if command else ""
    return processes


@pytest.mark.slow
@pytest.mark.parametrize("version", VERSIONS)
def test_stop_is_clean_and_leaves_no_jvm(tmp_path: Path, version: str) -> None:
    broker = KafkaBroker(tmp_path, version=version).start()
    try:
        assert broker.startup_s is not None and broker.startup_s < 60
        assert _jvms_in(tmp_path) == [broker.pid]
    finally:
        stopped_cleanly = broker.stop()
    assert stopped_cleanly, broker.describe()
    assert broker.process is not None and broker.process.returncode == 128 + signal.SIGTERM
    assert _jvms_in(tmp_path) == []
    # Kafka's own marks of a clean shutdown
    assert (broker.data_dir / ".kafka_cleanshutdown").is_file()
    log = broker.server_log.read_text(encoding="utf-8")
    assert f"[BrokerServer id={broker.node_id}] shut down completed" in log
    assert broker.request_log.is_file()


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal is Linux's")
def test_broker_stops_when_the_test_process_dies(tmp_path: Path) -> None:
    """A run killed outright (no teardown) still leaves no JVM on the machine."""
    script = (
        "import sys, time; from kafka_support import KafkaBroker; "
        "b = KafkaBroker(sys.argv[1]).start(); print(b.pid, flush=True); time.sleep(600)"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    parent = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert parent.stdout is not None
        jvm = int(parent.stdout.readline())
        assert _jvm_alive(jvm)
    finally:
        parent.kill()
        parent.wait()
        parent.stdout.close()  # type: ignore[union-attr]
    _until("the orphaned broker's JVM exits", lambda: not _jvm_alive(jvm))
    assert _jvms_in(tmp_path) == []
    assert (tmp_path / "data" / ".kafka_cleanshutdown").is_file()  # it got SIGTERM


# -- start-up is well under a minute ------------------------------------------------------


@pytest.mark.slow
def test_fixtures_start_well_under_a_minute(
    kafka_broker: KafkaBroker,
    kafka3_broker: KafkaBroker,
    kafka_cluster: KafkaCluster,
    record_property: Callable[[str, object], None],
) -> None:
    times = {
        f"kafka_broker ({kafka_broker.version})": kafka_broker.startup_s,
        f"kafka3_broker ({kafka3_broker.version})": kafka3_broker.startup_s,
        f"kafka_cluster ({kafka_cluster.version}, 3+1 nodes)": kafka_cluster.startup_s,
    }
    for name, seconds in times.items():
        record_property(f"startup_s {name}", seconds)
        assert seconds is not None and seconds < 60, times
