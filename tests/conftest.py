"""Shared fixtures.

``spark``: one real local SparkSession (``local[2]``, few shuffle partitions, no UI) for
every Spark test of the session; tests that use it need the ``spark`` extra.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"


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
    if "tansu" in request.fixturenames:
        import gc

        gc.collect()


# -- Tansu: the real Kafka-compatible broker behind `kquota proxy` -------------------------

TANSU_VERSION = "0.6.0"


def tansu_binary() -> Path:
    """Where ``make tools`` builds Tansu: ``${XDG_CACHE_HOME:-~/.cache}/kquota/tansu-VERSION``."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "kquota" / f"tansu-{TANSU_VERSION}" / "bin" / "tansu"


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
    import socket
    import subprocess
    import time

    binary = tansu_binary()
    if not binary.is_file():
        pytest.skip(f"Tansu {TANSU_VERSION} is not built at {binary}: run `make tools`")
    port, proxy_port = free_port(), free_port()
    log = tmp_path_factory.mktemp("tansu") / "tansu.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(binary),
                "broker",
                "--storage-engine",
                "memory://tansu/",
                "--listener-url",
                f"tcp://127.0.0.1:{port}",
                "--advertised-listener-url",
                f"tcp://127.0.0.1:{proxy_port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                pytest.fail(f"Tansu exited with {process.returncode}: {log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"Tansu did not listen on {port} within 30 s")
                time.sleep(0.05)
        yield Tansu(port, proxy_port, process, log)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
