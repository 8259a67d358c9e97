"""``kquota traffic``: Kafka's request log as back-test traffic (``import``, ``describe``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from kquota.cli.backtest import MASTER, add_log_options, log_options
from kquota.cli.common import EXIT_OK, ExamplesFormatter, fail
from kquota.exceptions import InvalidValueError, KquotaError


def register(subparsers: Any) -> None:
    """Add the ``traffic`` subcommand with ``import`` and ``describe``."""
    parser = subparsers.add_parser(
        "traffic",
        help="read Kafka's request log (kafka-request.log*) as back-test traffic",
        description=(
            "Read the request log Kafka writes with kafka.request.logger at DEBUG (one "
            "'Completed request' line per request, Kafka 2.8 or later) on Spark. Exit "
            "status 2 on bad input."
        ),
        epilog=(
            "examples:\n"
            "  kquota traffic describe logs/\n"
            "  kquota traffic import logs/ --out traffic/ --log-timezone Europe/Paris"
        ),
        formatter_class=ExamplesFormatter,
    )
    commands = parser.add_subparsers(dest="traffic_command", metavar="COMMAND", required=True)
    for name, help_text in (
        ("import", "write the log as traffic Parquet, for back-tests run many times"),
        ("describe", "requests, span, brokers, clients, users, APIs, bytes, lines skipped"),
    ):
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.add_argument(
            "path",
            metavar="PATH",
            help="a kafka-request.log* file (rolled and .gz ones too), a folder of them "
            "(one folder per broker) or a glob",
        )
        if name == "import":
            sub.add_argument(
                "--out", required=True, metavar="DIR", help="traffic Parquet folder to write"
            )
        add_log_options(sub)
        sub.add_argument("--master", metavar="URL", help="Spark master (default local[*])")
        sub.add_argument(
            "--verbose", action="store_true", help="Spark's own start-up and log output on stderr"
        )
        sub.set_defaults(run=run_import if name == "import" else run_describe, extra="spark")


def _session(args: argparse.Namespace, command: str) -> Any:
    from kquota.backtest import session

    if args.master is not None and not MASTER.fullmatch(args.master):
        raise InvalidValueError(
            f"invalid --master {args.master!r}: expected local, local[N], local[*], "
            "spark://HOST:PORT, yarn or k8s://URL"
        )
    try:
        return session.spark_session(args.master, f"kquota {command}", verbose=args.verbose)
    except session.spark_errors() as exc:
        raise InvalidValueError(f"cannot start Spark: {session.spark_message(exc)}") from None


def _run(args: argparse.Namespace, command: str, action: Any) -> int:
    from kquota.backtest import inputs, requestlog, session

    try:
        options = log_options(args)
        requestlog.log_files(args.path)  # before Spark starts: missing, empty, unreadable
        if command == "traffic import":
            inputs.prepare_output(str(Path(args.out).absolute().parent))
        spark, created = _session(args, command)
    except KquotaError as exc:
        return fail(command, exc)
    try:
        return int(action(spark, requestlog, options))
    except KquotaError as exc:
        return fail(command, exc)
    except session.spark_errors() as exc:
        return fail(command, f"Spark failed: {session.spark_message(exc)}")
    finally:
        if created:
            spark.stop()


def run_import(args: argparse.Namespace) -> int:
    """``kquota traffic import PATH --out DIR``."""

    def action(spark: Any, requestlog: Any, options: Any) -> int:
        summary = requestlog.import_log(spark, args.path, args.out, options)
        print(
            f"wrote {summary.rows:,} requests to {args.out}/ from {summary.lines:,} lines in "
            f"{summary.files:,} file(s) in {summary.seconds:.1f} s"
        )
        for reason, count in summary.skipped.items():
            print(f"skipped {count:,} line(s): {reason}", file=sys.stderr)
        if summary.share_fetches:
            print(
                f"{summary.share_fetches:,} ShareFetch request(s): {requestlog.SHARE_FETCH_BYTES}",
                file=sys.stderr,
            )
        if summary.throttled_fetches:
            print(summary.fetch_note(), file=sys.stderr)
        if summary.mutations:
            print(summary.controller_note(), file=sys.stderr)
        return EXIT_OK

    return _run(args, "traffic import", action)


def run_describe(args: argparse.Namespace) -> int:
    """``kquota traffic describe PATH``."""

    def action(spark: Any, requestlog: Any, options: Any) -> int:
        print(requestlog.describe(spark, args.path, options).text())
        return EXIT_OK

    return _run(args, "traffic describe", action)
