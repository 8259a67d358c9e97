"""What a new user of the command line meets first: ``kquota --version``, an example in
every command's ``--help``, and Spark's own start-up output kept off stderr unless asked
for (``--verbose``)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import kquota
import pytest
from kquota.cli import COMMANDS, build_parser, main


def test_version_prints_the_packages_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"kquota {kquota.__version__}"


def _commands() -> list[str]:
    parser = build_parser()
    actions = [a for a in parser._actions if a.dest == "command"]
    return sorted(actions[0].choices)  # type: ignore[arg-type]


@pytest.mark.parametrize("command", _commands())
def test_every_commands_help_ends_with_an_example_that_parses(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--help"]) == 0
    text = capsys.readouterr().out
    examples = text[text.rindex("\nexample") :]
    assert f"\n  kquota {command} " in examples, text
    # each example line parses as the command's arguments (backslash-joined lines as one)
    joined = re.sub(r"\\\n\s+", "", examples)
    lines = [line.strip() for line in joined.splitlines() if line.strip().startswith("kquota ")]
    assert lines
    for line in lines:
        argv = shlex.split(line)[1:]
        build_parser().parse_args(argv)  # a usage error exits


def test_the_command_list_is_every_module() -> None:
    assert len(_commands()) == len(COMMANDS) == 6


@pytest.mark.slow
def test_spark_keeps_its_start_up_output_to_itself_unless_verbose(tmp_path: Path) -> None:
    """A back-test in a fresh process (a JVM of its own): the progress lines on stderr and
    none of the JVM's notices; with ``--verbose``, the JVM's too."""
    traffic = tmp_path / "t.csv"
    traffic.write_text("ts_ms,user,client_id,api,bytes\n1700000000000,alice,a,produce,3000\n")
    quotas = tmp_path / "q.json"
    quotas.write_text(
        '{"quotas": [{"entity": {"client-id": "a"}, "config": {"producer_byte_rate": 1}}]}'
    )

    def run(*extra: str) -> str:
        argv = ["--traffic", str(traffic), "--quotas", str(quotas), *extra]
        done = subprocess.run(
            [sys.executable, "-m", "kquota", "backtest", *argv],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stderr

    quiet = run("--out", str(tmp_path / "quiet"))
    assert "reading" in quiet and "writing the report" in quiet
    assert "log level" not in quiet and "WARNING" not in quiet, quiet
    verbose = run("--out", str(tmp_path / "verbose"), "--verbose")
    assert "log level" in verbose or "WARNING" in verbose, verbose
