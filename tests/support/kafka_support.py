"""Real Apache Kafka brokers for the tests (no tests here), run from the jars ``make tools``
copies into ``${XDG_CACHE_HOME:-~/.cache}/kquota/kafka-<version>/libs``.

* ``KafkaBroker``: one KRaft node, controller and broker in one JVM, on ephemeral ports of
  127.0.0.1 in a folder of its own, its request log on (``logs/kafka-request.log``).
* ``KafkaCluster``: three brokers and a KRaft controller, each in its own JVM; any
  broker can be stopped and started again while the other two keep serving.
* ``kafka_configs``: Kafka's own ``kafka-configs`` against a running broker.

The versions come from ``apache-kafka/pom.xml``, the one place they are pinned: ``KAFKA_VERSION``
(the default profile, Kafka 4, log4j 2), ``KAFKA3_VERSION`` (profile ``kafka-3``,
log4j 1 through reload4j) and ``KAFKA_NEWEST_VERSION`` (profile ``kafka-newest``, the
newest Kafka on Maven Central, log4j 2). Every broker logs in UTC, the zone ``kquota
backtest`` reads request logs in by default.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Self

import paths
import pytest
from ports import free_port

ROOT = paths.ROOT
POM = ROOT / "apache-kafka" / "pom.xml"
LOGGING = Path(__file__).resolve().parent / "kafka_logging"

BROKER_MAIN = "kafka.Kafka"
STORAGE_TOOL_MAIN = "kafka.tools.StorageTool"  # kafka-storage, in kafka_2.13 for 3.9 and 4.1
CONFIG_COMMAND_MAIN = "kafka.admin.ConfigCommand"  # kafka-configs, likewise up to 4.3
CONFIG_COMMAND_MAIN_4_4 = "org.apache.kafka.tools.ConfigCommand"  # in kafka-tools from 4.4
ROLES = ("broker,controller", "broker", "controller")  # process.roles of a KRaft node

START_TIMEOUT_S = 90.0  # bounds a start that would otherwise hang; never a measurement
STOP_TIMEOUT_S = 30.0  # SIGTERM, then this long for the shutdown hook, then SIGKILL
TOOL_TIMEOUT_S = 120.0


# -- versions and jars --------------------------------------------------------------------


def pinned_versions(pom: Path = POM) -> dict[str, str]:
    """``{profile id: Kafka version}`` as ``apache-kafka/pom.xml`` pins them, the profile active by
    default first (it takes the project's ``kafka.version``; a profile may override it)."""
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    project = ET.parse(pom).getroot()
    default = project.findtext("m:properties/m:kafka.version", namespaces=ns)
    if not default:
        raise ValueError(f"{pom} sets no <kafka.version> property")
    versions: list[tuple[str, str]] = []
    for profile in project.iterfind("m:profiles/m:profile", ns):
        entry = (
            profile.findtext("m:id", namespaces=ns) or "",
            profile.findtext("m:properties/m:kafka.version", namespaces=ns) or default,
        )
        if profile.findtext("m:activation/m:activeByDefault", namespaces=ns) == "true":
            versions.insert(0, entry)
        else:
            versions.append(entry)
    return dict(versions)


_PINNED = pinned_versions()
KAFKA_VERSION = next(iter(_PINNED.values()))
KAFKA3_VERSION = _PINNED["kafka-3"]
KAFKA_NEWEST_VERSION = _PINNED["kafka-newest"]
VERSIONS = tuple(dict.fromkeys(_PINNED.values()))


class KafkaNotInstalled(RuntimeError):
    """The pinned jars (or ``java``) are not on this machine."""


def running_kafka(kafka: Any) -> Iterator[Any]:
    """Start a ``KafkaBroker`` or ``KafkaCluster``, yield it, stop it (an error if it had
    to be killed: every stop is meant to be clean). A missing jar or ``java`` fails the
    tests that need it with what to run (``make test`` fetches the jars first; a skip would
    drop Kafka's side of a comparison without a word)."""
    try:
        kafka.start()
    except KafkaNotInstalled as missing:
        pytest.fail(str(missing), pytrace=False)
    try:
        yield kafka
    finally:
        if not kafka.stop():
            pytest.fail(f"did not stop on SIGTERM; killed\n{kafka.describe()}", pytrace=False)


def kafka_home(version: str) -> Path:
    """Where ``make tools`` puts a version: ``${XDG_CACHE_HOME:-~/.cache}/kquota/kafka-V``."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "kquota" / f"kafka-{version}"


def _check_version(version: str) -> None:
    if version not in VERSIONS:
        raise ValueError(f"Kafka {version!r} is not pinned in {POM}: use one of {VERSIONS}")


def kafka_libs(version: str) -> Path:
    """The folder of ``version``'s jars, complete; ``KafkaNotInstalled`` (saying to run
    ``make tools``) when it is not."""
    _check_version(version)
    home = kafka_home(version)
    if not (home / ".complete").is_file():
        raise KafkaNotInstalled(
            f"Apache Kafka {version}'s jars are not in {home}/libs: run `make tools`"
            " (`make test` fetches them first)"
        )
    if not _java():
        raise KafkaNotInstalled("no `java` on PATH: the Kafka brokers need Java 17 or later")
    return home / "libs"


def _java() -> str | None:
    import shutil

    return shutil.which("java")


def _major(version: str) -> int:
    return int(version.split(".")[0])


def java_command(
    version: str,
    main_class: str,
    *args: str,
    heap: str = "256m",
    logging: str = "tools",
    system_properties: Mapping[str, str] | None = None,
) -> list[str]:
    """``java -cp 'libs/*' MAIN ARGS`` for one of Kafka's main classes, with a bounded heap,
    UTC as the default zone and the log4j configuration of ``logging`` (``tools`` or
    ``broker``, written for log4j 2 or log4j 1 after the version)."""
    libs = kafka_libs(version)
    if _major(version) >= 4:  # log4j 2; log4j 1 (reload4j) before
        config = LOGGING / f"{logging}-log4j2.xml"
        log_property = f"-Dlog4j2.configurationFile={config}"
    else:
        config = LOGGING / f"{logging}-log4j.properties"
        log_property = f"-Dlog4j.configuration={config.as_uri()}"
    properties = [f"-D{k}={v}" for k, v in (system_properties or {}).items()]
    return [
        _java() or "java",
        f"-Xmx{heap}",
        # few cores: a serial collector and C1 only halve a start (measured: 3 brokers and a
        # controller in 10-11 s rather than 21 s, with the machine loaded)
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-XX:-UsePerfData",
        "-Djava.awt.headless=true",
        "-Duser.timezone=UTC",
        log_property,
        *properties,
        "-cp",
        f"{libs}/*",
        main_class,
        *args,
    ]


class KafkaToolFailed(RuntimeError):
    """One of Kafka's tools exited with an error."""


