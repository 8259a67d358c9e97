"""The ``kquota`` command line: a thin layer over the library.

Every subcommand is one function taking the parsed arguments and returning the exit
status; add one with another ``subparsers.add_parser(...)`` in :func:`build_parser`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from kquota.conformance import expand_paths, load_scenario, replay
from kquota.exceptions import ScenarioError

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    """The ``kquota`` argument parser with one subparser per subcommand."""
    parser = argparse.ArgumentParser(
        prog="kquota", description="Apache Kafka's client quotas, outside Kafka."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    conformance = subparsers.add_parser(
        "conformance",
        help="replay conformance scenarios and compare with Kafka's expected values",
        description=(
            "Replay each scenario file (or every *.json file of a folder) through kquota and "
            "compare every expected value. Exit status: 0 when all match, 1 on a mismatch, "
            "2 on a missing or malformed file."
        ),
    )
    conformance.add_argument("paths", nargs="+", metavar="PATH", help="scenario file or folder")
    conformance.set_defaults(run=run_conformance)
    return parser


def run_conformance(args: argparse.Namespace) -> int:
    """``kquota conformance PATH...``: one line per scenario, then a summary."""
    try:
        scenarios = [load_scenario(path) for path in expand_paths(args.paths)]
    except ScenarioError as exc:
        print(f"kquota conformance: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    matched = 0
    for scenario in scenarios:
        result = replay(scenario)
        if result.mismatch is None:
            matched += 1
            print(f"ok   {result.name}  ({result.steps} steps)")
        else:
            print(f"FAIL {result.name}  {result.mismatch}")
    print(f"{matched}/{len(scenarios)} scenarios match")
    return EXIT_OK if matched == len(scenarios) else EXIT_MISMATCH


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``kquota`` command with ``argv`` (default: ``sys.argv[1:]``); return the status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error argparse has already reported
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    status: int = args.run(args)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
