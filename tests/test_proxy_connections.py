"""Connection-creation rates (KIP-612) on the proxy's accept, against Tansu 0.6.0.

A client on 127.0.0.1 opens connections in a loop, each sending an ApiVersions request
(a real Kafka request, answered by Tansu through the proxy), and then reads each one's
outcome: its response, or the proxy closing it unanswered. The expected numbers come
from the core's :class:`kquota.ConnectionQuotas` fed the same number of connections,
and the proxy's side from its counters and its Prometheus metrics over real HTTP.
"""

from __future__ import annotations

import socket
import urllib.request
from typing import Any

import pytest
from kquota import ConnectionQuotas
from kquota.broker import ConnectionQuotaCollector, serve_metrics
from kquota.proxy import kafka_clock_ms
from test_proxy_support import RecordingPlugin, api_versions_request, read_frame, run_proxy

pytest.importorskip("kio")

LISTENER = "PLAINTEXT"
WINDOW_MS = 10_000
"""quota.window.size.seconds as ms: the connections of a test all arrive well within the
first window of their IP's sensor (they take milliseconds; the window is 10 s), so the
core's rate for them does not depend on exactly when each one came."""
NUM_SAMPLES = 2
CONNECTIONS = 12


def _outcomes(port: int, count: int) -> list[bool]:
    """Open ``count`` connections to the proxy one after another, send an ApiVersions
    request on each, then read them: ``True`` for a response, ``False`` for a connection
    the proxy closed unanswered."""
    sockets = []
    try:
        for i in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sockets.append(sock)
            sock.sendall(api_versions_request(i, client_id=f"loop-{i}"))
        outcomes = []
        for sock in sockets:
            try:
                outcomes.append(read_frame(sock) is not None)
            except ConnectionResetError:
                outcomes.append(False)
        return outcomes
    finally:
        for sock in sockets:
            sock.close()


def _scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name] = float(value)
    return values


def test_an_ip_over_its_connection_creation_rate_gets_closed_connections(tansu: Any) -> None:
    rate = 1  # connection_creation_rate of 127.0.0.1: connections per second
    quotas = ConnectionQuotas(num_samples=NUM_SAMPLES, window_ms=WINDOW_MS)
    quotas.set_ip_quota("127.0.0.1", rate)
    # What the core admits of CONNECTIONS connections arriving in the first window.
    reference = ConnectionQuotas(num_samples=NUM_SAMPLES, window_ms=WINDOW_MS)
    reference.set_ip_quota("127.0.0.1", rate)
    reference.add_listener(LISTENER)
    now = 10**12
    expected = [
        reference.on_new_connection(LISTENER, "127.0.0.1", now).ip_throttle_ms == 0
        for _ in range(CONNECTIONS)
    ]
    admitted = sum(expected)
    assert 0 < admitted < CONNECTIONS
    plugin = RecordingPlugin(clock=kafka_clock_ms, background=True)
    with (
        run_proxy(tansu.upstream, tansu.proxy_port, plugin, connection_quotas=quotas) as proxy,
        serve_metrics(ConnectionQuotaCollector(quotas, clock=kafka_clock_ms)) as metrics,
    ):
        outcomes = _outcomes(tansu.proxy_port, CONNECTIONS)
        # The first connections are answered, the rest closed without a response.
        assert outcomes == expected
        assert proxy.server.ip_throttled_connections == CONNECTIONS - admitted
        scraped = _scrape(metrics.url)
        prefix = "kafka_server_socket_server_metrics"
        assert scraped[f'{prefix}_ip_connection_accept_throttle_time{{listener="{LISTENER}"}}'] > 0
        assert scraped[f'{prefix}_connection_accept_rate{{ip="127.0.0.1",listener=""}}'] > 0
        assert scraped[f"{prefix}_broker_connection_accept_rate"] > 0


def test_the_listener_rate_delays_accepting_and_closes_nothing(tansu: Any) -> None:
    rate = 2  # listener.name.PLAINTEXT.max.connection.creation.rate
    quotas = ConnectionQuotas(num_samples=NUM_SAMPLES, window_ms=1000)
    quotas.add_listener(LISTENER, rate)
    reference = ConnectionQuotas(num_samples=NUM_SAMPLES, window_ms=1000)
    reference.add_listener(LISTENER, rate)
    count = 6
    delays = [reference.accept_delay(LISTENER, 10**12) for _ in range(count)]
    assert any(d > 0 for d in delays)  # connections at once go over the rate
    plugin = RecordingPlugin(clock=kafka_clock_ms, background=True)
    with (
        run_proxy(tansu.upstream, tansu.proxy_port, plugin, connection_quotas=quotas) as proxy,
        serve_metrics(ConnectionQuotaCollector(quotas, clock=kafka_clock_ms)) as metrics,
    ):
        outcomes = _outcomes(tansu.proxy_port, count)
        assert outcomes == [True] * count  # delayed, never refused
        assert proxy.server.ip_throttled_connections == 0
        scraped = _scrape(metrics.url)
        prefix = "kafka_server_socket_server_metrics"
        assert scraped[f'{prefix}_connection_accept_throttle_time{{listener="{LISTENER}"}}'] > 0
        assert scraped[f'{prefix}_connection_accept_rate{{ip="",listener="{LISTENER}"}}'] > 0
