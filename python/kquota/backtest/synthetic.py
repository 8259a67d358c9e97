"""Realistic multi-tenant Kafka traffic for demos, tests and benchmarks (``kquota gen-traffic``).

The traffic is seeded and generated with vectorized NumPy, a few million requests in
seconds. It has what makes quota planning interesting:

* tenants (users) with a heavy-tailed number of clients, and clients with heavy-tailed
  (Pareto) request rates and log-normal request sizes; a few anonymous clients (empty user);
* a daily pattern (quiet at night, a peak in the afternoon);
* producer bursts: a client sends two to four times its user's produce quota for a minute
  or two;
* KIP-13's example: a consumer (user ``analytics``, client ``bootstrap-consumer``) that reads
  steadily, then resets its offsets to the beginning and catches up at three times its
  fetch quota, for ten minutes;
* produce, fetch and other APIs (metadata, heartbeats, offset commits), each client spread
  over a few brokers, with request-handler thread times.

:func:`suggest_quotas` derives a quota file from traffic as an operator might plan it:
under it some tenants run just over their quota at their daily peak and some just under,
so the quotas scaled by 0.5, 1 and 2 throttle clearly different numbers of requests.
:func:`planned_quotas` gives the quotas it gives for the steady traffic, against which
the bursts and the catch-up are sized (a few times a quota, whatever the traffic's scale).
"""

from __future__ import annotations

import errno
import json
import math
import os
import secrets
from collections.abc import Iterator, Sequence
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
from kquota.backtest.frames import API, BROKER, BYTES, CLIENT, THREAD, TS, USER
from kquota.config import QuotaConfig, QuotaEntry, Window
from kquota.exceptions import OutputError, TrafficError

__all__ = [
    "BOOTSTRAP_CLIENT",
    "BOOTSTRAP_USER",
    "PLANNED_QUOTAS",
    "REQUEST_ID",
    "TrafficSpec",
    "data_file",
    "generate",
    "output_format",
    "planned_quotas",
    "staged",
    "suggest_quotas",
    "write",
    "write_to",
]

PLANNED_QUOTAS: Final = "kquota.planned_quotas"
"""The key of the quotas :func:`generate` planned, in its table's schema metadata."""
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

BURST_MULTIPLE: Final = (2.0, 4.0)
"""A producer burst sends from this many to this many times its user's produce quota
(uniformly drawn), so that the quotas scaled by 0.5, 1 and 2 throttle it differently."""
BOOTSTRAP_MULTIPLE: Final = 3.0
"""The bootstrapping consumer catches up at this many times its fetch quota, per broker."""
CATCH_UP_FETCH: Final = (800_000, 1_048_576)
"""The bytes of one catch-up fetch (uniformly drawn): full responses, read from the start
of the log."""
MAX_REQUEST_SIZE: Final = 1_048_576
"""The most bytes a produce or fetch carries: the clients' default ``max.request.size``
and ``max.partition.fetch.bytes`` (one partition a request)."""
OTHER_SHARE: Final = 0.06
"""The share of a producer's or consumer's requests that are neither produce nor fetch."""
BUSY_QUANTILE: Final = 0.99
"""A user's busy rate (:func:`suggest_quotas`): this quantile of its 10-second rates over
the whole traffic, on its busiest broker."""
OVERRIDE_SHARES: Final = (0.8, 1.25, 0.7, 1.5, 0.9, 1.15)
"""The heaviest users' own quotas as shares of their busy rate, heaviest first
(:func:`suggest_quotas`): below 1 they run just over their quota at their daily peak,
above 1 just under it."""


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


@dataclass(frozen=True)
class _Clients:
    """Per client (the bootstrapping consumer last): its user (an index into the user
    names), role (0 producer, 1 consumer, 2 admin), mean request size, home broker and how
    many brokers from its home on it talks to."""

    user: IntArray
    role: IntArray
    mean_size: npt.NDArray[np.float64]
    home: IntArray
    spread: IntArray


@dataclass
class _Rows:
    """Requests as columns of codes: time, client, API (an index into :data:`_API_NAMES`),
    bytes and broker."""

    ts: IntArray
    client: IntArray
    api: IntArray
    bytes: npt.NDArray[np.float64]
    broker: IntArray

    @staticmethod
    def concat(parts: list[_Rows]) -> _Rows:
        return _Rows(
            *(np.concatenate([getattr(p, name) for p in parts]) for name in _Rows.__annotations__)
        )


_API_NAMES: Final = ("produce", "fetch", *OTHER_APIS)


