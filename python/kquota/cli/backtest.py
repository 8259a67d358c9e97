"""``kquota backtest``: replay recorded traffic through the core under candidate quotas."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kquota.callback import load_callback
from kquota.cli.common import (
    EXIT_BAD_INPUT,
    EXIT_OK,
    ExamplesFormatter,
    escape_stdout,
    fail,
    run_command,
)
from kquota.config import QuotaConfig, QuotaStore, open_store
from kquota.exceptions import InvalidValueError, KquotaError, QuotaFileError, StoreError

SQLITE_MAGIC = b"SQLite format 3\x00"
MASTER = re.compile(
    r"local(\[(\d+|\*)(,\s*\d+)?\])?|local-cluster\[\d+,\s*\d+,\s*\d+\]|yarn|(spark|k8s)://\S+"
)
"""The Spark master URLs Spark accepts (anything else makes spark-submit die with a Java
stack trace before kquota can say anything)."""


def register(subparsers: Any) -> None:
    """Add the ``backtest`` subcommand."""
    parser = subparsers.add_parser(
        "backtest",
        help="back-test quotas over recorded traffic on Spark: who is throttled, how long",
        description=(
            "Replay a traffic table (Parquet or CSV, one row per request) through kquota's "
            "core under a quota configuration, on Spark, and write each request with every "
            "scenario's throttles (DIR/requests/), per-entity summaries (DIR/entities/), bad rows "
            "(DIR/quarantine/) and DIR/report.html. Exit status 2 on bad input."
        ),
        epilog=(
            "examples:\n"
            "  kquota backtest --traffic logs/ --quotas quotas.json --out out\n"
            "  kquota backtest --traffic traffic.parquet --store quotas.sqlite --out out \\\n"
            "      --mode closed --scale 0.5,1,2 --recommend --target 0.01\n"
            "  kquota backtest --traffic 'logs/*/kafka-request.log*' --quotas quotas.json \\\n"
            "      --broker-id-from 'kafka-(\\d+)/' --log-timezone Europe/Paris --out out"
        ),
        formatter_class=ExamplesFormatter,
    )
    parser.add_argument("--traffic", required=True, metavar="PATH", help="Parquet or CSV traffic")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--quotas",
        metavar="FILE",
        help="the quotas to replay, from a quota file (the format of kquota configs --import "
        "and --export, and of gen-traffic --quotas-out); deprecated for a store, which it "
        "still reads: name a store with --store",
    )
    source.add_argument(
        "--store",
        metavar="STORE",
        help="the quotas to replay, from a store, as kquota configs and kquota proxy name it: "
        "a SQLite file, sqlite://PATH, kafka://HOST:PORT/TOPIC or SCHEME://... of an installed "
        "backend (read as it is, never created or changed)",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="output folder")
    parser.add_argument(
        "--quota-callback",
        metavar="MODULE:FACTORY",
        help=(
            "a custom quota callback (KIP-257): FACTORY() in the importable MODULE returns a"
            " kquota.QuotaCallback that resolves clients and gives their quota limits instead"
            " of Kafka's precedence; every scenario's managers get their own instance"
        ),
    )
    parser.add_argument(
        "--kafka-version",
        metavar="VERSION",
        help="replay by the quota rules of this Kafka release, 3.8 or later, e.g. 4.4 "
        "(default: the quota file's kafka_version, else 4.1)",
    )
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
    parser.add_argument(
        "--headroom",
        type=float,
        default=0.2,
        metavar="FRACTION",
        help="--recommend: the recommended quota file's quotas are the demand that meets "
        "--target plus this much (default 0.2: 20%%)",
    )
    parser.add_argument(
        "--lower",
        action="store_true",
        help="--recommend: the recommended quota file may lower quotas (default: only raise)",
    )
    parser.add_argument(
        "--add-quotas",
        action="store_true",
        help="--recommend: entities without a quota get one in the recommended quota file",
    )
    parser.add_argument("--master", metavar="URL", help="Spark master (default local[*])")
    parser.add_argument(
        "--strict", action="store_true", help="refuse traffic with any bad row (exit 2)"
    )
    parser.add_argument(
        "--traffic-format",
        "--format",
        dest="format",
        choices=("auto", "parquet", "csv", "kafka-request-log"),
        default="auto",
        help="input format (auto: kafka-request.log* files, folders of them and globs are "
        "Kafka's request log; else by name)",
    )
    add_log_options(parser)
    add_client_options(parser)
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
        help=(
            "--recommend: Spark tasks searching the entities, per quota type "
            "(default 2 x Spark parallelism)"
        ),
    )
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument(
        "--verbose", action="store_true", help="Spark's own start-up and log output on stderr"
    )
    parser.set_defaults(run=run, extra="spark")


def main(argv: Sequence[str] | None = None) -> int:
    """``kquota backtest`` alone, with ``argv`` (default: ``sys.argv[1:]``); return the
    status. The parser is ``kquota``'s with only this subcommand, so that the arguments,
    the help and the messages are those of ``kquota backtest`` without loading the other
    commands (``python -m kquota.backtest``, the spark-submit entry point, runs this)."""
    escape_stdout()
    parser = argparse.ArgumentParser(prog="kquota")
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    try:
        args = parser.parse_args(["backtest", *(sys.argv[1:] if argv is None else argv)])
    except SystemExit as exc:  # --help, or a usage error argparse has already reported
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    return run_command(args)


def add_log_options(parser: argparse.ArgumentParser) -> None:
    """``--broker-id-from``/``--broker-id``, ``--log-timezone`` and ``--num-partitions``
    (Kafka's request log)."""
    broker = parser.add_mutually_exclusive_group()
    broker.add_argument(
        "--broker-id-from",
        metavar="REGEX",
        default=r"([^/]+)/[^/]+$",
        help="request log: the broker id is the first group of REGEX in each file's path "
        "(default: the folder holding the file, one folder per broker)",
    )
    broker.add_argument(
        "--broker-id", type=int, metavar="N", help="request log: every file is broker N's"
    )
    parser.add_argument(
        "--log-timezone",
        metavar="ZONE",
        default="UTC",
        help="request log: the brokers' time zone (the log does not print it; default UTC)",
    )
    parser.add_argument(
        "--num-partitions",
        type=int,
        metavar="N",
        default=1,
        help="request log: the brokers' num.partitions, the partitions of a topic a "
        "CreateTopics line creates with numPartitions -1 and no assignments (default 1)",
    )


def add_client_options(parser: argparse.ArgumentParser) -> None:
    """Closed loop: what bounds each client (Kafka's Java client defaults)."""
    clients = parser.add_argument_group(
        "clients (closed loop)",
        "Each client holds what it cannot send yet, within Kafka's client limits; what does "
        "not fit or waits too long is not served (the report says how much, and whose).",
    )
    clients.add_argument(
        "--buffer-memory",
        type=int,
        metavar="BYTES",
        default=33_554_432,
        help="produce bytes a client holds unsent, at most (default 33554432, buffer.memory)",
    )
    clients.add_argument(
        "--delivery-timeout-ms",
        type=int,
        metavar="MS",
        default=120_000,
        help="how long a produce may wait to be sent (default 120000, delivery.timeout.ms)",
    )
    clients.add_argument(
        "--api-timeout-ms",
        type=int,
        metavar="MS",
        default=60_000,
        help="how long any other request but a fetch may wait to be sent "
        "(default 60000, default.api.timeout.ms; a consumer that falls behind reads later)",
    )
    clients.add_argument(
        "--unbounded-clients",
        action="store_true",
        help="clients hold everything and wait for ever: a throttled client's later requests "
        "all shift by what it waited",
    )


def client_limits(args: argparse.Namespace) -> Any:
    """The :class:`~kquota.backtest.frames.ClientLimits` of the parsed arguments (``None``
    with ``--unbounded-clients``); a limit that is not > 0 is refused, naming it."""
    from kquota.backtest.frames import ClientLimits

    if args.unbounded_clients:
        return None
    try:
        return ClientLimits(args.buffer_memory, args.delivery_timeout_ms, args.api_timeout_ms)
    except ValueError as exc:
        option = {
            "buffer_bytes": "--buffer-memory",
            "delivery_timeout_ms": "--delivery-timeout-ms",
            "api_timeout_ms": "--api-timeout-ms",
        }
        text = str(exc)
        for name, flag in option.items():
            text = text.replace(f"client limit {name}", flag)
        raise InvalidValueError(text) from None


def log_options(args: argparse.Namespace) -> Any:
    """The :class:`~kquota.backtest.requestlog.LogOptions` of the parsed arguments."""
    from kquota.backtest.requestlog import LogOptions

    return LogOptions(
        broker_id_from=args.broker_id_from,
        broker_id=args.broker_id,
        timezone=args.log_timezone,
        num_partitions=args.num_partitions,
    )


def load_quotas(spec: str) -> QuotaConfig:
    """A quota file, or the configuration of a store (SQLite file or ``SCHEME://``): what
    ``--quotas`` reads (a store there is the deprecated form of ``--store``).

    Reading never creates a store: a store or file that is not there is an error naming
    it, as is a store never written (it holds no quotas to back-test).
    """
    if is_store(spec):
        return load_store(spec)
    return QuotaConfig.load(Path(spec))


def load_store(spec: str) -> QuotaConfig:
    """The configuration of the store ``spec`` names (``--store``), as
    :func:`~kquota.config.open_store` opens it; never created, and refused when never
    written or when it is a quota file (which ``--quotas`` reads)."""
    if "://" not in spec:
        try:
            with Path(spec).open("rb") as handle:
                magic = handle.read(len(SQLITE_MAGIC))
        except OSError:
            magic = SQLITE_MAGIC  # not there, or not readable: the store says which
        if magic not in (SQLITE_MAGIC, b""):
            raise StoreError(
                f"--store {spec!r} is not a kquota store (a SQLite file): for a quota file, "
                "use --quotas FILE"
            )
    return _store_config(open_store(spec))


def is_store(spec: str) -> bool:
    """Whether ``spec`` names a store (``SCHEME://...`` or a SQLite file) rather than a
    quota file; a path that cannot be read is an error naming it."""
    return "://" in spec or _magic(spec) == SQLITE_MAGIC


def _magic(spec: str) -> bytes:
    """The first bytes of the file ``spec``, as many as SQLite's header string."""
    try:
        with Path(spec).open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise QuotaFileError(
            f"cannot read quota file or store {spec!r}: {exc.strerror} (expected a quota "
            "file, a kquota SQLite store, sqlite://PATH or SCHEME://...)"
        ) from None


def _store_config(store: QuotaStore) -> QuotaConfig:
    snapshot = store.read()  # a store that does not exist raises, naming it
    if snapshot.version == 0:
        raise StoreError(f"{store.describe()} holds no quotas yet: nothing to back-test")
    return snapshot.config


def _scales(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise InvalidValueError(
            f"invalid --scale {text!r}: expected comma-separated numbers, e.g. 0.5,1,2"
        ) from None


def _with_release(config: QuotaConfig, version: str | None) -> QuotaConfig:
    """``config`` following Kafka release ``version`` when given (refused here, naming it,
    before Spark starts)."""
    if version is None:
        return config
    return dataclasses.replace(config, kafka_version=version)


def _with_callback(config: QuotaConfig, spec: str | None) -> QuotaConfig:
    """``config`` resolving through the callback ``spec`` names (checked here: a bad spec
    exits with status 2 before Spark starts)."""
    if spec is None:
        return config
    load_callback(spec).close()
    return dataclasses.replace(config, quota_callback=spec)


def _source(args: argparse.Namespace) -> QuotaConfig:
    """The quotas ``--store`` or ``--quotas`` names (a store given to ``--quotas`` is read
    as ``--store`` reads it)."""
    if args.store is not None:
        return load_store(args.store)
    return load_quotas(args.quotas)


def _deprecated_store_note(args: argparse.Namespace) -> None:
    """After a run that read a store through ``--quotas``, one line on stderr naming
    ``--store``. Only on success: a refused run keeps its one line."""
    if args.quotas is not None and is_store(args.quotas):
        print(
            f"kquota backtest: note: --quotas {args.quotas!r} is a store; --quotas for a store "
            "is deprecated, name it with --store",
            file=sys.stderr,
        )


def run(args: argparse.Namespace) -> int:
    """Run the job; print the summary table and where the report is."""
    from kquota.backtest import inputs, job, report, session
    from kquota.backtest.options import BacktestOptions

    try:
        options = BacktestOptions(
            traffic=args.traffic,
            quotas=_with_release(
                _with_callback(_source(args), args.quota_callback), args.kafka_version
            ),
            out=args.out,
            mode=args.mode,
            scales=_scales(args.scale),
            recommend=args.recommend,
            target=args.target,
            headroom=args.headroom,
            lower=args.lower,
            add_quotas=args.add_quotas,
            strict=args.strict,
            input_format=args.format,
            buckets=args.buckets,
            partition=args.partition,
            log=log_options(args),
            clients=client_limits(args),
        )
        if args.master is not None and not MASTER.fullmatch(args.master):
            raise InvalidValueError(
                f"invalid --master {args.master!r}: expected local, local[N], local[*], "
                "spark://HOST:PORT, yarn or k8s://URL"
            )
        # Every local path is checked before Spark starts (and before a long job).
        inputs.check_traffic(options.traffic, options.input_format)
        inputs.prepare_output(options.out)
    except KquotaError as exc:
        return fail("backtest", exc)
    try:
        spark, created = session.spark_session(args.master, verbose=args.verbose)
    except session.spark_errors() as exc:
        master = f" on --master {args.master!r}" if args.master else ""
        return fail("backtest", f"cannot start Spark{master}: {session.spark_message(exc)}")
    try:
        with session.Progress(spark, None if args.quiet else sys.stderr) as progress:
            result = job.run(spark, options, progress)
    except KquotaError as exc:
        return fail("backtest", exc)
    except session.spark_errors() as exc:  # what no read or write point translated
        return fail("backtest", f"Spark failed: {session.spark_message(exc)}")
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
    if result.recommended is not None:
        print(f"{'quota file':>15}: {result.recommended.path} (kquota configs --import)")
    if result.report is not None:
        print(f"{'report':>15}: {result.report}")
    _deprecated_store_note(args)
    return EXIT_OK
