"""Run one atheris target with coverage of kquota, argparse and json.

    python fuzz/python/atheris_main.py TARGET [libFuzzer options] [corpus folders]

TARGET is ``cli_args``, ``quota_file`` or ``scenario``; the options are libFuzzer's
(``-max_total_time=30``, ``-artifact_prefix=DIR/``, ``-runs=N``, ``-dict=FILE``...). An
uncaught exception or a failed check in the target is a crash: atheris prints it, writes
the input to the artifact prefix and exits with a nonzero status.
"""

from __future__ import annotations

import importlib
import shlex
import sys
from pathlib import Path

TARGETS = {
    "cli_args": "fuzz_cli_args",
    "quota_file": "fuzz_quota_file",
    "scenario": "fuzz_scenario",
}


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(TARGETS)}}} [libFuzzer options] [corpus]")
    import atheris  # type: ignore[import-untyped]

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    with atheris.instrument_imports(include=["kquota", "argparse", "json", *TARGETS.values()]):
        module = importlib.import_module(TARGETS[sys.argv[1]])
    # libFuzzer runs argv[0] through the shell for -merge=1 and -fork: make it this command.
    command = shlex.join([sys.executable, str(Path(__file__).resolve()), sys.argv[1]])
    atheris.Setup([command, *sys.argv[2:]], module.test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