def _requests(
    rng: np.random.Generator, clients: _Clients, client: IntArray, ts: IntArray, brokers: int
) -> _Rows:
    """Requests of ``client`` at ``ts``: producers produce, consumers fetch, and everyone
    sometimes does something else (metadata, heartbeats, offset commits); sizes log-normal
    around the client's mean, at most :data:`MAX_REQUEST_SIZE`; each request to one of the
    client's brokers."""
    n = len(client)
    role = clients.role[client]
    other = rng.random(n) < np.where(role == 2, 1.0, OTHER_SHARE)
    api = np.where(other, 2 + rng.integers(0, len(OTHER_APIS), n), role)
    size = np.exp(rng.normal(0.0, 0.7, n)) * clients.mean_size[client]
    size = np.minimum(size, MAX_REQUEST_SIZE)
    size[other] = rng.integers(64, 4096, int(other.sum()))
    broker = (clients.home[client] + (rng.random(n) * clients.spread[client]).astype(np.int64)) % (
        brokers
    )
    return _Rows(ts, client, api.astype(np.int64), size, broker)


def _fill(rows: _Rows, api: int, rate: float, seconds: float, rng: np.random.Generator) -> None:
    """Size the ``api`` requests of ``rows`` (spread over ``seconds``) so that together they
    send ``rate`` bytes/s, each size log-normal around their mean."""
    chosen = rows.api == api
    k = int(chosen.sum())
    if not k:
        return
    noise = np.exp(rng.normal(0.0, 0.3, k))
    rows.bytes[chosen] = rate * seconds / k * noise / noise.mean()


