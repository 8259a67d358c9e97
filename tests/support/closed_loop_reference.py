"""The closed loop in plain Python, one request at a time through the core's
:class:`kquota.RequestPath`: a straightforward ``replay_closed``, the tests' second oracle
for :class:`kquota.ReplayKernel` in closed loop (which the back-test runs, in
``kquota.backtest.kernel.replay_closed`` and on Spark)."""

from __future__ import annotations

import heapq

import numpy as np
import pandas as pd
from kquota import RequestPath
from kquota.backtest.kernel import (
    API,
    BYTES,
    CLIENT,
    THREAD,
    TS,
    USER,
    kinds,
    time_order,
)
from kquota.backtest.kernel.replay import _closed_frame, _pair_codes
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
