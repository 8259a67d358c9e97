"""atheris target ``cli_args``: the ``kquota`` command line, run in-process on argv lists.

The input is an argv list: arguments separated by NUL bytes, each decoded as Linux
decodes a command line (UTF-8, undecodable bytes as lone surrogates), except that an
argument ``\\x01`` + byte ``i`` stands for word ``i - 1`` of :data:`VOCABULARY` (every
subcommand, option, property and a few files), so the fuzzer reaches deep into the
parsers fast.

Every run starts in the same scratch folder (reset after a run that changed it) holding a
SQLite store (``KQUOTA_STORE``) with a few quotas, a valid quota file, broken ones and a
scenario file. No argument can leave that folder: a ``/`` becomes ``_`` (except in a
leading ``scheme://``). ``backtest`` runs up to the moment it would start Spark, and
``gen-traffic`` generates only small tables.

Invariants:

* ``main`` returns 0 or 2 (1 only for ``conformance``); no other exception escapes;
* on status 2, stderr is one line ``kquota COMMAND: ...`` (or argparse's usage and its
  ``error:`` message), and the folder and the store are byte for byte as they were;
* commands that only read (``--describe``, ``--export``, ``conformance``, ``--help``)
  leave the store as it was; after a successful ``configs`` the store still reads;
* ``configs --describe --json`` prints a valid quota file.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from fuzz_common import scratch
from kquota import DEFAULT, Entity
from kquota.cli import main
from kquota.config.model import QuotaConfig, QuotaEntry, Window
from kquota.config.store import SQLiteStore

VOCABULARY: tuple[str, ...] = (
    # subcommands and shared options
    "configs",
    "conformance",
    "gen-traffic",
    "backtest",
    "--help",
    "-h",
    # configs
    "--store",
    "--lock-timeout",
    "--alter",
    "--describe",
    "--import",
    "--export",
    "--add-config",
    "--delete-config",
    "--entity-type",
    "--entity-name",
    "--entity-default",
    "--user",
    "--user-defaults",
    "--client",
    "--client-defaults",
    "--json",
    "users",
    "clients",
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "producer_byte_rate=1048576",
    "consumer_byte_rate=2.5e6,request_percentage=50",
    "request_percentage=0",
    "producer_byte_rate=nan",
    "producer_byte_rate,consumer_byte_rate",
    "alice",
    "bob",
    "app-1",
    DEFAULT,
    "",
    " ",
    "User:CN=a b",
    "\udcff",
    # values
    "0",
    "1",
    "-1",
    "0.5",
    "1e999",
    "nan",
    "inf",
    "99999999999999999999",
    # files in the sandbox
    "quotas.json",
    "broken.json",
    "huge.json",
    "scenario.json",
    "traffic.csv",
    "store.sqlite",
    "sqlite://store.sqlite",
    "other.sqlite",
    "missing.json",
    "out.json",
    "nope://x",
    ".",
    "..",
    # gen-traffic
    "--out",
    "--requests",
    "--brokers",
    "--users",
    "--clients",
    "--hours",
    "--bursts",
    "--no-bootstrap",
    "--seed",
    "--quotas-out",
    "traffic.parquet",
    # backtest
    "--traffic",
    "--quotas",
    "--mode",
    "open",
    "closed",
    "--scale",
    "0.5,1,2",
    "--recommend",
    "--target",
    "--master",
    "--strict",
    "--format",
    "auto",
    "parquet",
    "csv",
    "--partition",
    "broker",
    "sensor",
    "--buckets",
    "--quiet",
)
"""Words the input can name with two bytes (``\\x01`` and an index)."""

# Sizes up to which ``gen-traffic`` really generates and writes its table.
_SMALL_TRAFFIC = {"requests": 2000, "brokers": 100, "users": 2000, "clients": 2000, "bursts": 100}

_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)(.*)", re.DOTALL)


class WouldStartSpark(Exception):
    """``backtest`` validated its options and would now start Spark."""


class WouldGenerate(Exception):
    """``gen-traffic`` validated its options and would now generate a large table."""


def decode_argv(data: bytes) -> list[str]:
    """The argv list an input stands for (see the module documentation)."""
    if not data:
        return []
    argv = []
    for raw in data.split(b"\0"):
        if len(raw) == 2 and raw[0] == 1:
            argv.append(VOCABULARY[(raw[1] - 1) % len(VOCABULARY)])
        else:
            argv.append(confine(raw.decode("utf-8", "surrogateescape")))
    return argv


def confine(arg: str) -> str:
    """``arg`` with every ``/`` (other than a leading ``scheme://``) made a ``_``."""
    match = _SCHEME.fullmatch(arg)
    if match:
        return match.group(1) + match.group(2).replace("/", "_")
    return arg.replace("/", "_")


@dataclass(frozen=True)
class Sandbox:
    """The folder a run happens in, with the store and the files it may name."""

    root: Path
    store: Path
    template: bytes
    files: dict[str, bytes]

    def reset(self) -> None:
        """Make the folder hold exactly the files of a fresh sandbox."""
        for entry in self.root.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        self.store.write_bytes(self.template)
        for name, content in self.files.items():
            (self.root / name).write_bytes(content)

    def contents(self) -> dict[str, bytes | None]:
        """Every entry of the folder with its bytes (``None`` for a folder)."""
        return {
            entry.name: None if entry.is_dir() else entry.read_bytes()
            for entry in sorted(self.root.iterdir())
        }


_sandbox: Sandbox | None = None

_SCENARIO = {
    "format": 1,
    "name": "fuzz sandbox scenario",
    "quota_type": "produce",
    "config": {"num_samples": 11, "window_ms": 1000},
    "quotas": [{"user": "alice", "client_id": None, "value": 1024}],
    "steps": [
        {"t_ms": 0, "op": "record", "user": "alice", "client_id": "app", "value": 600},
        {
            "t_ms": 0,
            "op": "measure",
            "user": "alice",
            "client_id": "app",
            "expect": {"rate": 60.0},
        },
    ],
}


def sandbox() -> Sandbox:
    """The sandbox of this process, built on first use."""
    global _sandbox
    if _sandbox is None:
        base = scratch() / "cli"
        root = base / "a" / "cwd"  # so that ".." stays inside the scratch folder
        root.mkdir(parents=True)
        store = root / "store.sqlite"
        config = QuotaConfig(
            Window(11, 1000),
            (
                QuotaEntry(Entity(user="alice"), {"producer_byte_rate": 1048576.0}),
                QuotaEntry(Entity(user=DEFAULT), {"consumer_byte_rate": 2097152.0}),
                QuotaEntry(Entity(user="bob", client_id="app-1"), {"request_percentage": 50.0}),
            ),
        )
        SQLiteStore(store).replace(config)
        files = {
            "quotas.json": config.dumps().encode(),
            "broken.json": b'{"window": {"num_samples": 0}, "quotas": [}',
            # the largest whole rates Kafka's LONG holds, near 2^63
            "huge.json": b'{"quotas": [{"entity": {"user": "a"}, "config": '
            b'{"producer_byte_rate": 9e18}}]}',
            "scenario.json": json.dumps(_SCENARIO).encode(),
            "traffic.csv": b"ts_ms,broker,user,client_id,api,bytes,thread_time_ns\n"
            b"0,0,alice,app,produce,100,1000\n",
            "other.sqlite": b"SQLite format 3\x00" + bytes(84),
        }
        _sandbox = Sandbox(root, store, store.read_bytes(), files)
        _sandbox.reset()
    return _sandbox


@contextlib.contextmanager
def _environment(box: Sandbox) -> Iterator[None]:
    """Inside the sandbox: its folder, its store, no Spark, small traffic only."""
    env = {"KQUOTA_STORE": str(box.store), "XDG_STATE_HOME": str(box.root.parent)}
    old_env = {name: os.environ.get(name) for name in env}
    old_cwd = os.getcwd()
    os.environ.update(env)
    os.chdir(box.root)
    try:
        with contextlib.ExitStack() as patches:
            _no_spark_no_large_traffic(patches)
            yield
    finally:
        os.chdir(old_cwd)
        for name, value in old_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _no_spark_no_large_traffic(patches: contextlib.ExitStack) -> None:
    try:
        from kquota.backtest import session, synthetic
    except ImportError:  # without the spark extra both commands stop with status 2
        return
    real_generate = synthetic.generate

    def spark_session(*args: Any, **kwargs: Any) -> Any:
        raise WouldStartSpark

    def generate(spec: synthetic.TrafficSpec) -> Any:
        if any(getattr(spec, name) > limit for name, limit in _SMALL_TRAFFIC.items()):
            raise WouldGenerate
        return real_generate(spec)

    patches.enter_context(mock.patch.object(session, "spark_session", spark_session))
    patches.enter_context(mock.patch.object(synthetic, "generate", generate))


def _text_stream(errors: str) -> io.TextIOWrapper:
    """A stream that encodes as Python's ``sys.stdout`` (``strict``: a lone surrogate
    fails) or ``sys.stderr`` (``backslashreplace``) do on a UTF-8 system."""
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors=errors, newline="\n")


