"""Faults behind and of the gateway, judged by what the cluster holds afterwards: every
message a client was told is stored is read back from the brokers themselves.

Three Kafka 4 brokers and a controller; ``kquota proxy --bootstrap`` run as a user runs it,
with its quotas in a store on a Kafka topic that only broker 1 holds. Producers write with
``acks=all`` to a topic replicated three times (``min.insync.replicas=2``) while:

* broker 1 is killed with SIGKILL and started again: the data topic loses a leader and one
  replica, and the quota store is unreachable until the broker is back;
* the gateway is killed with SIGKILL and a second instance of the same configuration
  (the same store) takes its addresses: its clients reconnect there.

A producer that is not idempotent may store a message twice when it retries a request
whose answer it lost; those duplicates are counted. The idempotent one must store none.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from delivery import FIVE, Delivery, Producer, five_clients
from kafka_support import kafka_configs
from ports import free_port, free_ports

pytestmark = [
    pytest.mark.slow,
    pytest.mark.filterwarnings(
        # kafka-python 3.0.12 loads its schemas with importlib.resources' legacy API
        "ignore:(open_text|read_text) is deprecated:DeprecationWarning",
    ),
]


@pytest.fixture(autouse=True)
def _kafka_python_leaves_refused_sockets_open() -> Iterator[None]:
    """kafka-python 3.0.12 drops the socket of a refused connection without closing it
    (kafka/net/inet.py; only a broker or gateway that is gone makes that happen), and its
    warning would come at the end of the session. After each test here, the sockets that
    are still open but neither connected nor listening are closed."""
    yield
    gc.collect()
    for sock in [o for o in gc.get_objects() if issubclass(type(o), socket.socket)]:
        if sock.fileno() < 0 or sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            continue
        try:
            sock.getpeername()
        except OSError as err:
            if err.errno == errno.ENOTCONN:
                sock.close()


QUOTA = 50_000
"""producer_byte_rate of each producer's client id, per broker as in Kafka: throttled, so
the fault comes while requests wait out their throttles as well as at the broker. A new
sensor gives a client 10 s of quota at once on each broker (1.5 MB here): the two
producers sharing a client id (4 MB) are still held well after the fault."""
MESSAGES = 2000
IDEMPOTENT = "idempotent"
PRODUCERS: dict[str, Producer] = {
    **FIVE,
    IDEMPOTENT: Producer("librdkafka", IDEMPOTENT, (("enable.idempotence", True),)),
}
STORE_BROKER = 1


def _brokers(cluster: Any) -> list[tuple[str, int]]:
    return [
        (host, int(port)) for host, port in (b.rsplit(":", 1) for b in cluster.bootstrap.split(","))
    ]


def _store(cluster: Any) -> str:
    """A new quota store on a compacted topic that only broker 1 holds, with every
    producer's client id at :data:`QUOTA`; its address."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"kquota-quotas-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(
        topic, 1, replica_assignment=[[STORE_BROKER]], config={"cleanup.policy": "compact"}
    )
    admin.create_topics([new])[topic].result(60)
    address = f"kafka://{cluster.bootstrap}/{topic}"
    for client_id in sorted({p.client_id for p in PRODUCERS.values()}):
        subprocess.run(
            [
                *(sys.executable, "-m", "kquota", "configs", "--store", address, "--alter"),
                *("--entity-type", "clients", "--entity-name", client_id),
                *("--add-config", f"producer_byte_rate={QUOTA}"),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )
    return address


def _data_topic(cluster: Any) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"faults-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new = NewTopic(topic, 3, 3, config={"min.insync.replicas": "2"})
    admin.create_topics([new])[topic].result(60)
    return topic


@dataclass
class Gateway:
    address: str
    ports: tuple[int, tuple[int, int]]
    process: subprocess.Popen[bytes]
    log: Path

    def logged(self) -> str:
        return self.log.read_text(errors="replace")


@contextlib.contextmanager
def _gateway(
    cluster: Any, store: str, folder: Path, at: tuple[int, tuple[int, int]] | None = None
) -> Iterator[Gateway]:
    """``kquota proxy --bootstrap`` in front of ``cluster`` with ``store``, listening on
    ``at`` (a port and the brokers' ports; default: free ones); its log in a file; stopped
    with SIGTERM at the end (status 0) unless the test killed it."""
    listen, (first, last) = at if at is not None else (free_port(), free_ports(3))
    log = folder / f"gateway-{listen}.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [
                *(sys.executable, "-m", "kquota", "proxy", "--listen", f"127.0.0.1:{listen}"),
                *("--bootstrap", cluster.bootstrap, "--broker-ports", f"{first}-{last}"),
                *("--store", store),
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    gateway = Gateway(f"127.0.0.1:{listen}", (listen, (first, last)), process, log)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        assert line.startswith("kquota proxy: gateway listening"), (line, gateway.logged())
        yield gateway
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            assert process.wait(60) == 0, gateway.logged()[-4000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()


def _check(delivery: Delivery) -> None:
    """Every message acknowledged, none of them lost, none stored twice by the idempotent
    producer (the others' retries may store some twice: counted)."""
    described = delivery.describe()
    print(described)
    assert not delivery.errors, described
    assert delivery.audit.lost_count == 0, described
    assert delivery.acknowledged == len(delivery.ledgers) * MESSAGES, described
    assert delivery.audit.duplicated[IDEMPOTENT] == 0, described


def _after(seconds: float, *steps: Any) -> Any:
    """A fault for :func:`five_clients`' ``during``: ``steps`` in turn, the first after
    ``seconds`` of the run."""

    def fault() -> None:
        time.sleep(seconds)
        for step in steps:
            step()

    return fault


def test_a_broker_killed_during_acks_all_produce_loses_nothing_acknowledged(
    kafka_cluster: Any, tmp_path: Path
) -> None:
    broker_killed(kafka_cluster, tmp_path)


def broker_killed(kafka_cluster: Any, tmp_path: Path) -> Delivery:
    """Broker 1 (which holds the quota store) killed with SIGKILL 5 s into the run and
    started again 3 s later."""
    store = _store(kafka_cluster)
    topic = _data_topic(kafka_cluster)
    killed_at: list[float] = []

    def kill() -> None:
        killed_at.append(time.monotonic())
        kafka_cluster.kill_broker(STORE_BROKER)

    def restart() -> None:
        time.sleep(3)
        kafka_cluster.start_broker(STORE_BROKER)

    with _gateway(kafka_cluster, store, tmp_path) as gateway:
        delivery = five_clients(
            gateway.address,
            _brokers(kafka_cluster),
            topic,
            MESSAGES,
            producers=PRODUCERS,
            during=_after(5, kill, restart),
        )
        # the store was out of reach while its broker was down, and is followed again
        deadline = time.monotonic() + 60
        while "are followed again" not in gateway.logged() and time.monotonic() < deadline:
            time.sleep(0.5)
        logged = gateway.logged()
    assert killed_at, "the broker was never killed"
    _check(delivery)
    assert "cannot refresh quotas from Kafka topic store" in logged, logged[-3000:]
    assert "are followed again" in logged, logged[-3000:]
    assert delivery.largest_throttle_ms > 0, "the quotas did not hold"
    return delivery


def test_a_gateway_killed_while_clients_run_loses_nothing_and_another_takes_over(
    kafka_cluster: Any, tmp_path: Path
) -> None:
    gateway_killed(kafka_cluster, tmp_path)


def gateway_killed(kafka_cluster: Any, tmp_path: Path) -> Delivery:
    """The clients run through gateway A when it is killed; a second instance of the same
    configuration (the same store) then takes A's addresses, as a supervisor restarting
    it, or a standby behind the same address, would. Every client reconnects and
    finishes, and the second instance serves the quotas the store holds."""
    store = _store(kafka_cluster)
    topic = _data_topic(kafka_cluster)
    took_over: list[Gateway] = []
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(_gateway(kafka_cluster, store, tmp_path))

        def kill_a() -> None:
            a.process.kill()
            a.process.wait()

        def start_b() -> None:
            took_over.append(stack.enter_context(_gateway(kafka_cluster, store, tmp_path, a.ports)))

        delivery = five_clients(
            a.address,
            _brokers(kafka_cluster),
            topic,
            MESSAGES,
            producers=PRODUCERS,
            during=_after(5, kill_a, start_b),
        )
        assert took_over, "the second instance never started"
        # it serves the configuration the first one did, from the shared store
        described = kafka_configs(
            took_over[0].address,
            "--describe",
            "--entity-type",
            "clients",
            "--entity-name",
            "shared",
        )
    assert a.process.returncode == -signal.SIGKILL
    _check(delivery)
    assert f"producer_byte_rate={float(QUOTA)}" in described, described
    return delivery


@pytest.mark.soak
@pytest.mark.parametrize("fault", [broker_killed, gateway_killed], ids=lambda f: f.__name__)
def test_soak_faults_lose_no_acknowledged_message(
    fault: Any,
    kafka_cluster: Any,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> None:
    """``make soak``: ``--soak-runs`` runs of each fault, each read back."""
    runs = request.config.getoption("soak_runs")
    acknowledged = duplicated = 0
    for run in range(runs):
        try:
            delivery = fault(kafka_cluster, tmp_path_factory.mktemp(fault.__name__))
        except AssertionError as failed:
            raise AssertionError(f"{fault.__name__}, run {run + 1} of {runs}: {failed}") from None
        acknowledged += delivery.acknowledged
        duplicated += sum(delivery.audit.duplicated.values())
        for node in [kafka_cluster.controller, *kafka_cluster.brokers]:
            if not node.running:
                node.start()
    print(
        f"\nsoak {fault.__name__}: {runs} runs, {acknowledged} messages acknowledged, 0 lost,"
        f" {duplicated} stored twice by retries of producers that are not idempotent"
        " (none by the idempotent one)"
    )
