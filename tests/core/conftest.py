"""The ``oracle`` fixture of the tests against Apache Kafka's quota classes
(``test_kafka_oracle*.py``): session-scoped, so those modules share one JVM per pinned
Kafka version."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka_oracle import ORACLE_VERSIONS, KafkaOracle, missing_tools, start_oracle


@pytest.fixture(scope="session", params=ORACLE_VERSIONS)
def oracle(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaOracle]:
    """One oracle JVM per pinned Kafka version for the session: compiled into a temp
    folder, stopped at the end. Every test that uses it runs against each. Skipped only when Kafka's
    jars or a JDK are missing (``make tools`` fetches the jars)."""
    version: str = request.param
    why = missing_tools(version)
    if why is not None:
        pytest.skip(why)
    running = start_oracle(tmp_path_factory.mktemp(f"kafka-oracle-{version}-"), version)
    try:
        yield running
    finally:
        assert running.close() == 0, "the Kafka oracle exited with an error"
