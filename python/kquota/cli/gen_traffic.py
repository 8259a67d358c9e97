"""``kquota gen-traffic``: write realistic multi-tenant Kafka traffic as Parquet or CSV."""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any

from kquota.cli.common import EXIT_OK, ExamplesFormatter, fail
from kquota.config.model import check_name
from kquota.exceptions import KquotaError, TrafficError


def register(subparsers: Any) -> None:
    """Add the ``gen-traffic`` subcommand."""
    parser = subparsers.add_parser(
        "gen-traffic",
        help="write realistic multi-tenant Kafka traffic (Parquet or CSV) for kquota backtest",
        description=(
            "Generate seeded multi-tenant traffic: heavy-tailed client sizes, a daily pattern, "
            "producer bursts of a few times their quota and a consumer that resets its offsets "
            "and catches up (KIP-13's example). Writes one file with the columns kquota "
            "backtest reads, in the format its name says (Parquet or CSV), and optionally a "
            "quota file for it: a <default> user quota and the heaviest tenants' own, some just "
            "over their daily peak and some just under, so that scaling it (kquota backtest "
            "--scale 0.5,1,2) throttles clearly more or less. Exit status 2 on bad options or "
            "a path that cannot be written."
        ),
        epilog=(
            "example:\n"
            "  kquota gen-traffic --out traffic.parquet --requests 1000000 --quotas-out quotas.json"
        ),
        formatter_class=ExamplesFormatter,
    )
    parser.add_argument(
        "--out",
        required=True,
        metavar="PATH",
        help="file to write: NAME.parquet or NAME.pq (Parquet), NAME.csv or NAME.csv.gz (CSV), "
        "or NAME without a suffix (a folder: NAME/part-00000.parquet)",
    )
    parser.add_argument("--requests", type=int, default=1_000_000, help="rows (default 1000000)")
    parser.add_argument("--brokers", type=int, default=6, help="brokers (default 6)")
    parser.add_argument("--users", type=int, default=40, help="tenants (default 40)")
    parser.add_argument("--clients", type=int, default=400, help="client ids (default 400)")
    parser.add_argument("--hours", type=float, default=24.0, help="time span (default 24)")
    parser.add_argument("--bursts", type=int, default=12, help="producer bursts (default 12)")
    parser.add_argument(
        "--no-bootstrap", action="store_true", help="leave out the bootstrapping consumer"
    )
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--quotas-out",
        metavar="FILE",
        help="also write a quota file (kquota configs format) for this traffic, planned from "
        "its steady part: some tenants run just over their quota at their daily peak, some "
        "just under; bursts and the catch-up are a few times theirs",
    )
    parser.set_defaults(run=run, extra="spark")


def run(args: argparse.Namespace) -> int:
    """Generate, write, and say what was written.

    Both files are written under temporary names and renamed at the end, so a run that
    fails (a bad option, a path that cannot be written) leaves neither behind.
    """
    from kquota.backtest import synthetic

    started = time.monotonic()
    try:
        check_name(args.out, "--out")  # pyarrow writes only UTF-8 paths
        synthetic.output_format(args.out)
        spec = synthetic.TrafficSpec(
            requests=args.requests,
            brokers=args.brokers,
            users=args.users,
            clients=args.clients,
            hours=args.hours,
            bursts=args.bursts,
            bootstrap=not args.no_bootstrap,
            seed=args.seed,
        )
        path = synthetic.data_file(args.out)
        quotas = Path(args.quotas_out) if args.quotas_out is not None else None
        if quotas is not None and quotas.absolute() == path.absolute():
            raise TrafficError(f"--quotas-out {args.quotas_out!r} is the --out file: give another")
        with contextlib.ExitStack() as files:  # both folders checked before generating
            data = files.enter_context(synthetic.staged(path, "--out"))
            quotas_data = (
                files.enter_context(synthetic.staged(quotas, "--quotas-out"))
                if quotas is not None
                else None
            )
            table = synthetic.generate(spec)
            synthetic.write_to(table, data, path)
            if quotas_data is not None:
                planned = synthetic.planned_quotas(table)
                quotas_data.write_text(planned.dumps(), encoding="utf-8")
    except KquotaError as exc:
        return fail("gen-traffic", exc)
    print(f"wrote {table.num_rows:,} requests to {path} in {time.monotonic() - started:.1f} s")
    if quotas is not None:
        print(f"wrote a quota file for them to {quotas}")
    return EXIT_OK
