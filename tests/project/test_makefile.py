"""The Makefile's own contract: `make test` without ../shared stops at once with one line,
and `make help` lists the targets the README names."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import paths
import pytest

ROOT = paths.ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="needs make")


def make(*args: str) -> subprocess.CompletedProcess[str]:
    """``make ARGS`` in the checkout, as a user runs it (not as a sub-make of ``make test``,
    which this test also runs under)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,  # bounds a hang only
        check=False,
    )


def test_make_test_without_shared_stops_with_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no-shared-here"
    # `test` itself, dry of everything after the check: the check runs first and fails.
    result = make("test", f"SHARED={missing}")
    assert result.returncode == 2
    # make adds its own "make: *** [...] Error 2" (make[N]: in a sub-make); ours is the rest.
    lines = [line for line in result.stderr.splitlines() if not re.match(r"make(\[\d+\])?: ", line)]
    assert len(lines) == 1, result.stderr
    assert f"{missing}/conformance" in lines[0] and "../shared" in lines[0]
    assert result.stdout == ""  # nothing ran before it


def test_make_help_lists_the_commands_the_readme_gives() -> None:
    result = make("help")
    assert result.returncode == 0, result.stderr
    targets = {line.split()[1] for line in result.stdout.splitlines() if line.strip()}
    assert {"demo", "test", "fuzz", "tools", "bench", "bench-quick", "lint"} <= targets
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make demo" in readme and "make test" in readme


def test_make_demo_back_tests_in_closed_loop_with_the_open_loop_beside_it() -> None:
    # dry (-n), with nothing to build: the commands the demo runs, in order
    result = make("-n", "demo", "PY=python", "EXT=")
    assert result.returncode == 0, result.stderr
    runs = [line for line in result.stdout.splitlines() if " -m kquota backtest " in line]
    assert len(runs) == 2, result.stdout
    timed, beside = runs
    assert "--mode closed" in timed and "--recommend" in timed and "--scale 0.5,1,2" in timed
    assert "--mode open" in beside and "--out demo-out/backtest-open" in beside
    assert "open loop replays the recorded times" in result.stdout
    assert "(target: at most 3x)" in result.stdout and "issue" not in result.stdout.lower()
