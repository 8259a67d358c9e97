"""Tansu, the Kafka-compatible broker the proxy tests and benchmarks run behind the proxy,
and the helpers that run it (or any server) as a process until a block ends."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TANSU_VERSION = "0.6.0"


def tansu_binary() -> Path:
    """Where ``make tools`` builds Tansu: ``${XDG_CACHE_HOME:-~/.cache}/kquota/tansu-VERSION``."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "kquota" / f"tansu-{TANSU_VERSION}" / "bin" / "tansu"


def tansu_argv(port: int, advertised: int) -> list[str]:
    """An in-memory Tansu on ``127.0.0.1:port`` that advertises ``127.0.0.1:advertised``."""
    return [
        str(tansu_binary()),
        "broker",
        "--storage-engine",
        "memory://tansu/",
        "--listener-url",
        f"tcp://127.0.0.1:{port}",
        "--advertised-listener-url",
        f"tcp://127.0.0.1:{advertised}",
    ]


def wait_listening(port: int, process: subprocess.Popen[bytes], what: str, log: Path) -> None:
    """Return once ``process`` listens on ``port``; raise if it exits or takes over 30 s."""
    deadline = time.monotonic() + 30
    while True:
        if process.poll() is not None:
            tail = log.read_text()[-2000:]
            raise RuntimeError(f"{what} exited with {process.returncode}: {tail}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not listen on {port} within 30 s") from None
            time.sleep(0.02)


@contextmanager
def listening(
    argv: list[str], port: int, what: str, log: Path
) -> Iterator[subprocess.Popen[bytes]]:
    """``argv`` running until the block ends (then terminated), once it listens on ``port``;
    its output goes to the end of ``log``."""
    with log.open("ab") as out:
        process = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        wait_listening(port, process, what, log)
        yield process
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
