"""How ``kquota proxy`` pipelines: Produce requests go on to the broker while earlier ones
still wait for their responses (at most ``_PIPELINE_DEPTH``), any other request only once
everything before it has been answered, and a pipelined request's quota is still checked
in its turn, after the mute its predecessor's response started, as Kafka checks it.

The broker here is a stand-in (``ScriptedBroker``): Tansu cannot be told to hold a
response until a second request has arrived, which is what shows pipelining without a
clock. It speaks Kafka through kio, like the clients' frames below.
"""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kquota
import pytest
from kafka_wire import response_correlation_id, throttle_ms
from ports import free_port
from proxy_support import (
    SCRIPT_HANG_S,
    RecordingPlugin,
    ScriptedBroker,
    metadata_request,
    produce_request,
    read_frame,
    run_proxy,
)

_PIPELINE_DEPTH = 8
"""The proxy's ``PIPELINE_DEPTH`` (``rust/kquota-proxy/src/server/mod.rs``): how many Produce
requests of one connection may be at the broker at once."""


@contextmanager
def proxied(
    plugin: kquota.broker.QuotaPlugin | None = None,
) -> Iterator[tuple[ScriptedBroker, socket.socket, Any]]:
    broker = ScriptedBroker()
    try:
        with (
            run_proxy(("127.0.0.1", broker.port), free_port(), plugin) as proxy,
            socket.create_connection(proxy.server.address, timeout=SCRIPT_HANG_S) as client,
        ):
            yield broker, client, proxy
    finally:
        broker.close()


def _answered(client: socket.socket) -> int:
    frame = read_frame(client)
    assert frame is not None, "the proxy closed the connection"
    return response_correlation_id(frame)


def test_produce_requests_reach_the_broker_before_earlier_ones_are_answered() -> None:
    with proxied() as (broker, client, _):
        client.sendall(b"".join(produce_request(c, "p", 100) for c in (1, 2, 3)))
        # all three are at the broker while it has answered none (without pipelining,
        # the second would never come and next_request would time out)
        assert [broker.next_request() for _ in range(3)] == [(1, 0), (2, 0), (3, 0)]
        for correlation_id in (1, 2, 3):
            broker.answer(correlation_id, 0)
        assert [_answered(client) for _ in range(3)] == [1, 2, 3]


def test_at_most_pipeline_depth_produce_requests_are_in_flight() -> None:
    total = _PIPELINE_DEPTH + 3
    with proxied() as (broker, client, _):
        client.sendall(b"".join(produce_request(c, "p", 10) for c in range(1, total + 1)))
        first = [broker.next_request()[0] for _ in range(_PIPELINE_DEPTH)]
        assert first == list(range(1, _PIPELINE_DEPTH + 1))
        assert broker.nothing_more(), f"more than {_PIPELINE_DEPTH} requests in flight"
        broker.answer(1, 0)  # one answered: one more may go
        assert broker.next_request() == (_PIPELINE_DEPTH + 1, 0)
        assert broker.nothing_more()
        received = _PIPELINE_DEPTH + 1
        for correlation_id in range(2, total + 1):
            broker.answer(correlation_id, 0)
            if received < total:
                received += 1
                assert broker.next_request() == (received, 0)
        assert [_answered(client) for _ in range(total)] == list(range(1, total + 1))


def test_other_requests_wait_until_every_earlier_one_is_answered() -> None:
    with proxied() as (broker, client, _):
        client.sendall(produce_request(1, "p", 10) + metadata_request(2, "p"))
        assert broker.next_request() == (1, 0)
        assert broker.nothing_more(), "the metadata request went on before the produce was answered"
        broker.answer(1, 0)
        assert broker.next_request() == (2, 3)
        broker.answer(2, 3)
        assert [_answered(client) for _ in range(2)] == [1, 2]
        # and a produce request behind a metadata request waits for it too
        client.sendall(metadata_request(3, "p") + produce_request(4, "p", 10))
        assert broker.next_request() == (3, 3)
        assert broker.nothing_more()
        broker.answer(3, 3)
        assert broker.next_request() == (4, 0)
        broker.answer(4, 0)
        assert [_answered(client) for _ in range(2)] == [3, 4]


