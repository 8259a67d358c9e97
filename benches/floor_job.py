"""The floor job the Spark targets compare with: what any back-test on Spark pays at least.

It reads the same Parquet traffic as ``kquota backtest``, repartitions it by broker, sorts
it by time within partitions, passes every column through an identity ``mapInArrow`` (the
rows go to a Python worker and back as Arrow, as the back-test's replay does) and writes
two columns (``ts_ms`` and ``bytes``) as Parquet. It starts its Spark session as
``kquota backtest`` does (:func:`kquota.backtest.session.spark_session`), so both are timed
as whole processes with the same settings:

    python benches/floor_job.py --traffic T.parquet --out DIR [--master local[2]]

Prints the seconds the job took (process start to the written output) on stdout.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from processes import run_spark_job

STARTED = time.monotonic()


def identity(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Every batch as it came."""
    yield from batches


def main(argv: Sequence[str] | None = None) -> int:
    return run_spark_job(
        argv,
        __doc__.split("\n\n")[0],
        lambda parser: parser.add_argument(
            "--traffic", required=True, help="Parquet traffic (kquota gen-traffic)"
        ),
        "kquota floor job",
        _floor,
        STARTED,
    )


def _floor(spark: Any, args: Any) -> None:
    from pyspark.sql import functions as F

    traffic = spark.read.parquet(args.traffic)
    (
        traffic.repartition(F.col("broker"))
        .sortWithinPartitions("ts_ms")
        .mapInArrow(identity, traffic.schema)
        .select("ts_ms", "bytes")
        .write.mode("overwrite")
        .parquet(args.out)
    )


if __name__ == "__main__":
    sys.exit(main())
