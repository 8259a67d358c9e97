"""Real Kafka clients held to their quotas by ``kquota proxy`` in front of Tansu.

What Kafka's algorithm guarantees, checked on what the proxy recorded and what the clients
saw (only upper bounds on rates: a slow machine may send less):

* once the sensor's first full window span has passed, the rate Kafka's quota check
  measures at a request stays near ``Q * N / (N - 1)``: when a window leaves the ring the
  measured span shrinks by about one window of at least ``N - 1``, so with Kafka's default
  N = 11 a greedy client's sensor reads up to ~1.13 Q at those moments (a simulation on the
  core, which is Kafka's arithmetic, shows the same; 1.05 Q does not hold for N = 11). The
  check allows that plus two requests over ``N - 1`` windows (samples start at requests,
  not on a grid, so the shrink can exceed one window by a little);
* a fresh sensor's window is padded to ``(num_samples - 1)`` windows, so a greedy client may
  get up to that much quota at once (a burst), then the window's span: over the run it gets
  at most ``Q * (run + (num_samples - 1) * window)`` plus one request, and from second 5 on
  (after the first burst) at most 1.05 Q;
* the throttles the client reports are exactly the ones the proxy applied;
* nothing is lost: every message is consumed once, in order.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import kquota
import pytest
from kquota import QuotaManager
from kquota.broker import QuotaCollector, serve_metrics
from kquota.config.live import LiveQuotas
from kquota.config.store import SQLiteStore
from kquota.proxy import ANONYMOUS
from ports import free_port
from proxy_support import RecordingPlugin, consume_from_start, create_topic, run_proxy
from scrapes import client_sample

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings(
        # kafka-python 3.0.12 loads its schemas with importlib.resources' legacy API
        "ignore:(open_text|read_text) is deprecated:DeprecationWarning",
    ),
]

NUM_SAMPLES = 11
WINDOW_S = 1
PADDED_S = (NUM_SAMPLES - 1) * WINDOW_S
MESSAGE = 1000  # payload bytes per message (plus an 8-byte sequence number)
BATCH = 65_536  # librdkafka batch.size: one request stays well under 5 % of Q x 10 s
FETCH_QUOTA = 150_000  # consumer_byte_rate of the fetch-quota tests
FETCH_RUN_S = 20
FETCH_MESSAGES = 4_500  # ~4.5 MB: more than the quota lets through in the run


REQUESTS_BEYOND = 8
"""Requests Kafka's arithmetic may measure beyond the quota. A throttle mutes until the
rate, as measured then, is back at the quota; samples that roll out meanwhile can leave it
above when the client's next requests come, and each is recorded before its check. Runs
on a loaded machine have measured four requests' worth; the replay checks that every
throttle is Kafka's, this bound only that the client is held near the quota."""


def sensor_bound(quota: float, request_bytes: float) -> float:
    """What Kafka's check may measure at a request after the first full window span."""
    return quota * NUM_SAMPLES / (NUM_SAMPLES - 1) + REQUESTS_BEYOND * request_bytes / PADDED_S


def _check_sensor(plugin: RecordingPlugin, api: str, client_id: str, quota: float) -> float:
    """Assert the sensor bound at every request after the first window span; return the
    largest rate / quota seen (reported by the tests)."""
    start = plugin.first_ms(api, client_id) + NUM_SAMPLES * WINDOW_S * 1000
    rates = plugin.rates_after(api, client_id, start)
    largest = max(a.size for a in plugin.applied if a.api == api and a.client_id == client_id)
    assert rates, "no request after the first window span"
    assert max(rates) <= sensor_bound(quota, largest)
    return max(rates) / quota


