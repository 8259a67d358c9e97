"""What the ``kquota configs`` tests (``tests/config/test_cli_configs*.py``) share: the
command in a fresh interpreter, the command in this process, and a file's digest."""

from __future__ import annotations

import hashlib
import shlex
from pathlib import Path

import pytest
from kquota.cli import main

# The `kquota` command (the console script's entry point) in a fresh interpreter.
KQUOTA = "import sys; from kquota.cli import main; sys.exit(main())"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def configs(capsys: pytest.CaptureFixture[str], store: Path, *args: str) -> tuple[int, str, str]:
    """``kquota configs --store STORE ARGS...`` in this process: status, stdout, stderr.

    A single argument is split as a shell would split it."""
    argv = shlex.split(args[0]) if len(args) == 1 else list(args)
    status = main(["configs", "--store", str(store), *argv])
    out, err = capsys.readouterr()
    return status, out, err
