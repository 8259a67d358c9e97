"""``kquota conformance PATH...``: replay scenarios against Kafka's expected values."""

from __future__ import annotations

import argparse
from typing import Any

from kquota.cli.common import EXIT_MISMATCH, EXIT_OK, ExamplesFormatter, fail
from kquota.conformance import expand_paths, load, replay
from kquota.exceptions import ScenarioError


def register(subparsers: Any) -> None:
    """Add the ``conformance`` subcommand."""
    parser = subparsers.add_parser(
        "conformance",
        help="replay conformance scenarios and compare with Kafka's expected values",
        description=(
            "Replay each scenario file (or every *.json file of a folder) through kquota and "
            "compare every expected value. Exit status: 0 when all match, 1 on a mismatch, "
            "2 on a missing or malformed file."
        ),
        epilog="example:\n  kquota conformance ../shared/conformance tests/vectors",
        formatter_class=ExamplesFormatter,
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="scenario file or folder")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """One line per scenario, then ``N/M scenarios match``."""
    try:
        scenarios = [load(path) for path in expand_paths(args.paths)]
    except ScenarioError as exc:
        return fail("conformance", exc)
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