def run_tool(version: str, main_class: str, *args: str, timeout: float = TOOL_TIMEOUT_S) -> str:
    """Run a Kafka tool to its end; its standard output, or ``KafkaToolFailed`` with the
    command and what it printed."""
    command = java_command(version, main_class, *args)
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if result.returncode != 0:
        raise KafkaToolFailed(
            f"{main_class} {' '.join(args)} exited with {result.returncode}:\n"
            f"{result.stdout[-2000:]}{result.stderr[-4000:]}"
        )
    return result.stdout


def kafka_configs(bootstrap: str, *args: str, version: str = KAFKA_VERSION) -> str:
    """Kafka's ``kafka-configs --bootstrap-server BOOTSTRAP ARGS`` (``ConfigCommand``), e.g.
    ``kafka_configs(b, "--alter", "--add-config", "producer_byte_rate=1024",
    "--entity-type", "clients", "--entity-name", "greedy")``; its output."""
    moved = tuple(int(p) for p in version.split(".")[:2]) >= (4, 4)
    main = CONFIG_COMMAND_MAIN_4_4 if moved else CONFIG_COMMAND_MAIN
    return run_tool(version, main, "--bootstrap-server", bootstrap, *args)


def sasl_plain(user: str, password: str) -> dict[str, str]:
    """librdkafka's settings to log in as ``user`` with SASL/PLAIN over plaintext."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
    }


def random_cluster_id() -> str:
    """A random cluster id as Kafka writes one: 16 random bytes in unpadded base64url.

    Like Kafka's own ``Uuid.randomUuid``, it never starts with ``-``: command lines would
    read such an id as an option (one time in 64 otherwise)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent (thread) dies."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def completed_request(line: str) -> dict[str, Any] | None:
    """The JSON object of a request-log line (``[...] DEBUG Completed request:{...}
    (kafka.request.logger)``), read as the spec says and not by kquota's reader; ``None``
    for any other line."""
    _, found, body = line.partition(" Completed request:")
    if not found:
        return None
    document: dict[str, Any] = json.loads(body.removesuffix(" (kafka.request.logger)"))
    return document


