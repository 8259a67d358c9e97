"""Shared fixtures.

``spark``: one real local SparkSession (``local[2]``, few shuffle partitions, no UI) for
every Spark test of the session; tests that use it need the ``spark`` extra.

``kafka_broker``, ``kafka3_broker``, ``kafka_newest_broker``, ``kafka_cluster``: real
Apache Kafka (the versions
``apache-kafka/pom.xml`` pins) from tests/support/kafka_support.py; a failing test's
report names their log folders, which outlive the run.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paths as _paths
import pytest
from ports import free_port
from tansu import TANSU_VERSION, listening, tansu_argv, tansu_binary

SHARED = _paths.SHARED


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--soak-runs",
        type=int,
        default=0,
        metavar="N",
        help="run the soak tests (marked soak, left out otherwise) N times each: make soak",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The soak tests run only with ``--soak-runs`` (``make soak``), never in ``make test``."""
    if config.getoption("soak_runs") > 0:
        return
    soak = [item for item in items if item.get_closest_marker("soak")]
    if soak:
        config.hook.pytest_deselected(items=soak)
        items[:] = [item for item in items if not item.get_closest_marker("soak")]


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop at once, with one line, when ``../shared`` is not beside the checkout: the
    conformance vectors and the spec the tests read live there."""
    if not (SHARED / "conformance").is_dir():
        pytest.exit(
            f"the tests need the shared folder beside this checkout: no {SHARED}/conformance"
            " (clone it as ../shared)",
            returncode=2,
        )


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    pytest.importorskip("pyspark", reason='needs the spark extra: pip install "kquota[spark]"')
    from kquota.backtest.session import LOG4J_CONFIG
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kquota tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config(
            "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"
        )
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(autouse=True)
def _no_kafka_client_outlives_its_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a test with the broker: collect reference cycles, so that a librdkafka client
    the test left behind (its callbacks refer back to the object holding it) is destroyed
    now, not when the collector next runs: until then it reconnects to the address the
    next test's proxy listens on, and that proxy counts a connection it did not expect."""
    yield
    if {"tansu", *KAFKA_FIXTURES} & set(request.fixturenames):
        import gc

        gc.collect()


# -- Apache Kafka: real brokers, Kafka as the oracle -------------------------------------

KAFKA_FIXTURES = ("kafka_broker", "kafka3_broker", "kafka_newest_broker", "kafka_cluster")


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One Kafka 4 KRaft node (``KAFKA_VERSION``) for the session: a ``KafkaBroker``, with
    ``bootstrap``, ``log_dir`` and ``request_log``. Tests leave it as they found it (a
    quota they set, they delete)."""
    from kafka_support import KAFKA_VERSION, KafkaBroker, running_kafka

    folder = tmp_path_factory.mktemp(f"kafka-{KAFKA_VERSION}-")
    yield from running_kafka(KafkaBroker(folder, version=KAFKA_VERSION))


@pytest.fixture(scope="session")
def kafka3_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The same with Kafka 3 (``KAFKA3_VERSION``, log4j 1): the request-log format most
    clusters write today."""
    from kafka_support import KAFKA3_VERSION, KafkaBroker, running_kafka

    folder = tmp_path_factory.mktemp(f"kafka-{KAFKA3_VERSION}-")
    yield from running_kafka(KafkaBroker(folder, version=KAFKA3_VERSION))


@pytest.fixture(scope="module")
def kafka_newest_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The same with the newest Kafka pinned (``KAFKA_NEWEST_VERSION``), for the modules
    that compare against it: one node per module."""
    from kafka_support import KAFKA_NEWEST_VERSION, KafkaBroker, running_kafka

    folder = tmp_path_factory.mktemp(f"kafka-{KAFKA_NEWEST_VERSION}-")
    yield from running_kafka(KafkaBroker(folder, version=KAFKA_NEWEST_VERSION))


@pytest.fixture(scope="module")
def _kafka_cluster_of_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from kafka_support import KAFKA_VERSION, KafkaCluster, running_kafka

    folder = tmp_path_factory.mktemp(f"kafka-cluster-{KAFKA_VERSION}-")
    yield from running_kafka(KafkaCluster(folder, size=3, version=KAFKA_VERSION))


@pytest.fixture
def kafka_cluster(_kafka_cluster_of_module: Any) -> Iterator[Any]:
    """Three Kafka 4 brokers (node ids 0, 1, 2) and a KRaft controller for the module: a
    ``KafkaCluster``, with ``bootstrap``, ``stop_broker(i)``, ``start_broker(i)``. Every
    test gets every node running: one a test left stopped is started again after it."""
    cluster = _kafka_cluster_of_module
    yield cluster
    for node in [cluster.controller, *cluster.brokers]:
        if not node.running:
            node.start()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failing test that used a Kafka broker gets a section naming its log folder (kept
    after the run with pytest's temporary folders) and its last warnings."""
    report = yield
    if report.failed:
        from kafka_support import KafkaBroker, KafkaCluster

        described: set[int] = set()
        for name, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, KafkaBroker | KafkaCluster) and id(value) not in described:
                described.add(id(value))
                report.sections.append((f"Kafka: {name}", value.describe()))
    return report


# -- Tansu: the real Kafka-compatible broker behind `kquota proxy` -------------------------


class Tansu:
    """A running Tansu broker on ``127.0.0.1:port`` that advertises ``127.0.0.1:proxy_port``:
    clients reach it only through a proxy listening there."""

    def __init__(self, port: int, proxy_port: int, process: Any, log: Path) -> None:
        self.port = port
        self.proxy_port = proxy_port
        self.process = process
        self.log = log

    @property
    def upstream(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)


@pytest.fixture(scope="session")
def tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tansu]:
    """One in-memory Tansu for the session (started in milliseconds, killed at the end).

    Skipped only when the binary is missing (``make tools`` builds it; ``make test``
    does so first).
    """
    binary = tansu_binary()
    if not binary.is_file():
        pytest.skip(f"Tansu {TANSU_VERSION} is not built at {binary}: run `make tools`")
    port, proxy_port = free_port(), free_port()
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with listening(tansu_argv(port, proxy_port), port, "Tansu", log) as process:
        yield Tansu(port, proxy_port, process, log)
