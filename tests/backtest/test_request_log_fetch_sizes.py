"""A throttled fetch's size, rebuilt on import from a later fetch from the same position,
else from what the produce lines show its partitions held.

Kafka answers a throttled consumer fetch empty after it has charged (then taken back) the
size of the response it would have sent, so the line shows no size. The import gives the
throttled fetch the size of the same connection's next unthrottled fetch from the same
partitions and offsets (or, in an incremental session, the next fetch changing nothing),
and counts the fetches it could not size. The lines here are written by hand so that each
case is one of those rules; the real-broker case is in ``test_request_log_agreement.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest
import requestlog_gen as gen
from kquota.backtest import requestlog
from kquota.backtest.requestlog import import_job

pytestmark = pytest.mark.slow

START_MS = 1_717_430_400_000


def _fetch(
    correlation: int,
    connection: str,
    offset: int | None,
    records: int,
    throttle: int = 0,
    epoch: int = -1,
) -> dict[str, Any]:
    """A consumer Fetch v11 line's object: one partition from ``offset`` (``None``: an
    incremental fetch listing nothing), answered with ``records`` bytes, or empty when
    ``throttle`` > 0 as Kafka answers a throttled fetch."""
    partitions = (
        []
        if offset is None
        else [
            {
                "topic": "orders",
                "partitions": [
                    {
                        "partition": 0,
                        "currentLeaderEpoch": 0,
                        "fetchOffset": offset,
                        "logStartOffset": -1,
                        "partitionMaxBytes": 1048576,
                    }
                ],
            }
        ]
    )
    request = {
        "replicaId": -1,
        "maxWaitMs": 500,
        "minBytes": 1,
        "maxBytes": 52428800,
        "isolationLevel": 0,
        "sessionId": 0 if epoch <= 0 else 9,
        "sessionEpoch": epoch,
        "topics": partitions,
        "forgottenTopicsData": [],
        "rackId": "",
    }
    answered = [
        {
            "topic": "orders",
            "partitions": [
                {
                    "partitionIndex": 0,
                    "errorCode": 0,
                    "highWatermark": 5000,
                    "lastStableOffset": 5000,
                    "logStartOffset": 0,
                    "abortedTransactions": None,
                    "preferredReadReplica": -1,
                    "recordsSizeInBytes": records,
                }
            ],
        }
    ]
    response = {
        "throttleTimeMs": throttle,
        "errorCode": 0,
        "sessionId": 0 if epoch <= 0 else 9,
        "responses": [] if throttle > 0 else answered,
    }
    return {
        "isForwarded": False,
        "requestHeader": {
            "requestApiKey": 1,
            "requestApiVersion": 11,
            "correlationId": correlation,
            "clientId": "reader",
            "requestApiKeyName": "FETCH",
        },
        "request": request,
        "response": response,
        "connection": connection,
        "totalTimeMs": 1.5,
        "requestQueueTimeMs": 0.1,
        "localTimeMs": 0.5,
        "remoteTimeMs": 0.0,
        "throttleTimeMs": throttle,
        "responseQueueTimeMs": 0.1,
        "sendTimeMs": 0.2,
        "securityProtocol": "PLAINTEXT",
        "principal": "User:ANONYMOUS",
        "listener": "PLAINTEXT",
        "clientInformation": {"softwareName": "librdkafka", "softwareVersion": "2.6.1"},
    }


A = "127.0.0.1:9092-127.0.0.1:50001-0-1"
B = "127.0.0.1:9092-127.0.0.1:50002-0-2"
FETCHES = [
    # full fetches (librdkafka's): a throttled fetch from offset 100, throttled again, then
    # served from there
    _fetch(1, A, 0, 600_000),
    _fetch(2, A, 100, 0, throttle=900),
    _fetch(3, A, 100, 0, throttle=300),
    _fetch(4, A, 100, 700_000),
    # throttled from 200, but the next fetch reads from 300: nothing bounds its size
    _fetch(5, A, 200, 0, throttle=400),
    _fetch(6, A, 300, 500_000),
    # another connection's throttled fetch from 300: A's fetch from 300 is not its own
    _fetch(7, B, 300, 0, throttle=200),
    # an incremental session: a throttled fetch moving the position, then one changing
    # nothing, served
    _fetch(8, B, 400, 0, throttle=500, epoch=3),
    _fetch(9, B, None, 300_000, epoch=4),
    # a throttled fetch at the end of the log: no later fetch at all
    _fetch(10, A, 900, 0, throttle=100),
]


def _write(folder: Path, objects: list[dict[str, Any]] = FETCHES) -> Path:
    """Broker 1's log of ``objects``, a second apart, under ``folder``; returns ``folder``."""
    path = folder / "1" / "kafka-request.log"
    path.parent.mkdir(parents=True)
    lines = [
        gen.line(START_MS + 1000 * i, "DEBUG", json.dumps(f, separators=(",", ":")))
        for i, f in enumerate(objects)
    ]
    path.write_text("\n".join(lines) + "\n")
    return folder