@contextmanager
def _fetch_quota_proxy(
    tansu: Any, topic: str, client_id: str, fill: bytes
) -> Iterator[tuple[RecordingPlugin, Any]]:
    """A proxy whose plugin holds ``client_id`` to a fetch quota of :data:`FETCH_QUOTA`,
    and ``topic`` holding :data:`FETCH_MESSAGES` numbered messages of ``fill`` bytes."""
    from confluent_kafka import Producer

    plugin = _plugin()
    plugin.fetch.set_quota(kquota.Entity(client_id=client_id), FETCH_QUOTA)
    with run_proxy(tansu.upstream, tansu.proxy_port, plugin) as proxy:
        create_topic(proxy.address, topic)
        filler = Producer({"bootstrap.servers": proxy.address, "client.id": "filler"})
        payload = fill * MESSAGE
        for seq in range(FETCH_MESSAGES):
            filler.produce(topic, seq.to_bytes(8, "big") + payload)
            if seq % 500 == 0:
                filler.poll(0)
        assert filler.flush(60) == 0
        yield plugin, proxy


def _check_consumer_held(
    plugin: RecordingPlugin, client_id: str, received: list[tuple[float, int, int]], start: float
) -> tuple[float, int, int]:
    """A consumer under a ``consumer_byte_rate`` of :data:`FETCH_QUOTA` for
    :data:`FETCH_RUN_S`: throttled, each throttled fetch answered empty (its bytes not
    recorded), within its quota over the run and from second 5, and what it got in order,
    once each, no gap. Returns the sensor's maximum (in Q), the bytes consumed over the
    run and those from second 5."""
    quota, run_s = FETCH_QUOTA, FETCH_RUN_S
    assert plugin.throttles("fetch", client_id), "the consumer was never throttled"
    throttled = [a for a in plugin.applied if a.api == "fetch" and a.outcome.throttled]
    assert all(a.outcome.empty_response for a in throttled)
    sensor_max = _check_sensor(plugin, "fetch", client_id, quota)
    got = sum(size for t, _, size in received if t < start + run_s)
    assert got <= quota * (run_s + PADDED_S) + BATCH
    later = sum(size for t, _, size in received if start + 5 <= t < start + run_s)
    assert later / (run_s - 5) <= 1.05 * quota
    assert [seq for _, seq, _ in received] == list(range(len(received)))
    assert 0 < len(received) < FETCH_MESSAGES
    return sensor_max, got, later


def _plugin() -> RecordingPlugin:
    managers = [
        QuotaManager(t, num_samples=NUM_SAMPLES, window_ms=WINDOW_S * 1000)
        for t in ("produce", "fetch", "request")
    ]
    return RecordingPlugin(*managers)


class GreedyProducer:
    """A librdkafka producer that always has ~128 messages waiting (bounded memory)."""

    def __init__(self, bootstrap: str, topic: str, client_id: str, **conf: Any) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.throttles_ms: list[int] = []
        self.acked: list[tuple[float, int]] = []
        self.failures: list[Any] = []
        self.sent = 0
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": client_id,
                "batch.size": BATCH,
                "linger.ms": 5,
                "acks": "all",
                "throttle_cb": self._throttled,
                **conf,
            }
        )

    def _throttled(self, event: Any) -> None:
        if event.throttle_time > 0:
            self.throttles_ms.append(round(event.throttle_time * 1000))

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.failures.append(err)
        else:
            self.acked.append((time.monotonic(), len(msg.value())))

    def run(self, seconds: float) -> float:
        """Produce for ``seconds``, then deliver what is queued; return the start time."""
        start = time.monotonic()
        payload = b"x" * MESSAGE
        while time.monotonic() - start < seconds:
            if len(self.producer) < 128:
                value = self.sent.to_bytes(8, "big") + payload
                self.producer.produce(self.topic, value, on_delivery=self._delivered)
                self.sent += 1
                self.producer.poll(0)
            else:
                self.producer.poll(0.01)
        assert self.producer.flush(60) == 0, "messages left undelivered"
        self.producer.poll(0)
        return start

    def acked_between(self, start: float, end: float) -> int:
        return sum(size for t, size in self.acked if start <= t < end)


