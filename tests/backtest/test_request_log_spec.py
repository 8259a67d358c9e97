"""The request-log reader on the points of the spec (``../shared/docs/kafka-request-log.md``)
that differ between Kafka versions or that the quota counts differently from what the line
shows: ``"records":null`` partitions, the 2.8 fetch keys, ``nodeEndpoints``, ShareFetch,
the empty fetch per version, a null client id, and the throttle of a mutation request the
broker forwarded to the controller.

Fetch responses are kio structures (Kafka's message schemas), so each expected size is
kio's own encoding of the message the line logs."""

from __future__ import annotations

import dataclasses
import datetime
from pathlib import Path
from typing import Any

import pytest
import requestlog_gen as gen
from kafka_request_json import make_message, message_module
from kquota.backtest import requestlog
from kquota.backtest.frames import API, BYTES, CLIENT
from kquota.backtest.requestlog import KAFKA_THROTTLE

pytest.importorskip("kio", reason="the generator needs kio, a dev dependency")

T0 = gen.START_MS
EMPTY_FETCH = {0: 8, **dict.fromkeys(range(1, 7), 12), **dict.fromkeys(range(7, 12), 18)}
EMPTY_FETCH |= dict.fromkeys(range(12, 19), 16)
"""Bytes Kafka counts for a fetch response with no topic (4 + body), per version."""
KEYS_2_8 = {"partitions": "partitionResponses", "partitionIndex": "partition"}
"""Fetch response keys 3.0 renamed (the records key too: ``recordSet``)."""


def _error(name: str) -> Any:
    from kio.schema.errors import ErrorCode

    return getattr(ErrorCode, name)


def _fetch_response(version: int, records: list[bytes | None], endpoints: int = 0) -> Any:
    """A kio Fetch response of ``version`` (4+) with one topic and a partition per entry
    of ``records`` (None: an error partition whose records are null)."""
    resp = message_module(1, version, "response")
    parts = tuple(
        make_message(
            resp.PartitionData,
            partition_index=i,
            error_code=_error("none" if r is not None else "topic_authorization_failed"),
            high_watermark=1000,
            last_stable_offset=1000,
            log_start_offset=0,
            preferred_read_replica=-1,
            aborted_transactions=None,
            records=r,
        )
        for i, r in enumerate(records)
    )
    topics = (
        (make_message(resp.FetchableTopicResponse, topic="orders", partitions=parts),)
        if records
        else ()
    )
    values: dict[str, Any] = {"error_code": _error("none"), "session_id": 7, "responses": topics}
    if endpoints:
        values["node_endpoints"] = tuple(
            make_message(
                resp.NodeEndpoint, node_id=n, host=f"kafka-{n}.example", port=9092, rack="r"
            )
            for n in range(endpoints)
        )
    return make_message(resp.FetchResponse, **values)


def _document(
    key: int, name: str, version: int, cid: int, *body: Any, client: str | None = "app", **line: Any
) -> str:
    """A line at ``T0 + cid``; ``body``, ``line``: :func:`gen.completed_line`'s."""
    return gen.completed_line(T0 + cid, key, name, version, cid, *body, client=client, **line)


def _fetch_line(
    cid: int, version: int, response: dict[str, Any], client: str | None = "app"
) -> str:
    request: dict[str, Any] = {"maxWaitMs": 500, "minBytes": 1, "topics": []}
    if version <= 14:
        request["replicaId"] = -1
    return _document(1, "FETCH", version, cid, request, response, client=client)


def _as_2_8(response: dict[str, Any]) -> dict[str, Any]:
    """A 3.0+ Fetch response's JSON under the keys of Kafka 2.8."""
    names = KEYS_2_8 | {"recordsSizeInBytes": "recordSetSizeInBytes", "records": "recordSet"}
    return {k: gen.renamed(v, names) if k == "responses" else v for k, v in response.items()}


def _rows(spark: Any, folder: Path, lines: list[str]) -> Any:
    broker = folder / "broker-1"
    broker.mkdir(parents=True, exist_ok=True)
    (broker / "kafka-request.log").write_text("\n".join(lines) + "\n")
    frame = requestlog.read(spark, str(folder)).frame.toPandas()
    assert frame["_kq_reason"].isna().all() or set(frame["_kq_reason"].dropna()) == {
        requestlog.FORWARDED
    }, frame["_kq_example"].dropna().tolist()
    rows = frame[frame["_kq_reason"].isna()]
    return rows.set_index(requestlog.CORRELATION_ID)


# -- plain functions: the sizes the spec gives, from kio --------------------------------------