def generate(spec: TrafficSpec) -> pa.Table:
    """The traffic table: one row per request, sorted by time (ties in generation order).

    Columns: ``ts_ms``, ``broker``, ``user``, ``client_id``, ``api``, ``bytes``,
    ``thread_time_ns`` and ``request_id``. The schema's metadata holds the quotas planned
    for it (:func:`planned_quotas`): what :func:`suggest_quotas` gives for its steady
    traffic, against which the producer bursts and the bootstrapping consumer's catch-up
    are sized (:data:`BURST_MULTIPLE` and :data:`BOOTSTRAP_MULTIPLE` times them), so that
    they are a few times a quota, as an operator sees them, whatever the traffic's scale.
    """
    rng = np.random.default_rng(spec.seed)
    n_clients = spec.clients
    duration_ms = int(spec.hours * 3_600_000)
    end_ms = spec.start_ms + duration_ms - 1
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
    bootstrap_id = n_clients
    clients = _Clients(
        user=np.append(np.where(anonymous, spec.users, user_of), spec.users + 1),
        role=np.append(role, 1),
        mean_size=np.append(mean_size, 200_000.0),
        home=np.append(home, 0),
        spread=np.append(spread, spec.brokers),
    )
    user_names = [f"tenant-{u:03d}" for u in range(spec.users)] + ["", BOOTSTRAP_USER]
    role_names = ("producer", "consumer", "admin")
    client_names = [f"{role_names[r]}-{i:04d}" for i, r in enumerate(role.tolist())]
    client_names.append(BOOTSTRAP_CLIENT)

    bootstrap_n = min(spec.requests // 50, 100_000) if spec.bootstrap else 0
    steady_boot = bootstrap_n // 5
    burst_clients = np.flatnonzero((role == 0) & ~anonymous)  # a quota applies to them
    bursts = spec.bursts if len(burst_clients) else 0
    burst_n = min(spec.requests // 50, bursts * 4_000) if bursts else 0

    # the bootstrapping consumer reading as it keeps up, first: its fetch quota sets how many
    # fetches its catch-up takes
    parts: list[_Rows] = []
    boot_quota: float | None = None
    if steady_boot:
        boot_ts = _daily_times(rng, steady_boot, spec)
        boot_client = np.full(steady_boot, bootstrap_id)
        parts.append(_requests(rng, clients, boot_client, boot_ts, spec.brokers))
        boot_quota = (
            _steady_quotas(parts[0], clients, user_names, (spec.start_ms, end_ms))
            .manager("fetch")
            .quota_for(BOOTSTRAP_USER, BOOTSTRAP_CLIENT)
        )
    reset_at = spec.start_ms + int(duration_ms * 0.55)
    catch_up_ms = max(min(600_000, end_ms - reset_at), 1)
    catch_up = bootstrap_n - steady_boot
    if catch_up and boot_quota is not None:
        sent = BOOTSTRAP_MULTIPLE * boot_quota * spec.brokers * catch_up_ms / 1000.0
        requests = sent / (sum(CATCH_UP_FETCH) / 2) / (1.0 - OTHER_SHARE)
        catch_up = min(catch_up, max(math.ceil(requests), 1))

    # steady traffic
    n_base = spec.requests - steady_boot - catch_up - burst_n
    steady_ts = _daily_times(rng, n_base, spec)
    steady_client = rng.choice(n_clients, size=n_base, p=weight)
    parts.append(_requests(rng, clients, steady_client, steady_ts, spec.brokers))
    quotas = _steady_quotas(_Rows.concat(parts), clients, user_names, (spec.start_ms, end_ms))

    # producer bursts: a producer sends BURST_MULTIPLE times its user's quota to its home
    # broker for one to two minutes
    if burst_n:
        chosen = rng.choice(burst_clients, size=bursts)
        per_burst = np.full(bursts, burst_n // bursts)
        per_burst[: burst_n % bursts] += 1
        length = np.minimum(rng.uniform(60_000, 120_000, bursts), max(duration_ms // 10, 1))
        starts = spec.start_ms + (rng.random(bursts) * (duration_ms - length)).astype(np.int64)
        multiple = rng.uniform(*BURST_MULTIPLE, bursts)
        for b in range(bursts):
            client = int(chosen[b])
            ts = starts[b] + (rng.random(per_burst[b]) * length[b]).astype(np.int64)
            rows = _requests(rng, clients, np.full(per_burst[b], client), ts, spec.brokers)
            rows.broker[:] = clients.home[client]
            quota = quotas.manager("produce").quota_for(
                user_names[clients.user[client]], client_names[client]
            )
            if quota is None:  # nothing measured to size it against: large batches
                rows.bytes[rows.api == 0] *= 8.0
            else:
                _fill(rows, 0, float(multiple[b]) * quota, float(length[b]) / 1000.0, rng)
            parts.append(rows)

    # KIP-13: the consumer resets its offsets and catches up for ten minutes on every broker,
    # in full fetches (read from the start of the log), BOOTSTRAP_MULTIPLE times its quota
    if catch_up:
        ts = reset_at + (rng.random(catch_up) * catch_up_ms).astype(np.int64)
        rows = _requests(rng, clients, np.full(catch_up, bootstrap_id), ts, spec.brokers)
        full = rows.api == 1
        rows.bytes[full] = rng.uniform(*CATCH_UP_FETCH, int(full.sum()))
        parts.append(rows)

    every = _Rows.concat(parts)
    ts = np.minimum(every.ts, end_ms)
    bytes_ = np.maximum(every.bytes, 0).astype(np.int64)
    n = len(ts)
    thread = (40_000 + 1.2 * bytes_ + rng.exponential(30_000, n)).astype(np.int64)
    order = np.argsort(ts, kind="stable")
    broker_names = [f"broker-{b}" for b in range(spec.brokers)]

    def strings(codes: IntArray, names: Sequence[str]) -> pa.Array:
        dictionary = pa.array(list(names), pa.string())
        return pa.DictionaryArray.from_arrays(pa.array(codes[order], pa.int32()), dictionary).cast(
            pa.string()
        )

    table = pa.table(
        {
            TS: pa.array(ts[order], pa.int64()),
            BROKER: strings(every.broker, broker_names),
            USER: strings(clients.user[every.client], user_names),
            CLIENT: strings(every.client, client_names),
            API: strings(every.api, _API_NAMES),
            BYTES: pa.array(bytes_[order], pa.int64()),
            THREAD: pa.array(thread[order], pa.int64()),
            REQUEST_ID: pa.array(np.arange(n, dtype=np.int64)),
        }
    )
    return table.replace_schema_metadata({PLANNED_QUOTAS: quotas.dumps()})


def planned_quotas(table: pa.Table) -> QuotaConfig:
    """The quotas :func:`generate` planned ``table`` against (as an operator plans from
    usual days: the steady traffic, without the bursts and the catch-up), from its schema's
    metadata; for a table without them (traffic from elsewhere), :func:`suggest_quotas`."""
    planned = (table.schema.metadata or {}).get(PLANNED_QUOTAS.encode())
    if planned is None:
        return suggest_quotas(table)
    return QuotaConfig.from_json(json.loads(planned), "the table's planned quotas")


def _steady_quotas(
    rows: _Rows, clients: _Clients, user_names: Sequence[str], bounds: tuple[int, int]
) -> QuotaConfig:
    """What :func:`suggest_quotas` gives for the steady ``rows`` of traffic from and to the
    times ``bounds`` (a user with nothing to measure has no quota of its own)."""
    frame = pd.DataFrame(
        {
            TS: rows.ts,
            BROKER: rows.broker,
            USER: pd.Categorical.from_codes(clients.user[rows.client], list(user_names)),
            API: pd.Categorical.from_codes(rows.api, list(_API_NAMES)),
            BYTES: np.maximum(rows.bytes, 0).astype(np.int64),
        }
    )
    return _suggest(frame, Window(), bounds)


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
    """A quota configuration for ``table`` as an operator might plan it: most tenants well
    inside a ``<default>`` quota, the heaviest on quotas of their own, some of them just
    over their daily peak and some just under.

    A user's *busy rate* (per API) is the rate it reaches in the busiest 1 % of the
    traffic's 10-second windows on its busiest broker (the quota sensor's
    ``num_samples - 1`` windows, 10 s by default), so a minute-long burst does not raise
    it. Every user gets a ``<default>`` producer and consumer byte rate of 1.5 times the
    busy rate of the 80th-percentile user; the heaviest users above that get their own
    quotas of :data:`OVERRIDE_SHARES` times their busy rate (below 1: throttled at their
    daily peak; above 1: throttled mostly when the quotas are scaled down). The
    bootstrapping consumer of KIP-13 gets twice its largest rate before it resets its
    offsets, and a ``request_percentage`` of 1 %; every other user gets 25 % of one
    handler thread.
    """
    frame = table.select([TS, BROKER, USER, API, BYTES]).to_pandas()
    return _suggest(frame, window or Window())


def _busy_rates(rates: pd.Series, windows: int) -> pd.Series:
    """Per user, from its rates per (user, broker, window) where it sent something: on its
    busiest broker, the :data:`BUSY_QUANTILE` of its rates over every window of the traffic
    (a window where it sent nothing has rate 0), so that a burst of a few windows does not
    raise it however sparse the user's other traffic is."""
    rank = math.ceil((1.0 - BUSY_QUANTILE) * windows)  # from the top, 1-based
    busy: dict[object, float] = {}
    for (user, _), part in rates.groupby(level=[0, 1], observed=True, sort=False):
        ordered = np.sort(part.to_numpy())[::-1]
        rate = float(ordered[rank - 1]) if rank <= len(ordered) else 0.0
        busy[user] = max(busy.get(user, 0.0), rate)
    return pd.Series(busy, dtype=np.float64)


def _suggest(
    frame: pd.DataFrame, window: Window, bounds: tuple[int, int] | None = None
) -> QuotaConfig:
    """:func:`suggest_quotas` of a frame with its columns, for traffic from and to the times
    ``bounds`` (by default its first and last request)."""
    if frame.empty:
        raise TrafficError("cannot suggest quotas for empty traffic")
    span_ms = max(window.num_samples - 1, 1) * window.window_ms
    cell = frame[TS] // span_ms
    start, end = bounds or (int(frame[TS].min()), int(frame[TS].max()))
    users = frame[USER]
    merged: dict[Entity, dict[str, float]] = {}

    def cell_rates(rows: pd.Series) -> pd.Series:
        """Per user, broker and 10-second window: its rate (bytes/s)."""
        keys = [users[rows], frame.loc[rows, BROKER], cell[rows]]
        sums = frame.loc[rows, BYTES].groupby(keys, observed=True, sort=False).sum()
        return sums / (span_ms / 1000.0)

    for api, prop in (("produce", "producer_byte_rate"), ("fetch", "consumer_byte_rate")):
        rows = (frame[API] == api) & (users != "")
        if not rows.any():
            continue
        busy = _busy_rates(cell_rates(rows), end // span_ms - start // span_ms + 1)
        tenants = busy.drop(BOOTSTRAP_USER, errors="ignore")
        if tenants.empty:
            continue
        default = max(float(tenants.quantile(0.8)) * 1.5, 1.0)
        merged.setdefault(Entity(user=DEFAULT), {})[prop] = float(round(default))
        heavy = tenants[tenants > default].sort_values(ascending=False, kind="stable")
        for (user, rate), share in zip(heavy.items(), OVERRIDE_SHARES, strict=False):
            merged.setdefault(Entity(user=str(user)), {})[prop] = float(
                round(max(rate * share, 1.0))
            )
    merged.setdefault(Entity(user=DEFAULT), {})["request_percentage"] = 25.0
    boot = (
        (users == BOOTSTRAP_USER)
        & (frame[API] == "fetch")
        & (frame[TS] < start + (end - start) // 2)
    )
    if boot.any():
        steady = float(cell_rates(boot).max())
        boot_quotas = merged.setdefault(Entity(user=BOOTSTRAP_USER), {})
        boot_quotas["consumer_byte_rate"] = float(round(max(steady * 2.0, 1.0)))
        boot_quotas["request_percentage"] = 1.0
    return QuotaConfig(
        window, tuple(QuotaEntry(entity, config) for entity, config in merged.items())
    )