def _consume_sequence(bootstrap: str, topic: str, count: int) -> list[int]:
    """The sequence numbers of the first ``count`` messages of ``topic`` (then checks that
    nothing more arrives)."""
    values = consume_from_start(bootstrap, topic, count, f"{topic}-check", "checker", 120)
    return [int.from_bytes(value[:8], "big") for value in values]


def test_librdkafka_producer_is_held_to_its_produce_quota(tansu: Any) -> None:
    quota = 200_000
    run_s = 20
    topic = "quota-produce-librdkafka"
    plugin = _plugin()
    plugin.produce.set_quota(kquota.Entity(client_id="greedy"), quota)
    with run_proxy(tansu.upstream, tansu.proxy_port, plugin) as proxy:
        create_topic(proxy.address, topic)
        producer = GreedyProducer(proxy.address, topic, "greedy")
        start = producer.run(run_s)
        sequence = _consume_sequence(proxy.address, topic, producer.sent)

    applied = plugin.throttles("produce", "greedy")
    assert applied, "a greedy producer was never throttled"
    assert plugin.replay_mismatches == []
    assert producer.failures == []
    assert producer.throttles_ms == applied
    sensor_max = _check_sensor(plugin, "produce", "greedy", quota)
    whole_run = producer.acked_between(start, start + run_s)
    assert whole_run <= quota * (run_s + PADDED_S) + BATCH
    later = producer.acked_between(start + 5, start + run_s) / (run_s - 5)
    assert later <= 1.05 * quota
    assert sequence == list(range(producer.sent))
    print(
        f"greedy librdkafka producer, Q={quota}: {len(applied)} throttles"
        f" (max {max(applied)} ms), sensor max {sensor_max:.3f} Q, acked"
        f" {whole_run / run_s / quota:.3f} Q over the run, {later / quota:.3f} Q from 5 s,"
        f" {producer.sent} messages consumed once in order"
    )


class TimedAcks:
    """Acknowledged payload bytes with the time each ack arrived."""

    def __init__(self) -> None:
        self.acked: list[tuple[float, int]] = []
        self._lock = threading.Lock()

    def add(self, size: int) -> None:
        with self._lock:
            self.acked.append((time.monotonic(), size))

    def between(self, start: float, end: float) -> int:
        with self._lock:
            return sum(size for t, size in self.acked if start <= t < end)


def _kafka_python_greedy(bootstrap: str, topic: str, client_id: str, seconds: float) -> Any:
    from kafka import KafkaProducer

    acks = TimedAcks()
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, client_id=client_id, batch_size=BATCH, linger_ms=5
    )
    payload = b"x" * MESSAGE
    pending: list[Any] = []
    sent = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < seconds:
            value = sent.to_bytes(8, "big") + payload
            future = producer.send(topic, value)
            future.add_callback(lambda _meta: acks.add(MESSAGE + 8))
            pending.append(future)
            sent += 1
            if len(pending) >= 128:
                pending.pop(0).get(timeout=60)
        producer.flush(60)
        for future in pending:
            future.get(timeout=60)
    finally:
        producer.close(10)
    return start, sent, acks