@pytest.mark.parametrize("version", range(4, 19))
def test_null_records_encode_as_an_empty_record_set(version: int) -> None:
    null = _fetch_response(version, [None, b"x" * 100])
    empty = _fetch_response(version, [b"", b"x" * 100])
    assert gen.encoded_size(null) == gen.encoded_size(empty)
    document = gen.kafka_json(null)["responses"][0]["partitions"][0]
    assert document["records"] is None and "recordsSizeInBytes" not in document


@pytest.mark.parametrize("version", range(4, 19))
def test_the_empty_fetch_of_each_version(version: int) -> None:
    assert 4 + gen.encoded_size(_fetch_response(version, [])) == EMPTY_FETCH[version]


# -- Spark: each point read from lines ----------------------------------------------------------


@pytest.mark.slow
def test_records_null_partitions_count_as_empty_ones(spark: Any, tmp_path: Path) -> None:
    lines, want = [], {}
    for version in range(4, 19):
        response = _fetch_response(version, [None, b"x" * 300, None])
        lines.append(_fetch_line(version, version, gen.kafka_json(response)))
        want[version] = 4 + gen.encoded_size(response)
    assert '"records":null' in lines[-1]
    rows = _rows(spark, tmp_path, lines)
    assert rows[BYTES].to_dict() == want


@pytest.mark.slow
def test_the_fetch_keys_of_kafka_2_8_are_read(spark: Any, tmp_path: Path) -> None:
    # Kafka 2.8 answers fetch v0-12; v4-12 have kio schemas
    lines, want = [], {}
    for version in range(4, 13):
        response = _fetch_response(version, [b"x" * 500, b"y" * 20_000, None])
        document = _as_2_8(gen.kafka_json(response))
        lines.append(_fetch_line(version, version, document))
        want[version] = 4 + gen.encoded_size(response)
    assert '"partitionResponses":[{"partition":0,' in lines[0]
    assert '"recordSetSizeInBytes":500' in lines[0] and '"recordSet":null' in lines[0]
    assert "recordsSizeInBytes" not in "".join(lines)
    rows = _rows(spark, tmp_path, lines)
    assert rows[BYTES].to_dict() == want
    assert (rows[BYTES] > 20_500).all()


@pytest.mark.slow
def test_node_endpoints_are_not_in_the_fetch_size(spark: Any, tmp_path: Path) -> None:
    lines, want = [], {}
    for version in range(16, 19):
        response = _fetch_response(version, [b"x" * 100], endpoints=2)
        lines.append(_fetch_line(version, version, gen.kafka_json(response)))
        without = dataclasses.replace(response, node_endpoints=())
        want[version] = 4 + gen.encoded_size(without)
        assert gen.encoded_size(response) > gen.encoded_size(without)
    assert '"nodeEndpoints":[{' in lines[0]
    rows = _rows(spark, tmp_path, lines)
    assert rows[BYTES].to_dict() == want


@pytest.mark.slow
def test_an_empty_fetch_counts_what_its_version_encodes(spark: Any, tmp_path: Path) -> None:
    lines = []
    for version in range(19):
        document: dict[str, Any] = {"responses": []}
        if version >= 1:
            document = {"throttleTimeMs": 0, **document}
        if version >= 7:
            document |= {"errorCode": 0, "sessionId": 7}
        lines.append(_fetch_line(version, version, document))
    rows = _rows(spark, tmp_path, lines)
    assert rows[BYTES].to_dict() == EMPTY_FETCH


@pytest.mark.slow
def test_a_null_client_id_is_the_empty_client_id(spark: Any, tmp_path: Path) -> None:
    # before 3.1 a request without a client id prints "clientId":null; Produce v8 and
    # Fetch v12 are what a 3.0 client sends
    req = message_module(0, 8, "request")
    produce = make_message(
        req.ProduceRequest,
        transactional_id=None,
        acks=1,
        timeout=datetime.timedelta(milliseconds=30_000),
        topic_data=(
            make_message(
                req.TopicProduceData,
                name="orders",
                partition_data=(
                    make_message(req.PartitionProduceData, index=0, records=b"x" * 70),
                ),
            ),
        ),
    )
    from kio.schema.request_header.v1.header import RequestHeader

    null_header = RequestHeader(
        request_api_key=0, request_api_version=8, correlation_id=1, client_id=None
    )
    empty_header = dataclasses.replace(null_header, client_id="")
    assert gen.encoded_size(null_header) == gen.encoded_size(empty_header)
    fetch = _fetch_response(12, [b"x" * 10])
    lines = [
        _document(0, "PRODUCE", 8, 1, gen.kafka_json(produce), "", client=None),
        _fetch_line(2, 12, gen.kafka_json(fetch), client=None),
        _fetch_line(3, 12, gen.kafka_json(fetch), client="app"),
    ]
    assert lines[0].count('"clientId":null') == 1
    rows = _rows(spark, tmp_path, lines)
    assert rows[CLIENT].to_dict() == {1: "", 2: "", 3: "app"}
    produce_size = gen.encoded_size(null_header) + gen.encoded_size(produce)
    assert rows[BYTES].to_dict() == {
        1: produce_size,
        2: 4 + gen.encoded_size(fetch),
        3: 4 + gen.encoded_size(fetch),
    }


