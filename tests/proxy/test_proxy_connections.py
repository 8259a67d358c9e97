"""Connection-creation rates (KIP-612) on the proxy's accept, against Tansu 0.6.0.

A client on 127.0.0.1 opens connections in a loop, each sending an ApiVersions request
(a real Kafka request, answered by Tansu through the proxy), and then reads each one's
outcome: its response, or the proxy closing it unanswered. The expected numbers come
from the core's :class:`kquota.ConnectionQuotas` fed the same number of connections,
and the proxy's side from its counters and its Prometheus metrics over real HTTP.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kquota import ConnectionQuotas, TokenBucket, monotonic_ms
from kquota.broker import ConnectionQuotaCollector, serve_metrics
from proxy_support import (
    RecordingPlugin,
    connection_outcomes,
    run_proxy,
    scrape_flat,
)

pytest.importorskip("kio")

LISTENER = "PLAINTEXT"
WINDOW_MS = 10_000
"""quota.window.size.seconds as ms: the connections of a test all arrive well within the
first window of their IP's sensor (they take milliseconds; the window is 10 s), so the
core's rate for them does not depend on exactly when each one came."""
NUM_SAMPLES = 2
CONNECTIONS = 12


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
    plugin = RecordingPlugin(clock=monotonic_ms, background=True)
    with (
        run_proxy(tansu.upstream, tansu.proxy_port, plugin, connection_quotas=quotas) as proxy,
        serve_metrics(ConnectionQuotaCollector(quotas, clock=monotonic_ms)) as metrics,
    ):
        outcomes = connection_outcomes(tansu.proxy_port, CONNECTIONS)
        # The first connections are answered, the rest closed without a response.
        assert outcomes == expected
        assert proxy.server.ip_throttled_connections == CONNECTIONS - admitted
        scraped = scrape_flat(metrics.url)
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
    plugin = RecordingPlugin(clock=monotonic_ms, background=True)
    with (
        run_proxy(tansu.upstream, tansu.proxy_port, plugin, connection_quotas=quotas) as proxy,
        serve_metrics(ConnectionQuotaCollector(quotas, clock=monotonic_ms)) as metrics,
    ):
        outcomes = connection_outcomes(tansu.proxy_port, count)
        assert outcomes == [True] * count  # delayed, never refused
        assert proxy.server.ip_throttled_connections == 0
        scraped = scrape_flat(metrics.url)
        prefix = "kafka_server_socket_server_metrics"
        assert scraped[f'{prefix}_connection_accept_throttle_time{{listener="{LISTENER}"}}'] > 0
        assert scraped[f'{prefix}_connection_accept_rate{{ip="",listener="{LISTENER}"}}'] > 0


def _configs(store: Path, *argv: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "kquota", "configs", "--store", str(store), "--alter", *argv],
        check=True,
        capture_output=True,
        timeout=60,
    )


@pytest.mark.slow
def test_cli_proxy_applies_the_stores_ip_and_mutation_rates_live(
    tansu: Any, tmp_path: Path
) -> None:
    """``kquota proxy`` with a store: the IP's rate closes connections and shows in the
    metrics; deleting it from the store lets connections in again; the client's
    controller_mutation_rate refuses topics (kafka-python, strict)."""
    kafka_admin = pytest.importorskip("kafka.admin")
    store = tmp_path / "quotas.sqlite"
    _configs(store, "--ip", "127.0.0.1", "--add-config", "connection_creation_rate=1")
    _configs(store, "--client", "cli-admin", "--add-config", "controller_mutation_rate=1")
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "kquota", "proxy", "--store", str(store)),
            *("--listen", f"127.0.0.1:{tansu.proxy_port}"),
            *("--upstream", f"127.0.0.1:{tansu.port}"),
            *("--metrics-port", "0", "--num-samples", str(NUM_SAMPLES)),
            *("--window-ms", str(WINDOW_MS)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("kquota proxy: listening on"), (line, process.stderr)
        metrics_url = f"http://127.0.0.1:{int(line.rsplit(':', 1)[1])}/metrics"
        outcomes = connection_outcomes(tansu.proxy_port, CONNECTIONS)
        assert outcomes[0] and not all(outcomes)
        assert outcomes == sorted(outcomes, reverse=True)  # answered first, closed after
        scraped = scrape_flat(metrics_url)
        prefix = "kafka_server_socket_server_metrics"
        assert scraped[f'{prefix}_ip_connection_accept_throttle_time{{listener="PLAINTEXT"}}'] > 0

        # A burst of 1 x 2 x 10 s = 20 partitions: of 30 one-partition topics in one
        # strict request, the core's bucket accepts 21.
        bucket = TokenBucket(1.0, num_samples=NUM_SAMPLES, window_ms=WINDOW_MS)
        accepted = [bucket.record_strict(1.0, 10**12).accepted for _ in range(30)]
        names = [f"cli-{i:02d}" for i in range(30)]
        _configs(store, "--ip", "127.0.0.1", "--delete-config", "connection_creation_rate")
        deadline = time.monotonic() + 30
        while not connection_outcomes(tansu.proxy_port, 1)[0]:  # the store's change, live
            assert time.monotonic() < deadline, "the IP's rate was not lifted within 30 s"
            time.sleep(0.2)
        admin = kafka_admin.KafkaAdminClient(
            bootstrap_servers=f"127.0.0.1:{tansu.proxy_port}", client_id="cli-admin"
        )
        try:
            spec = {"num_partitions": 1, "replication_factor": 1}
            result = admin.create_topics({n: spec for n in names}, raise_errors=False)
            codes = [r["error_code"] for r in result["topics"]]
            assert codes == [0 if ok else 89 for ok in accepted]
        finally:
            admin.close()
        scraped = scrape_flat(metrics_url)
        tokens = scraped['kafka_server_controllermutation_tokens{client_id="cli-admin",user=""}']
        assert tokens < 0
    finally:
        process.terminate()
        process.communicate(timeout=30)
    assert process.returncode == 0
