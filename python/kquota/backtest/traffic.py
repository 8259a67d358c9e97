"""Realistic multi-tenant Kafka traffic for demos, tests and benchmarks (``kquota gen-traffic``).

The traffic is seeded and generated with vectorized NumPy, a few million requests in
seconds. It has what makes quota planning interesting:

* tenants (users) with a heavy-tailed number of clients, and clients with heavy-tailed
  (Pareto) request rates and log-normal request sizes; a few anonymous clients (empty user);
* a daily pattern (quiet at night, a peak in the afternoon);
* producer bursts: a client sends large batches at a high rate for a minute or two;
* KIP-13's example: a consumer (user ``analytics``, client ``bootstrap-consumer``) that reads
  steadily, then resets its offsets to the beginning and fetches as fast as the brokers
  serve it, for ten minutes;
* produce, fetch and other APIs (metadata, heartbeats, offset commits), each client spread
  over a few brokers, with request-handler thread times.

:func:`suggest_quotas` derives a quota file from the traffic that throttles some of it.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped]
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.csv as pcsv  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]

from kquota import DEFAULT, Entity
from kquota.backtest.kernel import API, BROKER, BYTES, CLIENT, THREAD, TS, USER
from kquota.config import QuotaConfig, QuotaEntry, Window
from kquota.exceptions import OutputError, TrafficError

__all__ = [
    "BOOTSTRAP_CLIENT",
    "BOOTSTRAP_USER",
    "REQUEST_ID",
    "TrafficSpec",
    "data_file",
    "generate",
    "output_format",
    "staged",
    "suggest_quotas",
    "write",
    "write_to",
]

REQUEST_ID: Final = "request_id"
"""An extra column (not used by the back-test) that shows columns are carried through."""
BOOTSTRAP_USER: Final = "analytics"
"""The user of KIP-13's bootstrapping consumer."""
BOOTSTRAP_CLIENT: Final = "bootstrap-consumer"
"""The client id of KIP-13's bootstrapping consumer."""

START_MS: Final = 1_717_372_800_000
"""Midnight UTC, 3 June 2024: where generated traffic starts by default."""
MIN_HOURS: Final = 1 / 3600
"""The shortest span generated: one second."""
MAX_HOURS: Final = 1e6
"""The longest span generated (about 114 years; times stay far inside an int64 of ms)."""

OTHER_APIS: Final = ("metadata", "heartbeat", "offset_commit", "list_offsets", "find_coordinator")

