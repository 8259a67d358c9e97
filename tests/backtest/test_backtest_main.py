"""``python -m kquota.backtest`` (the spark-submit entry point) is ``kquota backtest``: the
same parser, the same messages. A full run of it, and of its file under spark-submit, is in
test_backtest_cluster.py."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import kquota.backtest
from kquota.cli import build_parser

MAIN = Path(kquota.backtest.__file__).with_name("__main__.py")


def backtest_options() -> set[str]:
    """Every option string of the ``kquota backtest`` subparser."""
    parser = build_parser()
    subparsers = next(
        a for a in parser._actions if isinstance(a, argparse._SubParsersAction)
    ).choices
    return {s for action in subparsers["backtest"]._actions for s in action.option_strings}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, check=False
    )


def test_it_takes_the_arguments_of_kquota_backtest() -> None:
    done = run("-m", "kquota.backtest", "--help")
    assert done.returncode == 0, done.stderr
    options = backtest_options()
    named = {"--traffic", "--quotas", "--store", "--out", "--master", "--scale", "--recommend"}
    assert named <= options
    assert [option for option in sorted(options) if option not in done.stdout] == []


def test_bad_input_is_one_line_and_status_2(tmp_path: Path) -> None:
    quotas = tmp_path / "none.json"
    args = ["--traffic", str(tmp_path), "--quotas", str(quotas), "--out", str(tmp_path / "o")]
    for how in (["-m", "kquota.backtest"], [str(MAIN)]):  # as a module, and as spark-submit runs it
        done = run(*how, *args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            f"kquota backtest: cannot read quota file or store {str(quotas)!r}: No such file or "
            "directory (expected a quota file, a kquota SQLite store, sqlite://PATH or "
            "SCHEME://...)"
        ]
        assert done.stdout == ""
