"""Replaying one broker's requests through the core: open loop (recorded times) and closed
loop (throttled clients wait, KIP-219), and the sensors the requests resolve to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import numpy as np
import numpy.typing as npt
import pandas as pd  # type: ignore[import-untyped]

from kquota import QuotaManager, ReplayKernel, RequestPath
from kquota._core import applied_throttles
from kquota.backtest.frames import schema
from kquota.backtest.frames.schema import BoolArray, Int32Array, Int64Array
from kquota.config import QuotaConfig
from kquota.exceptions import InvalidConfigError
from kquota.quota_types import QuotaType

__all__ = [
    "ClientLimits",
    "ReplayMode",
    "SplitReplay",
    "applied_throttle",
    "kind_codes",
    "kinds",
    "replay_closed",
    "replay_open",
    "request_path",
    "resolve_sensors",
    "sensor_tags",
    "time_order",
]

_KIND_NAMES: Final = (schema.KIND_PRODUCE, schema.KIND_FETCH, schema.KIND_OTHER)
_KIND_CODE: Final = {schema.KIND_PRODUCE: 0, schema.KIND_FETCH: 1}


def _factorize(values: pd.Series) -> tuple[Int64Array, list[str]]:
    """Codes of the distinct values and the values as strings (a null counts as ``""``)."""
    codes, uniques = pd.factorize(values, sort=False)
    names = [str(u) for u in uniques]
    codes = np.asarray(codes, dtype=np.int64)
    missing = codes < 0
    if missing.any():
        if "" not in names:
            names.append("")
        codes = np.where(missing, names.index(""), codes)
    return codes, names


def kind_codes(api: pd.Series) -> npt.NDArray[np.int8]:
    """0 (produce), 1 (fetch) or 2 (any other API) for each API name, case-insensitively."""
    codes, names = _factorize(api)
    table = np.array([_KIND_CODE.get(name.lower(), 2) for name in names] or [2], dtype=np.int8)
    return table[codes]


def kinds(api: pd.Series) -> npt.NDArray[np.object_]:
    """:data:`KIND_PRODUCE`, :data:`KIND_FETCH` or :data:`KIND_OTHER` for each API name."""
    return np.array(_KIND_NAMES, dtype=object)[kind_codes(api)]


def time_order(frame: pd.DataFrame, times: str = schema.TS) -> Int64Array:
    """Row positions in replay order: by ``times``, ties by :data:`SEQ_COLUMNS` (stable)."""
    keys: list[npt.NDArray[np.generic]] = [
        frame[name].to_numpy() for name in reversed(schema.SEQ_COLUMNS) if name in frame.columns
    ]
    keys.append(frame[times].to_numpy(dtype=np.int64))
    return np.lexsort(keys).astype(np.int64)


def _pair_codes(users: pd.Series, clients: pd.Series) -> tuple[Int64Array, list[tuple[str, str]]]:
    """Codes of the distinct ``(user, client_id)`` pairs and the pairs themselves."""
    user_codes, user_values = _factorize(users)
    client_codes, client_values = _factorize(clients)
    n_clients = max(len(client_values), 1)
    codes, uniques = pd.factorize(user_codes * n_clients + client_codes, sort=False)
    pairs = [
        (user_values[u], client_values[c])
        for u, c in zip(
            (uniques // n_clients).tolist(), (uniques % n_clients).tolist(), strict=True
        )
    ]
    return np.asarray(codes, dtype=np.int64), pairs


def _expand(
    per_pair: Sequence[str], pair_codes: Int64Array, rows: BoolArray | None
) -> pd.Categorical:
    """A categorical column from one string per pair (null where ``rows`` is false)."""
    codes, categories = pd.factorize(np.array(list(per_pair) or [""], dtype=object), sort=False)
    out = np.asarray(codes, dtype=np.int64)[pair_codes] if len(pair_codes) else pair_codes
    if rows is not None:
        out = np.where(rows, out, -1)
    return pd.Categorical.from_codes(out, categories=pd.Index(categories, dtype=object))


def _tags(
    pair_codes: Int64Array,
    pairs: Sequence[tuple[str, str]],
    manager: QuotaManager,
    rows: BoolArray | None = None,
) -> tuple[pd.Categorical, pd.Categorical]:
    tags = [manager.tags(user, client) for user, client in pairs]
    return (
        _expand([t[0] for t in tags], pair_codes, rows),
        _expand([t[1] for t in tags], pair_codes, rows),
    )


def sensor_tags(
    users: pd.Series, clients: pd.Series, manager: QuotaManager
) -> tuple[npt.NDArray[np.object_], npt.NDArray[np.object_]]:
    """The ``(user, client-id)`` metric tags of each request, by the core's precedence rules.

    Requests with equal tags share one sensor (on one broker). The tags depend only on which
    overrides exist, so they are the same for a configuration and any scaled copy of it.
    """
    user_tags, client_tags = _tags(*_pair_codes(users, clients), manager)
    return np.asarray(user_tags, dtype=object), np.asarray(client_tags, dtype=object)


def resolve_sensors(
    frame: pd.DataFrame, managers: Mapping[QuotaType, QuotaManager]
) -> dict[str, pd.Categorical]:
    """Each request's kind and the tags of the sensors it is recorded by, as categoricals.

    ``managers`` are configured managers of the quota types that have quotas. Returns
    ``kind`` (:func:`kinds`), ``byte_user``/``byte_client`` (the produce sensor of produce
    requests, the fetch sensor of fetch requests, null otherwise) and
    ``request_user``/``request_client`` (the request sensor; null without request quotas).
    """
    n = len(frame)
    kind = kind_codes(frame[schema.API]) if n else np.empty(0, dtype=np.int8)
    codes, pairs = _pair_codes(frame[schema.USER], frame[schema.CLIENT])
    none = np.zeros(n, dtype=np.bool_)
    result = {
        "kind": pd.Categorical.from_codes(
            kind.astype(np.int64), categories=pd.Index(list(_KIND_NAMES), dtype=object)
        )
    }
    byte_user: list[str] = []
    byte_client: list[str] = []
    byte_code = np.full(n, -1, dtype=np.int64)
    byte_types: tuple[QuotaType, ...] = ("produce", "fetch")
    for code, quota_type in enumerate(byte_types):
        rows = kind == code
        if quota_type not in managers or not rows.any():
            continue
        tags = [managers[quota_type].tags(user, client) for user, client in pairs]
        byte_code[rows] = codes[rows] + len(byte_user)
        byte_user += [t[0] for t in tags]
        byte_client += [t[1] for t in tags]
    has_bytes = byte_code >= 0
    result["byte_user"] = _expand(byte_user, np.maximum(byte_code, 0), has_bytes)
    result["byte_client"] = _expand(byte_client, np.maximum(byte_code, 0), has_bytes)
    if "request" in managers and n:
        result["request_user"], result["request_client"] = _tags(codes, pairs, managers["request"])
    else:
        empty = _expand([], np.zeros(n, dtype=np.int64), none)
        result["request_user"] = result["request_client"] = empty
    return result


def request_path(config: QuotaConfig) -> RequestPath:
    """A broker's path for one scenario: its three managers as ``config`` sets them."""
    return RequestPath(
        config.manager("produce"), config.manager("fetch"), config.manager("request")
    )


