"""Every message a client was told is stored is in the broker: ``kquota proxy`` in the path
of produce requests, under throttling, loses nothing.

Five real clients held to their quotas (librdkafka, kafka-python and aiokafka producers,
two librdkafka producers sharing one client id, a librdkafka consumer), then every
partition is read back from the broker's own port and each acknowledged key looked for:
behind the sidecar on Tansu and on Apache Kafka, and behind the gateway on Kafka. The same
scenario, repeated, is ``make soak``.

Tansu 0.6 answers ListOffsets(latest) with the base offset of the batch it stored last,
plus one, instead of its high watermark: a reader that stops there misses the rest of the
log. The last test shows it with nothing of kquota in the path; the read-back takes the
end from the Fetch responses' high watermark.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from delivery import (
    Ledger,
    five_clients,
    high_watermarks,
    librdkafka_producer,
    read_back,
    set_quotas,
)
from kquota import QuotaManager
from kquota.broker import QuotaPlugin
from ports import free_ports
from proxy_support import TimingRelay, create_topic, run_proxy
from side_by_side_support import SideBySideBroker

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings(
        # kafka-python 3.0.12 loads its schemas with importlib.resources' legacy API
        "ignore:(open_text|read_text) is deprecated:DeprecationWarning",
    ),
]

QUOTA = 256_000.0
"""Each client id's producer_byte_rate and the consumer's consumer_byte_rate, bytes/s."""
MESSAGES = 3000
"""Messages of 1 KiB per producer: past the first 10 s of quota at once, so every
producer is throttled; the two sharing a client id for several seconds at a time."""
SOAK_MESSAGES = 4000
"""The same in each run of ``make soak``."""


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideBySideBroker]:
    """One Kafka 4 KRaft node: its PROXIED listener advertises the sidecar's port, its
    PLAINTEXT listener is the gateway's bootstrap and the read-back's."""
    from kafka_support import running_kafka

    yield from running_kafka(SideBySideBroker(tmp_path_factory.mktemp("delivery-kafka")))


def _plugin() -> QuotaPlugin:
    plugin = QuotaPlugin(*(QuotaManager(t) for t in ("produce", "fetch", "request")))
    set_quotas(plugin, QUOTA)
    return plugin


def _topic() -> str:
    return f"delivered-{uuid.uuid4().hex[:8]}"


def _assert_delivered(delivery: Any, messages: int, quiet: bool = False) -> None:
    described = delivery.describe()
    assert not delivery.errors, described
    assert delivery.audit.lost_count == 0, described
    assert delivery.acknowledged == len(delivery.ledgers) * messages, described
    assert delivery.largest_throttle_ms > 0, f"never throttled\n{described}"
    if not quiet:
        print(described)


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def deliver(setup: str, tansu: Any, kafka: SideBySideBroker, messages: int = MESSAGES) -> Any:
    """One run of the five clients through ``setup`` (``tansu-sidecar``, ``kafka-sidecar``
    or ``kafka-gateway``), on a new topic, read back from the broker itself."""
    if setup == "tansu-sidecar":
        proxied, listen, direct = tansu.upstream, tansu.proxy_port, tansu.upstream
        gateway: dict[str, Any] = {}
    elif setup == "kafka-sidecar":
        proxied, listen, direct = (
            _address(kafka.proxied),
            kafka.proxy_port,
            _address(kafka.bootstrap),
        )
        gateway = {}
    elif setup == "kafka-gateway":
        proxied, listen, direct = _address(kafka.bootstrap), 0, _address(kafka.bootstrap)
        gateway = {"broker_ports": free_ports(2)}  # node ids 0 and 1
    else:
        raise ValueError(f"unknown setup {setup!r}")
    with run_proxy(proxied, listen, _plugin(), **gateway) as proxy:
        topic = _topic()
        create_topic(proxy.address, topic, partitions=3)
        return five_clients(proxy.address, direct, topic, messages)


SETUPS = ["tansu-sidecar", "kafka-sidecar", "kafka-gateway"]


@pytest.mark.parametrize("setup", SETUPS)
def test_every_acknowledged_message_is_stored(
    setup: str, tansu: Any, kafka: SideBySideBroker
) -> None:
    _assert_delivered(deliver(setup, tansu, kafka), MESSAGES)


@pytest.mark.soak
@pytest.mark.parametrize("setup", SETUPS)
def test_soak_loses_no_acknowledged_message(
    setup: str, tansu: Any, kafka: SideBySideBroker, request: pytest.FixtureRequest
) -> None:
    """``make soak``: ``--soak-runs`` runs of the five clients, each read back."""
    runs = request.config.getoption("soak_runs")
    acknowledged = duplicated = 0
    throttles = []
    for run in range(runs):
        delivery = deliver(setup, tansu, kafka, SOAK_MESSAGES)
        try:
            _assert_delivered(delivery, SOAK_MESSAGES, quiet=True)
        except AssertionError as failed:
            raise AssertionError(f"{setup}, run {run + 1} of {runs}: {failed}") from None
        acknowledged += delivery.acknowledged
        duplicated += sum(delivery.audit.duplicated.values())
        throttles.append(delivery.largest_throttle_ms)
    print(
        f"\nsoak {setup}: {runs} runs, {acknowledged} messages acknowledged, 0 lost,"
        f" {duplicated} duplicated by client retries; largest throttle of a run"
        f" {min(throttles)}-{max(throttles)} ms"
    )


def test_tansu_lists_the_base_offset_of_its_last_batch_as_the_end(tansu: Any) -> None:
    """Without kquota: a librdkafka producer through a plain relay (where Tansu
    advertises), then ListOffsets(latest) against the Fetch response's high watermark."""
    relay = TimingRelay(tansu.proxy_port, tansu.upstream)
    try:
        topic = _topic()
        bootstrap = f"127.0.0.1:{tansu.proxy_port}"
        create_topic(bootstrap, topic, partitions=1)
        ledger = Ledger("direct")
        librdkafka_producer(
            bootstrap, topic, ledger, 500, client_id="direct", config={"linger.ms": 50}
        )
    finally:
        relay.close()
    assert len(ledger.acked) == 500 and not ledger.failed
    last = max(offset for _, offset in ledger.acked.values())
    read = read_back(tansu.upstream, topic, 1)
    assert read.fetch_ends == {0: last + 1} == {0: len(read.records)}
    listed = high_watermarks(tansu.upstream, topic, 1)[0]
    batches = sorted({offset for _, offset in ledger.acked.values()})
    # the first offset of a batch (librdkafka's batches of linger.ms), plus one
    assert listed < last + 1, "Tansu now lists its high watermark: update docs/guide/proxy.md"
    assert listed - 1 in batches
