"""``kquota backtest``: replay recorded traffic through the core under candidate quotas."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kquota.cli.common import EXIT_OK, fail
from kquota.config import QuotaConfig, open_store
from kquota.exceptions import InvalidValueError, KquotaError

SPARK_EXTRA = 'needs the spark extra: pip install "kquota[spark]"'
SQLITE_MAGIC = b"SQLite format 3\x00"


def register(subparsers: Any) -> None:
    """Add the ``backtest`` subcommand."""
    parser = subparsers.add_parser(
        "backtest",
        help="back-test quotas over recorded traffic on Spark: who is throttled, how long",
        description=(
            "Replay a traffic table (Parquet or CSV, one row per request) through kquota's "
            "core under a quota configuration, on Spark, and write per-request throttles "
            "(DIR/requests/), per-entity summaries (DIR/entities/), bad rows "
            "(DIR/quarantine/) and DIR/report.html. Exit status 2 on bad input."
        ),
    )
    parser.add_argument("--traffic", required=True, metavar="PATH", help="Parquet or CSV traffic")
    parser.add_argument(
        "--quotas",
        required=True,
        metavar="FILE",
        help="a quota file (kquota configs format), or a store: a kquota SQLite store file, "
        "sqlite://PATH or SCHEME://... of an installed store backend",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")
    parser.add_argument(
        "--mode",
        choices=("open", "closed"),
        default="open",
        help="open: replay recorded times; closed: throttled clients wait (KIP-219)",
    )
    parser.add_argument(
        "--scale",
        default="1",
        metavar="LIST",
        help="what-if: comma-separated factors applied to every quota, e.g. 0.5,1,2",
    )
    parser.add_argument(
        "--recommend",
        action="store_true",
        help="per entity, find the smallest quota keeping the throttled fraction <= --target",
    )
    parser.add_argument(
        "--target", type=float, default=0.01, help="throttled fraction for --recommend (0.01)"
    )
    parser.add_argument("--master", metavar="URL", help="Spark master (default local[*])")
    parser.add_argument(
        "--strict", action="store_true", help="refuse traffic with any bad row (exit 2)"
    )
    parser.add_argument(
        "--format", choices=("auto", "parquet", "csv"), default="auto", help="input format"
    )
    parser.add_argument(
        "--partition",
        choices=("broker", "sensor"),
        default="broker",
        help="open loop: split the replay by broker (one pass, the default) or by sensor "
        "(more parallel than there are brokers; two passes with request quotas)",
    )
    parser.add_argument(
        "--buckets",
        type=int,
        metavar="N",
        help="--recommend: groups of entities per quota type (default 2 x Spark parallelism)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.set_defaults(run=run)


def load_quotas(spec: str) -> QuotaConfig:
    """A quota file, or the configuration of a store (SQLite file or ``SCHEME://``)."""
    if "://" in spec:
        return open_store(spec).read().config
    path = Path(spec)
    try:
        with path.open("rb") as handle:
            magic = handle.read(len(SQLITE_MAGIC))
    except OSError:
        magic = b""
    if magic == SQLITE_MAGIC:
        return open_store(str(path)).read().config
    return QuotaConfig.load(path)


def _scales(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InvalidValueError(
            f"invalid --scale {text!r}: expected comma-separated numbers, e.g. 0.5,1,2"
        ) from None


def run(args: argparse.Namespace) -> int:
    """Run the job; print the summary table and where the report is."""
    try:
        from kquota.backtest import job, report
    except ImportError as exc:
        return fail("backtest", f"{SPARK_EXTRA} ({exc})")
    try:
        options = job.BacktestOptions(
            traffic=args.traffic,
            quotas=load_quotas(args.quotas),
            out=args.out,
            mode=args.mode,
            scales=_scales(args.scale),
            recommend=args.recommend,
            target=args.target,
            strict=args.strict,
            input_format=args.format,
            buckets=args.buckets,
            partition=args.partition,
        )
    except KquotaError as exc:
        return fail("backtest", exc)
    spark, created = job.spark_session(args.master)
    try:
        with job.Progress(spark, None if args.quiet else sys.stderr) as progress:
            result = job.run(spark, options, progress)
    except KquotaError as exc:
        return fail("backtest", exc)
    finally:
        if created:
            spark.stop()
    print(report.summary_text(result))
    print()
    for name in ("requests", "entities", "quarantine", "recommendations"):
        if name == "quarantine" and not result.quarantined:
            continue
        if name == "recommendations" and result.recommendations is None:
            continue
        print(f"{name:>15}: {result.out}/{name}/")
    if result.report is not None:
        print(f"{'report':>15}: {result.report}")
    return EXIT_OK