class SplitReplay:
    """The open loop in two passes, for requests that arrive in batches, several scenarios
    at once, through the core's :class:`kquota.ReplayKernel`.

    A replay split by sensor (``--partition sensor``) puts a request's request sensor and
    its byte sensor in different partitions, so it replays the request quota first
    (:meth:`request_throttles`) and the produce and fetch quotas after
    (:meth:`byte_throttles`), given the first pass's throttles: a fetch the request quota
    throttled is not recorded. The kernel decides both passes (``quota_pass="request"``
    and ``"bytes"``); they decide what one pass over the same requests decides.

    Rows must come in replay order per sensor: time order (ties by :data:`SEQ_COLUMNS`) for
    the requests of any one ``(broker, sensor)``, within a batch and across batches, and
    each pass's batches in time order. Each broker gets a kernel per pass, kept across
    batches. The Spark job feeds it the sorted rows of a partition batch by batch;
    :func:`replay_open` feeds it one sorted group.
    """

    def __init__(self, configs: Sequence[QuotaConfig]) -> None:
        self._paths = [request_path(config) for config in configs]
        self._kernels: dict[tuple[str, str], tuple[ReplayKernel, dict[tuple[str, str], int]]] = {}
        self._last: tuple[pd.DataFrame, _Batch] | None = None

    def _batch(self, frame: pd.DataFrame) -> _Batch:
        """The converted columns of ``frame``, converted once for both passes."""
        if self._last is None or self._last[0] is not frame:
            self._last = (frame, _Batch(frame))
        return self._last[1]

    @property
    def scenarios(self) -> int:
        """How many configurations are replayed side by side."""
        return len(self._paths)

    def _feed(
        self,
        quota_pass: Literal["request", "bytes"],
        frame: pd.DataFrame,
        given: Sequence[npt.ArrayLike] | None = None,
    ) -> dict[str, Int32Array]:
        """Each scenario's throttles of every row of ``frame`` (rows x scenarios columns,
        scenario after scenario), broker by broker through that broker's kernel."""
        batch = self._batch(frame)
        n, scenarios = len(frame), self.scenarios
        out = {
            name: np.zeros((scenarios, n), dtype=np.int32)
            for name in ("produce_throttle_ms", "fetch_throttle_ms", "request_throttle_ms")
        }
        if not n:
            return out
        requests = (
            None
            if given is None
            else np.stack([np.asarray(g, dtype=np.int32) for g in given]).reshape(scenarios, n)
        )
        several = len(batch.broker_names) > 1
        for code in np.unique(batch.broker_codes).tolist():
            mine = np.flatnonzero(batch.broker_codes == code) if several else slice(None)
            key = (batch.broker_names[code], quota_pass)
            if key not in self._kernels:
                kernel = ReplayKernel([], self._paths, expiry_task_ms=None, quota_pass=quota_pass)
                self._kernels[key] = (kernel, {})
            kernel, ids = self._kernels[key]
            new = [p for p in batch.pairs if p not in ids]
            if new:
                first = kernel.add_pairs(new)
                ids.update((p, first + i) for i, p in enumerate(new))
            pair_ids = np.fromiter((ids[p] for p in batch.pairs), np.int32, len(batch.pairs))
            fed = kernel.feed(
                batch.times[mine],
                pair_ids[batch.pair_codes[mine]],
                batch.kinds[mine],
                batch.sizes[mine],
                batch.threads[mine],
                np.full(len(batch.times[mine]), -1, dtype=np.int16),
                request_throttle_ms=(
                    None if requests is None else np.ascontiguousarray(requests[:, mine]).ravel()
                ),
            )
            for name, column in out.items():
                column[:, mine] = fed[name].reshape(scenarios, -1)
        return out

    def request_throttles(self, frame: pd.DataFrame) -> list[Int32Array]:
        """Per scenario, the request-quota throttle of every row (0 without :data:`THREAD`)."""
        return list(self._feed("request", frame)["request_throttle_ms"])

    def byte_throttles(
        self, frame: pd.DataFrame, requests: Sequence[npt.ArrayLike] | None = None
    ) -> list[tuple[Int32Array, Int32Array]]:
        """Per scenario, the produce and fetch throttles of every row.

        :data:`BYTES` of ``produce`` requests go to the produce quota, of ``fetch`` requests
        to the fetch quota (other APIs get 0 for both). A fetch throttled by either quota is
        unrecorded; ``requests`` are each scenario's request-quota throttles (default: none).
        """
        if requests is None:
            requests = [np.zeros(len(frame), dtype=np.int32)] * self.scenarios
        out = self._feed("bytes", frame, requests)
        return list(zip(out["produce_throttle_ms"], out["fetch_throttle_ms"], strict=True))


