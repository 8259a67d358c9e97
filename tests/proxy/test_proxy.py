"""``kquota proxy`` with Tansu behind it and real Kafka clients in front: no quota.

Each client (librdkafka, kafka-python, aiokafka) creates a topic, produces and consumes
through the proxy; bad input closes only the offending connection; SIGTERM answers the
request in flight and exits 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kafka_wire import (
    encode_request,
    read_response,
    response_correlation_id,
    throttle_ms,
)
from proxy_support import (
    api_versions_request,
    assert_proxy_cli_refuses,
    closed_by_peer,
    consume_from_start,
    create_topic,
    metadata_request,
    read_frame,
    run_proxy,
)

pytestmark = pytest.mark.filterwarnings(
    # kafka-python 3.0.12 loads its schemas with importlib.resources' legacy API
    "ignore:(open_text|read_text) is deprecated:DeprecationWarning",
)

N_MESSAGES = 300


def _values(prefix: str) -> list[bytes]:
    """~1 kB each: librdkafka batches them into produce requests of more than the
    proxy's 64 KiB read chunk, which it reads in several steps."""
    return [f"{prefix}-{i:05d}".encode() * 80 for i in range(N_MESSAGES)]


# -- each client: create a topic, produce, consume once and in order ---------------------


def _librdkafka_roundtrip(bootstrap: str, topic: str) -> list[bytes]:
    from confluent_kafka import Producer

    create_topic(bootstrap, topic)
    failures: list[Any] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "client.id": "rdkafka-roundtrip", "linger.ms": 5}
    )
    for value in _values(topic):
        producer.produce(topic, value, on_delivery=lambda err, _msg: err and failures.append(err))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert failures == []
    group, client_id = f"{topic}-group", "rdkafka-roundtrip-consumer"
    return consume_from_start(bootstrap, topic, N_MESSAGES, group, client_id, 60)


def _kafka_python_roundtrip(bootstrap: str, topic: str) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kp-admin")
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="kp-roundtrip", linger_ms=5)
    futures = [producer.send(topic, value) for value in _values(topic)]
    producer.flush(60)
    for future in futures:
        future.get(timeout=60)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"{topic}-group",
        client_id="kp-roundtrip-consumer",
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
        consumer_timeout_ms=3000,
    )
    received: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(received) <= N_MESSAGES and time.monotonic() < deadline:
            batch = [msg.value for msg in consumer]  # stops after 3 s without a message
            received.extend(batch)
            if not batch:
                break
    finally:
        consumer.close()
    return received


def _aiokafka_roundtrip(bootstrap: str, topic: str) -> list[bytes]:
    async def run() -> list[bytes]:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="aio-admin")
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 1)])
        finally:
            await admin.close()
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, client_id="aio-roundtrip", linger_ms=5
        )
        await producer.start()
        try:
            sent = [await producer.send(topic, value) for value in _values(topic)]
            for future in sent:
                await asyncio.wait_for(future, 60)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=f"{topic}-group",
            client_id="aio-roundtrip-consumer",
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
        )
        await consumer.start()
        received: list[bytes] = []
        try:
            deadline = time.monotonic() + 60
            while len(received) < N_MESSAGES and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    received.extend(r.value for r in records if r.value is not None)
            batches = await consumer.getmany(timeout_ms=1000)
            received.extend(r.value for rs in batches.values() for r in rs if r.value)
        finally:
            await consumer.stop()
        return received

    return asyncio.run(run())


CLIENTS = {
    "librdkafka": _librdkafka_roundtrip,
    "kafka-python": _kafka_python_roundtrip,
    "aiokafka": _aiokafka_roundtrip,
}


@pytest.mark.slow
@pytest.mark.parametrize("client", list(CLIENTS))
def test_client_produces_and_consumes_through_the_proxy(tansu: Any, client: str) -> None:
    topic = f"roundtrip-{client}"
    with run_proxy(tansu.upstream, tansu.proxy_port) as proxy:
        received = CLIENTS[client](proxy.address, topic)
        # every request went through the proxy's quota path, none throttled
        applied = proxy.plugin.applied  # type: ignore[attr-defined]
    assert received == _values(topic)
    assert any(a.api == "produce" for a in applied)
    assert any(a.api == "fetch" for a in applied)
    assert not any(a.outcome.throttled for a in applied)


