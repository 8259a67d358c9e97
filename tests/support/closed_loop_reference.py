"""The closed loop in plain Python, one request at a time through the core's
:class:`kquota.RequestPath`: a straightforward ``replay_closed``, the tests' second oracle
for :class:`kquota.ReplayKernel` in closed loop (which the back-test runs, in
``kquota.backtest.frames.replay_closed`` and on Spark)."""

from __future__ import annotations

import heapq
from collections import deque

import numpy as np
import pandas as pd
from kquota import RequestPath
from kquota.backtest.frames import (
    API,
    BYTES,
    CLIENT,
    THREAD,
    TS,
    UNSERVED_BUFFER_FULL,
    UNSERVED_TIMED_OUT,
    USER,
    ClientLimits,
    kinds,
    time_order,
)
from kquota.backtest.frames.replay import _closed_frame, _pair_codes
from kquota.config import QuotaConfig


def replay_closed(frame: pd.DataFrame, config: QuotaConfig) -> pd.DataFrame:
    """Closed loop: clients honour KIP-219, so a throttle delays the client's later requests.

    One broker's requests, replayed one event at a time through the core. A client is a
    ``(user, client_id)`` connection to this broker. When a request sent at ``t`` is
    throttled for ``T`` ms (the applied throttle), the client sends nothing more to the
    broker until ``t + T``; a later request that would have gone out before then waits, and
    the client's timeline shifts: every later request goes out that much later too
    (``sent = max(recorded + shift, mute end)``, the shift never shrinks). Returns the
    throttle columns of :func:`replay_open` plus :data:`SENT` (when the request reached the
    broker) and :data:`ADDED_LATENCY` (``sent - recorded``), one row per input row.
    """
    n = len(frame)
    produce = np.zeros(n, dtype=np.int32)
    fetch = np.zeros(n, dtype=np.int32)
    request = np.zeros(n, dtype=np.int32)
    sent = frame[TS].to_numpy(dtype=np.int64).copy()
    if n == 0:
        return _closed_frame(frame, produce, fetch, request, sent)

    order = time_order(frame)
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n, dtype=np.int64)
    codes, pairs = _pair_codes(frame[USER], frame[CLIENT])
    # each client's rows in replay order
    by_client = order[np.argsort(codes[order], kind="stable")]
    starts = np.searchsorted(codes[by_client], np.arange(len(pairs) + 1))
    queues = [by_client[starts[c] : starts[c + 1]].tolist() for c in range(len(pairs))]

    kind = kinds(frame[API]).tolist()
    size = frame[BYTES].to_numpy(dtype=np.float64).tolist()
    recorded = frame[TS].to_numpy(dtype=np.int64).tolist()
    ranks = rank.tolist()
    threads: list[float | None] = [None] * n
    if THREAD in frame.columns:
        column = frame[THREAD]
        known = column.notna().to_numpy()
        values = column.to_numpy(dtype=np.float64, na_value=np.nan).tolist()
        threads = [v if k else None for v, k in zip(values, known.tolist(), strict=True)]

    # Kafka's request handling, one request at a time, in the core (a manager without
    # quotas measures nothing; an unknown thread time skips the request quota).
    path = RequestPath(
        config.manager("produce"), config.manager("fetch"), config.manager("request")
    )
    record = path.record

    shift = [0] * len(pairs)
    mute_end = [-(2**62)] * len(pairs)
    cursor = [0] * len(pairs)
    heap = [(recorded[q[0]], ranks[q[0]], c) for c, q in enumerate(queues) if q]
    heapq.heapify(heap)
    out_produce, out_fetch, out_request = [0] * n, [0] * n, [0] * n
    out_sent = [0] * n
    while heap:
        now, _, c = heapq.heappop(heap)
        i = queues[c][cursor[c]]
        user, client = pairs[c]
        outcome = record(user, client, kind[i], size[i], threads[i], now_ms=now)
        out_produce[i] = outcome.produce_throttle_ms
        out_fetch[i] = outcome.fetch_throttle_ms
        out_request[i] = outcome.request_throttle_ms
        out_sent[i] = now
        applied = outcome.throttle_ms
        if applied > 0 and now + applied > mute_end[c]:
            mute_end[c] = now + applied
        cursor[c] += 1
        if cursor[c] < len(queues[c]):
            j = queues[c][cursor[c]]
            due = recorded[j] + shift[c]
            if due < mute_end[c]:
                due = mute_end[c]
            shift[c] = due - recorded[j]
            heapq.heappush(heap, (due, ranks[j], c))
    produce[:] = out_produce
    fetch[:] = out_fetch
    request[:] = out_request
    sent[:] = out_sent
    return _closed_frame(frame, produce, fetch, request, sent)