class _Batch:
    """The columns of a batch both passes need, converted once."""

    def __init__(self, frame: pd.DataFrame) -> None:
        n = len(frame)
        self.times = frame[schema.TS].to_numpy(dtype=np.int64)
        self.pair_codes, self.pairs = _pair_codes(frame[schema.USER], frame[schema.CLIENT])
        self.kinds = kind_codes(frame[schema.API]) if n else np.empty(0, dtype=np.int8)
        self.sizes = frame[schema.BYTES].to_numpy(dtype=np.float64) if n else np.empty(0)
        self.threads = (
            frame[schema.THREAD].to_numpy(dtype=np.float64, na_value=np.nan)
            if schema.THREAD in frame.columns
            else np.full(n, np.nan)
        )
        if schema.BROKER in frame.columns:
            self.broker_codes, self.broker_names = _factorize(frame[schema.BROKER])
            self.broker_names = self.broker_names or [""]
        else:
            self.broker_codes = np.zeros(n, dtype=np.int64)
            self.broker_names = [""]


def applied_throttle(
    produce: npt.ArrayLike, fetch: npt.ArrayLike, request: npt.ArrayLike
) -> Int32Array:
    """What the broker applies and returns, per request, from its three quotas' throttles:
    the core's rule (:func:`kquota._core.applied_throttles`, the throttle
    :class:`kquota.RequestPath` applies): the larger, 0 when none is positive."""
    return applied_throttles(
        np.asarray(produce, dtype=np.int32),
        np.asarray(fetch, dtype=np.int32),
        np.asarray(request, dtype=np.int32),
    )