def test_a_pipelined_request_is_checked_in_its_turn_after_the_mute() -> None:
    """The first request exceeds the produce quota at once (a throttle of seconds); the
    second, already at the broker, is checked and answered only once that throttle has
    passed, as Kafka, which reads it only then, would check it."""
    plugin = RecordingPlugin()
    plugin.produce.set_quota(kquota.Entity(client_id="p"), 1000)  # bytes/s
    with proxied(plugin) as (broker, client, _):
        client.sendall(produce_request(1, "p", 20_000) + produce_request(2, "p", 10))
        assert [broker.next_request() for _ in range(2)] == [(1, 0), (2, 0)]
        broker.answer(1, 0)
        broker.answer(2, 0)
        frame = read_frame(client)
        first_at = time.monotonic()
        assert frame is not None and response_correlation_id(frame) == 1
        throttle = throttle_ms(frame, 0, 9)
        assert throttle is not None and throttle > 1000
        assert _answered(client) == 2
        second_at = time.monotonic()
    first, second = (a for a in plugin.applied if a.api == "produce")
    assert first.outcome.throttle_time_ms == throttle
    assert second.at_ms >= first.at_ms + throttle  # checked after the mute, on its clock
    assert second_at - first_at >= throttle / 1000 - 0.01  # and answered no earlier


@pytest.mark.parametrize("acks", [0, 1])
def test_shutdown_answers_pipelined_requests(acks: int) -> None:
    """Requests already forwarded are answered when the proxy shuts down (acks=0 ones
    only recorded: they have no response)."""
    broker = ScriptedBroker()
    plugin = RecordingPlugin()
    try:
        with run_proxy(("127.0.0.1", broker.port), free_port(), plugin) as proxy:
            client = socket.create_connection(proxy.server.address, timeout=SCRIPT_HANG_S)
            client.sendall(produce_request(1, "p", 10) + produce_request(2, "p", 10, acks=acks))
            assert [broker.next_request() for _ in range(2)] == [(1, 0), (2, 0)]
            stopping = asyncio.run_coroutine_threadsafe(
                proxy.server.shutdown(SCRIPT_HANG_S), proxy.loop
            )
            broker.answer(1, 0)
            if acks:
                broker.answer(2, 0)
            assert _answered(client) == 1
            if acks:
                assert _answered(client) == 2
            assert read_frame(client) is None  # then closed
            client.close()
            stopping.result(SCRIPT_HANG_S)
    finally:
        broker.close()
    assert [a.size > 0 for a in plugin.applied if a.api == "produce"] == [True, True]


def _pieces(data: bytes, seed: int) -> Iterator[bytes]:
    """``data`` cut into pieces of random sizes, 1 byte to 300 kB."""
    rng = random.Random(seed)
    at = 0
    while at < len(data):
        size = rng.randint(1, 300_000)
        yield data[at : at + size]
        at += size


def test_large_produce_requests_reach_the_broker_byte_for_byte() -> None:
    """Produce requests larger than the proxy's read chunk (64 KiB), up to 3 MB, between
    smaller ones, pipelined, and sent in uneven pieces with pauses: each reaches the broker
    exactly as sent and in order, and each is recorded on the produce quota with its whole
    size."""
    rng = random.Random(7)
    sizes = [10, 200_000, 3_000_000, 65_000, 70_000, 1_048_576]
    requests = [
        produce_request(c, "big", size, records=rng.randbytes(size))
        for c, size in enumerate(sizes, 1)
    ]
    correlation_ids = list(range(1, len(sizes) + 1))
    plugin = RecordingPlugin()
    with proxied(plugin) as (broker, client, _):
        for piece in _pieces(b"".join(requests), seed=3):
            client.sendall(piece)
            time.sleep(0.002)
        assert [broker.next_request() for _ in sizes] == [(c, 0) for c in correlation_ids]
        for correlation_id in correlation_ids:
            broker.answer(correlation_id, 0)
        assert [_answered(client) for _ in sizes] == correlation_ids
    assert len(broker.frames) == len(requests)
    for sent, received in zip(requests, broker.frames, strict=True):
        assert received == sent[4:], f"request of {len(sent)} bytes changed on its way"
    produced = [a for a in plugin.applied if a.api == "produce"]
    assert [a.size for a in produced] == [len(r) - 4 for r in requests]


def test_a_client_gone_inside_a_large_request_closes_its_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The broker gets no part of a request whose client left before its end: the proxy
    closes the connection upstream and says why."""
    request = produce_request(1, "big", 500_000)
    with caplog.at_level("WARNING", logger="kquota.proxy"), proxied() as (broker, client, _):
        client.sendall(request[:300_000])
        client.shutdown(socket.SHUT_RDWR)
        assert broker.ended.wait(SCRIPT_HANG_S), "the proxy kept the broker's connection"
        deadline = time.monotonic() + SCRIPT_HANG_S
        while not (logged := [r.getMessage() for r in caplog.records]):
            assert time.monotonic() < deadline, "nothing logged"
            time.sleep(0.05)
    assert broker.frames == []
    assert any("closing connection from" in m and "request:" in m for m in logged), logged
