"""Spark's side of the back-test: the session, the progress lines, and Spark's errors as
kquota's (:class:`~kquota.exceptions.TrafficError` and
:class:`~kquota.exceptions.OutputError` naming the path).

Used by the job, by the request-log import (:mod:`kquota.backtest.requestlog`) and by the
command line; nothing here imports the rest of the back-test.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final, TextIO

from kquota.exceptions import OutputError, TrafficError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "LOG4J_CONFIG",
    "Progress",
    "reading_traffic",
    "spark_errors",
    "spark_message",
    "spark_session",
    "writing_output",
]

LOG4J_CONFIG: Final = Path(__file__).with_name("log4j2.properties")
"""Quiet logging for the Spark driver kquota starts locally (errors only)."""


# -- progress ---------------------------------------------------------------------------------


class Progress:
    """Phase lines and, while Spark works, its task counts (from the status tracker)."""

    def __init__(self, spark: SparkSession | None, stream: TextIO | None = sys.stderr) -> None:
        self._spark = spark
        self._stream = stream
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._phase = ""
        self._started = time.monotonic()

    def phase(self, message: str) -> None:
        """Announce a step of the job."""
        self._phase = message
        self._write(f"[{time.monotonic() - self._started:6.1f}s] {message}")

    def note(self, message: str) -> None:
        """Print an indented detail of the current step."""
        self._write(f"          {message}")

    def _write(self, line: str) -> None:
        if self._stream is not None:
            print(line, file=self._stream, flush=True)

    def __enter__(self) -> Progress:
        if self._stream is not None and self._spark is not None:
            self._thread = threading.Thread(target=self._watch, name="kquota-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _watch(self) -> None:
        assert self._spark is not None
        tracker = self._spark.sparkContext.statusTracker()
        last = ""
        while not self._stop.wait(3.0):
            try:
                stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            except Exception:  # the context is stopping; progress is best effort
                return
            done = sum(s.numCompletedTasks for s in stages if s is not None)
            total = sum(s.numTasks for s in stages if s is not None)
            if total:
                line = f"          ... {done}/{total} tasks of {len(stages)} running stage(s)"
                if line != last:
                    self._write(line)
                    last = line


# -- the session ------------------------------------------------------------------------------


def spark_session(
    master: str | None = None, app_name: str = "kquota backtest", verbose: bool = False
) -> tuple[SparkSession, bool]:
    """The active SparkSession, or a new one; returns ``(session, created)``.

    A session that already exists (a notebook, ``spark-submit``, the tests) is used as it
    is and left running. Otherwise a session is started on ``master``; without one,
    ``spark-submit``'s ``spark.master`` or else ``local[*]``. On any master, a session
    started here reads times without a zone as UTC; a local one also gets the current
    Python for its workers and quiet logs. Unless ``verbose``, the JVM this starts writes
    its own output (start-up notices, log lines) to a temporary file rather than to
    stderr; when it fails to start, the error carries that file's last lines.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active, False
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        # spark-submit started the JVM with its --master and --conf; SparkConf() reads them
        # only once PySpark is connected to it (unconnected, it is empty: local[*] below)
        SparkContext._ensure_initialized()
    conf = SparkConf()
    chosen = master or conf.get("spark.master", None) or "local[*]"
    settings = {
        "spark.app.name": app_name,
        "spark.master": chosen,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",  # zone-less times are UTC
    }
    if chosen.startswith("local"):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
        if conf.get("spark.driver.memory", None) is None:
            settings["spark.driver.memory"] = "4g"
        if LOG4J_CONFIG.exists() and conf.get("spark.driver.extraJavaOptions", None) is None:
            options = f"-Dlog4j2.configurationFile={LOG4J_CONFIG.as_uri()}"
            settings["spark.driver.extraJavaOptions"] = options
    if not verbose and SparkContext._gateway is None:
        _launch_quietly(settings)
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session, True


def _launch_quietly(settings: dict[str, str]) -> None:
    """Start Spark's JVM with ``settings`` (some are read only at launch: memory, Java
    options) and its stdout and stderr in a temporary file, kept for the process."""
    import tempfile

    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf(loadDefaults=False).setAll(list(settings.items()))
    output = tempfile.TemporaryFile()  # noqa: SIM115 (open while the JVM runs)
    try:
        quiet = {"stdout": output, "stderr": output}
        gateway = launch_gateway(conf, popen_kwargs=quiet)  # type: ignore[no-untyped-call]
    except Exception as exc:
        output.seek(0)
        tail = output.read().decode("utf-8", "replace").strip().splitlines()[-5:]
        detail = " / ".join(tail) or str(exc)
        raise SparkStartError(f"Spark's JVM did not start: {detail}") from None
    _JVM_OUTPUT.append(output)
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)


class SparkStartError(RuntimeError):
    """Spark's JVM did not start (its last lines of output in the message)."""


_JVM_OUTPUT: Final[list[object]] = []
"""The files holding the output of the JVMs started here (open while the process runs)."""


# -- Spark's errors ---------------------------------------------------------------------------


def spark_errors() -> tuple[type[Exception], ...]:
    """What a Spark call raises when Spark or Java fails: Py4J's errors (a Java exception,
    a lost gateway) and PySpark's own (``AnalysisException``, captured Java errors,
    ``PythonException``...). For ``except spark_errors() as exc:``."""
    from py4j.protocol import Py4JError  # type: ignore[import-untyped]
    from pyspark.errors import PySparkException

    return (PySparkException, Py4JError, SparkStartError)


def spark_message(exc: BaseException) -> str:
    """One line saying what a Spark error is: the Java exception's own first line (not
    Py4J's "An error occurred while calling o42.parquet"), or the last line of a Python
    worker's traceback, or the first line of the message."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            return _first_line(str(java.toString()))
        except Exception:  # the gateway is gone: fall back to Python's text
            pass
    text = str(exc).strip()
    if "Traceback (most recent call last)" in text:
        last = [line for line in text.splitlines() if line.strip() and not line[:1].isspace()]
        if last:
            return last[-1].strip()
    return _first_line(text) or type(exc).__name__


@contextlib.contextmanager
def writing_output(path: str) -> Iterator[None]:
    """Turn an ``OSError`` or a Spark failure while writing ``path`` into one
    :class:`~kquota.exceptions.OutputError` naming it."""
    try:
        yield
    except OSError as exc:
        raise OutputError(f"cannot write {path!r}: {exc.strerror or exc}") from None
    except spark_errors() as exc:
        raise OutputError(f"cannot write {path!r}: {spark_message(exc)}") from None


@contextlib.contextmanager
def reading_traffic(path: str) -> Iterator[None]:
    """Turn a Spark failure while reading the traffic ``path`` into one
    :class:`~kquota.exceptions.TrafficError` naming it."""
    try:
        yield
    except spark_errors() as exc:
        raise TrafficError(f"cannot read traffic {path!r}: {spark_message(exc)}") from None


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0].strip() if lines else ""
