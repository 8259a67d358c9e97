"""The baseline of ``kquota traffic import``: a Spark job that reads the same text files and
writes their lines unchanged as Parquet, with no parsing. It starts its Spark session as
``kquota`` does (:func:`kquota.backtest.session.spark_session`), so both are timed as whole
processes with the same settings:

    python benches/text_copy_job.py --out DIR [--master local[2]] FILE...

Prints the seconds the job took (process start to the written output) on stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

STARTED = time.monotonic()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", help="text files to copy")
    parser.add_argument("--out", required=True, help="output folder (overwritten)")
    parser.add_argument("--master", default="local[2]", help="Spark master (local[2])")
    args = parser.parse_args(argv)

    from kquota.backtest.session import spark_session

    spark, created = spark_session(args.master, "kquota text copy job")
    spark.read.text(args.files).write.mode("overwrite").parquet(args.out)
    if created:
        spark.stop()
    print(f"{time.monotonic() - STARTED:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
