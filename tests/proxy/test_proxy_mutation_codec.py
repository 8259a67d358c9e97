"""``kquota.proxy.mutation`` and CreatePartitions through the proxy.

Tansu 0.6.0 does not implement CreatePartitions (it is not in its ApiVersions, so neither
librdkafka nor kafka-python sends it), so the end-to-end case here runs the proxy in
front of a scripted upstream that answers Metadata v12 and CreatePartitions v3 as a Kafka
broker does; the request is a real CreatePartitions v3 frame encoded with kio.
"""

from __future__ import annotations

import datetime
import socket
import struct
import threading
import uuid
from typing import Any

import pytest

pytest.importorskip("kio")

from kio.schema.create_partitions.v3 import request as cp_request
from kio.schema.create_partitions.v3 import response as cp_response
from kio.schema.create_topics.v7 import request as ct_request
from kio.schema.delete_topics.v6 import request as dt_request
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import response as md_response
from kio.static.primitive import i16, i32, i32Timedelta
from kquota import ControllerMutationQuotaManager, Entity, TokenBucket
from kquota.proxy import codec, kafka_clock_ms
from kquota.proxy import mutation as mutations
from proxy_support import DATA_PATHS, RecordingPlugin, read_frame, run_proxy

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


class _ScriptedController:
    """An upstream answering Metadata v12 (the topics of ``partitions``) and
    CreatePartitions v3 (success for every topic, in reverse order, with the broker's own
    throttle), keeping the CreatePartitions requests it got."""

    def __init__(self, partitions: dict[str, int], throttle_ms: int) -> None:
        self.partitions = partitions
        self.throttle_ms = throttle_ms
        self.received: list[list[str]] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = ("127.0.0.1", self.listener.getsockname()[1])
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            while (frame := read_frame(conn)) is not None:
                header = codec.parse_request_header(frame)
                body = codec.read_fields(frame, header.body_offset, header.api.request_type)
                if header.api.key == 3:
                    reply: Any = md_response.MetadataResponse(
                        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
                        brokers=(),
                        cluster_id=None,
                        controller_id=i32(1),  # type: ignore[arg-type]
                        topics=tuple(self._topic(n, c) for n, c in self.partitions.items()),
                    )
                else:
                    names = [t.name for t in body.topics]
                    self.received.append(names)
                    reply = cp_response.CreatePartitionsResponse(
                        throttle_time=i32Timedelta.parse(
                            datetime.timedelta(milliseconds=self.throttle_ms)
                        ),
                        results=tuple(
                            cp_response.CreatePartitionsTopicResult(
                                name=n, error_code=ErrorCode.none, error_message=None
                            )
                            for n in reversed(names)
                        ),
                    )
                head = type(reply).__header_schema__(correlation_id=i32(header.correlation_id))
                conn.sendall(codec.encode(head, reply))

    @staticmethod
    def _topic(name: str, count: int) -> Any:
        return md_response.MetadataResponseTopic(
            error_code=ErrorCode.none,
            name=name,
            topic_id=uuid.uuid4(),
            is_internal=False,
            partitions=tuple(
                md_response.MetadataResponsePartition(
                    error_code=ErrorCode.none,
                    partition_index=i32(p),
                    leader_id=i32(1),  # type: ignore[arg-type]
                    leader_epoch=i32(0),
                    replica_nodes=(),
                    isr_nodes=(),
                    offline_replicas=(),
                )
                for p in range(count)
            ),
            topic_authorized_operations=i32(-2147483648),
        )

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize("data_path", DATA_PATHS)
def test_strict_create_partitions_forwards_the_accepted_topics_and_merges_in_order(
    data_path: str,
) -> None:
    rate, samples, client_id = 10.0, 5, "grower"
    existing = {"a": 1, "b": 1, "c": 1}
    wanted = [("a", 40), ("b", 40), ("c", 5)]
    # The core's bucket, full: which topics its strict record accepts, and the throttle.
    bucket = TokenBucket(rate, num_samples=samples, window_ms=1000)
    checks = [bucket.record_strict(float(c - existing[n]), 10**12) for n, c in wanted]
    accepted = [n for (n, _), check in zip(wanted, checks, strict=True) if check.accepted]
    assert 0 < len(accepted) < len(wanted)
    manager = ControllerMutationQuotaManager(num_samples=samples, window_ms=1000)
    manager.set_quota(Entity(client_id=client_id), rate)
    upstream = _ScriptedController(existing, throttle_ms=7)
    plugin = RecordingPlugin(clock=kafka_clock_ms, background=True)
    try:
        with (
            run_proxy(upstream.address, 0, plugin, mutation=manager, data_path=data_path) as proxy,
            socket.create_connection(proxy.server.address, timeout=30) as client,
            socket.create_connection(proxy.server.address, timeout=30) as other,
        ):
            frame = _frame(_create_partitions(*wanted), 77, client_id)
            client.sendall(struct.pack(">i", len(frame)) + frame)
            answer = read_frame(client)
            assert answer is not None
            # The same client on a connection that is not muted, while the bucket is
            # still overdrawn: every topic refused, answered without the upstream.
            again = _frame(_create_partitions(("a", 60)), 78, client_id)
            other.sendall(struct.pack(">i", len(again)) + again)
            refused = read_frame(other)
            assert refused is not None
        assert upstream.received == [accepted]  # only the accepted topics went upstream
        spec = codec.api(mutations.CREATE_PARTITIONS, 3)
        _, offset = spec.response_header(answer)
        body = codec.read_fields(answer, offset, spec.response_type)
        assert struct.unpack_from(">i", answer, 0)[0] == 77
        assert [r.name for r in body.results] == [n for n, _ in wanted]  # request order
        assert [int(r.error_code) for r in body.results] == [
            0 if check.accepted else mutations.THROTTLING_QUOTA_EXCEEDED for check in checks
        ]
        throttle = round(body.throttle_time.total_seconds() * 1000)
        refusal = max(check.throttle_ms for check in checks if not check.accepted)
        assert 7 < throttle <= refusal  # the mutation throttle, above the broker's own
        _, offset = spec.response_header(refused)
        body = codec.read_fields(refused, offset, spec.response_type)
        assert struct.unpack_from(">i", refused, 0)[0] == 78
        assert [(r.name, int(r.error_code)) for r in body.results] == [
            ("a", mutations.THROTTLING_QUOTA_EXCEEDED)
        ]
        assert body.throttle_time > datetime.timedelta(0)
    finally:
        upstream.close()