def replay_closed_bounded(
    frame: pd.DataFrame, config: QuotaConfig, limits: ClientLimits
) -> pd.DataFrame:
    """Closed loop with bounded clients, one event at a time (a client id's producer,
    consumer and other requests are three clients): a request joins its client at
    its recorded time (a produce only if the client's unsent produce bytes leave room for
    it, else it is not served), and the client sends what it holds as soon as its channel
    is unmuted, in order; a request still waiting when its timeout runs out is given up
    then (a fetch waits as long as it takes). The columns of
    ``kquota.backtest.frames.replay_closed`` with ``clients``."""
    n = len(frame)
    produce = np.zeros(n, dtype=np.int32)
    fetch = np.zeros(n, dtype=np.int32)
    request = np.zeros(n, dtype=np.int32)
    sent = frame[TS].to_numpy(dtype=np.int64).copy()
    unserved = np.zeros(n, dtype=np.int32)
    if n == 0:
        return _closed_frame(frame, produce, fetch, request, sent, unserved)
    order = time_order(frame).tolist()
    rank = [0] * n
    for r, i in enumerate(order):
        rank[i] = r
    codes, pairs = _pair_codes(frame[USER], frame[CLIENT])
    kind = kinds(frame[API]).tolist()
    # a client id's producer, consumer and the rest are connections of their own
    lanes = {"produce": 0, "fetch": 1}
    code = [3 * c + lanes.get(k, 2) for c, k in zip(codes.tolist(), kind, strict=True)]
    size = frame[BYTES].to_numpy(dtype=np.float64).tolist()
    recorded = frame[TS].to_numpy(dtype=np.int64).tolist()
    threads: list[float | None] = [None] * n
    if THREAD in frame.columns:
        column = frame[THREAD]
        known = column.notna().to_numpy().tolist()
        values = column.to_numpy(dtype=np.float64, na_value=np.nan).tolist()
        threads = [v if k else None for v, k in zip(values, known, strict=True)]
    path = RequestPath(
        config.manager("produce"), config.manager("fetch"), config.manager("request")
    )
    never = -(2**62)
    clients = 3 * len(pairs)
    queue: list[deque[int]] = [deque() for _ in range(clients)]
    buffered = [0.0] * clients
    last = [never] * clients
    mute_end = [never] * clients
    scheduled = [False] * clients
    giving_up = [False] * clients
    heap: list[tuple[int, int, int]] = []

    def timeout(i: int) -> float:
        if kind[i] == "fetch":  # a consumer that falls behind reads later
            return float("inf")
        return limits.delivery_timeout_ms if kind[i] == "produce" else limits.api_timeout_ms

    def schedule(c: int) -> None:
        if scheduled[c] or not queue[c]:
            return
        j = queue[c][0]
        ready = max(recorded[j], last[c], mute_end[c])
        expiry = recorded[j] + timeout(j)
        giving_up[c] = ready > expiry
        scheduled[c] = True
        heapq.heappush(heap, (max(expiry, last[c]) if giving_up[c] else ready, rank[j], c))

    def drain(limit: float) -> None:
        while heap and heap[0][0] <= limit:
            now, _, c = heapq.heappop(heap)
            scheduled[c] = False
            i = queue[c].popleft()
            last[c] = now
            sent[i] = now
            if kind[i] == "produce":
                buffered[c] -= size[i]
            if giving_up[c]:
                unserved[i] = UNSERVED_TIMED_OUT
            else:
                user, client = pairs[c // 3]
                outcome = path.record(user, client, kind[i], size[i], threads[i], now_ms=now)
                produce[i] = outcome.produce_throttle_ms
                fetch[i] = outcome.fetch_throttle_ms
                request[i] = outcome.request_throttle_ms
                if outcome.throttle_ms > 0:
                    mute_end[c] = max(mute_end[c], now + outcome.throttle_ms)
            schedule(c)

    for i in order:
        drain(recorded[i])
        c = code[i]
        if kind[i] == "produce":
            if buffered[c] + size[i] > limits.buffer_bytes:
                unserved[i] = UNSERVED_BUFFER_FULL
                continue
            buffered[c] += size[i]
        queue[c].append(i)
        schedule(c)
    drain(float("inf"))
    return _closed_frame(frame, produce, fetch, request, sent, unserved)
