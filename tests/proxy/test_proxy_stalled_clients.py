"""Clients that stop or send what Kafka refuses hold nothing but their own connection, and
only for a bound: Kafka's ``connections.max.idle.ms`` and ``socket.request.max.bytes``.

A real Kafka broker answers the same bad frames first, and the proxy must close as it
closes.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import pytest
from delivery import Ledger, librdkafka_producer
from ports import free_port
from proxy_support import (
    SCRIPT_HANG_S,
    ScriptedBroker,
    closed_by_peer,
    create_topic,
    metadata_request,
    produce_request,
    read_frame,
    run_proxy,
)

pytestmark = pytest.mark.slow

IDLE_S = 2.0
"""The proxy's connections_max_idle in these tests (Kafka's default is 10 minutes)."""
CLOSED_WITHIN_S = 60.0
"""How long a test waits for a close it expects: a bound for a hung test, not a timing."""


def _logged(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    deadline = time.monotonic() + CLOSED_WITHIN_S
    while True:
        found = [r.getMessage() for r in caplog.records if text in r.getMessage()]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def test_a_client_stopped_inside_a_request_is_closed_after_the_idle_bound(
    tansu: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Half a produce request, then nothing: the proxy forwards none of it, serves other
    clients meanwhile, and closes that connection (and its broker connection) once it has
    been idle for ``connections_max_idle``."""
    caplog.set_level("WARNING", logger="kquota.proxy")
    request = produce_request(1, "stalled", 200_000)
    half = request[: len(request) // 2]
    with (
        run_proxy(tansu.upstream, tansu.proxy_port, connections_max_idle=IDLE_S) as proxy,
        socket.create_connection(proxy.server.address, timeout=30) as stalled,
    ):
        stalled.sendall(half)
        topic = f"stalled-{free_port()}"
        create_topic(proxy.address, topic)
        ledger = Ledger("served")
        librdkafka_producer(proxy.address, topic, ledger, 200, client_id="served")
        assert len(ledger.acked) == 200 and not ledger.failed, ledger.failed[:3]
        assert closed_by_peer(stalled, timeout=CLOSED_WITHIN_S), "the stalled client stayed"
        logged = _logged(caplog, "in the middle of a request")
    assert logged, "the close was not logged"
    assert f"idle for {int(IDLE_S * 1000)} ms (connections.max.idle.ms)" in logged[0]
    assert f"{len(half)} bytes of it read" in logged[0]


def test_an_idle_connection_is_closed_after_the_bound() -> None:
    broker = ScriptedBroker()
    try:
        with (
            run_proxy(broker.address, free_port(), connections_max_idle=IDLE_S) as proxy,
            socket.create_connection(proxy.server.address, timeout=30) as client,
        ):
            client.sendall(metadata_request(1, "idle"))
            broker.exchange(3)
            assert read_frame(client) is not None
            assert closed_by_peer(client, timeout=CLOSED_WITHIN_S)
            assert broker.ended.wait(SCRIPT_HANG_S), "the broker's connection stayed open"
    finally:
        broker.close()


def _closed_unanswered(address: tuple[str, int], data: bytes) -> bool:
    """Whether the peer closes the connection after ``data`` without answering."""
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(data)
        sock.settimeout(CLOSED_WITHIN_S)
        try:
            return sock.recv(1) == b""
        except ConnectionResetError:
            return True


@pytest.mark.parametrize(
    "size",
    [104_857_601, -1],
    ids=["over socket.request.max.bytes", "negative"],
)
def test_a_frame_kafka_refuses_closes_the_connection_as_kafka_closes_it(
    kafka_broker: Any, size: int
) -> None:
    """A size prefix over ``socket.request.max.bytes`` (100 MiB by default on both) or
    below zero: Kafka closes the connection without a word, and so does the proxy,
    forwarding nothing."""
    prefix = struct.pack(">i", size) + b"\0" * 64
    host, port = kafka_broker.bootstrap.rsplit(":", 1)
    assert _closed_unanswered((host, int(port)), prefix), "Kafka answered"
    broker = ScriptedBroker()
    try:
        with run_proxy(broker.address, free_port()) as proxy:
            assert _closed_unanswered(proxy.server.address, prefix), "the proxy answered"
            assert broker.ended.wait(SCRIPT_HANG_S), "the broker's connection stayed open"
        assert broker.frames == []
    finally:
        broker.close()