def replay_open(frame: pd.DataFrame, config: QuotaConfig) -> pd.DataFrame:
    """Open loop: every request of one broker (or several) replayed at its recorded time.

    Rows may come in any order. Returns one row per input row (same index) with
    :data:`PRODUCE_THROTTLE`, :data:`FETCH_THROTTLE`, :data:`REQUEST_THROTTLE` (each the
    manager's value, Kafka's int: a pathological quota can make it wrap negative, which
    means "not throttled") and :data:`THROTTLE` (the applied one). The request quota
    records :data:`THREAD` where it is known (a request without it is not
    request-throttled); a fetch throttled by either quota is unrecorded, as Kafka does.
    """
    order = time_order(frame)
    needed = [
        c
        for c in (
            schema.BROKER,
            schema.TS,
            schema.USER,
            schema.CLIENT,
            schema.API,
            schema.BYTES,
            schema.THREAD,
        )
        if c in frame.columns
    ]
    ordered = frame[needed].iloc[order]
    loop = SplitReplay([config])
    request = loop.request_throttles(ordered)[0]
    produce, fetch = loop.byte_throttles(ordered, [request])[0]
    columns = {}
    for name, values in (
        (schema.PRODUCE_THROTTLE, produce),
        (schema.FETCH_THROTTLE, fetch),
        (schema.REQUEST_THROTTLE, request),
    ):
        column = np.empty(len(frame), dtype=np.int32)
        column[order] = values
        columns[name] = column
    columns[schema.THROTTLE] = applied_throttle(*columns.values())
    return pd.DataFrame(columns, index=frame.index)


@dataclass(frozen=True)
class ClientLimits:
    """What bounds a client in closed loop, as Kafka's Java clients bound themselves (their
    defaults here): the produce bytes it holds unsent (``buffer.memory``), how long a
    produce may wait to be sent (``delivery.timeout.ms``) and how long any other request may
    (``default.api.timeout.ms``) but a consumer's fetch, which waits as long as it takes (a
    consumer that falls behind reads later: its lag). A produce that finds no room, or a
    request still waiting when its time runs out, is not served
    (:data:`~kquota.backtest.frames.UNSERVED`)."""

    buffer_bytes: int = 33_554_432
    delivery_timeout_ms: int = 120_000
    api_timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        for name in ("buffer_bytes", "delivery_timeout_ms", "api_timeout_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise InvalidConfigError(
                    f"invalid client limit {name} {value!r}: it must be an int > 0"
                )

    def as_tuple(self) -> tuple[int, int, int]:
        """The limits as :class:`~kquota.ReplayKernel`'s ``client_limits`` takes them."""
        return (self.buffer_bytes, self.delivery_timeout_ms, self.api_timeout_ms)


