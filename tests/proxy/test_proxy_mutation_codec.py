"""``kquota.proxy.mutation``, the asyncio data path's reading and answering of
controller mutations, on frames encoded with kio (through a running proxy:
``test_proxy_create_partitions.py``)."""

from __future__ import annotations

import datetime
import struct
import uuid
from typing import Any

import pytest

pytest.importorskip("kio")

from kio.schema.create_partitions.v3 import request as cp_request
from kio.schema.create_topics.v7 import request as ct_request
from kio.schema.delete_topics.v6 import request as dt_request
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta
from kquota.proxy import codec
from kquota.proxy import mutation as mutations

TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=30))


def _frame(body: Any, correlation_id: int, client_id: str = "scripted") -> bytes:
    """A request frame (without its size) of kio ``body``."""
    header = type(body).__header_schema__(
        request_api_key=i16(type(body).__api_key__),
        request_api_version=i16(type(body).__version__),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    return codec.encode(header, body)[4:]


def _parse(frame: bytes) -> mutations.MutationRequest:
    header = codec.parse_request_header(frame)
    return mutations.parse(header.api, frame, header)


def _create_partitions(*topics: tuple[str, int]) -> Any:
    return cp_request.CreatePartitionsRequest(
        topics=tuple(
            cp_request.CreatePartitionsTopic(name=n, count=i32(c), assignments=None)
            for n, c in topics
        ),
        timeout=TIMEOUT,
        validate_only=False,
    )


def test_create_topics_counts_assignments_num_partitions_and_the_default() -> None:
    def topic(name: str, partitions: int, assignments: int = 0) -> Any:
        return ct_request.CreatableTopic(
            name=name,
            num_partitions=i32(partitions),
            replication_factor=i16(-1 if assignments else 1),
            assignments=tuple(
                ct_request.CreatableReplicaAssignment(partition_index=i32(p), broker_ids=())
                for p in range(assignments)
            ),
            configs=(),
        )

    body = ct_request.CreateTopicsRequest(
        topics=(topic("a", 4), topic("b", -1), topic("c", -1, 3), topic("d", 0)),
        timeout=TIMEOUT,
        validate_only=False,
    )
    request = _parse(_frame(body, 1))
    mutations.count_created(request, default_num_partitions=7)
    # num_partitions; num.partitions for -1; the assignments; 0 fails before the quota
    assert [t.permits for t in request.topics] == [4, 7, 3, None]
    assert not request.needs_partition_counts


def test_delete_topics_by_name_and_id_count_the_partitions_they_have() -> None:
    known = uuid.uuid4()
    body = dt_request.DeleteTopicsRequest(
        topics=(
            dt_request.DeleteTopicState(name="a", topic_id=None),
            dt_request.DeleteTopicState(name=None, topic_id=known),
            dt_request.DeleteTopicState(name="gone", topic_id=None),
        ),
        timeout=TIMEOUT,
    )
    request = _parse(_frame(body, 2))
    assert request.needs_partition_counts and request.needs_all_topics
    request.count({"a": 3, known: 5})
    assert [t.permits for t in request.topics] == [3, 5, None]


def test_create_partitions_counts_the_partitions_added() -> None:
    request = _parse(_frame(_create_partitions(("a", 4), ("b", 2), ("c", 9)), 3))
    request.count({"a": 1, "b": 2})  # b does not grow, c is unknown: not counted
    assert [t.permits for t in request.topics] == [3, None, None]


def test_a_response_with_nothing_forwarded_lists_every_topic_refused() -> None:
    request = _parse(_frame(_create_partitions(("a", 4), ("b", 2)), 4))
    for topic in request.topics:
        topic.throttled = True
    frame = mutations.throttled_response(request, 4, None, 250)
    spec = request.spec
    _, offset = spec.response_header(frame[4:])
    body = codec.read_fields(frame[4:], offset, spec.response_type)
    assert struct.unpack_from(">i", frame, 4)[0] == 4
    assert [(r.name, r.error_code, r.error_message) for r in body.results] == [
        ("a", ErrorCode.throttling_quota_exceeded, mutations.THROTTLED_MESSAGE),
        ("b", ErrorCode.throttling_quota_exceeded, mutations.THROTTLED_MESSAGE),
    ]
    assert body.throttle_time == datetime.timedelta(milliseconds=250)