def broker_ids(bootstrap: str, timeout: float = 5.0) -> set[int]:
    """The ids of the brokers a metadata request to ``bootstrap`` lists (empty when none
    answers in time). A real client's request: librdkafka's."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    try:
        return set(admin.list_topics(timeout=timeout).brokers)
    except Exception:  # KafkaException: not answering yet
        return set()
    finally:
        del admin


# -- one node -----------------------------------------------------------------------------


class KafkaBroker:
    """One Apache Kafka KRaft node on 127.0.0.1: by default broker and controller in one
    JVM, its own single-voter quorum (``roles`` and ``voters`` make the nodes of a
    ``KafkaCluster`` instead).

    ``folder`` holds ``server.properties``, ``data/`` (the log and metadata directories)
    and ``logs/`` (``kafka-server.log``, ``kafka-request.log`` with ``kafka.request.logger``
    at DEBUG, and ``kafka.out``, the JVM's own output); nothing is deleted on stop, so the
    logs outlive the broker. Without a folder, a temporary one is made (and kept).

    Use as a context manager, or ``start()``/``stop()``; a stopped broker starts again
    with its data. ``config`` adds or overrides ``server.properties`` entries; ``jmx``
    opens remote JMX on a port of 127.0.0.1 (``jmx_url``), for reading the broker's metrics.
    """

    def __init__(
        self,
        folder: Path | None = None,
        *,
        version: str = KAFKA_VERSION,
        node_id: int = 1,
        heap: str = "512m",
        config: Mapping[str, object] | None = None,
        roles: str = "broker,controller",
        controller_port: int | None = None,
        voters: str | None = None,
        cluster_id: str | None = None,
        jmx: bool = False,
    ) -> None:
        _check_version(version)
        if roles not in ROLES:
            raise ValueError(f"roles {roles!r}: use one of {ROLES}")
        if folder is None:
            import tempfile

            folder = Path(tempfile.mkdtemp(prefix=f"kafka-{version}-"))
        self.folder = Path(folder)
        self.version = version
        self.node_id = node_id
        self.heap = heap
        self.roles = roles
        self.is_broker = "broker" in roles
        self.is_controller = "controller" in roles
        self.port = free_port() if self.is_broker else 0
        self.controller_port = (controller_port or free_port()) if self.is_controller else 0
        if voters is None and not self.is_controller:
            raise ValueError("a broker-only node needs the controllers' voters")
        self.voters = voters or f"{node_id}@127.0.0.1:{self.controller_port}"
        self.cluster_id = cluster_id or random_cluster_id()
        self.config = dict(config or {})
        # remote JMX on 127.0.0.1, no authentication: for tests that read the broker's metrics
        self.jmx_port = free_port() if jmx else None
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None  # how long the last start took
        self.stopped_cleanly: bool | None = None  # the last stop: on SIGTERM, or killed

    # where things are
    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def jmx_url(self) -> str:
        """The JMX service URL of a broker started with ``jmx=True``."""
        if self.jmx_port is None:
            raise ValueError(f"{self.describe_briefly()} was made without jmx=True: no JMX port")
        return f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{self.jmx_port}/jmxrmi"

    def jvm_properties(self) -> dict[str, str]:
        """The JVM's system properties: the log folder, and remote JMX when asked for (one
        port for the registry and the connections, bound to 127.0.0.1)."""
        properties = {"kafka.logs.dir": str(self.log_dir)}
        if self.jmx_port is not None:
            port = str(self.jmx_port)
            properties |= {
                "com.sun.management.jmxremote": "true",
                "com.sun.management.jmxremote.port": port,
                "com.sun.management.jmxremote.rmi.port": port,
                "com.sun.management.jmxremote.host": "127.0.0.1",
                "com.sun.management.jmxremote.local.only": "true",
                "com.sun.management.jmxremote.authenticate": "false",
                "com.sun.management.jmxremote.ssl": "false",
                "java.rmi.server.hostname": "127.0.0.1",
            }
        return properties

    @property
    def log_dir(self) -> Path:
        return self.folder / "logs"

    @property
    def data_dir(self) -> Path:
        return self.folder / "data"

    @property
    def request_log(self) -> Path:
        """The request log's current file (see :meth:`request_log_lines` for all of it)."""
        return self.log_dir / "kafka-request.log"

    @property
    def request_log_files(self) -> list[Path]:
        """The request log's files, oldest first: the ones the hourly roll renamed
        (``kafka-request.log.YYYY-MM-dd-HH``, as on a production broker), then the
        current one."""
        rolled = sorted(p for p in self.log_dir.glob("kafka-request.log.*") if p.is_file())
        return [*rolled, self.request_log]

    def request_log_lines(self) -> Iterator[str]:
        """Every line of the request log so far, oldest first, across the hourly rolls (a
        run that spans an hour's end has its first lines in a rolled file)."""
        for path in self.request_log_files:
            if path.is_file():
                with path.open(encoding="utf-8", errors="replace") as lines:
                    for line in lines:
                        yield line.rstrip("\n")

    @property
    def server_log(self) -> Path:
        return self.log_dir / "kafka-server.log"

    @property
    def properties_file(self) -> Path:
        return self.folder / "server.properties"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def server_properties(self) -> dict[str, str]:
        """What ``server.properties`` holds: a one-node-per-JVM KRaft setup on 127.0.0.1
        with every quota setting at Kafka's default, then ``config``."""
        listeners = []
        if self.is_broker:
            listeners.append(f"PLAINTEXT://127.0.0.1:{self.port}")
        if self.is_controller:
            listeners.append(f"CONTROLLER://127.0.0.1:{self.controller_port}")
        properties: dict[str, object] = {
            "process.roles": self.roles,
            "node.id": self.node_id,
            "controller.quorum.voters": self.voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": ",".join(listeners),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": self.data_dir,
            # sized for a test on two cores: fewer threads and internal partitions
            "num.network.threads": 2,
            "num.io.threads": 4,
            "num.partitions": 1,
            "offsets.topic.num.partitions": 5,
            "offsets.topic.replication.factor": 1,
            "transaction.state.log.num.partitions": 5,
            "transaction.state.log.replication.factor": 1,
            "transaction.state.log.min.isr": 1,
            "share.coordinator.state.topic.replication.factor": 1,
            "share.coordinator.state.topic.min.isr": 1,
            "group.initial.rebalance.delay.ms": 0,
            # a joining broker is unfenced at its first heartbeat: sooner than every 2 s
            "broker.heartbeat.interval.ms": 500,
            **self.config,
        }
        if self.is_broker:
            properties["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{self.port}"
            properties["inter.broker.listener.name"] = "PLAINTEXT"
        if _major(self.version) < 4:  # share groups came with Kafka 4
            del properties["share.coordinator.state.topic.replication.factor"]
            del properties["share.coordinator.state.topic.min.isr"]
        return {k: str(v) for k, v in properties.items()}

    def _write_properties(self) -> None:
        lines = [f"{k}={v}" for k, v in self.server_properties().items()]
        self.properties_file.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def _format(self) -> None:
        """Format the storage once, with the cluster id (a restart keeps its data)."""
        if (self.data_dir / "meta.properties").is_file():
            return
        run_tool(
            self.version,
            STORAGE_TOOL_MAIN,
            "format",
            "--config",
            str(self.properties_file),
            f"--cluster-id={self.cluster_id}",
        )

    # life cycle
    def prepare(self) -> None:
        """Write ``server.properties`` and format the storage (the first time only)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        self._write_properties()
        self._format()

    def launch(self) -> None:
        """Start the JVM and return at once (``wait_ready`` waits for it to answer).

        From the main thread the JVM gets SIGTERM when the test process dies, however it
        dies, so that no broker outlives an interrupted run on a shared machine. (Linux ties
        that signal to the thread that started the child, so other threads go without.)"""
        if self.running:
            raise RuntimeError(f"{self.describe_briefly()} is already running")
        self._launched_at = time.monotonic()
        self.prepare()
        command = java_command(
            self.version,
            BROKER_MAIN,
            str(self.properties_file),
            heap=self.heap,
            logging="broker",
            system_properties=self.jvm_properties(),
        )
        tie_to_parent = (
            sys.platform == "linux" and threading.current_thread() is threading.main_thread()
        )
        with (self.log_dir / "kafka.out").open("ab") as out:
            self.process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.folder,
                start_new_session=True,  # a ^C reaches pytest only, which then stops brokers
                preexec_fn=_die_with_parent if tie_to_parent else None,
            )
        self.stopped_cleanly = None

    def wait_ready(
        self, node_ids: Iterable[int] | None = None, timeout: float = START_TIMEOUT_S
    ) -> None:
        """Wait until this node answers: a broker, a metadata request listing ``node_ids``
        (itself by default) as live brokers; a controller only, its quorum port. Else
        ``RuntimeError`` with its log, when it exits or times out."""
        wanted = {self.node_id} if node_ids is None else set(node_ids)
        deadline = time.monotonic() + timeout
        while True:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(
                    f"{self.describe_briefly()} exited while starting\n{self.describe()}"
                )
            if self.is_broker:
                if _listening(self.port) and wanted <= broker_ids(self.bootstrap, timeout=2):
                    break
            elif _listening(self.controller_port):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.describe_briefly()} was not ready within {timeout:.0f} s"
                    f" (brokers wanted: {sorted(wanted)})\n{self.describe()}"
                )
            time.sleep(0.2)
        self.startup_s = time.monotonic() - self._launched_at
        if not self.server_log.is_file():
            raise RuntimeError(
                f"{self.describe_briefly()} answers but writes no {self.server_log.name}: its"
                " logging binding is missing from the jars; run `make tools` again"
            )

    def start(self, timeout: float = START_TIMEOUT_S) -> Self:
        """Format (the first time), start, and wait until the broker answers."""
        self.launch()
        try:
            self.wait_ready(timeout=timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def terminate(self) -> None:
        """Send SIGTERM, if running: Kafka's shutdown hook then shuts the node down cleanly
        (a broker hands its partition leaderships to the others first)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL, as ``kill -9``: the node stops at once, with no shutdown of any kind
        (no controlled shutdown, no flush); ``start`` brings it back with its data."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
            self.stopped_cleanly = False

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> bool:
        """SIGTERM, wait up to ``timeout`` for the JVM to exit, then SIGKILL. True when it
        exited on SIGTERM alone (kept in ``stopped_cleanly``), or was never started."""
        process = self.process
        if process is None:
            return True
        if self.stopped_cleanly is None:
            self.terminate()
            try:
                process.wait(timeout)
                self.stopped_cleanly = process.returncode in (0, 128 + signal.SIGTERM)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                self.stopped_cleanly = False
        return self.stopped_cleanly

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # reports
    def describe_briefly(self) -> str:
        where = self.bootstrap if self.is_broker else f"controller port {self.controller_port}"
        return f"Kafka {self.version} node {self.node_id} ({self.roles}) at {where}"

    def describe(self, lines: int = 10) -> str:
        """For a failure report: where the logs are, the state of the JVM, the last warnings
        and lines of its server log, and what the JVM itself printed."""
        if self.process is None:
            state = "never started"
        elif self.process.poll() is None:
            state = f"running, pid {self.process.pid}"
        else:
            state = f"exited with {self.process.returncode}"
        log = _lines(self.server_log)
        warnings = [line for line in log if "] WARN " in line or "] ERROR " in line]
        out = _lines(self.log_dir / "kafka.out")
        parts = [
            f"{self.describe_briefly()}, {state}; its logs are kept in {self.log_dir}",
            f"-- last warnings and errors of {self.server_log.name}:",
            *(warnings[-lines:] or ["(none)"]),
            f"-- last lines of {self.server_log.name}:",
            *(log[-lines:] or ["(empty or missing)"]),
        ]
        if out:
            parts += ["-- last lines the JVM printed (kafka.out):", *out[-lines:]]
        return "\n".join(parts)


# -- three nodes --------------------------------------------------------------------------


class KafkaCluster:
    """``size`` Kafka brokers (node ids 0 .. size-1) and one KRaft controller (node id
    ``CONTROLLER_ID``), each in its own JVM on 127.0.0.1.

    ``stop_broker(i)``/``start_broker(i)`` stop and restart broker ``i`` (its data and port
    kept) while the others serve: the controller moves its partition leaderships to them.
    ``config`` adds or overrides every broker's ``server.properties`` entries.

    Why a controller of its own rather than three combined nodes (which start about a
    second sooner on two cores, three JVMs instead of four): a broker's clean shutdown asks
    the controller quorum to approve it, so the quorum must outlive every broker. Three
    combined nodes stopped together race for it (a straggler waits minutes for a quorum that
    has gone, and is killed), and stopping one restarts an election as well. Here brokers
    stop first, then the controller: about half a second, and a broker's restart leaves the
    quorum alone.
    """

    CONTROLLER_ID = 100

    def __init__(
        self,
        folder: Path | None = None,
        *,
        size: int = 3,
        version: str = KAFKA_VERSION,
        heap: str = "384m",
        controller_heap: str = "256m",
        config: Mapping[str, object] | None = None,
    ) -> None:
        _check_version(version)
        if folder is None:
            import tempfile

            folder = Path(tempfile.mkdtemp(prefix=f"kafka-cluster-{version}-"))
        self.folder = Path(folder)
        self.version = version
        cluster_id = random_cluster_id()
        controller_port = free_port()
        voters = f"{self.CONTROLLER_ID}@127.0.0.1:{controller_port}"
        self.controller = KafkaBroker(
            self.folder / "controller",
            version=version,
            node_id=self.CONTROLLER_ID,
            heap=controller_heap,
            roles="controller",
            controller_port=controller_port,
            voters=voters,
            cluster_id=cluster_id,
        )
        replication = min(size, 3)
        shared: dict[str, object] = {
            "offsets.topic.replication.factor": replication,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": min(replication, 2),
            "share.coordinator.state.topic.replication.factor": replication,
            "share.coordinator.state.topic.min.isr": min(replication, 2),
            "default.replication.factor": replication,
            **(config or {}),
        }
        self.brokers = [
            KafkaBroker(
                self.folder / f"broker-{i}",
                version=version,
                node_id=i,
                heap=heap,
                config=shared,
                roles="broker",
                voters=voters,
                cluster_id=cluster_id,
            )
            for i in range(size)
        ]
        self.startup_s: float | None = None

    @property
    def nodes(self) -> list[KafkaBroker]:
        """The brokers, then the controller."""
        return [*self.brokers, self.controller]

    @property
    def bootstrap(self) -> str:
        """Every broker's address, comma-separated (a client needs one that answers)."""
        return ",".join(broker.bootstrap for broker in self.brokers)

    @property
    def log_dirs(self) -> list[Path]:
        """Every node's log folder, the brokers' first."""
        return [node.log_dir for node in self.nodes]

    def broker(self, node_id: int) -> KafkaBroker:
        return self.brokers[node_id]

    def start(self, timeout: float = START_TIMEOUT_S) -> Self:
        """Start every node at once; wait until each broker lists all brokers as live."""
        began = time.monotonic()
        try:
            # the format tool's JVMs side by side; the nodes' from this thread (launch)
            with ThreadPoolExecutor(len(self.nodes)) as pool:
                list(pool.map(KafkaBroker.prepare, self.nodes))
            for node in self.nodes:
                node.launch()
            for broker in self.brokers:
                broker.wait_ready(range(len(self.brokers)), timeout=timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - began
        return self

    def stop_broker(self, node_id: int, timeout: float = STOP_TIMEOUT_S) -> bool:
        """Stop one broker: SIGTERM, a controlled shutdown that first moves its leaderships
        to the others. True when it exited on SIGTERM alone."""
        return self.brokers[node_id].stop(timeout)

    def kill_broker(self, node_id: int) -> None:
        """Kill one broker with SIGKILL (``kill -9``): its leaderships move only once the
        controller misses its heartbeats."""
        self.brokers[node_id].kill()

    def start_broker(self, node_id: int, timeout: float = START_TIMEOUT_S) -> None:
        """Start a stopped broker again; return once it is a live broker again. (The
        controller refuses its new registration until the heartbeats of the old one have
        been missing for ``broker.session.timeout.ms``, 9 s: a restart takes about 10 s.)"""
        self.brokers[node_id].start(timeout)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> bool:
        """Stop the brokers together, then the controller that approves their shutdown.
        True when every node exited on SIGTERM alone."""
        for broker in self.brokers:
            broker.terminate()
        clean = [broker.stop(timeout) for broker in self.brokers]
        return all([*clean, self.controller.stop(timeout)])

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def describe(self, lines: int = 5) -> str:
        return "\n".join(node.describe(lines) for node in self.nodes)