def _aiokafka_greedy(bootstrap: str, topic: str, client_id: str, seconds: float) -> Any:
    async def run() -> Any:
        from aiokafka import AIOKafkaProducer

        acks = TimedAcks()
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, client_id=client_id, max_batch_size=BATCH, linger_ms=5
        )
        await producer.start()
        payload = b"x" * MESSAGE
        pending: list[Any] = []
        sent = 0
        start = time.monotonic()
        try:
            while time.monotonic() - start < seconds:
                value = sent.to_bytes(8, "big") + payload
                future = await producer.send(topic, value)
                future.add_done_callback(lambda f: f.exception() or acks.add(MESSAGE + 8))
                pending.append(future)
                sent += 1
                if len(pending) >= 128:
                    await asyncio.wait_for(pending.pop(0), 60)
            for future in pending:
                await asyncio.wait_for(future, 60)
        finally:
            await producer.stop()
        return start, sent, acks

    return asyncio.run(run())


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_python_clients_are_held_to_their_produce_quota(tansu: Any, client: str) -> None:
    """kafka-python backs off by itself (KIP-219); aiokafka ignores the field and is held by
    the muted connection alone. Either way the proxy's throttles keep it to the quota."""
    quota = 200_000
    run_s = 20
    topic = f"quota-produce-{client}"
    client_id = f"greedy-{client}"
    plugin = _plugin()
    plugin.produce.set_quota(kquota.Entity(client_id=client_id), quota)
    greedy = _kafka_python_greedy if client == "kafka-python" else _aiokafka_greedy
    with run_proxy(tansu.upstream, tansu.proxy_port, plugin) as proxy:
        create_topic(proxy.address, topic)
        start, sent, acks = greedy(proxy.address, topic, client_id, run_s)
        sequence = _consume_sequence(proxy.address, topic, sent)

    applied = plugin.throttles("produce", client_id)
    assert applied, "a greedy producer was never throttled"
    sensor_max = _check_sensor(plugin, "produce", client_id, quota)
    whole_run = acks.between(start, start + run_s)
    assert whole_run <= quota * (run_s + PADDED_S) + BATCH
    later = acks.between(start + 5, start + run_s) / (run_s - 5)
    assert later <= 1.05 * quota
    assert sequence == list(range(sent))
    print(
        f"greedy {client} producer, Q={quota}: {len(applied)} throttles"
        f" (max {max(applied)} ms), sensor max {sensor_max:.3f} Q, acked"
        f" {whole_run / run_s / quota:.3f} Q over the run, {later / quota:.3f} Q from 5 s,"
        f" {sent} messages consumed once in order"
    )


def test_librdkafka_consumer_group_is_held_to_its_fetch_quota(tansu: Any) -> None:
    from confluent_kafka import Consumer, KafkaException

    quota, run_s, topic = FETCH_QUOTA, FETCH_RUN_S, "quota-fetch-librdkafka"
    with _fetch_quota_proxy(tansu, topic, "slow-consumer", b"y") as (plugin, proxy):
        throttles_ms: list[int] = []
        consumer = Consumer(
            {
                "bootstrap.servers": proxy.address,
                "group.id": "slow-group",
                "client.id": "slow-consumer",
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
                "fetch.max.bytes": BATCH,
                "max.partition.fetch.bytes": BATCH,
                "message.max.bytes": BATCH,
                "throttle_cb": lambda e: (
                    e.throttle_time > 0 and throttles_ms.append(round(e.throttle_time * 1000))
                ),
            }
        )
        consumer.subscribe([topic])
        received: list[tuple[float, int, int]] = []
        start = time.monotonic()
        try:
            while time.monotonic() - start < run_s:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    raise KafkaException(msg.error())
                value = msg.value()
                received.append((time.monotonic(), int.from_bytes(value[:8], "big"), len(value)))
        finally:
            consumer.close()

    applied = plugin.throttles("fetch", "slow-consumer")
    assert throttles_ms == applied
    sensor_max, got, later = _check_consumer_held(plugin, "slow-consumer", received, start)
    print(
        f"librdkafka consumer group, Q={quota}: {len(applied)} throttled fetches answered"
        f" empty (max {max(applied)} ms), sensor max {sensor_max:.3f} Q, consumed"
        f" {got / run_s / quota:.3f} Q over the run, {later / (run_s - 5) / quota:.3f} Q"
        f" from 5 s, {len(received)} messages in order"
    )


