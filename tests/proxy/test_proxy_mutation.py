"""The controller-mutation quota (KIP-599) through ``kquota proxy``, with real admin clients
against Tansu 0.6.0.

Which behaviour a client gets depends on the request version it sends, as with Kafka:

* kafka-python 3.0 sends CreateTopics v7 and DeleteTopics v6: strict (v6+ and v5+), so the
  topics over the quota fail with ``THROTTLING_QUOTA_EXCEEDED`` and are retried;
* confluent-kafka (librdkafka 2.16) sends CreateTopics v4 and DeleteTopics v4: permissive,
  so every topic is created and the response carries the throttle (librdkafka never
  sees error 89 from a Kafka broker either).

Tansu 0.6.0 handles CreateTopics, DeleteTopics and Metadata v12 but not CreatePartitions
(it does not list it in ApiVersions; both clients refuse to send it), so CreatePartitions
is left to ``test_proxy_create_partitions.py`` (a scripted upstream).

Every expected count and throttle is computed from the core's token bucket
(:class:`kquota.TokenBucket`, the stat the manager measures with), not written down.
The plugin runs on :func:`kquota.monotonic_ms` as ``kquota proxy`` does, so a new
bucket is full at its first use, as on Kafka's wall clock.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kafka_wire import THROTTLED_MESSAGE, THROTTLING_QUOTA_EXCEEDED
from kquota import ControllerMutationQuotaManager, Entity, TokenBucket, monotonic_ms
from kquota.broker import MutationQuotaCollector, QuotaOutcome, serve_metrics
from proxy_support import RecordingPlugin, run_proxy, scrape_flat

pytest.importorskip("kio")

RATE = 10.0
"""controller_mutation_rate: partitions per second."""
NUM_SAMPLES = 5
"""quota.window.num: a burst of 5 s of quota (50 partitions), so that 100 topics go over
it (Kafka's default of 11 samples would allow 110)."""
TOPICS = 100


class MutationPlugin(RecordingPlugin):
    """The real plugin, keeping what each mutation response was given."""

    def __init__(self) -> None:
        super().__init__(clock=monotonic_ms, background=True)
        self._mutations: list[tuple[int, QuotaOutcome]] = []
        self._guard = threading.Lock()

    def mutation_decided(self, mutation_throttle_ms: int, outcome: QuotaOutcome) -> None:
        with self._guard:
            self._mutations.append((mutation_throttle_ms, outcome))

    @property
    def mutations(self) -> list[tuple[int, QuotaOutcome]]:
        """What each mutation response was given, so far."""
        self.pull()
        return self._mutations


def _manager(client_id: str) -> ControllerMutationQuotaManager:
    manager = ControllerMutationQuotaManager(num_samples=NUM_SAMPLES, window_ms=1000)
    manager.set_quota(Entity(client_id=client_id), RATE)
    return manager


def _full_bucket() -> tuple[TokenBucket, int]:
    """The core's bucket of one client as the proxy's manager starts it: full (its first
    use is long after time 0, as on Kafka's clock)."""
    bucket = TokenBucket(RATE, num_samples=NUM_SAMPLES, window_ms=1000)
    now = 10**12
    assert bucket.measure(now) == bucket.burst
    return bucket, now


def _strict_refusals(topics: int) -> tuple[int, int]:
    """How many of ``topics`` one-partition topics of one strict request the core's bucket
    refuses, and the throttle of a refusal."""
    bucket, now = _full_bucket()
    refused, throttle = 0, 0
    for _ in range(topics):
        check = bucket.record_strict(1.0, now)
        if not check.accepted:
            refused += 1
            throttle = check.throttle_ms
    return refused, throttle


def _permissive_throttle(topics: int) -> int:
    """The throttle one permissive request of ``topics`` one-partition topics gets."""
    bucket, now = _full_bucket()
    throttle = 0
    for _ in range(topics):
        check = bucket.record_permissive(1.0, now)
        assert check.accepted
        throttle = check.throttle_ms
    return throttle


def _when_not_paused(call: Any) -> Any:
    """``call()``, again while kafka-python refuses to send because the connection is
    paused for the broker's throttle (``NodeNotReadyError``: it leaves the waiting to the
    application; the pause ends with the throttle)."""
    from kafka.errors import NodeNotReadyError

    deadline = time.monotonic() + 60
    while True:
        try:
            return call()
        except NodeNotReadyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def test_strict_create_topics_refuses_the_topics_over_the_burst_and_retries_succeed(
    tansu: Any,
) -> None:
    kafka_admin = pytest.importorskip("kafka.admin")
    client_id = "strict-admin"
    manager = _manager(client_id)
    plugin = MutationPlugin()
    names = [f"strict-{i:03d}" for i in range(TOPICS)]
    expected_refused, refusal_throttle = _strict_refusals(TOPICS)
    assert 0 < expected_refused < TOPICS and refusal_throttle > 0
    with (
        run_proxy(tansu.upstream, tansu.proxy_port, plugin, mutation=manager) as proxy,
        serve_metrics(MutationQuotaCollector(manager, clock=monotonic_ms)) as metrics,
    ):
        admin = kafka_admin.KafkaAdminClient(bootstrap_servers=proxy.address, client_id=client_id)
        try:
            spec = {"num_partitions": 1, "replication_factor": 1}
            first = admin.create_topics({n: spec for n in names}, raise_errors=False)
            results = first["topics"]
            # Every topic answered, in the request's order, the refused ones last.
            assert [r["name"] for r in results] == names
            refused = [r["name"] for r in results if r["error_code"] == THROTTLING_QUOTA_EXCEEDED]
            assert {r["error_code"] for r in results} <= {0, THROTTLING_QUOTA_EXCEEDED}
            assert len(refused) == expected_refused
            assert refused == names[TOPICS - expected_refused :]
            assert {
                r["error_message"] for r in results if r["error_code"] == THROTTLING_QUOTA_EXCEEDED
            } == {THROTTLED_MESSAGE}
            # The response's throttle is the refusal's (less the time since it was
            # computed), applied through the mutation manager, which muted the channel.
            mutation_throttle, outcome = plugin.mutations[0]
            assert 0 < mutation_throttle <= refusal_throttle
            assert outcome.throttle_time_ms == mutation_throttle
            assert outcome.throttled_by == "controller_mutation"
            scraped = scrape_flat(metrics.url)
            labels = f'{{client_id="{client_id}",user=""}}'
            assert scraped[f"kafka_server_controllermutation_tokens{labels}"] < 0
            assert scraped[f"kafka_server_controllermutation_throttle_time{labels}"] > 0
            # Kafka's mutation-rate: the accepted partitions only (refused ones count nothing).
            assert scraped[f"kafka_server_controllermutation_mutation_rate{labels}"] > 0

            # An application retries the refused topics until none is refused.
            pending, rounds = refused, 0
            while pending:
                rounds += 1
                assert rounds <= 4 * TOPICS, f"still refused after {rounds} rounds: {pending}"
                retry = {n: spec for n in pending}
                again = _when_not_paused(
                    lambda retry=retry: admin.create_topics(retry, raise_errors=False)
                )
                assert {r["error_code"] for r in again["topics"]} <= {
                    0,
                    THROTTLING_QUOTA_EXCEEDED,
                }
                pending = [
                    r["name"]
                    for r in again["topics"]
                    if r["error_code"] == THROTTLING_QUOTA_EXCEEDED
                ]
            assert rounds >= 1
            assert set(names) <= set(_when_not_paused(admin.list_topics))
        finally:
            admin.close()


def test_strict_delete_topics_counts_the_partitions_each_topic_has(tansu: Any) -> None:
    kafka_admin = pytest.importorskip("kafka.admin")
    client_id = "strict-deleter"
    names = [f"doomed-{i}" for i in range(3)]
    partitions = 30  # 3 topics of 30 partitions: the third goes over the burst of 50
    with run_proxy(tansu.upstream, tansu.proxy_port) as proxy:  # no mutation quota here
        admin = kafka_admin.KafkaAdminClient(bootstrap_servers=proxy.address, client_id=client_id)
        try:
            spec = {"num_partitions": partitions, "replication_factor": 1}
            created = admin.create_topics({n: spec for n in names}, raise_errors=False)
            assert {r["error_code"] for r in created["topics"]} == {0}
        finally:
            admin.close()
    bucket, now = _full_bucket()
    checks = [bucket.record_strict(float(partitions), now) for _ in names]
    expected = [check.accepted for check in checks]
    assert expected == [True, True, False]  # the arithmetic this test is about
    manager = _manager(client_id)
    plugin = MutationPlugin()
    with run_proxy(tansu.upstream, tansu.proxy_port, plugin, mutation=manager) as proxy:
        admin = kafka_admin.KafkaAdminClient(bootstrap_servers=proxy.address, client_id=client_id)
        try:
            deleted = admin.delete_topics(names, raise_errors=False)
            codes = {r["name"]: r["error_code"] for r in deleted["topics"]}
            pairs = zip(names, expected, strict=True)
            assert codes == {n: 0 if ok else THROTTLING_QUOTA_EXCEEDED for n, ok in pairs}
            mutation_throttle, outcome = plugin.mutations[0]
            assert 0 < mutation_throttle <= checks[-1].throttle_ms
            assert outcome.throttled_by == "controller_mutation"
            remaining = set(_when_not_paused(admin.list_topics))
            assert [n in remaining for n in names] == [not ok for ok in expected]
        finally:
            admin.close()


def test_permissive_create_topics_creates_every_topic_and_throttles_after(tansu: Any) -> None:
    confluent_admin = pytest.importorskip("confluent_kafka.admin")
    client_id = "permissive-admin"
    manager = _manager(client_id)
    plugin = MutationPlugin()
    names = [f"permissive-{i:03d}" for i in range(TOPICS)]
    expected_throttle = _permissive_throttle(TOPICS)
    assert expected_throttle > 0
    seen: list[float] = []
    with run_proxy(tansu.upstream, tansu.proxy_port, plugin, mutation=manager) as proxy:
        admin = confluent_admin.AdminClient(
            {
                "bootstrap.servers": proxy.address,
                "client.id": client_id,
                "throttle_cb": lambda event: seen.append(event.throttle_time),
            }
        )
        futures = admin.create_topics(
            [confluent_admin.NewTopic(n, 1, 1) for n in names], request_timeout=30
        )
        for name in names:
            futures[name].result(timeout=60)  # librdkafka's v4 request: nothing refused
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            admin.poll(0.1)  # throttle_cb runs from poll
        assert len(plugin.mutations) == 1
        mutation_throttle, outcome = plugin.mutations[0]
        assert 0 < mutation_throttle <= expected_throttle
        assert outcome.throttle_time_ms == mutation_throttle
        assert outcome.throttled_by == "controller_mutation"
        # What librdkafka read from the response (seconds) is the proxy's throttle.
        assert seen and round(seen[0] * 1000) == mutation_throttle
        tokens = manager.tokens("ANONYMOUS", client_id, monotonic_ms())
        assert tokens is not None and tokens < 0
        del admin
