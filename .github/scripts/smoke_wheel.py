"""Install a built kquota wheel into a fresh virtual environment and use it.

    python .github/scripts/smoke_wheel.py dist/kquota-*.whl

Runs with the interpreter that should get the wheel (any CPython from 3.11 on: the wheel is
abi3). Checks that the compiled core loads and computes a throttle, that the command line
starts without any extra, and that a command whose extra is missing names it. Exit status
0 when all holds; otherwise the failing step's output and status 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

LIBRARY = """
import kquota
manager = kquota.QuotaManager("produce")
manager.set_quota(kquota.Entity(user="alice"), 1000)
assert manager.record("alice", "app", 6000, now_ms=0) == 0
assert manager.record("alice", "app", 6000, now_ms=10) > 0
print("kquota", kquota.__version__, "from", kquota.__file__)
"""


def run(*argv: str | Path, expect: int = 0) -> str:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True)
    if result.returncode != expect:
        print(f"FAILED (status {result.returncode}, expected {expect}): {argv}")
        print(result.stdout, result.stderr, sep="\n")
        raise SystemExit(1)
    return result.stdout + result.stderr


def main(wheel: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        run(sys.executable, "-m", "venv", venv)
        scripts = venv / ("Scripts" if os.name == "nt" else "bin")
        python = scripts / "python"
        run(python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel)
        print(run(python, "-c", LIBRARY).strip())
        run(scripts / "kquota", "--help")
        store = Path(tmp) / "quotas.sqlite"
        run(
            scripts / "kquota",
            "configs",
            "--store",
            store,
            "--alter",
            "--user",
            "alice",
            "--add-config",
            "producer_byte_rate=1024",
        )
        described = run(scripts / "kquota", "configs", "--store", store, "--describe")
        assert "producer_byte_rate=1024.0" in described, described
        refused = run(
            scripts / "kquota",
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "127.0.0.1:9",
            expect=2,
        )
        assert 'pip install "kquota[proxy]"' in refused, refused
    print(f"{Path(wheel).name}: works on Python {sys.version.split()[0]}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
