"""Apache Kafka's own quota classes as a live oracle: compile, start, ask, stop.

``apache-kafka/oracle/QuotaOracle.java`` is compiled with ``javac`` against the jars ``make
tools`` copies into ``${XDG_CACHE_HOME:-~/.cache}/kquota/kafka-<version>/libs`` (a
version pinned in ``apache-kafka/pom.xml``), together with the access to Kafka's quota
managers for that version's generation (``apache-kafka/oracle/kafka-X.Y/``, the newest
folder not newer than the version: :func:`oracle_generation`), and runs as one JVM: it
reads batches of traces as JSON lines on stdin and answers each with one JSON line, an
answer per operation (see the Java file for the protocol). :class:`KafkaOracle` is that
JVM; :func:`start_oracle` compiles and starts it. Doubles cross as their IEEE bits
(:func:`to_bits`, :func:`from_bits`), so nothing is lost to decimal text.

No fixture lives here: a test module defines its own, so that nothing depends on
``conftest.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import paths
from kafka_support import KAFKA_VERSION, VERSIONS, KafkaNotInstalled, kafka_libs

ROOT: Final = paths.ROOT
ORACLE_DIR: Final = ROOT / "apache-kafka" / "oracle"
ORACLE_SOURCE: Final = ORACLE_DIR / "QuotaOracle.java"
JOIN_S: Final = 30.0  # bounds a wait for the JVM to exit; never a measurement


class OracleError(RuntimeError):
    """The oracle could not be built or started, or stopped answering."""


def release(version: str) -> tuple[int, int]:
    """A Kafka version's ``(major, minor)``: ``"3.9.2"`` is ``(3, 9)`` (a patch does not
    change quota behaviour)."""
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def oracle_generation(version: str) -> Path | None:
    """The folder of the managers' access that compiles against Kafka ``version``: the
    newest ``kafka-X.Y`` under ``apache-kafka/oracle`` whose X.Y is not after the version's;
    ``None`` when every folder is newer."""
    folders = [f for f in ORACLE_DIR.glob("kafka-*") if f.is_dir()]
    fitting = [f for f in folders if release(f.name.removeprefix("kafka-")) <= release(version)]
    return max(fitting, key=lambda f: release(f.name.removeprefix("kafka-")), default=None)


ORACLE_VERSIONS: Final = tuple(v for v in VERSIONS if oracle_generation(v) is not None)
"""The pinned versions the oracle runs against, the default (``KAFKA_VERSION``) first."""


def missing_tools(version: str = KAFKA_VERSION) -> str | None:
    """Why the oracle cannot run here (no Kafka jars, no JDK), or ``None`` when it can."""
    try:
        kafka_libs(version)
    except KafkaNotInstalled as exc:
        return str(exc)
    if shutil.which("javac") is None:
        return "no `javac` on the PATH: the Kafka oracle needs a JDK (17 or later)"
    return None


def to_bits(value: float) -> int:
    """A double's IEEE bits as a signed 64-bit int (Java's ``doubleToRawLongBits``)."""
    bits: int = struct.unpack("<q", struct.pack("<d", value))[0]
    return bits


def from_bits(bits: int) -> float:
    """The double whose IEEE bits are ``bits`` (Java's ``longBitsToDouble``)."""
    value: float = struct.unpack("<d", struct.pack("<q", bits))[0]
    return value


class KafkaOracle:
    """One running oracle JVM. :meth:`run` sends a batch of traces and returns, per trace,
    Kafka's answer to each operation; :meth:`close` ends the JVM (closing its stdin)."""

    def __init__(self, process: subprocess.Popen[str], log: Path, version: str) -> None:
        self.version = version
        self._process = process
        self._log = log
        self.batches = 0

    def run(self, traces: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        """Kafka's answers to every operation of every trace, in order."""
        stdin, stdout = self._process.stdin, self._process.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(json.dumps({"traces": list(traces)}, ensure_ascii=False) + "\n")
            stdin.flush()
            line = stdout.readline()
        except (BrokenPipeError, OSError) as exc:
            raise OracleError(f"the Kafka oracle stopped: {exc}; {self._tail()}") from None
        if not line:
            raise OracleError(f"the Kafka oracle exited ({self._process.poll()}): {self._tail()}")
        results: list[list[dict[str, Any]]] = json.loads(line)["results"]
        if len(results) != len(traces):
            raise OracleError(f"{len(traces)} traces sent, {len(results)} answered")
        for trace, answers in zip(traces, results, strict=True):
            if len(answers) != len(trace["ops"]):
                raise OracleError(f"{len(trace['ops'])} operations sent, {len(answers)} answered")
        self.batches += 1
        return results

    def _tail(self) -> str:
        try:
            return self._log.read_text(encoding="utf-8", errors="replace")[-3000:]
        except OSError:
            return "(no log)"

    def close(self) -> int:
        """Close the JVM's stdin and wait for it to exit; its exit status."""
        if self._process.stdin is not None and not self._process.stdin.closed:
            self._process.stdin.close()
        try:
            status = self._process.wait(JOIN_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
            raise OracleError("the Kafka oracle did not exit when its input ended") from None
        finally:
            if self._process.stdout is not None:
                self._process.stdout.close()
        return status


def compile_oracle(build_dir: Path, version: str = KAFKA_VERSION) -> Path:
    """Compile the harness into ``build_dir`` (javac, against ``version``'s jars)."""
    generation = oracle_generation(version)
    if generation is None:
        raise OracleError(f"no access to Kafka {version}'s quota managers in {ORACLE_DIR}")
    classpath = str(kafka_libs(version) / "*")
    sources = sorted(ORACLE_DIR.glob("*.java")) + sorted(generation.glob("*.java"))
    build_dir.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [
            "javac",
            "-Xlint:all",
            "-Werror",
            "-d",
            str(build_dir),
            "-cp",
            classpath,
            *map(str, sources),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise OracleError(f"javac failed:\n{result.stdout}{result.stderr}")
    return build_dir


def start_oracle(work_dir: Path, version: str = KAFKA_VERSION) -> KafkaOracle:
    """Compile the harness under ``work_dir`` against Kafka ``version`` and start its JVM
    (stderr goes to a log there)."""
    classes = compile_oracle(work_dir / "classes", version)
    classpath = os.pathsep.join([str(classes), str(kafka_libs(version) / "*")])
    log = work_dir / "oracle.log"
    with log.open("wb") as err:
        process = subprocess.Popen(
            [
                "java",
                "-Xmx512m",
                "-XX:+UseSerialGC",
                "-Dlog4j2.level=ERROR",
                "-cp",
                classpath,
                "QuotaOracle",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            encoding="utf-8",
        )
    return KafkaOracle(process, log, version)