def _written(stream: io.TextIOWrapper) -> str:
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("utf-8")


def run(argv: list[str]) -> tuple[int | None, str, str]:
    """``kquota ARGV`` in the sandbox: (status or ``None`` if it stopped before Spark or a
    large generation, stdout, stderr)."""
    box = sandbox()
    out, err = _text_stream("strict"), _text_stream("backslashreplace")
    status: int | None
    with _environment(box), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except (WouldStartSpark, WouldGenerate):
            status = None
    return status, _written(out), _written(err)


def check_run(argv: list[str]) -> int | None:
    """Run ``argv`` and check every invariant; return the status."""
    box = sandbox()
    before = box.contents()
    status, out, err = run(argv)
    after = box.contents()
    command = next((a for a in argv if not a.startswith("-")), None)
    helped = status == 0 and out.startswith("usage: ")  # -h, --help, -hx, --he...
    allowed = {0, 2, 1} if command == "conformance" else {0, 2}
    assert status is None or status in allowed, f"status {status} for {argv!r}\n{err}"
    if status == 2:
        lines = err.rstrip("\n").split("\n")
        assert lines, f"status 2 without a message for {argv!r}"
        if lines[0].startswith("usage: "):  # argparse's (which quotes arguments raw)
            assert "\nkquota" in err and ": error: " in err, err
        else:
            assert len(lines) == 1, f"not one line for {argv!r}:\n{err}"
            assert lines[0].startswith("kquota "), err
        assert after == before, f"status 2 changed the sandbox for {argv!r}"
    else:
        assert "Traceback" not in err, err
    read_only = helped or command == "conformance" or bool({"--describe", "--export"} & {*argv})
    if status is None or read_only:
        assert after.get("store.sqlite") == before["store.sqlite"], f"store changed: {argv!r}"
    if status == 0 and command == "configs":
        SQLiteStore(box.store).read()
    if status == 0 and not helped and {"--describe", "--json"} <= {*argv}:
        QuotaConfig.from_json(json.loads(out))
    if after != before:
        box.reset()
    return status


def test_one_input(data: bytes) -> None:
    check_run(decode_argv(data))


if __name__ == "__main__":  # one argv by hand: python fuzz/python/fuzz_cli_args.py ARG...
    print(check_run(sys.argv[1:]))
