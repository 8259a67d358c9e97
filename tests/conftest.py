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
    from kquota.backtest.job import LOG4J_CONFIG
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