# -- bad input closes one connection, others never notice --------------------------------


def _healthy_exchange(sock: socket.socket, correlation_id: int) -> None:
    sock.sendall(api_versions_request(correlation_id))
    frame = read_frame(sock)
    assert frame is not None, "the healthy connection was closed"
    assert struct.unpack_from(">i", frame)[0] == correlation_id
    # the versions offered are the ones the proxy can read
    error_code = struct.unpack_from(">h", frame, 4)[0]
    assert error_code == 0


def _bad_frames() -> dict[str, bytes]:
    garbage = b"\x00\x03\x00\x0c\x00\x00\x00\x07\x7f\xff" + b"\xff" * 20  # client id overruns
    unknown_key = struct.pack(">hhih", 999, 0, 7, 0)
    unknown_version = struct.pack(">hhih", 0, 99, 7, 0)
    return {
        "malformed": struct.pack(">i", len(garbage)) + garbage,
        "oversized": struct.pack(">i", 200 * 1024 * 1024) + b"\x00" * 16,
        "negative-size": struct.pack(">i", -5),
        "unknown-api-key": struct.pack(">i", len(unknown_key)) + unknown_key,
        "unknown-version": struct.pack(">i", len(unknown_version)) + unknown_version,
        "truncated": struct.pack(">i", 100) + b"\x00\x12",
    }


