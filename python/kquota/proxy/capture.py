"""``kquota proxy --capture DIR``: the traffic the proxy sees, as back-test input.

One row per request the proxy checked a quota for, in kquota's traffic schema
(:mod:`kquota.traffic_schema`, the columns ``kquota traffic import`` writes from a Kafka
request log), taken at the moment of the
check: the time the quotas recorded it (the plugin's clock, in epoch ms: the clock's
reading plus one offset fixed by :meth:`TrafficCapture.align`, so the quotas' arithmetic,
which depends only on differences, replays alike), the user and
client id, the API, the bytes the quota counted (a produce request's size, a consumer fetch
response's size, also when the fetch was throttled and its bytes were taken back), the
proxy's handling time for the request quota (null for ``acks=0``, which Kafka exempts), the
``acks``, the throttle the proxy applied (``kafka_throttle_ms``: "what was applied live",
where an imported log has what the broker applied), the API version, the correlation id
and the client's connection (``connection``, ``HOST:PORT``: with the correlation id, it
names the request). ``kquota backtest`` over a
capture with the quotas the proxy ran with gives, request for request, the throttles it
applied (tests/proxy/test_proxy_capture.py).

Files are Parquet, written by a thread of their own and rolled by size or age: a file is
written under a hidden name (``.traffic-*.parquet.inprogress``, which Spark skips) and
renamed to ``traffic-<UTC time>-<n>.parquet`` once complete, so every file that appears is
whole. If writing fails (a full disk), the capture stops with one error line and the
proxy goes on serving; the file being written stays hidden.

What the capture leaves out: SASL requests (never throttled), and the network-thread time
of sending each response, which the proxy adds to the request quota without a check
(Kafka's ``recordNoThrottle``; a Kafka request log has no column for it either).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import os
import queue
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from kquota import traffic_schema
from kquota._extras import require
from kquota.exceptions import InvalidConfigError, OutputError

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped]

__all__ = [
    "CONNECTION",
    "DEFAULT_ROLL_BYTES",
    "DEFAULT_ROLL_SECONDS",
    "TrafficCapture",
    "flush_every_second",
]

log = logging.getLogger("kquota.proxy")

DEFAULT_ROLL_BYTES: Final = 128 * 1024 * 1024
"""A file is closed once it holds at least this many bytes."""
DEFAULT_ROLL_SECONDS: Final = 3600.0
"""... or once it is this old (and holds a row)."""
_BATCH_ROWS: Final = 16_384
"""Rows handed to the writer thread at once (one Parquet row group at most)."""
_BATCH_SECONDS: Final = 1.0
"""Rows are handed over at least this often while requests come."""
CONNECTION: Final = "connection"
"""The client's end of the connection a request came on (``HOST:PORT``)."""
_PREFIX: Final = "traffic-"
_SUFFIX: Final = ".parquet"


def _schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            (traffic_schema.TS, pa.int64()),
            (traffic_schema.BROKER, pa.string()),
            (traffic_schema.USER, pa.string()),
            (traffic_schema.CLIENT, pa.string()),
            (traffic_schema.API, pa.string()),
            (traffic_schema.BYTES, pa.int64()),
            (traffic_schema.THREAD, pa.int64()),
            (traffic_schema.ACKS, pa.int32()),
            (traffic_schema.KAFKA_THROTTLE, pa.int32()),
            (traffic_schema.API_VERSION, pa.int32()),
            (traffic_schema.CORRELATION_ID, pa.int32()),
            (CONNECTION, pa.string()),
        ]
    )