def test_two_clients_of_one_user_share_its_quota(tansu: Any) -> None:
    """Two producers whose principal is the same user: a user quota covers both.

    Without SASL the principal is ANONYMOUS, so the user quota is set for it.
    """
    quota = 200_000
    run_s = 20
    plugin = _plugin()
    plugin.produce.set_quota(kquota.Entity(user=ANONYMOUS), quota)
    with run_proxy(tansu.upstream, tansu.proxy_port, plugin) as proxy:
        create_topic(proxy.address, "quota-shared")
        producers = [GreedyProducer(proxy.address, "quota-shared", f"sharer-{i}") for i in (1, 2)]
        starts: list[float] = []
        threads = [
            threading.Thread(target=lambda p=p: starts.append(p.run(run_s))) for p in producers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    start = min(starts)
    assert len(starts) == 2
    assert all(p.failures == [] for p in producers)
    assert all(p.throttles_ms for p in producers), "each client was throttled"
    for i, p in enumerate(producers, 1):
        assert p.throttles_ms == plugin.throttles("produce", f"sharer-{i}")
    # Both measure the one user sensor. It is not checked against sensor_bound: each
    # connection is muted on its own, so while one waits the other's requests are recorded
    # over the quota too (as in Kafka); the clients' rate below is what the quota holds.
    sensor_max = max(max(plugin.rates_after("produce", f"sharer-{i}", 0)) / quota for i in (1, 2))
    later = sum(p.acked_between(start + 5, start + run_s) for p in producers)
    assert later / (run_s - 5) <= 1.05 * quota
    total = sum(p.acked_between(start, start + run_s) for p in producers)
    assert total <= quota * (run_s + PADDED_S) + 2 * BATCH
    shares = [p.acked_between(start, start + run_s) / total for p in producers]
    print(
        f"two librdkafka producers of one user, Q={quota}: sensor max {sensor_max:.3f} Q,"
        f" together {total / run_s / quota:.3f} Q over the run,"
        f" {later / (run_s - 5) / quota:.3f} Q from 5 s, shares {shares[0]:.2f}/{shares[1]:.2f}"
    )


def test_quota_raised_with_kquota_configs_applies_mid_run_and_metrics_show_it(
    tansu: Any, tmp_path: Path
) -> None:
    low, high = 100_000, 1_000_000
    store_path = tmp_path / "quotas.sqlite"
    kquota_cmd = [sys.executable, "-m", "kquota", "configs", "--store", str(store_path)]
    plugin = _plugin()

    def alter(value: int) -> int:
        subprocess.run(
            [
                *kquota_cmd,
                *("--alter", "--entity-type", "clients", "--entity-name", "mover"),
                *("--add-config", f"producer_byte_rate={value}"),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        return plugin.channels.now_ms()

    alter(low)
    live = LiveQuotas(SQLiteStore(store_path), *plugin.managers).start()
    metrics = serve_metrics(QuotaCollector(*plugin.managers))
    scraped: list[str] = []
    raised: list[int] = []
    bound_seen: list[int] = []
    try:
        with run_proxy(tansu.upstream, tansu.proxy_port, plugin) as proxy:
            create_topic(proxy.address, "quota-mover")
            producer = GreedyProducer(proxy.address, "quota-mover", "mover")

            def midway() -> None:
                time.sleep(13)
                with urllib.request.urlopen(metrics.url, timeout=10) as reply:
                    scraped.append(reply.read().decode())
                raised.append(alter(high))
                deadline = time.monotonic() + 10
                while plugin.produce.bound(ANONYMOUS, "mover") != high:
                    assert time.monotonic() < deadline
                    time.sleep(0.01)
                bound_seen.append(plugin.channels.now_ms())

            helper = threading.Thread(target=midway, daemon=True)
            helper.start()
            producer.run(24)
            helper.join(30)
    finally:
        metrics.close()
        live.stop()

    assert producer.failures == []
    assert producer.throttles_ms == plugin.throttles("produce", "mover")
    # the change reached the proxy within a second
    assert bound_seen, "the raised quota never reached the proxy"
    assert bound_seen[0] - raised[0] < 1000
    mover = [a for a in plugin.applied if a.client_id == "mover" and a.rate is not None]
    # held to the old quota before the change (throttled), and faster than it allows
    # within one second plus one quota window after
    assert any(a.outcome.throttled for a in mover if a.at_ms < raised[0])
    before = [a.rate for a in mover if a.at_ms < raised[0]]
    after = [a.rate for a in mover if a.at_ms >= bound_seen[0] + WINDOW_S * 1000]
    assert max(after) > 1.5 * low
    # the scrape during the run shows the client under Kafka's names
    text = scraped[0]
    rate = client_sample(text, "kafka_server_produce_byte_rate", "mover")
    assert 0 < rate <= 1.3 * low  # a read between requests may see the span shrink (above)
    assert client_sample(text, "kafka_server_produce_throttle_time", "mover") > 0
    print(
        f"quota raised {low} -> {high} mid-run: reached the proxy in"
        f" {bound_seen[0] - raised[0]} ms; sensor before {max(before) / low:.3f} x old Q,"
        f" after {max(after) / low:.2f} x old Q; scraped byte_rate {rate:.0f}"
    )


@pytest.mark.parametrize("client", ["kafka-python", "librdkafka"])
def test_kip219_clients_send_nothing_on_a_connection_while_throttled(
    tansu: Any, client: str
) -> None:
    """kafka-python 3.x honours KIP-219: after a response carrying a throttle it sends
    nothing on that connection until the throttle has passed. librdkafka does not wait by
    itself (the proxy's mute holds it): it is the control showing that the relay, which
    sits on the advertised address and sees every byte, catches a client that sends."""
    from proxy_support import TimingRelay

    quota = 200_000
    topic = f"quota-kip219-{client}"
    plugin = _plugin()
    plugin.produce.set_quota(kquota.Entity(client_id="polite"), quota)
    proxy_port = free_port()
    bootstrap = f"127.0.0.1:{tansu.proxy_port}"
    with run_proxy(tansu.upstream, proxy_port, plugin):
        relay = TimingRelay(tansu.proxy_port, ("127.0.0.1", proxy_port))
        try:
            create_topic(bootstrap, topic)
            if client == "kafka-python":
                _kafka_python_greedy(bootstrap, topic, "polite", 15)
            else:
                GreedyProducer(bootstrap, topic, "polite").run(15)
        finally:
            relay.close()
    early, throttled = relay.sent_while_throttled()
    assert throttled > 0, "the client was never throttled"
    assert throttled == len(plugin.throttles("produce", "polite"))
    if client == "kafka-python":
        assert early == 0, f"{early} requests were sent during a throttle"
    else:
        assert early > 0
    print(f"{client}: {throttled} throttled responses, {early} requests sent during them")


def test_kafka_python_consumer_group_is_held_to_its_fetch_quota(tansu: Any) -> None:
    """kafka-python's fetcher keeps fetch-session state (KIP-227; Tansu 0.6 opens no
    session): after throttled fetches answered empty it goes on without a reset or a gap."""
    from kafka import KafkaConsumer

    quota, run_s, topic = FETCH_QUOTA, FETCH_RUN_S, "quota-fetch-kafka-python"
    with _fetch_quota_proxy(tansu, topic, "kp-slow-consumer", b"z") as (plugin, proxy):
        consumer = KafkaConsumer(
            topic,
            bootstrap_servers=proxy.address,
            group_id="kp-slow-group",
            client_id="kp-slow-consumer",
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            fetch_max_bytes=BATCH,
            max_partition_fetch_bytes=BATCH,
        )
        received: list[tuple[float, int, int]] = []
        start = time.monotonic()
        try:
            while time.monotonic() - start < run_s:
                for records in consumer.poll(timeout_ms=200).values():
                    now = time.monotonic()
                    received.extend(
                        (now, int.from_bytes(r.value[:8], "big"), len(r.value)) for r in records
                    )
        finally:
            consumer.close()

    applied = plugin.throttles("fetch", "kp-slow-consumer")
    sensor_max, got, later = _check_consumer_held(plugin, "kp-slow-consumer", received, start)
    print(
        f"kafka-python consumer group, Q={quota}: {len(applied)} throttled fetches answered"
        f" empty, sensor max {sensor_max:.3f} Q, consumed {got / run_s / quota:.3f} Q over"
        f" the run, {later / (run_s - 5) / quota:.3f} Q from 5 s, {len(received)} in order"
    )
