"""The same clients against Kafka's own quotas and against ``kquota proxy``, on one broker
(no tests here; tests/proxy/test_kafka_side_by_side.py and benches/test_kafka_side_by_side.py
use it).

One Apache Kafka KRaft node with two client listeners:

* ``PLAINTEXT`` on port P, advertised as itself: the clients of run (A) talk to Kafka
  directly and Kafka enforces its own quota, set with Kafka's ``kafka-configs`` on their
  client id;
* ``PROXIED`` on port Q, advertised as the proxy's address R: the clients of run (B)
  bootstrap at R, every address Kafka gives them is R, so every request of theirs goes
  through ``kquota proxy --listen R --upstream Q`` with the same quota set with
  ``kquota configs`` on their client id (Kafka has none on it).

A run is one workload for some seconds; what it leaves is a :class:`Run`: what the clients
saw (acknowledged or consumed bytes with their times, the throttle each response
carried as the client reported it), what the side enforcing the quota wrote down for
every response (Kafka's request log in (A), the proxy's ``--capture`` in (B)), and the CPU
time of the broker JVM and of the proxy process over the run (``/proc/PID/stat``).
:func:`~side_by_side_runs.compare` says, with numbers, where two runs differ beyond stated
tolerances (what a run saw and how two compare are in ``side_by_side_runs.py``).

The teeth: :class:`Front` also runs the same proxy with no quota for the client (a plain
relay) and a small proxy holding the client with a token bucket at the same rate in place
of Kafka's sampled windows (tests/support/token_bucket_front.py), with the same store and
capture.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUPPORT = Path(__file__).resolve().parent
if str(SUPPORT) not in sys.path:  # imported from benches/ too
    sys.path.insert(0, str(SUPPORT))

from kafka_support import KafkaBroker, kafka_configs, sasl_plain  # noqa: E402
from ports import free_port  # noqa: E402
from side_by_side_runs import Run, capture_rows, request_log  # noqa: E402

WAIT_S = 60.0
"""Bounds a wait (a start, a flush, a log line); never a measurement."""
TICKS = os.sysconf("SC_CLK_TCK")
LOG_LAG_S = 1.0
"""How long after a run Kafka's request log is read: its lines follow the responses."""


# -- the broker with a proxied listener ---------------------------------------------------


class SideBySideBroker(KafkaBroker):
    """A :class:`KafkaBroker` with a second client listener, ``PROXIED`` on
    ``proxied_port``, which advertises ``127.0.0.1:proxy_port``, where the proxy listens.
    ``PLAINTEXT`` (``bootstrap``) stays the inter-broker listener and advertises itself."""

    PROXIED = "PROXIED"
    SASL = "SASL"

    def __init__(
        self, folder: Path, *, sasl_users: Mapping[str, str] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(folder, **kwargs)
        self.proxied_port = free_port()
        self.proxy_port = free_port()
        self.sasl_users = dict(sasl_users or {})
        self.sasl_port = free_port() if self.sasl_users else 0

    @property
    def client_bootstrap(self) -> str:
        """Where the clients of (A) connect: the ``SASL`` listener when the broker has SASL
        users, else ``PLAINTEXT`` (the tools' listener either way)."""
        return f"127.0.0.1:{self.sasl_port}" if self.sasl_users else self.bootstrap

    @property
    def proxied(self) -> str:
        """The proxied listener itself: the proxy's upstream."""
        return f"127.0.0.1:{self.proxied_port}"

    @property
    def proxy_bootstrap(self) -> str:
        """Where the clients of (B) bootstrap: the proxy."""
        return f"127.0.0.1:{self.proxy_port}"

    def server_properties(self) -> dict[str, str]:
        """With ``sasl_users``, ``PROXIED`` and a third listener, ``SASL``, authenticate
        clients with SASL/PLAIN against those users and passwords; ``PLAINTEXT`` stays open
        for the tools and the broker itself."""
        properties = super().server_properties()
        direct = f"PLAINTEXT://127.0.0.1:{self.port}"
        proxied = f"{self.PROXIED}://127.0.0.1:{self.proxied_port}"
        advertised = [direct, f"{self.PROXIED}://127.0.0.1:{self.proxy_port}"]
        listeners = [direct, proxied, f"CONTROLLER://127.0.0.1:{self.controller_port}"]
        protocol = "PLAINTEXT"
        protocols = ["PLAINTEXT:PLAINTEXT", "CONTROLLER:PLAINTEXT"]
        if self.sasl_users:
            protocol = "SASL_PLAINTEXT"
            sasl = f"{self.SASL}://127.0.0.1:{self.sasl_port}"
            listeners.append(sasl)
            advertised.append(sasl)
            protocols.append(f"{self.SASL}:{protocol}")
            users = " ".join(f'user_{u}="{p}"' for u, p in self.sasl_users.items())
            jaas = f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};"
            properties["sasl.enabled.mechanisms"] = "PLAIN"
            for name in (self.SASL, self.PROXIED):
                properties[f"listener.name.{name.lower()}.plain.sasl.jaas.config"] = jaas
        protocols.append(f"{self.PROXIED}:{protocol}")
        properties["listeners"] = ",".join(listeners)
        properties["advertised.listeners"] = ",".join(advertised)
        properties["listener.security.protocol.map"] = ",".join(protocols)
        return properties

    def sasl_config(self, user: str) -> dict[str, str]:
        """librdkafka's settings to log in as ``user`` with SASL/PLAIN."""
        return sasl_plain(user, self.sasl_users[user])


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime: fields 14 and 15


