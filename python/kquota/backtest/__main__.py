r"""``python -m kquota.backtest ARGS`` runs ``kquota backtest ARGS``: the entry point for
``spark-submit``, with the same arguments, parsed by the same parser
(:func:`kquota.cli.backtest.main`, which loads no other command).

``spark-submit`` runs a Python file rather than a module, so give it this file::

    spark-submit --master spark://HOST:7077 --conf spark.pyspark.python=PYTHON \
        "$(python -c 'import kquota.backtest as b; print(b.__path__[0])')/__main__.py" \
        --traffic ... --quotas ... --out ...

A session ``spark-submit`` configures (its ``--master``, its ``--conf``) is used as it is.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``kquota backtest`` with ``argv`` (default: ``sys.argv[1:]``); return the status."""
    from kquota.cli.backtest import main as backtest_main

    return backtest_main(argv)


if __name__ == "__main__":
    # Run as a file (spark-submit), Python puts this package's folder first on sys.path,
    # where its modules (options, session, report...) would shadow top-level ones.
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]
    raise SystemExit(main())
