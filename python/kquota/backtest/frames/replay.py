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
from kquota._core import applied_throttles, unrecorded_by_request
from kquota.backtest.frames import schema
from kquota.backtest.frames.schema import BoolArray, FloatArray, Int32Array, Int64Array
from kquota.config import QuotaConfig
from kquota.exceptions import InvalidConfigError
from kquota.quota_types import QuotaType

__all__ = [
    "ClientLimits",
    "OpenLoop",
    "ReplayMode",
    "applied_throttle",
    "kind_codes",
    "kinds",
    "replay_closed",
    "replay_open",
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


class OpenLoop:
    """Open-loop replay of requests that arrive in batches, for several scenarios at once.

    Rows must come in replay order per sensor: time order (ties by :data:`SEQ_COLUMNS`) for
    the requests of any one ``(broker, sensor)``, within a batch and across batches; how
    different sensors interleave does not matter. Each scenario (one
    :class:`~kquota.config.QuotaConfig`) gets one manager per broker and quota type, built
    on first use and kept across batches, and every batch goes through the core's
    :meth:`~kquota.QuotaManager.record_batch`. The Spark job feeds it the sorted rows of a
    partition batch by batch; :func:`replay_open` feeds it one sorted group.
    """

    def __init__(self, configs: Sequence[QuotaConfig]) -> None:
        self._configs = list(configs)
        self._managers: dict[tuple[int, str, QuotaType], QuotaManager] = {}
        self._last: tuple[pd.DataFrame, _Batch] | None = None

    def _batch(self, frame: pd.DataFrame) -> _Batch:
        """The converted columns of ``frame``, converted once for both quota families."""
        if self._last is None or self._last[0] is not frame:
            self._last = (frame, _Batch(frame))
        return self._last[1]

    @property
    def scenarios(self) -> int:
        """How many configurations are replayed side by side."""
        return len(self._configs)

    def _record(
        self,
        scenario: int,
        quota_type: QuotaType,
        batch: _Batch,
        rows: Int64Array,
        values: FloatArray,
        unrecord_if: BoolArray | None = None,
    ) -> Int32Array:
        """Throttles of ``rows`` (positions in ``batch``, in replay order) for one quota type."""
        out = np.zeros(len(rows), dtype=np.int32)
        config = self._configs[scenario]
        if not len(rows) or not config.quotas(quota_type):  # Kafka measures nothing then
            return out
        brokers = batch.broker_codes[rows]
        for code in np.unique(brokers).tolist():
            mine = np.flatnonzero(brokers == code) if len(batch.broker_names) > 1 else None
            picked = rows if mine is None else rows[mine]
            key = (scenario, batch.broker_names[code], quota_type)
            manager = self._managers.get(key)
            if manager is None:
                manager = self._managers[key] = config.manager(quota_type)
            drops = None
            if unrecord_if is not None:
                drops = unrecord_if if mine is None else unrecord_if[mine]
            throttles = manager.record_batch(
                batch.times[picked],
                batch.pair_codes[picked],
                values if mine is None else values[mine],
                batch.pairs,
                drops,
            )
            if mine is None:
                out[:] = throttles
            else:
                out[mine] = throttles
        return out

    def request_throttles(self, frame: pd.DataFrame) -> list[Int32Array]:
        """Per scenario, the request-quota throttle of every row (0 without :data:`THREAD`)."""
        batch = self._batch(frame)
        outs = []
        known = (
            np.flatnonzero(frame[schema.THREAD].notna().to_numpy())
            if schema.THREAD in frame.columns
            else np.empty(0, dtype=np.int64)
        )
        values = (
            frame[schema.THREAD].to_numpy(dtype=np.float64, na_value=np.nan)[known]
            if len(known)
            else np.empty(0)
        )
        for scenario in range(self.scenarios):
            out = np.zeros(len(frame), dtype=np.int32)
            out[known] = self._record(scenario, "request", batch, known, values)
            outs.append(out)
        return outs

    def byte_throttles(
        self, frame: pd.DataFrame, requests: Sequence[npt.ArrayLike] | None = None
    ) -> list[tuple[Int32Array, Int32Array]]:
        """Per scenario, the produce and fetch throttles of every row.

        :data:`BYTES` of ``produce`` requests go to the produce quota, of ``fetch`` requests
        to the fetch quota (other APIs get 0 for both). A fetch throttled by either quota is
        unrecorded; ``requests`` are each scenario's request-quota throttles (default: none).
        """
        batch = self._batch(frame)
        n = len(frame)
        kind = kind_codes(frame[schema.API]) if n else np.empty(0, dtype=np.int8)
        size = frame[schema.BYTES].to_numpy(dtype=np.float64) if n else np.empty(0)
        produce_rows = np.flatnonzero(kind == 0)
        fetch_rows = np.flatnonzero(kind == 1)
        outs = []
        for scenario in range(self.scenarios):
            produce = np.zeros(n, dtype=np.int32)
            fetch = np.zeros(n, dtype=np.int32)
            produce[produce_rows] = self._record(
                scenario, "produce", batch, produce_rows, size[produce_rows]
            )
            throttled = (
                np.zeros(len(fetch_rows), dtype=np.bool_)
                if requests is None
                else _unrecord_if(np.asarray(requests[scenario])[fetch_rows])
            )
            fetch[fetch_rows] = self._record(
                scenario, "fetch", batch, fetch_rows, size[fetch_rows], throttled
            )
            outs.append((produce, fetch))
        return outs


class _Batch:
    """The columns of a batch every quota type needs, converted once."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.times = frame[schema.TS].to_numpy(dtype=np.int64)
        self.pair_codes, self.pairs = _pair_codes(frame[schema.USER], frame[schema.CLIENT])
        if schema.BROKER in frame.columns:
            self.broker_codes, self.broker_names = _factorize(frame[schema.BROKER])
            self.broker_names = self.broker_names or [""]
        else:
            self.broker_codes = np.zeros(len(frame), dtype=np.int64)
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


def _unrecord_if(request_throttles: npt.ArrayLike) -> BoolArray:
    """Which fetches the request quota throttled, for the fetch manager's batch call.

    The open loop records each quota type as one batch, so it cannot call the core's
    per-request :class:`kquota.RequestPath`; it applies the core's unrecord rule in two
    halves: ``record_batch`` on the fetch manager takes the fetch half itself, and
    :func:`kquota._core.unrecorded_by_request` is the request half, passed as its
    ``unrecord_if``. The property tests check the open loop against the core's path.
    """
    return unrecorded_by_request(np.asarray(request_throttles, dtype=np.int32))


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
    loop = OpenLoop([config])
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