class TrafficCapture:
    """Rows appended by the proxy's event loop (:meth:`add`, a few list appends), written
    as Parquet files in ``folder`` by a thread of its own; :meth:`close` writes what is
    left and completes the last file.

    ``broker`` fills the broker column (quotas are per broker; a sidecar fronts one); a
    gateway gives each row the broker whose quotas applied (:meth:`add`'s ``broker``).
    """

    def __init__(
        self,
        folder: str | Path,
        broker: str,
        *,
        roll_bytes: int = DEFAULT_ROLL_BYTES,
        roll_seconds: float = DEFAULT_ROLL_SECONDS,
    ) -> None:
        if isinstance(roll_bytes, bool) or not isinstance(roll_bytes, int) or roll_bytes < 1:
            raise InvalidConfigError(
                f"invalid capture roll size {roll_bytes!r}: expected a positive number of bytes"
            )
        if not isinstance(roll_seconds, int | float) or not roll_seconds > 0:
            raise InvalidConfigError(
                f"invalid capture roll age {roll_seconds!r}: expected a positive number of seconds"
            )
        require("proxy", "kquota proxy --capture")
        self.folder = Path(folder)
        _check_folder(self.folder)
        self.broker = broker
        self.roll_bytes = roll_bytes
        self.roll_seconds = float(roll_seconds)
        self.schema = _schema()
        self.rows = 0
        """Rows added so far."""
        self.files: list[Path] = []
        """The complete files written so far, in order."""
        self.error: str | None = None
        """Why the capture stopped, if it did."""
        self._offset_ms = 0
        self._columns: list[list[Any]] = [[] for _ in self.schema.names]
        self._batch_started = time.monotonic()
        self._queue: queue.Queue[list[list[Any]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._write_all, name="kquota-capture", daemon=True)
        self._thread.start()
        self._closed = False

    def align(self, clock_ms: int) -> None:
        """Take ``clock_ms``, the quota clock's reading now, as this moment: rows are
        written in epoch ms (the proxy calls it once, when it starts)."""
        self._offset_ms = time.time_ns() // 1_000_000 - clock_ms

    def add(
        self,
        ts_ms: int,
        user: str,
        client_id: str,
        api: str,
        size: int,
        thread_ns: int | None,
        acks: int | None,
        throttle_ms: int,
        api_version: int,
        correlation_id: int,
        connection: str,
        broker: str | None = None,
    ) -> None:
        """One request, as the proxy checked it at ``ts_ms`` on the quota clock (cheap:
        called on the event loop); ``broker`` overrides the capture's broker column."""
        if self._closed or self.error is not None:
            return
        row = (
            ts_ms + self._offset_ms,
            self.broker if broker is None else broker,
            user,
            client_id,
            api,
            size,
            thread_ns,
            acks,
            throttle_ms,
            api_version,
            correlation_id,
            connection,
        )
        for column, value in zip(self._columns, row, strict=True):
            column.append(value)
        self.rows += 1
        if (
            len(self._columns[0]) >= _BATCH_ROWS
            or time.monotonic() - self._batch_started >= _BATCH_SECONDS
        ):
            self._hand_over()

    def flush_due(self) -> None:
        """Hand the rows added to the writer if the oldest waits for a second or more
        (the proxy calls it every second, from the thread that calls :meth:`add`)."""
        if self._columns[0] and time.monotonic() - self._batch_started >= _BATCH_SECONDS:
            self._hand_over()

    def close(self, timeout: float = 60.0) -> None:
        """Write the rows added so far and complete the last file (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._hand_over()
        self._queue.put(None)
        self._thread.join(timeout)

    def __enter__(self) -> TrafficCapture:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the writer thread --------------------------------------------------------------

    def _hand_over(self) -> None:
        columns, self._columns = self._columns, [[] for _ in self.schema.names]
        self._batch_started = time.monotonic()
        if columns[0]:
            self._queue.put(columns)

    def _write_all(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq  # type: ignore[import-untyped]

        writer: pq.ParquetWriter | None = None
        part: Path | None = None
        opened = 0.0
        try:
            while True:
                try:
                    columns = self._queue.get(timeout=min(self.roll_seconds, 1.0))
                except queue.Empty:
                    columns = []  # nothing new: only the age may roll the file
                if columns is None:
                    break
                if columns:
                    if writer is None:
                        part, opened = self._new_part(), time.monotonic()
                        writer = pq.ParquetWriter(part, self.schema)
                    arrays = [
                        pa.array(values, type=field.type)
                        for values, field in zip(columns, self.schema, strict=True)
                    ]
                    writer.write_batch(pa.record_batch(arrays, schema=self.schema))
                if (
                    writer is not None
                    and part is not None
                    and (
                        part.stat().st_size >= self.roll_bytes
                        or time.monotonic() - opened >= self.roll_seconds
                    )
                ):
                    writer.close()
                    writer = None
                    self._complete(part)
            if writer is not None and part is not None:
                writer.close()
                self._complete(part)
        except Exception as exc:  # a full disk, a folder removed: stop capturing, serve on
            self.error = f"{type(exc).__name__}: {exc}"
            log.error("kquota proxy: capture to %s stopped: %s", self.folder, self.error)
            if writer is not None:
                with contextlib.suppress(Exception):  # it stays hidden (.inprogress)
                    writer.close()
            while self._queue.get() is not None:  # let close() finish
                pass

    def _new_part(self) -> Path:
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
        name = f"{_PREFIX}{stamp}-{len(self.files):06d}{_SUFFIX}"
        return self.folder / f".{name}.inprogress"

    def _complete(self, part: Path) -> None:
        final = part.with_name(part.name[1 : -len(".inprogress")])
        os.replace(part, final)
        self.files.append(final)


def _check_folder(folder: Path) -> None:
    """Create ``folder`` if needed and make sure a file can be written in it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".kquota-capture-probe-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise OutputError(f"cannot write the capture to {str(folder)!r}: {reason}") from None


async def flush_every_second(capture: TrafficCapture) -> None:
    """Hand the capture's rows to its writer at least every second, also when no request
    comes to do it (the proxy runs this task while it serves)."""
    while True:
        await asyncio.sleep(1.0)
        capture.flush_due()