def set_kafka_quota(
    broker: KafkaBroker, name: str, config: str, entity_type: str = "clients"
) -> None:
    """``kafka-configs --alter --add-config CONFIG`` on the client id or user ``name``;
    returns once the broker reports it (``--describe``), so a run never starts before its
    quota applies."""
    entity = ("--entity-type", entity_type, "--entity-name", name)
    kafka_configs(broker.bootstrap, "--alter", "--add-config", config, *entity)
    key = config.split("=", 1)[0]
    deadline = time.monotonic() + WAIT_S
    while key not in kafka_configs(broker.bootstrap, "--describe", *entity):
        if time.monotonic() > deadline:
            raise RuntimeError(f"Kafka did not report {config} on {entity_type} {name}")
        time.sleep(0.5)


def kquota_configs(store: Path, name: str, config: str, entity_type: str = "clients") -> None:
    """``kquota configs --store STORE --alter --entity-type clients|users --entity-name
    NAME --add-config CONFIG``."""
    subprocess.run(
        [
            *(sys.executable, "-m", "kquota", "configs", "--store", str(store), "--alter"),
            *("--entity-type", entity_type, "--entity-name", name, "--add-config", config),
        ],
        check=True,
        capture_output=True,
        timeout=WAIT_S,
        env=_env(),
    )


def _env() -> dict[str, str]:
    """This interpreter's environment with this checkout's ``python/`` first on the path."""
    python = str(SUPPORT.parents[1] / "python")
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (python, path) if p)}


# -- the proxy in front of the proxied listener --------------------------------------------

FRONTS = ("kquota", "relay", "token-bucket")
"""``kquota``: ``kquota proxy`` as a user runs it. ``relay``: the same command with a store
that has no quota for the client (a plain relay for it). ``token-bucket``: a small proxy
with a token bucket in place of Kafka's sampled rate (``token_bucket_front.py``)."""


class Front:
    """``kquota proxy --listen PROXY --upstream PROXIED --store STORE --capture DIR`` (or one
    of the teeth, see :data:`FRONTS`) as its own process, until :meth:`stop`."""

    def __init__(
        self,
        kind: str,
        broker: SideBySideBroker | None,
        store: Path,
        folder: Path,
        *,
        where: list[str] | None = None,
    ) -> None:
        """``where``: the proxy's own ``--listen`` and upstream options in place of the
        sidecar's in front of ``broker``'s proxied listener (a gateway's, for one)."""
        if kind not in FRONTS:
            raise ValueError(f"front {kind!r}: use one of {FRONTS}")
        self.kind = kind
        self.capture = folder / "capture"
        self.log = folder / "proxy.log"
        if where is None:
            assert broker is not None, "a sidecar front needs its broker"
            where = ["--listen", broker.proxy_bootstrap, "--upstream", broker.proxied]
        args = [
            *("proxy", *where),
            *("--store", str(store), "--capture", str(self.capture), "--log-level", "WARNING"),
        ]
        python = [sys.executable, "-X", "faulthandler"]
        if kind == "token-bucket":
            command = [*python, str(SUPPORT / "token_bucket_front.py"), *args[1:]]
        else:
            command = [*python, "-m", "kquota", *args]
        folder.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as err:
            self.process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=_env(),
                text=True,
            )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # the one line it prints once it listens
        if not (line.startswith("kquota proxy: ") and " listening on " in line):
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"{kind} proxy did not start: {line!r} {self.log.read_text()}")

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> str:
        """SIGTERM (the capture's last file is written), wait; its log."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise RuntimeError(f"{self.kind} proxy did not stop on SIGTERM") from None
        assert self.process.stdout is not None
        self.process.stdout.close()
        if self.process.returncode != 0:
            raise RuntimeError(
                f"{self.kind} proxy exited with {self.process.returncode}: {self.log.read_text()}"
            )
        return self.log.read_text()


# -- running a workload on one side ---------------------------------------------------------

SIDES = ("kafka", *FRONTS)
"""Where a run's quota is enforced: ``kafka`` (A) or one of the :data:`FRONTS` (B)."""


