"""examples/kafka_like_service.py over real loopback sockets: every throttle it answered
is exactly Kafka's for the sizes and times it recorded, a muted channel is never read, a
polite client is never throttled, the metrics endpoint reports both clients, and protocol
errors are answered, not hung on.

Nothing here depends on how fast the machine is: each assertion is a property the service
guarantees whatever the scheduling (the client sizes are chosen so), and timeouts only
bound a hang."""

from __future__ import annotations

import asyncio
import importlib.util
import math
import sys
import urllib.request
from types import ModuleType
from typing import Any

import kquota
import paths
import pytest
from broker_support import SimClock, no_thread_left_behind  # noqa: F401 (autouse fixture)
from kquota.broker import QuotaPlugin
from prometheus_client.parser import text_string_to_metric_families

EXAMPLE = paths.ROOT / "examples" / "kafka_like_service.py"
HANG_S = 60.0  # bounds a wait that would otherwise hang; never a measurement

QUOTA = 200_000.0  # bytes/s for every user
NUM_SAMPLES = 2  # quota.window.num: windows of 1 s, so a sensor's window is 1 s to 2 s
REQUEST_PERCENTAGE = 50.0
SIZE = 2_000  # bytes per request: 1 % of a second's quota
# More than two windows' worth at once: over the quota whatever the window's length.
BURST = 500_000
GREEDY_REQUESTS = 120  # after the burst, as fast as the service reads them
POLITE_REQUESTS = 40
POLITE_PAUSE_S = SIZE / (QUOTA / 5)  # a fifth of the quota at most, whatever the timing


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kafka_like_service", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def example() -> ModuleType:
    return load_example()


def scrape(url: str) -> dict[str, dict[tuple[str, str], float]]:
    with urllib.request.urlopen(url, timeout=HANG_S) as response:
        text = response.read().decode()
    return {
        f.name: {
            (s.labels.get("user", ""), s.labels.get("client_id", "")): s.value for s in f.samples
        }
        for f in text_string_to_metric_families(text)
    }


def replay(requests: list[Any]) -> list[tuple[int, int | None]]:
    """One client's requests through a fresh plugin on a simulated clock, with the quotas
    ``make_plugin`` sets, at the recorded times: the throttles Kafka's arithmetic gives."""
    clock = SimClock()
    twin = QuotaPlugin(
        *(kquota.QuotaManager(t, num_samples=NUM_SAMPLES) for t in ("produce", "fetch", "request")),
        clock=clock,
    )
    every_user = kquota.Entity(user=kquota.DEFAULT)
    twin.produce.set_quota(every_user, QUOTA)
    twin.request.set_quota(every_user, REQUEST_PERCENTAGE)
    channel = twin.channels.open()
    answers = []
    for h in requests:
        clock.now = h.at_ms
        outcome = twin.on_produce(
            h.user, h.client_id, h.size_bytes, h.thread_time_ns, channel=channel
        )
        answers.append((outcome.throttle_time_ms, outcome.muted_until_ms))
        clock.now = h.sent_at_ms
        twin.on_response_sent(h.user, h.client_id, h.network_thread_time_ns)
    return answers