CSV_SUFFIXES: Final = (".csv", ".csv.gz")
"""Names that ``kquota backtest --format auto`` reads as CSV (and :func:`write` writes so)."""
PARQUET_SUFFIXES: Final = (".parquet", ".pq")
"""Names read and written as Parquet (as is a name without a suffix: a folder)."""
_ACCEPTED: Final = (
    "a name ending in .parquet or .pq (Parquet), .csv or .csv.gz (CSV), "
    "or without a suffix (a folder of Parquet)"
)

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class TrafficSpec:
    """What to generate: ``requests`` rows over ``hours`` from ``start_ms``, seeded."""

    requests: int = 1_000_000
    brokers: int = 6
    users: int = 40
    clients: int = 400
    hours: float = 24.0
    bursts: int = 12
    bootstrap: bool = True
    seed: int = 0
    start_ms: int = START_MS

    def __post_init__(self) -> None:
        checks = {
            "requests": self.requests >= 1,
            "brokers": self.brokers >= 1,
            "users": self.users >= 1,
            "clients": self.clients >= 2,
            "hours": self.hours > 0,
            "bursts": self.bursts >= 0,
            "seed": self.seed >= 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise TrafficError(
                    f"invalid {name} {getattr(self, name)!r}: expected a positive number"
                    + (" (clients >= 2)" if name == "clients" else "")
                )
        if not MIN_HOURS <= self.hours <= MAX_HOURS:  # also NaN and infinity
            raise TrafficError(
                f"invalid hours {self.hours!r}: expected from {MIN_HOURS:.6g} (one second) "
                f"to {MAX_HOURS:g}"
            )


def _daily_times(rng: np.random.Generator, n: int, spec: TrafficSpec) -> IntArray:
    """``n`` times following a daily intensity (low at 04:00, peak at 16:00), sorted."""
    duration_ms = int(spec.hours * 3_600_000)
    grid = np.linspace(0, duration_ms, 2049)
    hour = ((spec.start_ms + grid) / 3_600_000.0) % 24.0
    intensity = 1.0 + 0.7 * np.sin(2 * np.pi * (hour - 10.0) / 24.0)
    cdf = np.concatenate(([0.0], np.cumsum((intensity[1:] + intensity[:-1]) / 2)))
    cdf /= cdf[-1]
    offsets = np.interp(rng.random(n), cdf, grid).astype(np.int64)
    return spec.start_ms + np.minimum(offsets, duration_ms - 1)


def generate(spec: TrafficSpec) -> pa.Table:
    """The traffic table: one row per request, sorted by time (ties in generation order).

    Columns: ``ts_ms``, ``broker``, ``user``, ``client_id``, ``api``, ``bytes``,
    ``thread_time_ns`` and ``request_id``.
    """
    rng = np.random.default_rng(spec.seed)
    n_clients = spec.clients
    # tenants: a heavy-tailed number of clients each; ~3% of clients are anonymous
    user_of = np.minimum(
        (spec.users * rng.random(n_clients) ** 2.2).astype(np.int64), spec.users - 1
    )
    anonymous = rng.random(n_clients) < 0.03
    role = rng.choice(3, size=n_clients, p=[0.55, 0.40, 0.05])  # producer, consumer, admin
    weight = rng.pareto(1.3, n_clients) + 0.05
    weight /= weight.sum()
    mean_size = np.exp(rng.normal(np.log(24_000), 0.9, n_clients))
    home = rng.integers(0, spec.brokers, n_clients)
    spread = rng.integers(1, min(spec.brokers, 4) + 1, n_clients)

    user_names = np.array([f"tenant-{u:03d}" for u in range(spec.users)] + [""], dtype=object)
    role_names = np.array(["producer", "consumer", "admin"], dtype=object)
    client_names = np.array(
        [f"{role_names[r]}-{i:04d}" for i, r in enumerate(role.tolist())] + [BOOTSTRAP_CLIENT],
        dtype=object,
    )
    client_user = np.where(anonymous, spec.users, user_of)

    n_special = 0
    bootstrap_n = 0
    if spec.bootstrap:
        bootstrap_n = min(spec.requests // 50, 100_000)
        n_special += bootstrap_n
    burst_n = min(spec.requests // 50, spec.bursts * 4_000) if spec.bursts else 0
    n_special += burst_n
    n_base = spec.requests - n_special

    # steady traffic
    times = [_daily_times(rng, n_base, spec)]
    client = [rng.choice(n_clients, size=n_base, p=weight)]

    # producer bursts: large batches at ~100 requests/s for a minute or two
    if burst_n:
        producers = np.flatnonzero(role == 0)
        burst_clients = rng.choice(producers, size=spec.bursts)
        per_burst = np.full(spec.bursts, burst_n // spec.bursts)
        per_burst[: burst_n % spec.bursts] += 1
        starts = spec.start_ms + rng.integers(0, int(spec.hours * 3_600_000 * 0.9), spec.bursts)
        owner = np.repeat(np.arange(spec.bursts), per_burst)
        lengths = per_burst[owner] * 10  # about 100 requests/s
        times.append(starts[owner] + (rng.random(burst_n) * lengths).astype(np.int64))
        client.append(burst_clients[owner])

    # KIP-13: a consumer that resets its offsets and bootstraps at 50 MB/s for 10 minutes
    bootstrap_id = n_clients
    if bootstrap_n:
        steady_n = bootstrap_n // 5
        reset_at = spec.start_ms + int(spec.hours * 3_600_000 * 0.55)
        boot_times = np.concatenate(
            (
                _daily_times(rng, steady_n, spec),
                reset_at + (rng.random(bootstrap_n - steady_n) * 600_000).astype(np.int64),
            )
        )
        times.append(boot_times)
        client.append(np.full(bootstrap_n, bootstrap_id))

    ts = np.concatenate(times)
    cl = np.concatenate(client)
    n = len(ts)
    is_boot = cl == bootstrap_id
    safe = np.where(is_boot, 0, cl)

    # APIs: producers produce, consumers fetch, everyone sometimes does something else
    client_role = np.where(is_boot, 1, role[safe])
    other = rng.random(n) < np.where(client_role == 2, 1.0, 0.06)
    api_code = np.where(other, 2 + rng.integers(0, len(OTHER_APIS), n), client_role)
    api_names = np.array(["produce", "fetch", *OTHER_APIS], dtype=object)

    # sizes: log-normal around the client's mean; bursts are large batches
    size = np.exp(rng.normal(0.0, 0.7, n)) * np.where(is_boot, 40_000.0, mean_size[safe])
    size[other] = rng.integers(64, 4096, int(other.sum()))
    burst_rows = np.zeros(n, dtype=np.bool_)
    if burst_n:
        burst_rows[n_base : n_base + burst_n] = True
        size[burst_rows & ~other] *= 8.0
    if bootstrap_n:
        boot_burst = np.zeros(n, dtype=np.bool_)
        boot_burst[n - (bootstrap_n - bootstrap_n // 5) :] = True
        size[boot_burst & ~other] = rng.integers(
            800_000, 1_048_577, int((boot_burst & ~other).sum())
        )
    bytes_ = np.maximum(size, 0).astype(np.int64)

    # brokers: each client talks to `spread` brokers from its home broker on
    boot_spread = spec.brokers
    span = np.where(is_boot, boot_spread, spread[safe])
    broker = (
        np.where(is_boot, 0, home[safe]) + (rng.random(n) * span).astype(np.int64)
    ) % spec.brokers

    thread = (40_000 + 1.2 * bytes_ + rng.exponential(30_000, n)).astype(np.int64)

    order = np.argsort(ts, kind="stable")
    user_index = np.where(is_boot, spec.users + 1, client_user[safe])
    all_users = np.concatenate((user_names, np.array([BOOTSTRAP_USER], dtype=object)))
    broker_names = np.array([f"broker-{b}" for b in range(spec.brokers)], dtype=object)

    def strings(codes: IntArray, names: npt.NDArray[np.object_]) -> pa.Array:
        dictionary = pa.array(names.tolist(), pa.string())
        return pa.DictionaryArray.from_arrays(pa.array(codes[order], pa.int32()), dictionary).cast(
            pa.string()
        )

    return pa.table(
        {
            TS: pa.array(ts[order], pa.int64()),
            BROKER: strings(broker, broker_names),
            USER: strings(user_index, all_users),
            CLIENT: strings(np.where(is_boot, len(client_names) - 1, cl), client_names),
            API: strings(api_code, api_names),
            BYTES: pa.array(bytes_[order], pa.int64()),
            THREAD: pa.array(thread[order], pa.int64()),
            REQUEST_ID: pa.array(np.arange(n, dtype=np.int64)),
        }
    )


def output_format(path: str | Path) -> str:
    """The format a traffic file name says, as ``kquota backtest --format auto`` reads it:
    ``parquet`` for ``.parquet`` and ``.pq`` and for a name without a suffix (a folder),
    ``csv`` for ``.csv`` and ``.csv.gz``. Any other name raises
    :class:`~kquota.exceptions.TrafficError` naming it and what is accepted."""
    if str(path) == "":
        raise TrafficError(f"empty traffic path: expected {_ACCEPTED}")
    name = Path(path).name.lower()
    if name.endswith(CSV_SUFFIXES):
        return "csv"
    if name.endswith(PARQUET_SUFFIXES) or Path(name).suffix == "":
        return "parquet"
    raise TrafficError(
        f"invalid traffic path {str(path)!r}: the name says neither Parquet nor CSV; "
        f"expected {_ACCEPTED}"
    )


def data_file(path: str | Path) -> Path:
    """The file :func:`write` writes for ``path``: ``path/part-00000.parquet`` for a name
    without a suffix (a folder), else ``path`` itself."""
    target = Path(path)
    return target / "part-00000.parquet" if target.suffix == "" else target


def write(table: pa.Table, path: str | Path) -> Path:
    """Write ``table`` in the format its name says (:func:`output_format`); return the file.

    A name without a suffix is a folder, written as ``NAME/part-00000.parquet`` (row
    groups of 1M rows); ``.csv`` and ``.csv.gz`` are CSV with a header, as ``kquota
    backtest`` reads them. The file is written under a temporary name and renamed, so a
    failure leaves no half file: it raises :class:`~kquota.exceptions.OutputError` naming
    the path (and a name no format matches, :class:`~kquota.exceptions.TrafficError`).
    """
    output_format(path)
    target = data_file(path)
    with staged(target, "traffic") as temporary:
        write_to(table, temporary, target)
    return target


def write_to(table: pa.Table, file: Path, name: str | Path) -> None:
    """Write ``table`` into ``file`` (e.g. a :func:`staged` temporary) in the format that
    ``name`` says (:func:`output_format`)."""
    if output_format(name) == "parquet":
        pq.write_table(table, file, row_group_size=1_000_000, compression="zstd")
        return
    gzip = Path(name).name.lower().endswith(".gz")
    with (
        pa.CompressedOutputStream(str(file), "gzip") if gzip else pa.OSFile(str(file), "wb")
    ) as sink:
        pcsv.write_csv(table, sink)


@contextmanager
def staged(path: Path, what: str) -> Iterator[Path]:
    """A temporary file beside ``path`` (its folders created) that becomes ``path`` when
    the block succeeds.

    Any failure removes the temporary file and the folders it created, so an existing
    ``path`` stays as it was; an ``OSError`` (also pyarrow's) becomes
    :class:`~kquota.exceptions.OutputError` naming ``what`` and ``path``. A name too long
    for its folder fails before the block runs.
    """
    created: list[Path] = []
    temporary: Path | None = None

    def failed(reason: object) -> OutputError:
        return OutputError(f"cannot write {what} {str(path)!r}: {reason}")

    try:
        missing = [p for p in (path.parent, *path.parent.parents) if not p.exists()]
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:  # a file where a folder should be
                raise failed(f"{str(folder)!r} is a file, not a folder") from None
            created.append(folder)
        if path.is_dir():
            raise failed("it is a folder")
        if len(os.fsencode(path.name)) > _name_max(path.parent):
            raise failed(os.strerror(errno.ENAMETOOLONG))
        temporary = _new_file(path.parent, f".{path.name[:100]}.")
        yield temporary
        os.replace(temporary, path)
    except BaseException as exc:
        if temporary is not None:
            temporary.unlink(missing_ok=True)
        for folder in reversed(created):
            with suppress(OSError):
                folder.rmdir()
        if isinstance(exc, OSError):  # pyarrow's carry no strerror
            raise failed(exc.strerror or _first_line(exc)) from None
        raise


def _new_file(folder: Path, prefix: str) -> Path:
    """A new empty file in ``folder`` with the permissions of any new file (``umask``
    applies, unlike :func:`tempfile.mkstemp`'s private 0600)."""
    for _ in range(100):
        candidate = folder / f"{prefix}{secrets.token_hex(4)}.tmp"
        try:
            os.close(os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        return candidate
    raise OSError(errno.EEXIST, "no free temporary name", str(folder))


def _name_max(folder: Path) -> int:
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):  # no limit known
        return 255


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def suggest_quotas(table: pa.Table, window: Window | None = None) -> QuotaConfig:
    """A quota configuration for ``table`` that throttles its bursts and a few heavy tenants.

    Rates are measured per user and broker over ``num_samples - 1`` windows (10 s by
    default), as a quota sensor would. Every user gets a ``<default>`` producer and
    consumer byte rate of 1.5 times the largest rate of the 80th-percentile user; the
    three heaviest users above that get their own overrides at half their largest rate (so
    they are throttled at their peaks); the bootstrapping consumer of KIP-13 gets twice
    its largest rate before it resets its offsets, and a ``request_percentage`` of
    1 %; every other user gets 25 % of one handler thread.
    """
    window = window or Window()
    span_ms = max(window.num_samples - 1, 1) * window.window_ms
    frame = table.select([TS, BROKER, USER, API, BYTES]).to_pandas()
    if frame.empty:
        raise TrafficError("cannot suggest quotas for empty traffic")
    frame["w"] = frame[TS] // span_ms
    start, end = int(frame[TS].min()), int(frame[TS].max())
    merged: dict[Entity, dict[str, float]] = {}

    def busy(part: pd.DataFrame) -> pd.Series:
        """Per user: its largest windowed rate (bytes/s) on any broker."""
        rates = part.groupby([USER, BROKER, "w"])[BYTES].sum() / (span_ms / 1000.0)
        return rates.groupby(level=0).max()

    for api, prop in (("produce", "producer_byte_rate"), ("fetch", "consumer_byte_rate")):
        part = frame[(frame[API] == api) & (frame[USER] != "")]
        if part.empty:
            continue
        per_user = busy(part)
        tenants = per_user.drop(BOOTSTRAP_USER, errors="ignore")
        default = max(float(tenants.quantile(0.8)) * 1.5, 1.0)
        merged.setdefault(Entity(user=DEFAULT), {})[prop] = float(round(default))
        for user, rate in tenants[tenants > default].nlargest(3).items():
            merged.setdefault(Entity(user=str(user)), {})[prop] = float(round(max(rate * 0.5, 1.0)))
    merged.setdefault(Entity(user=DEFAULT), {})["request_percentage"] = 25.0
    before_reset = frame[TS] < start + (end - start) // 2
    boot = frame[(frame[USER] == BOOTSTRAP_USER) & (frame[API] == "fetch") & before_reset]
    if not boot.empty:
        steady = float(busy(boot).iloc[0])
        boot_quotas = merged.setdefault(Entity(user=BOOTSTRAP_USER), {})
        boot_quotas["consumer_byte_rate"] = float(round(max(steady * 2.0, 1.0)))
        boot_quotas["request_percentage"] = 1.0
    return QuotaConfig(
        window, tuple(QuotaEntry(entity, config) for entity, config in merged.items())
    )
