"""The ``kquota`` command line: a thin layer over the library.

Each subcommand lives in its own module of this package with a ``register(subparsers)``
function that adds its parser and sets ``run`` (a function of the parsed arguments that
returns the exit status). Add a command by adding its module to :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Sequence

from kquota.cli import backtest, configs, conformance, gen_traffic
from kquota.cli.common import EXIT_BAD_INPUT

COMMANDS = (conformance, configs, backtest, gen_traffic)


def build_parser() -> argparse.ArgumentParser:
    """The ``kquota`` argument parser with one subparser per subcommand."""
    parser = argparse.ArgumentParser(
        prog="kquota", description="Apache Kafka's client quotas, outside Kafka."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``kquota`` command with ``argv`` (default: ``sys.argv[1:]``); return the status."""
    # File names from the command line may hold undecodable bytes (lone surrogates in
    # Python): print them escaped, as Python's stderr does, instead of failing.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(errors="backslashreplace")
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has already reported
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    status: int = args.run(args)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
