"""Which files a request-log path names, which broker each is from, and how to read them
(:class:`LogOptions`). No Spark: the command line checks its arguments with these before
Spark starts."""

from __future__ import annotations

import glob
import re
import urllib.parse
import zoneinfo
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kquota.exceptions import TrafficError

FORMAT: Final = "kafka-request-log"
"""The ``--traffic-format`` of Kafka's request log."""
FILE_PREFIX: Final = "kafka-request.log"
"""What the files of a folder must be called to be read: ``kafka-request.log`` and its
rolled copies (``kafka-request.log.2024-06-03-17``, ``...-17.gz``)."""
DEFAULT_BROKER_ID_FROM: Final = r"([^/]+)/[^/]+$"
"""The broker of a file, by default: the name of the folder holding it (one folder per
broker, e.g. ``logs/broker-1/kafka-request.log``)."""
DEFAULT_NUM_PARTITIONS: Final = 1
"""Kafka's ``num.partitions``: what a CreateTopics topic with ``numPartitions`` -1 and no
assignments gets (:attr:`LogOptions.num_partitions`)."""
_OFFSET: Final = re.compile(r"^[+-]\d{2}:\d{2}$")
_LOCAL_SCHEME: Final = re.compile(r"^file:/+")


@dataclass(frozen=True)
class LogOptions:
    """How to read request-log files: where the broker id comes from, and the time zone."""

    broker_id_from: str = DEFAULT_BROKER_ID_FROM
    broker_id: int | None = None
    timezone: str = "UTC"
    num_partitions: int = DEFAULT_NUM_PARTITIONS
    """The brokers' ``num.partitions``: partitions of a created topic that asks for -1."""

    def __post_init__(self) -> None:
        if isinstance(self.num_partitions, bool) or not (
            isinstance(self.num_partitions, int) and self.num_partitions >= 1
        ):
            raise TrafficError(
                f"invalid --num-partitions {self.num_partitions!r}: expected a number >= 1 "
                "(the brokers' num.partitions)"
            )
        if self.broker_id is not None and self.broker_id < 0:
            raise TrafficError(f"invalid --broker-id {self.broker_id!r}: expected a number >= 0")
        try:
            pattern = re.compile(self.broker_id_from)
        except re.error as exc:
            raise TrafficError(
                f"invalid --broker-id-from {self.broker_id_from!r}: {exc} (expected a regular "
                "expression whose first group, or whole match, is the broker id)"
            ) from None
        if pattern.groups > 1 and self.broker_id is None:
            raise TrafficError(
                f"invalid --broker-id-from {self.broker_id_from!r}: expected at most one group"
            )
        check_timezone(self.timezone)


def check_timezone(zone: str) -> str:
    """``zone`` if it is an IANA time zone (``Europe/Paris``, ``UTC``) or an offset
    (``+02:00``), else :class:`~kquota.exceptions.TrafficError` naming it."""
    if _OFFSET.match(zone):
        return zone
    try:
        if zone and "\0" not in zone:
            zoneinfo.ZoneInfo(zone)
            return zone
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        pass
    raise TrafficError(
        f"invalid --log-timezone {zone!r}: expected a time zone such as UTC, Europe/Paris or +02:00"
    )


@dataclass(frozen=True)
class LogFiles:
    """The files a path names: those to read, and those skipped because they are empty."""

    path: str
    files: tuple[str, ...]
    empty: tuple[str, ...] = ()
    plain_bytes: int | None = None
    """The size of the files that are not ``.gz`` (None for a remote path)."""


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _has_magic(path: str) -> bool:
    return glob.has_magic(path)


def log_files(path: str) -> LogFiles:
    """The request-log files ``path`` names: a file, a folder (every ``kafka-request.log*``
    file under it, rolled and ``.gz`` ones included) or a glob. Empty files are listed apart.

    A remote path (``s3://...``) is left to Spark. Raises
    :class:`~kquota.exceptions.TrafficError` naming ``path`` when it names nothing to read.
    """
    if _is_remote(path):
        return LogFiles(path, (path,))
    local = path.removeprefix("file://")
    if _has_magic(local):
        found = sorted(p for p in glob.glob(local, recursive=True) if Path(p).is_file())
        if not found:
            raise TrafficError(f"traffic {path!r} matches no file: expected kafka-request.log*")
    elif Path(local).is_dir():
        found = sorted(
            str(p)
            for p in Path(local).rglob(f"{FILE_PREFIX}*")
            if p.is_file() and not p.name.endswith(".crc")
        )
        if not found:
            raise TrafficError(
                f"traffic {path!r} holds no {FILE_PREFIX}* file: expected Kafka's request log "
                "(one folder per broker, or --traffic-format parquet|csv)"
            )
    elif Path(local).is_file():
        found = [local]
    else:
        raise TrafficError(f"traffic {path!r} does not exist: expected a request-log path")
    files: list[str] = []
    empty: list[str] = []
    for name in found:
        try:
            size = Path(name).stat().st_size
            with open(name, "rb") as handle:  # readable
                handle.read(1)
        except OSError as exc:
            raise TrafficError(f"cannot read traffic file {name!r}: {exc.strerror}") from None
        (files if size else empty).append(str(Path(name).absolute()))
    if not files:
        raise TrafficError(
            f"traffic {path!r} has no line to read: all {len(empty):,} file(s) are empty"
        )
    plain = sum(Path(f).stat().st_size for f in files if not f.endswith(".gz"))
    return LogFiles(path, tuple(files), tuple(empty), plain)


def is_request_log(path: str) -> bool:
    """Whether ``kquota backtest --format auto`` reads ``path`` as Kafka's request log: a
    ``kafka-request.log*`` name, a glob, a folder holding such files and no Parquet or
    CSV, or a file whose first line starts like a log4j line (``[2024-06-03 ...``)."""
    if _is_remote(path):
        return Path(path).name.startswith(FILE_PREFIX)
    local = Path(path.removeprefix("file://"))
    if local.name.startswith(FILE_PREFIX) or _has_magic(str(local)):
        return True
    try:
        if local.is_dir():
            names = [p.name for p in local.rglob("*") if p.is_file()]
            return any(n.startswith(FILE_PREFIX) for n in names) and not any(
                n.endswith((".parquet", ".csv", ".csv.gz")) for n in names
            )
        if local.is_file() and not local.name.endswith((".parquet", ".pq", ".csv", ".gz")):
            with local.open("rb") as handle:
                return re.match(rb"\[\d{4}-\d\d-\d\d \d\d:", handle.read(32)) is not None
    except OSError:
        return False
    return False


def broker_of(file: str, options: LogOptions) -> str:
    """The broker a file's lines came from: :attr:`LogOptions.broker_id`, else the first
    group (or the whole match) of :attr:`LogOptions.broker_id_from` searched in its path."""
    if options.broker_id is not None:
        return str(options.broker_id)
    local = urllib.parse.unquote(_LOCAL_SCHEME.sub("/", file))
    found = re.search(options.broker_id_from, local)
    if found is None or not (found.group(1) if found.re.groups else found.group(0)):
        raise TrafficError(
            f"no broker id in traffic file {local!r}: --broker-id-from "
            f"{options.broker_id_from!r} does not match its path (give --broker-id N for one "
            "broker's files, or a regular expression that finds it)"
        )
    return found.group(1) if found.re.groups else found.group(0)