@pytest.mark.slow
def test_throttles_are_kafkas_and_muted_channels_are_not_read(example: Any) -> None:
    handled: list[Any] = []
    plugin = example.make_plugin(
        bytes_per_s=QUOTA, request_percentage=REQUEST_PERCENTAGE, num_samples=NUM_SAMPLES
    )
    service = example.KafkaLikeService(plugin, on_handled=handled.append)

    async def run() -> tuple[list[int], list[int], dict[str, Any]]:
        await service.start()
        try:
            assert service.metrics_url.startswith("http://127.0.0.1:")
            greedy = await example.ProduceClient.connect("127.0.0.1", service.port, "greedy", "g")
            polite = await example.ProduceClient.connect("127.0.0.1", service.port, "polite", "p")

            async def drive(client: Any, sizes: list[int], pause_s: float) -> list[int]:
                answers = []
                for size in sizes:  # ignoring the throttle times, like an old client
                    answers.append(await client.produce(size))
                    if pause_s:
                        await asyncio.sleep(pause_s)
                await client.close()
                return answers

            greedy_answers, polite_answers = await asyncio.wait_for(
                asyncio.gather(
                    drive(greedy, [BURST] + [SIZE] * GREEDY_REQUESTS, 0),
                    drive(polite, [SIZE] * POLITE_REQUESTS, POLITE_PAUSE_S),
                ),
                timeout=HANG_S,
            )
            metrics = await asyncio.to_thread(scrape, service.metrics_url)
            return greedy_answers, polite_answers, metrics
        finally:
            await service.close()

    with plugin:
        greedy_answers, polite_answers, metrics = asyncio.run(run())

    by_user: dict[str, list[Any]] = {"greedy": [], "polite": []}
    for h in handled:
        by_user[h.user].append(h)
    assert [h.throttle_time_ms for h in by_user["greedy"]] == greedy_answers
    assert [h.throttle_time_ms for h in by_user["polite"]] == polite_answers
    assert len(greedy_answers) == 1 + GREEDY_REQUESTS
    assert len(polite_answers) == POLITE_REQUESTS

    # Every answer is the throttle Kafka gives for those sizes at those times.
    for requests in by_user.values():
        assert replay(requests) == [(h.throttle_time_ms, h.muted_until_ms) for h in requests]

    # The burst is over the quota in any window; the polite client never is.
    assert greedy_answers[0] > 0
    assert polite_answers == [0] * POLITE_REQUESTS

    # No request of a muted channel is read during its mute.
    for requests in by_user.values():
        muted_until = -math.inf
        for h in requests:
            assert h.at_ms >= muted_until, f"channel {h.channel} read at {h.at_ms} ms"
            if h.muted_until_ms is not None:
                muted_until = max(muted_until, h.muted_until_ms)

    # The metrics endpoint shows both, read from the core at scrape time.
    rates = metrics["kafka_server_produce_byte_rate"]
    assert set(rates) == {("greedy", ""), ("polite", "")}
    assert metrics["kafka_server_produce_quota_value"][("greedy", "")] == QUOTA
    assert set(metrics["kafka_server_produce_throttle_time"]) == set(rates)
    assert math.isnan(metrics["kafka_server_produce_throttle_time"][("polite", "")])
    assert len(plugin.channels) == 0


@pytest.mark.parametrize(
    ("first", "second", "answer"),
    [
        (b"HI there\n", b"", b"ERR expected: HELLO <user> <client-id>\n"),
        (b"HELLO u c\n", b"PRODUCE -5\n", b"ERR expected: PRODUCE <n>\n"),
        (b"HELLO u c\n", b"PRODUCE 99999999\n", b"ERR request of 99999999 bytes; at most"),
    ],
)
def test_protocol_errors_are_answered_and_the_channel_closed(
    example: Any, first: bytes, second: bytes, answer: bytes
) -> None:
    plugin = example.make_plugin(bytes_per_s=QUOTA)
    service = example.KafkaLikeService(plugin, metrics_port=None)

    async def run() -> bytes:
        await service.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", service.port)
            writer.write(first + second)
            await writer.drain()
            data = await asyncio.wait_for(reader.read(), timeout=HANG_S)  # until it closes
            writer.close()
            # The service closes the channel before the connection: it is gone by now.
            assert len(service.plugin.channels) == 0
            return bytes(data)
        finally:
            await service.close()

    with plugin:
        data = asyncio.run(run())
    assert answer in data


def test_service_closes_without_waiting_for_a_long_mute(example: Any) -> None:
    """A channel muted for ~50 s is not read until then (as in Kafka), but closing the
    service does not wait for it, and the channel is closed."""
    plugin = example.make_plugin(bytes_per_s=1_000.0)
    service = example.KafkaLikeService(plugin, metrics_port=None)

    async def run() -> int:
        await service.start()
        client = await example.ProduceClient.connect("127.0.0.1", service.port, "u", "c")
        # A minute of quota at once: 60 000 B over a window of 10 s to 11 s is 49 s to
        # 50 s of throttle whatever the timing.
        throttle = await client.produce(60_000)
        assert len(plugin.channels) == 1
        await client.close()
        # Far less than the mute: if closing waited for it, this would time out.
        await asyncio.wait_for(service.close(), timeout=HANG_S / 2)
        return int(throttle)

    with plugin:
        throttle = asyncio.run(run())
    assert throttle >= 49_000 > HANG_S / 2 * 1000
    assert len(plugin.channels) == 0
