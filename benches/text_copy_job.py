"""The baseline of ``kquota traffic import``: a Spark job that reads the same text files and
writes their lines unchanged as Parquet, with no parsing. It starts its Spark session as
``kquota`` does (:func:`kquota.backtest.session.spark_session`), so both are timed as whole
processes with the same settings:

    python benches/text_copy_job.py --out DIR [--master local[2]] FILE...

Prints the seconds the job took (process start to the written output) on stdout.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from processes import run_spark_job

STARTED = time.monotonic()


def main(argv: Sequence[str] | None = None) -> int:
    return run_spark_job(
        argv,
        __doc__.split("\n\n")[0],
        lambda parser: parser.add_argument("files", nargs="+", help="text files to copy"),
        "kquota text copy job",
        _copy,
        STARTED,
    )


def _copy(spark: Any, args: Any) -> None:
    spark.read.text(args.files).write.mode("overwrite").parquet(args.out)


if __name__ == "__main__":
    sys.exit(main())