@pytest.mark.parametrize("case", list(_bad_frames()))
def test_bad_input_closes_only_that_connection(
    tansu: Any, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kquota.proxy")
    with (
        run_proxy(tansu.upstream, tansu.proxy_port),
        socket.create_connection(("127.0.0.1", tansu.proxy_port), timeout=10) as healthy,
        socket.create_connection(("127.0.0.1", tansu.proxy_port), timeout=10) as bad,
    ):
        _healthy_exchange(healthy, 1)
        bad_peer = "{}:{}".format(*bad.getsockname())
        bad.sendall(_bad_frames()[case])
        if case == "truncated":
            bad.shutdown(socket.SHUT_WR)  # the client gives up mid-request
        assert closed_by_peer(bad), f"the {case} connection stayed open"
        _healthy_exchange(healthy, 2)
        _healthy_exchange(healthy, 3)
    lines = [r.getMessage() for r in caplog.records if r.name == "kquota.proxy"]
    closing = [line for line in lines if line.startswith("closing connection")]
    assert len(closing) == 1, lines
    assert bad_peer in closing[0]
    expected = {
        "malformed": "ends inside its header",
        "oversized": "frame of 209715200 bytes",
        "negative-size": "invalid frame size -5",
        "unknown-api-key": "unknown API key 999",
        "unknown-version": "unsupported version 99 of API 0 (Produce)",
        "truncated": "connection closed inside a frame",
    }[case]
    assert expected in closing[0]


def test_a_client_that_does_not_read_holds_back_only_its_own_connection(tansu: Any) -> None:
    """A client sends requests and reads none of the answers, more of them than every socket
    buffer between it and the broker holds, so that the proxy's writes to it wait; another
    client's requests go on being answered meanwhile. Then it reads, and gets every answer,
    in order."""
    count = 40_000
    requests = b"".join(api_versions_request(i, client_id="hoarder") for i in range(count))
    with (
        run_proxy(tansu.upstream, tansu.proxy_port),
        socket.socket() as hoarder,
        socket.create_connection(("127.0.0.1", tansu.proxy_port), timeout=10) as other,
    ):
        # a small receive buffer (no autotuning): the proxy's send buffer holds the rest
        hoarder.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        hoarder.settimeout(60)
        hoarder.connect(("127.0.0.1", tansu.proxy_port))
        buffered = hoarder.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        buffered += _max_socket_buffer("tcp_wmem")
        hoarder.sendall(api_versions_request(count, client_id="hoarder"))
        first = read_frame(hoarder)  # the size of one answer
        assert first is not None
        assert count * (4 + len(first)) > 2 * buffered  # twice what the buffers hold
        sender = threading.Thread(target=hoarder.sendall, args=(requests,), daemon=True)
        sender.start()
        time.sleep(2)  # the answers pile up (their number does not depend on this wait)
        for correlation_id in range(1, 21):  # the other client is answered meanwhile
            _healthy_exchange(other, correlation_id)
        answered = [response_correlation_id(read_frame(hoarder) or b"") for _ in range(count)]
        sender.join(60)
    assert not sender.is_alive()
    assert answered == list(range(count))


def _max_socket_buffer(kind: str) -> int:
    """The most bytes Linux lets a TCP socket's send (``tcp_wmem``) or receive buffer grow
    to."""
    return int(Path(f"/proc/sys/net/ipv4/{kind}").read_text().split()[2])


def test_dead_upstream_closes_only_that_connection(
    tansu: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kquota.proxy")
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        dead_port = unused.getsockname()[1]  # bound, never listening: connections refused
        with (
            run_proxy(tansu.upstream, tansu.proxy_port),
            run_proxy(("127.0.0.1", dead_port), 0) as orphan,
            socket.create_connection(("127.0.0.1", tansu.proxy_port), timeout=10) as healthy,
        ):
            _healthy_exchange(healthy, 1)
            host, port = orphan.server.address
            with socket.create_connection((host, port), timeout=10) as doomed:
                assert closed_by_peer(doomed)
            _healthy_exchange(healthy, 2)
    closing = [r.getMessage() for r in caplog.records if "closing connection" in r.getMessage()]
    assert len(closing) == 1
    assert f"upstream 127.0.0.1:{dead_port} unreachable" in closing[0]


def test_upstream_dying_mid_connection_closes_the_client_connection(
    tansu: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A relay that dies after one answer stands for a broker that crashes."""
    caplog.set_level(logging.WARNING, logger="kquota.proxy")
    listener = socket.create_server(("127.0.0.1", 0))
    relay_port = listener.getsockname()[1]

    def one_answer_then_die() -> None:
        conn, _ = listener.accept()
        with conn, socket.create_connection(tansu.upstream) as broker:
            frame = read_frame(conn)
            assert frame is not None
            broker.sendall(struct.pack(">i", len(frame)) + frame)
            answer = read_frame(broker)
            assert answer is not None
            conn.sendall(struct.pack(">i", len(answer)) + answer)
            read_frame(conn)  # the second request: die without answering
        listener.close()

    relay = threading.Thread(target=one_answer_then_die, daemon=True)
    relay.start()
    with (
        run_proxy(("127.0.0.1", relay_port), 0) as proxy,
        socket.create_connection(proxy.server.address, timeout=10) as client,
    ):
        _healthy_exchange(client, 1)
        client.sendall(api_versions_request(2))
        assert closed_by_peer(client)
    relay.join(10)
    closing = [r.getMessage() for r in caplog.records if "closing connection" in r.getMessage()]
    assert len(closing) == 1
    assert "the upstream closed the connection" in closing[0]


# -- SIGTERM: the request in flight is answered, then exit 0 -----------------------------


def _fetch_request(correlation_id: int, topic: str, max_wait_ms: int) -> bytes:
    """A Fetch v12 request long-polling an empty partition for ``max_wait_ms``."""
    import datetime

    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.static.primitive import i8, i32, i32Timedelta, i64

    body = FetchRequest(
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(1),
        max_bytes=i32(1_000_000),
        isolation_level=i8(0),
        topics=(
            FetchTopic(
                topic=topic,  # type: ignore[arg-type]
                partitions=(
                    FetchPartition(
                        partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(1_000_000)
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    return encode_request(body, correlation_id, "sigterm-test")


def _start_cli_proxy(tansu: Any, tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    store = tmp_path / "quotas.sqlite"
    subprocess.run(
        [
            *(sys.executable, "-m", "kquota", "configs", "--store", str(store), "--alter"),
            *("--entity-type", "clients", "--entity-name", "someone-else"),
            *("--add-config", "producer_byte_rate=1000000"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kquota",
            "proxy",
            "--listen",
            f"127.0.0.1:{tansu.proxy_port}",
            "--upstream",
            f"127.0.0.1:{tansu.port}",
            "--store",
            str(store),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("kquota proxy: listening on"), (line, process.stderr.read())
    return process


@pytest.mark.slow
def test_sigterm_answers_the_request_in_flight_and_exits_0(tansu: Any, tmp_path: Path) -> None:
    process = _start_cli_proxy(tansu, tmp_path)
    try:
        topic = "sigterm-topic"
        create_topic(f"127.0.0.1:{tansu.proxy_port}", topic)
        with socket.create_connection(("127.0.0.1", tansu.proxy_port), timeout=20) as client:
            client.sendall(_fetch_request(41, topic, max_wait_ms=2000))
            time.sleep(0.5)  # the fetch is now held by the broker
            started = time.monotonic()
            process.send_signal(signal.SIGTERM)
            frame = read_frame(client)
            assert frame is not None, "the request in flight was not answered"
            assert struct.unpack_from(">i", frame)[0] == 41
            assert closed_by_peer(client)
        assert process.wait(30) == 0
        assert time.monotonic() - started < 20
        # no new connection is accepted after the shutdown
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", tansu.proxy_port), timeout=2).close()
    finally:
        if process.poll() is None:
            process.kill()
        _, stderr = process.communicate(timeout=30)  # also closes the pipes
    assert "shutting down" in stderr


def test_cli_rejects_bad_options_with_status_2(tmp_path: Path) -> None:
    cases = [
        (["--listen", "nowhere", "--upstream", "127.0.0.1:9"], "invalid --listen 'nowhere'"),
        (["--listen", "127.0.0.1:0", "--upstream", "h:99999"], "invalid --upstream 'h:99999'"),
        (
            ["--listen", "127.0.0.1:0", "--upstream", "h:9", "--num-samples", "1"],
            "invalid --num-samples 1",
        ),
        (
            ["--listen", "127.0.0.1:0", "--upstream", "h:9", "--window-ms", "0"],
            "invalid --window-ms 0",
        ),
        (
            ["--listen", "127.0.0.1:0", "--upstream", "h:9", "--threads", "0"],
            "invalid --threads 0: expected 1 to 256",
        ),
        # The data path's rules, with its option names given as the flags.
        (
            ["--listen", "127.0.0.1:0", "--upstream", "h:0"],
            'invalid --upstream "h:0": expected HOST:PORT with a port from 1 to 65535',
        ),
        (
            ["--listen", "127.0.0.1:0", "--upstream", "h:9", "--listener-name", ""],
            'invalid --listener-name "": expected a listener name',
        ),
        (
            ["--listen", "127.0.0.1:0", "--upstream", "h:9", "--num-partitions", "0"],
            "invalid --num-partitions 0: expected 1 to 2147483647",
        ),
        (
            ["--listen", "127.0.0.1:0", "--upstream", "h:9", "--max-request-bytes", "-1"],
            "invalid --max-request-bytes -1: expected 1 to 2147483647",
        ),
        (
            ["--listen", "127.0.0.1:0", "--upstream", "h:9", "--connections-max-idle-ms", "0"],
            "invalid --connections-max-idle-ms 0: expected 1 or more",
        ),
        (
            ["--listen", "127.0.0.1:0", "--upstream", "h:9", "--kafka-version", "3.7"],
            'invalid Kafka version "3.7"',
        ),
        (["--listen", "127.0.0.1:0", "--upstream", "h:9"], "does not exist"),
    ]
    assert_proxy_cli_refuses(cases, tmp_path / "q.db")


def test_cli_refuses_a_window_of_part_of_a_second(tmp_path: Path) -> None:
    # quota.window.size.seconds: every manager's window, the controller mutation's too,
    # is whole seconds; the core's message names the value.
    argv = ["--listen", "127.0.0.1:0", "--upstream", "h:9", "--window-ms", "1500"]
    message = "invalid window_ms 1500: a quota window is a whole number of seconds"
    assert_proxy_cli_refuses([(argv, message)], tmp_path / "q.db")


def test_bad_proxy_settings_are_named() -> None:
    from kquota._core import ProxyDataPath
    from kquota.broker import QuotaPlugin
    from kquota.exceptions import InvalidConfigError
    from kquota.proxy import ProxyServer

    with QuotaPlugin() as plugin:
        for kwargs, message in (
            ({"threads": 0}, "invalid threads 0: expected 1 to 256"),
            ({"threads": True}, "invalid threads True: expected an int, not a bool"),
            ({"listener": ""}, 'invalid listener "": expected a listener name'),
            ({"max_request_bytes": 2**31}, "invalid max_request_bytes 2147483648"),
            ({"max_response_bytes": 0}, "invalid max_response_bytes 0"),
            ({"default_num_partitions": 10**30}, f"invalid default_num_partitions {10**30}"),
            # Checked when given, though only start() uses them.
            ({"connect_timeout": 0}, "invalid connect_timeout 0: expected seconds > 0"),
            ({"upstream_timeout": -1.0}, "invalid upstream_timeout -1: expected seconds > 0"),
            ({"connections_max_idle": float("nan")}, "invalid connections_max_idle NaN"),
        ):
            with pytest.raises(InvalidConfigError, match=message):
                ProxyServer(("127.0.0.1", 9), plugin, **kwargs)  # type: ignore[arg-type]
    with socket.create_server(("127.0.0.1", 0)) as taken, QuotaPlugin() as plugin:
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        with pytest.raises(OSError, match=f"cannot listen on {listen}"):
            ProxyDataPath("127.0.0.1:9", *plugin.managers, listen=listen)
        with pytest.raises(InvalidConfigError, match='invalid upstream "nowhere"'):
            ProxyDataPath("nowhere", *plugin.managers)
        with pytest.raises(InvalidConfigError, match="invalid threads 0: expected 1 to 256"):
            ProxyDataPath("127.0.0.1:9", *plugin.managers, threads=0)
        # A host name is resolved when the data path starts, not when the options are given.
        missing = "no-such-host.invalid:9"
        ProxyServer(("no-such-host.invalid", 9), plugin)
        with pytest.raises(InvalidConfigError, match=f'invalid upstream "{missing}": its host'):
            ProxyDataPath(missing, *plugin.managers)


def test_api_versions_offer_only_versions_the_codec_reads(tansu: Any) -> None:
    with (
        run_proxy(tansu.upstream, tansu.proxy_port),
        socket.create_connection(("127.0.0.1", tansu.proxy_port), timeout=10) as sock,
    ):
        sock.sendall(api_versions_request(5))
        frame = read_frame(sock)
    assert frame is not None
    offered = _offered_versions(frame)
    assert 0 in offered and 1 in offered  # produce and fetch
    # never more than the broker offers (the codec's own versions are not visible here)
    with socket.create_connection(tansu.upstream, timeout=10) as direct:
        direct.sendall(api_versions_request(6))
        answer = read_frame(direct)
    assert answer is not None
    known = _offered_versions(answer)
    for key, (low, high) in offered.items():
        assert known[key][0] <= low <= high <= known[key][1], key


def _offered_versions(frame: bytes) -> dict[int, tuple[int, int]]:
    response = read_response(frame, 18, 3)
    return {int(e.api_key): (int(e.min_version), int(e.max_version)) for e in response.api_keys}


def test_request_quota_throttles_any_api_in_its_response_and_mutes(tansu: Any) -> None:
    """``request_percentage`` applies to every API: the throttle is written into the
    response's own field (Metadata v12 here), and the connection reads nothing more until
    it has passed (the next answer comes no earlier)."""
    import kquota
    from kquota.broker import QuotaPlugin

    plugin = QuotaPlugin()
    plugin.request.set_quota(kquota.Entity(client_id="chatty"), 0.01)  # 0.01 % of a thread
    with (
        run_proxy(tansu.upstream, tansu.proxy_port, plugin),
        socket.create_connection(("127.0.0.1", tansu.proxy_port), timeout=30) as sock,
    ):
        throttle = 0
        correlation_id = 0
        while throttle == 0 and correlation_id < 500:
            correlation_id += 1
            sock.sendall(metadata_request(correlation_id, "chatty"))
            frame = read_frame(sock)
            assert frame is not None
            assert response_correlation_id(frame) == correlation_id
            throttle = throttle_ms(frame, 3, 12)
            assert throttle is not None
            answered = time.monotonic()
        assert throttle > 0, "500 requests at 0.01 % of a thread were never throttled"
        # the next request is read only once the throttle has passed
        sock.sendall(metadata_request(correlation_id + 1, "chatty"))
        frame = read_frame(sock)
        waited = time.monotonic() - answered
    assert frame is not None and response_correlation_id(frame) == correlation_id + 1
    assert waited >= throttle / 1000 - 0.01
    # the patched responses decode; the broker advertises the proxy, as it must
    response = read_response(frame, 3, 12)
    assert response.brokers[0].port == tansu.proxy_port