@dataclass
class Side:
    """Where a workload's clients connect and who enforces their quota."""

    name: str
    bootstrap: str
    client_id: str  # unique per run; the quota is set on it, or on its user
    front: Front | None = None
    config: dict[str, str] = field(default_factory=dict)  # the clients' own (SASL login)


@contextlib.contextmanager
def side(
    name: str,
    broker: SideBySideBroker,
    folder: Path,
    client_id: str,
    quota: str,
    *,
    user: str | None = None,
) -> Iterator[Side]:
    """Set ``quota`` (``KEY=VALUE``) on ``client_id`` (or, given one, on ``user``, whom the
    clients then log in as) where side ``name`` enforces it, and yield where to connect:
    Kafka's own listener (``kafka``), or the proxy (the others)."""
    entity_type, entity = ("users", user) if user else ("clients", client_id)
    config = broker.sasl_config(user) if user else {}
    if name == "kafka":
        set_kafka_quota(broker, entity, quota, entity_type)
        yield Side(name, broker.client_bootstrap, client_id, config=config)
        return
    store = folder / "quotas.sqlite"
    if name == "relay":  # a store, but no quota for this client
        kquota_configs(store, f"not-{entity}", quota, entity_type)
    else:
        kquota_configs(store, entity, quota, entity_type)
    front = Front(name, broker, store, folder)
    try:
        yield Side(name, broker.proxy_bootstrap, client_id, front, config)
    finally:
        front.stop()


def measure(
    name: str,
    broker: SideBySideBroker,
    folder: Path,
    client_id: str,
    quota_config: str,
    quota: float,
    workload: Callable[[Side, Run], None],
    *,
    idle_s: float = 0.0,
    user: str | None = None,
) -> Run:
    """Run ``workload`` on side ``name`` with ``quota_config`` on ``client_id``, which its
    clients use; collect what Kafka logged or the proxy captured for it, and the CPU times
    of the broker and the proxy over the workload. With ``user``, the quota is that user's
    and the clients log in as it (SASL/PLAIN). With ``idle_s``, their CPU time while
    idle is measured first, for that long (:meth:`Run.cpu_per_request_us` takes it out)."""
    run = Run(name, client_id, quota)
    folder.mkdir(parents=True, exist_ok=True)
    assert broker.pid is not None
    with side(name, broker, folder, client_id, quota_config, user=user) as where:
        pids = {"broker": broker.pid}
        if where.front is not None:
            pids["proxy"] = where.front.pid
        if idle_s > 0:
            before = {k: cpu_seconds(pid) for k, pid in pids.items()}
            time.sleep(idle_s)
            run.idle_cpu_per_s = {
                k: (cpu_seconds(pid) - before[k]) / idle_s for k, pid in pids.items()
            }
        before = {k: cpu_seconds(pid) for k, pid in pids.items()}
        started = time.monotonic()
        started_wall_ms = time.time_ns() // 1_000_000
        workload(where, run)
        ended_wall_ms = time.time_ns() // 1_000_000
        run.wall_s = time.monotonic() - started
        run.cpu_s = {k: cpu_seconds(pid) - before[k] for k, pid in pids.items()}
    if name == "kafka":
        # a line is written once its response is sent, by a network thread: let the last
        # ones in before reading the log
        time.sleep(LOG_LAG_S)
        run.responses = request_log(
            broker, [client_id], started_wall_ms - 1000, ended_wall_ms + 1000
        )
    else:
        run.responses = capture_rows(folder / "capture", [client_id])
    return run


# -- the clients ------------------------------------------------------------------------------

