"""The ``kquota`` command line: a thin layer over the library.

Each subcommand lives in its own module of this package with a ``register(subparsers)``
function that adds its parser and sets ``run`` (a function of the parsed arguments that
returns the exit status) and, for a command that needs an extra, ``extra`` (``"spark"``,
``"proxy"``). Add a command by adding its module to :data:`COMMANDS`.

Every module here imports with plain ``pip install kquota``: a command's own dependencies
are imported when it runs, after :func:`main` has checked that its extra is installed (one
line naming the extra to install, status 2, when it is not).

Exit statuses (:mod:`kquota.cli.common`): 0 success, 1 a conformance mismatch, 2 bad input
with one line on stderr naming it. No traceback reaches a user: each command turns the
errors of its own reads and writes into that line, and :func:`main` turns any ``OSError``
that still escapes (it names its file) into it too.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from kquota.cli import backtest, configs, conformance, gen_traffic, proxy, traffic
from kquota.cli.common import EXIT_BAD_INPUT, escape_stdout, run_command

COMMANDS = (conformance, configs, backtest, gen_traffic, traffic, proxy)


def build_parser() -> argparse.ArgumentParser:
    """The ``kquota`` argument parser with one subparser per subcommand."""
    from kquota import __version__

    parser = argparse.ArgumentParser(
        prog="kquota", description="Apache Kafka's client quotas, outside Kafka."
    )
    parser.add_argument("--version", action="version", version=f"kquota {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``kquota`` command with ``argv`` (default: ``sys.argv[1:]``); return the status."""
    escape_stdout()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has already reported
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    return run_command(args)


if __name__ == "__main__":
    raise SystemExit(main())