def _imported(spark: Any, tmp_path: Path) -> tuple[requestlog.LogSummary, list[dict[str, Any]]]:
    folder = _write(tmp_path)
    out = tmp_path / "traffic"
    summary = requestlog.import_log(spark, str(folder), str(out))
    rows = pq.read_table(out).to_pylist()
    return summary, rows


def _check(summary: requestlog.LogSummary, rows: list[dict[str, Any]]) -> None:
    # the rows keep the log's order
    assert [r["correlation_id"] for r in rows] == [
        f["requestHeader"]["correlationId"] for f in FETCHES
    ]
    size = {r["correlation_id"]: r["bytes"] for r in rows}
    empty = size[10]
    assert size[4] > 700_000 > empty
    assert size[2] == size[3] == size[4], (
        "both throttled fetches from 100 take the served one's size"
    )
    assert size[8] == size[9] > 300_000
    # no later fetch from the same position on the same connection: the empty size
    assert size[5] == size[7] == size[10] == empty
    assert summary.throttled_fetches == 6
    assert summary.rebuilt_fetches == 3
    note = summary.fetch_note()
    assert note.startswith("6 throttled fetch(es)") and "3 sized as" in note
    # no produce line says what their partitions held
    assert summary.bounded_fetches == 0 and "3 that neither sizes" in note
    assert note in summary.notes()


def test_throttled_fetches_take_the_next_fetch_from_their_position(
    spark: Any, tmp_path: Path
) -> None:
    _check(*_imported(spark, tmp_path))


def test_a_shuffled_join_keeps_the_logs_order(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """More rebuilt sizes than are broadcast: the same rows, in the same order."""
    monkeypatch.setattr(import_job, "BROADCAST_ROWS", 0)
    _check(*_imported(spark, tmp_path))


def test_a_log_without_throttled_fetches_is_imported_as_logged(spark: Any, tmp_path: Path) -> None:
    served = [f for f in FETCHES if f["throttleTimeMs"] == 0]
    folder = _write(tmp_path / "log", served)
    summary = requestlog.import_log(spark, str(folder), str(tmp_path / "traffic"))
    assert summary.throttled_fetches == summary.rebuilt_fetches == 0
    assert not any("throttled fetch" in n for n in summary.notes())


def _produce(correlation: int, offset: int, size: int, partition: int = 0) -> dict[str, Any]:
    """A Produce v8 line's object: one batch of ``size`` bytes to ``orders``, written at
    ``offset``."""
    line = _fetch(correlation, A, 0, 0)
    line["requestHeader"].update(requestApiKey=0, requestApiVersion=8, requestApiKeyName="PRODUCE")
    line["requestHeader"]["clientId"] = "writer"
    line["request"] = {
        "transactionalId": None,
        "acks": -1,
        "timeoutMs": 30000,
        "topicData": [
            {
                "name": "orders",
                "partitionData": [{"index": partition, "recordsSizeInBytes": size}],
            }
        ],
    }
    line["response"] = {
        "responses": [
            {
                "name": "orders",
                "partitionResponses": [{"index": partition, "errorCode": 0, "baseOffset": offset}],
            }
        ],
        "throttleTimeMs": 0,
    }
    return line


def test_throttled_fetches_no_later_fetch_sizes_are_sized_from_the_produce_lines(
    spark: Any, tmp_path: Path
) -> None:
    lines = [
        _produce(1, 900, 400_000),
        _produce(2, 950, 800_000),
        # from 900: Kafka would have read 1 MiB of the 1.2 MB there
        _fetch(3, A, 900, 0, throttle=700),
        # from 950: the whole first batch (0.8 MB), and no more
        _fetch(4, B, 950, 0, throttle=600),
        _produce(5, 1000, 300_000),
        # from 1000 after that batch arrived: the batch
        _fetch(6, A, 1000, 0, throttle=500),
        # from 1100, past every batch: nothing more was produced
        _fetch(7, A, 1100, 0, throttle=400),
        # from 920, inside a batch the log shows: nothing says what is there
        _fetch(8, B, 920, 0, throttle=300),
        # an incremental fetch lists only what changed: not sized
        _fetch(9, B, 950, 0, throttle=200, epoch=5),
    ]
    folder = _write(tmp_path / "log", lines)
    summary = requestlog.import_log(spark, str(folder), str(tmp_path / "traffic"))
    size = {
        r["correlation_id"]: r["bytes"]
        for r in pq.read_table(tmp_path / "traffic").to_pylist()
        if r["api"] == "fetch"
    }
    # Fetch v11's response to one partition of "orders": 72 bytes and the records
    # (throttle, error, session, one topic of 2 + 6 + 4 bytes, a partition of 42)
    empty = 4 + 4 + 2 + 4 + 4 + (2 + 6 + 4) + 42
    assert size[3] == empty + 1_048_576
    assert size[4] == empty + 800_000
    assert size[6] == empty + 300_000
    assert size[7] == empty
    assert summary.throttled_fetches == 6
    assert summary.rebuilt_fetches == 0
    assert summary.bounded_fetches == 4
    # as logged: a throttled fetch counts no bytes
    assert size[8] == size[9] == 0
    assert "4 with no such fetch sized from the produce lines" in summary.fetch_note()
    assert "2 that neither sizes" in summary.fetch_note()