BACKLOG_BYTES = 1024 * 1024
"""What a greedy librdkafka producer keeps queued at most (``queue.buffering.max.kbytes``);
its ``purge`` drops it at the end of a run."""
PYTHON_BACKLOG = 128 * 1024
"""What a greedy kafka-python or aiokafka producer keeps unacknowledged at most (the
application's own bound: they have none). Small, because they cannot drop it at the end
of a run but must deliver it first, and a producer held by Kafka's quota may get one batch a
second then."""


def throttle_callback(throttles: list[int]) -> Callable[[Any], None]:
    """A librdkafka ``throttle_cb`` that appends each throttle above 0 to ``throttles``, in
    ms."""

    def on_throttle(event: Any) -> None:
        ms = round(event.throttle_time * 1000)
        if ms > 0:
            throttles.append(ms)

    return on_throttle


def greedy_librdkafka_producer(
    topic: str,
    seconds: float,
    *,
    value_bytes: int = 4096,
    batch_bytes: int = 32 * 1024,
    cap_bytes: int | None = None,
    producers: int = 1,
) -> Callable[[Side, Run], None]:
    """``producers`` librdkafka producers with the side's client id, producing as fast as
    they are let for ``seconds``, then dropping what is still queued and letting what is
    in flight finish. At most ``cap_bytes`` in all: a run without a quota stays small (and
    ends once they are acknowledged, the rest of its seconds counting as idle). Requests
    of at most ``batch_bytes`` (``batch.size``; 32 KiB: many requests, so that throttles
    follow the rate closely)."""

    def workload(where: Side, run: Run) -> None:
        from confluent_kafka import Producer

        value = b"q" * value_bytes
        acked: list[tuple[float, int]] = []
        throttles: list[int] = []
        began = run.begin()

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                acked.append((time.monotonic() - began, len(msg.value())))
            elif "purge" not in str(err).lower():
                run.failures.append(str(err))

        on_throttle = throttle_callback(throttles)

        clients = [
            Producer(
                {
                    "bootstrap.servers": where.bootstrap,
                    "client.id": where.client_id,
                    "acks": 1,
                    "linger.ms": 5,
                    "batch.size": batch_bytes,
                    "queue.buffering.max.kbytes": BACKLOG_BYTES // 1024,
                    "throttle_cb": on_throttle,
                    **where.config,
                }
            )
            for _ in range(producers)
        ]
        sent = 0
        turn = 0
        while time.monotonic() - began < seconds:
            if cap_bytes is not None and sent >= cap_bytes:
                if sum(len(c) for c in clients) == 0:
                    break  # all acknowledged: nothing more to send
                for client in clients:
                    client.poll(0.01)
                continue
            client = clients[turn % producers]
            turn += 1
            try:
                client.produce(topic, value, on_delivery=on_delivery)
                sent += value_bytes
            except BufferError:
                client.poll(0.05 / producers)
                continue
            client.poll(0)
        for client in clients:
            client.purge(in_queue=True, in_flight=False)
        left = sum(client.flush(WAIT_S) for client in clients)
        if left:
            run.failures.append(f"{left} messages still in flight {WAIT_S:g} s after the run")
        run.seconds = seconds
        run.data = acked
        run.client_throttles_ms = throttles
        clients.clear()  # their callbacks refer to this run

    return workload


