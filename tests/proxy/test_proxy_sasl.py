"""The principal whose quotas apply: taken by ``kquota proxy`` from SASL/PLAIN and SCRAM
authentication passing through, once the broker accepts it; ``ANONYMOUS`` without SASL or
after a failed attempt, as Kafka.

The broker is a stand-in (``ScriptedBroker``) that accepts or refuses on cue: the Tansu
the tests build keeps its users in memory and cannot create one while it requires
authentication (``tansu user create`` then fails), so a real SASL handshake with Tansu
is not possible here. The frames are the ones a client sends, encoded with kio.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import kquota
import pytest
from kafka_wire import read_response
from kquota.proxy import ANONYMOUS
from ports import free_port
from proxy_support import (
    SCRIPT_HANG_S,
    RecordingPlugin,
    ScriptedBroker,
    produce_request,
    read_frame,
    run_proxy,
    sasl_authenticate_request,
    sasl_handshake_request,
)

SASL_FAILED = 58  # SASL_AUTHENTICATION_FAILED


@contextmanager
def _proxied(plugin: RecordingPlugin) -> Iterator[tuple[ScriptedBroker, socket.socket]]:
    broker = ScriptedBroker()
    try:
        with (
            run_proxy(broker.address, free_port(), plugin) as proxy,
            socket.create_connection(proxy.server.address, timeout=SCRIPT_HANG_S) as client,
        ):
            yield broker, client
    finally:
        broker.close()


def _call(broker: ScriptedBroker, client: socket.socket, frame: bytes, error: int = 0) -> int:
    """Send one request, let the broker answer it (with ``error``), return the error code
    the client got."""
    client.sendall(frame)
    api_key = int.from_bytes(frame[4:6], "big")
    broker.exchange(api_key, error)
    response = read_frame(client)
    assert response is not None, "the proxy closed the connection"
    version = int.from_bytes(frame[6:8], "big")
    return int(read_response(response, api_key, version).error_code)


def _produce(broker: ScriptedBroker, client: socket.socket, correlation_id: int) -> None:
    client.sendall(produce_request(correlation_id, "app", 50_000))
    broker.exchange(0)
    assert read_frame(client) is not None


MECHANISMS: dict[str, list[bytes]] = {
    # PLAIN: one message, authzid \0 authcid \0 password
    "PLAIN": [b"\0alice\0secret"],
    # SCRAM: the client-first message names the user, the client-final one proves it
    "SCRAM-SHA-256": [b"n,,n=alice,r=fyko+d2lbbFgONRv9qkxdawL", b"c=biws,r=fyko,p=proof"],
}


@pytest.mark.parametrize("mechanism", list(MECHANISMS))
def test_the_authenticated_user_s_quota_applies(mechanism: str) -> None:
    plugin = RecordingPlugin()
    plugin.produce.set_quota(kquota.Entity(user="alice"), 1000)  # bytes/s: throttles at once
    with _proxied(plugin) as (broker, client):
        assert _call(broker, client, sasl_handshake_request(1, mechanism)) == 0
        for n, message in enumerate(MECHANISMS[mechanism], start=2):
            assert _call(broker, client, sasl_authenticate_request(n, message)) == 0
        _produce(broker, client, 10)
    (applied,) = [a for a in plugin.applied if a.api == "produce"]
    assert applied.user == "alice"
    assert applied.outcome.throttled  # alice's quota, not the default's (there is none)


def test_a_refused_attempt_leaves_the_connection_anonymous_and_a_retry_counts() -> None:
    plugin = RecordingPlugin()
    with _proxied(plugin) as (broker, client):
        assert _call(broker, client, sasl_handshake_request(1, "PLAIN")) == 0
        refused = sasl_authenticate_request(2, b"\0mallory\0guess")
        assert _call(broker, client, refused, error=SASL_FAILED) == SASL_FAILED
        _produce(broker, client, 3)  # (a real broker would close; the proxy does not decide)
        assert _call(broker, client, sasl_authenticate_request(4, b"\0bob\0pw")) == 0
        _produce(broker, client, 5)
    users = [a.user for a in plugin.applied if a.api == "produce"]
    assert users == [ANONYMOUS, "bob"]


def test_without_sasl_the_user_is_anonymous() -> None:
    plugin = RecordingPlugin()
    with _proxied(plugin) as (broker, client):
        _produce(broker, client, 1)
    assert [a.user for a in plugin.applied] == [ANONYMOUS]


def test_an_unknown_mechanism_applies_anonymous_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    plugin = RecordingPlugin()
    caplog.set_level("WARNING", logger="kquota.proxy")
    with _proxied(plugin) as (broker, client):
        assert _call(broker, client, sasl_handshake_request(1, "OAUTHBEARER")) == 0
        token = b"n,,\x01auth=Bearer eyJ\x01\x01"
        assert _call(broker, client, sasl_authenticate_request(2, token)) == 0
        _produce(broker, client, 3)
    assert [a.user for a in plugin.applied] == [ANONYMOUS]
    lines: list[Any] = [r for r in caplog.records if "OAUTHBEARER" in r.getMessage()]
    assert len(lines) == 1
