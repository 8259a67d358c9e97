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

import argparse
import sys
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa

STARTED = time.monotonic()


def identity(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Every batch as it came."""
    yield from batches


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traffic", required=True, help="Parquet traffic (kquota gen-traffic)")
    parser.add_argument("--out", required=True, help="output folder (overwritten)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    args = parser.parse_args(argv)

    from kquota.backtest.session import spark_session
    from pyspark.sql import functions as F

    spark, created = spark_session(args.master, "kquota floor job")
    traffic = spark.read.parquet(args.traffic)
    (
        traffic.repartition(F.col("broker"))
        .sortWithinPartitions("ts_ms")
        .mapInArrow(identity, traffic.schema)
        .select("ts_ms", "bytes")
        .write.mode("overwrite")
        .parquet(args.out)
    )
    if created:
        spark.stop()
    print(f"{time.monotonic() - STARTED:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