def replay_closed(
    frame: pd.DataFrame, config: QuotaConfig, clients: ClientLimits | None = None
) -> pd.DataFrame:
    """Closed loop: clients honour KIP-219, so a throttle delays the client's later requests.

    One broker's requests, replayed through the core's :class:`~kquota.ReplayKernel` in
    closed loop (Kafka's request handling one request at a time, as
    :class:`~kquota.RequestPath`). A client is a ``(user, client_id)`` connection to this
    broker. When a request sent at ``t`` is throttled for ``T`` ms (the applied throttle),
    the client sends nothing more to the broker until ``t + T``; a later request that would
    have gone out before then waits.

    With ``clients`` (bounded clients, :class:`ClientLimits`; a client id's producer,
    consumer and other requests are then three connections, each muted by its own
    throttles) a client sends what it holds as soon as it may (``sent = max(recorded, its
    last send, mute end)``), so it catches up when its demand drops; a produce that finds
    its buffer full, or a request other than a fetch still waiting when its timeout runs
    out, is not served (:data:`UNSERVED`). Without, the client's
    timeline shifts: every later request goes out that much later too (``sent =
    max(recorded + shift, mute end)``, the shift never shrinks), however far behind it falls.

    Returns the throttle columns of :func:`replay_open` plus :data:`SENT` (when the request
    reached the broker, or its client gave it up) :data:`ADDED_LATENCY` (``sent -
    recorded``) and :data:`UNSERVED`, one row per input row.
    """
    n = len(frame)
    produce = np.zeros(n, dtype=np.int32)
    fetch = np.zeros(n, dtype=np.int32)
    request = np.zeros(n, dtype=np.int32)
    sent = frame[schema.TS].to_numpy(dtype=np.int64).copy()
    unserved = np.zeros(n, dtype=np.int32)
    if n == 0:
        return _closed_frame(frame, produce, fetch, request, sent, unserved)

    order = time_order(frame)
    ordered = frame.iloc[order]
    codes, pairs = _pair_codes(ordered[schema.USER], ordered[schema.CLIENT])
    thread = (
        ordered[schema.THREAD].to_numpy(dtype=np.float64, na_value=np.nan)
        if schema.THREAD in frame.columns
        else np.full(n, np.nan)
    )
    path = RequestPath(
        config.manager("produce"), config.manager("fetch"), config.manager("request")
    )
    replay = ReplayKernel(
        pairs,
        [path],
        closed_loop=True,
        expiry_task_ms=None,
        client_limits=None if clients is None else clients.as_tuple(),
    )
    parts = [
        replay.feed(
            ordered[schema.TS].to_numpy(dtype=np.int64),
            codes.astype(np.int32),
            kind_codes(ordered[schema.API]),
            ordered[schema.BYTES].to_numpy(dtype=np.float64),
            thread,
            np.full(n, -1, dtype=np.int16),  # a produce with acks=0 has no thread time
        ),
        replay.finish(),
    ]
    position = order[np.concatenate([p["seq"] for p in parts]).astype(np.int64)]
    for name, column in (
        (schema.PRODUCE_THROTTLE, produce),
        (schema.FETCH_THROTTLE, fetch),
        (schema.REQUEST_THROTTLE, request),
        (schema.SENT, sent),
        (schema.UNSERVED, unserved),
    ):
        column[position] = np.concatenate([p[name] for p in parts])
    return _closed_frame(frame, produce, fetch, request, sent, unserved)


def _closed_frame(
    frame: pd.DataFrame,
    produce: Int32Array,
    fetch: Int32Array,
    request: Int32Array,
    sent: Int64Array,
    unserved: Int32Array | None = None,
) -> pd.DataFrame:
    if unserved is None:
        unserved = np.zeros(len(frame), dtype=np.int32)
    return pd.DataFrame(
        {
            schema.PRODUCE_THROTTLE: produce,
            schema.FETCH_THROTTLE: fetch,
            schema.REQUEST_THROTTLE: request,
            schema.THROTTLE: applied_throttle(produce, fetch, request),
            schema.SENT: sent,
            schema.ADDED_LATENCY: sent - frame[schema.TS].to_numpy(dtype=np.int64),
            schema.UNSERVED: unserved,
        },
        index=frame.index,
    )


ReplayMode = Literal["open", "closed"]
"""Open loop replays recorded times; closed loop lets throttles delay the client."""