def prefill(
    bootstrap: str,
    topic: str,
    total_bytes: int,
    value_bytes: int = 4096,
    batch_bytes: int | None = None,
) -> None:
    """``total_bytes`` of ``value_bytes`` messages in ``topic``, as fast as they go (a
    client id without a quota), in batches of up to ``batch_bytes`` (by default half of
    :data:`FETCH_BYTES`)."""
    from confluent_kafka import Producer

    failures: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": "prefill",
            "linger.ms": 20,
            "acks": 1,
            # a fetch returns whole batches: small ones, or a fetch would be far larger than
            # the consumer's fetch sizes
            "batch.size": batch_bytes or FETCH_BYTES // 2,
        }
    )
    value = b"c" * value_bytes
    for _ in range(total_bytes // value_bytes):
        while True:
            try:
                producer.produce(topic, value, on_delivery=lambda e, _m: e and failures.append(e))
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(WAIT_S) or failures:
        raise RuntimeError(f"prefilling {topic} failed: {failures[:3]}")


FETCH_BYTES = 64 * 1024
"""The consumer's fetch sizes (``fetch.max.bytes``, ``max.partition.fetch.bytes``): a
fetch response of at most a quarter of a second of quota, so that throttles follow the
rate closely."""


def librdkafka_consumer(
    topic: str, seconds: float, fetch_bytes: int = FETCH_BYTES
) -> Callable[[Side, Run], None]:
    """A librdkafka consumer in a group of its own reading ``topic`` (filled beforehand)
    from the start, as fast as it is let, for ``seconds`` from its first message (the group
    join before it is not part of the run), ``fetch_bytes`` at most a fetch."""

    def workload(where: Side, run: Run) -> None:
        from confluent_kafka import Consumer, KafkaException

        throttles: list[int] = []

        on_throttle = throttle_callback(throttles)

        consumer = Consumer(
            {
                "bootstrap.servers": where.bootstrap,
                "client.id": where.client_id,
                "group.id": f"group-{where.client_id}",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
                "fetch.max.bytes": fetch_bytes,
                "max.partition.fetch.bytes": fetch_bytes,
                "message.max.bytes": fetch_bytes,
                "throttle_cb": on_throttle,
            }
        )
        consumer.subscribe([topic])
        received: list[tuple[float, int]] = []
        began: float | None = None
        joined_by = time.monotonic() + WAIT_S
        try:
            while True:
                now = time.monotonic()
                if began is None and now > joined_by:
                    raise RuntimeError(f"no message of {topic} within {WAIT_S:g} s")
                if began is not None and now - began >= seconds:
                    break
                msg = consumer.poll(0.05)
                if msg is None:
                    continue
                if msg.error():
                    raise KafkaException(msg.error())
                if began is None:
                    began = run.begin()
                now = time.monotonic()
                received.append((now - began, len(msg.value())))
        finally:
            consumer.close()
        run.seconds = seconds
        run.data = received
        run.client_throttles_ms = throttles

    return workload


class _KafkaPythonThrottles(logging.Handler):
    """kafka-python's report of each throttled response (one warning per response, with
    the throttle it carried): the throttles it saw, in order."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.throttles_ms: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "throttled by broker" in str(record.msg) and record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            self.throttles_ms.append(int(args[-1]))


def greedy_kafka_python_producer(
    topic: str, seconds: float, *, value_bytes: int = 4096, cap_bytes: int | None = None
) -> Callable[[Side, Run], None]:
    """A kafka-python producer sending as fast as it is let for ``seconds``, at most
    :data:`PYTHON_BACKLOG` unacknowledged (kafka-python pauses a connection for the
    throttle each response carries, KIP-219's client side)."""

    def workload(where: Side, run: Run) -> None:
        from kafka import KafkaProducer
        from kafka.errors import KafkaTimeoutError

        value = b"q" * value_bytes
        acked: list[tuple[float, int]] = []
        handler = _KafkaPythonThrottles()
        logger = logging.getLogger("kafka.net.connection")
        logger.addHandler(handler)
        producer = KafkaProducer(
            bootstrap_servers=where.bootstrap,
            client_id=where.client_id,
            acks=1,
            linger_ms=5,
            batch_size=32 * 1024,
            max_block_ms=1000,
        )
        began = run.begin()
        ended = [False]
        sent = 0

        def on_acked(_metadata: Any) -> None:
            acked.append((time.monotonic() - began, value_bytes))

        def on_failed(error: Any) -> None:
            if not ended[0]:
                run.failures.append(str(error))

        try:
            while time.monotonic() - began < seconds:
                done = len(acked) * value_bytes
                capped = cap_bytes is not None and sent >= cap_bytes
                if capped and done >= sent:
                    break
                if capped or sent - done >= PYTHON_BACKLOG:
                    time.sleep(0.002)
                    continue
                try:
                    future = producer.send(topic, value)
                except KafkaTimeoutError:
                    continue
                future.add_callback(on_acked)
                future.add_errback(on_failed)
                sent += value_bytes
        finally:
            ended[0] = True
            producer.close(timeout=WAIT_S)  # delivers the backlog first
            logger.removeHandler(handler)
        run.seconds = seconds
        run.data = acked
        run.client_throttles_ms = [t for t in handler.throttles_ms if t > 0]

    return workload


def greedy_aiokafka_producer(
    topic: str, seconds: float, *, value_bytes: int = 4096, cap_bytes: int | None = None
) -> Callable[[Side, Run], None]:
    """An aiokafka producer sending as fast as it is let for ``seconds``, at most
    :data:`PYTHON_BACKLOG` unacknowledged. aiokafka ignores ``throttle_time_ms``: only the
    broker's (or proxy's) mute of its connection holds it back. The throttles its
    responses carried are read from the responses themselves."""

    async def produce(where: Side, run: Run) -> None:
        from aiokafka import AIOKafkaProducer

        value = b"q" * value_bytes
        acked: list[tuple[float, int]] = []
        throttles: list[int] = []
        producer = AIOKafkaProducer(
            bootstrap_servers=where.bootstrap,
            client_id=where.client_id,
            acks=1,
            linger_ms=5,
            max_batch_size=32 * 1024,
            request_timeout_ms=int(WAIT_S * 1000),
        )
        await producer.start()
        send = producer.client.send

        async def sending(*args: Any, **kwargs: Any) -> Any:
            response = await send(*args, **kwargs)
            ms = int(getattr(response, "throttle_time_ms", 0) or 0)
            if ms > 0:
                throttles.append(ms)
            return response

        producer.client.send = sending  # type: ignore[method-assign]
        began = run.begin()
        pending: set[asyncio.Future[Any]] = set()
        ended = False
        sent = 0

        def on_done(future: asyncio.Future[Any]) -> None:
            pending.discard(future)
            if future.cancelled():
                return
            if future.exception() is None:
                acked.append((time.monotonic() - began, value_bytes))
            elif not ended:
                run.failures.append(repr(future.exception()))

        try:
            while time.monotonic() - began < seconds:
                capped = cap_bytes is not None and sent >= cap_bytes
                if capped and not pending:
                    break
                if capped or len(pending) * value_bytes >= PYTHON_BACKLOG:
                    await asyncio.sleep(0.002)
                    continue
                future = await producer.send(topic, value)
                future.add_done_callback(on_done)
                pending.add(future)
                sent += value_bytes
        finally:
            ended = True
            await asyncio.wait_for(producer.stop(), WAIT_S)  # delivers the backlog first
        run.seconds = seconds
        run.data = acked
        run.client_throttles_ms = throttles

    def workload(where: Side, run: Run) -> None:
        asyncio.run(produce(where, run))

    return workload


def metadata_storm(seconds: float, *, warm_up_s: float = 0.0) -> Callable[[Side, Run], None]:
    """One connection sending Metadata requests (v12, no topics) one after the other as
    fast as the answers come, for ``seconds``: a client that ignores ``throttle_time_ms``,
    so that only the mute of its connection holds it back. Each answer is one unit of the
    run's data (requests per second); the throttle each carried is read from it.

    With ``warm_up_s``, the same storm goes first for that long on a connection of its own
    with a client id no quota names (``CLIENT_ID-warm-up``), unthrottled, through the same
    side: Kafka's Metadata path is compiled (JIT) and the proxy has learned the broker's
    round trips, as on a broker and a proxy that have served for a while (measured: Kafka's
    handler takes ~0.15 ms on a Metadata request cold and ~0.006 ms warm)."""

    def storm(where: Side, client_id: str, seconds: float, run: Run) -> None:
        import socket

        from kafka_wire import throttle_ms
        from proxy_support import metadata_request, read_frame

        host, port = where.bootstrap.rsplit(":", 1)
        answered: list[tuple[float, int]] = []
        throttles: list[int] = []
        with socket.create_connection((host, int(port)), timeout=WAIT_S) as sock:
            began = run.begin()
            correlation_id = 0
            while time.monotonic() - began < seconds:
                correlation_id += 1
                sock.sendall(metadata_request(correlation_id, client_id))
                frame = read_frame(sock)
                if frame is None:
                    run.failures.append("the connection was closed")
                    break
                throttle = throttle_ms(frame, 3, 12) or 0
                answered.append((time.monotonic() - began, 1))
                if throttle > 0:
                    throttles.append(throttle)
        run.seconds = seconds
        run.data = answered
        run.client_throttles_ms = throttles

    def workload(where: Side, run: Run) -> None:
        if warm_up_s > 0:
            warm_up = Run(f"{run.label} warm-up", f"{where.client_id}-warm-up", run.quota)
            storm(where, warm_up.client_id, warm_up_s, warm_up)
            run.failures.extend(f"warm-up: {failure}" for failure in warm_up.failures)
        storm(where, where.client_id, seconds, run)

    return workload