@pytest.mark.slow
def test_a_forwarded_mutation_gets_the_larger_of_its_two_throttles(
    spark: Any, tmp_path: Path
) -> None:
    create = {
        "topics": [
            {
                "name": "t",
                "numPartitions": 4,
                "replicationFactor": 1,
                "assignments": [],
                "configs": [],
            }
        ],
        "timeoutMs": 30000,
        "validateOnly": False,
    }
    created = {
        "throttleTimeMs": 3966,
        "topics": [{"name": "t", "errorCode": 89, "errorMessage": "throttled"}],
    }
    grow = {"topics": [{"name": "t", "count": 8, "assignments": None}], "timeoutMs": 1000}
    grown = {"throttleTimeMs": 50, "results": [{"name": "t", "errorCode": 0}]}
    delete = {"topics": [{"name": "t", "topicId": "AAAAAAAAAAAAAAAAAAAAAA"}], "timeoutMs": 1000}
    fetch = gen.kafka_json(_fetch_response(12, [b"x"]))
    lines = [
        # the controller's line of the forwarded request (skipped), then the broker's:
        # its own throttle is the request quota's, the response holds the mutation one
        _document(19, "CREATE_TOPICS", 7, 1, create, created, throttle=3966, forwarded=True),
        _document(19, "CREATE_TOPICS", 7, 1, create, created, throttle=0),
        _document(37, "CREATE_PARTITIONS", 3, 2, grow, grown, throttle=120),
        _document(20, "DELETE_TOPICS", 6, 3, delete, "", throttle=7),
        _document(20, "DELETE_TOPICS", 6, 4, delete, {"throttleTimeMs": 900, "responses": []}),
        # other APIs keep the line's throttle whatever their response says
        _fetch_line(5, 12, {**fetch, "throttleTimeMs": 800}),
    ]
    rows = _rows(spark, tmp_path, lines)
    assert rows[KAFKA_THROTTLE].to_dict() == {1: 3966, 2: 120, 3: 7, 4: 900, 5: 0}
    assert rows.loc[1, API] == "create_topics"


@pytest.mark.slow
def test_share_fetch_lines_are_counted_and_reported(spark: Any, tmp_path: Path) -> None:
    share_request = {"groupId": "g", "memberId": "m", "shareSessionEpoch": 0, "topics": []}
    share_response = {
        "throttleTimeMs": 0,
        "errorCode": 0,
        "responses": [
            {
                "topicId": "AAAAAAAAAAAAAAAAAAAAAA",
                "partitions": [{"partitionIndex": 0, "errorCode": 0, "records": ""}],
            }
        ],
    }
    fetch = gen.kafka_json(_fetch_response(12, [b"x" * 10]))
    lines = [
        _document(78, "SHARE_FETCH", 1, 1, share_request, share_response),
        _document(78, "SHARE_FETCH", 1, 2, share_request, share_response),
        _fetch_line(3, 12, fetch),
    ]
    broker = tmp_path / "logs" / "broker-1"
    broker.mkdir(parents=True)
    (broker / "kafka-request.log").write_text("\n".join(lines) + "\n")
    summary = requestlog.import_log(spark, str(tmp_path / "logs"), str(tmp_path / "out"))
    assert summary.share_fetches == 2
    assert summary.rows == 3
    assert any(
        note.startswith("2 ShareFetch request(s): ") and requestlog.SHARE_FETCH_BYTES in note
        for note in summary.notes()
    )
    rows = spark.read.parquet(str(tmp_path / "out")).toPandas()
    shares = rows[rows[API] == "share_fetch"]
    assert len(shares) == 2 and (shares[BYTES] == 0).all()
    described = requestlog.describe(spark, str(tmp_path / "logs"))
    assert described.summary.share_fetches == 2
    assert f"ShareFetch requests: 2 ({requestlog.SHARE_FETCH_BYTES})" in described.text()
