"""CreatePartitions through ``kquota proxy``, under a strict controller-mutation quota.

Tansu 0.6.0 does not implement CreatePartitions (it is not in its ApiVersions, so neither
librdkafka nor kafka-python sends it), so the proxy runs here in front of a scripted
upstream that answers Metadata v12 and CreatePartitions v3 as a Kafka broker does; the
request is a real CreatePartitions v3 frame encoded with kio.
"""

from __future__ import annotations

import datetime
import socket
import threading
import uuid
from typing import Any

from kafka_wire import (
    THROTTLING_QUOTA_EXCEEDED,
    encode_request,
    encode_response,
    read_request,
    read_response,
    response_correlation_id,
)
from kio.schema.create_partitions.v3 import request as cp_request
from kio.schema.create_partitions.v3 import response as cp_response
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import response as md_response
from kio.static.primitive import i32, i32Timedelta
from kquota import ControllerMutationQuotaManager, Entity, TokenBucket, monotonic_ms
from proxy_support import RecordingPlugin, read_frame, run_proxy

TIMEOUT = i32Timedelta.parse(datetime.timedelta(seconds=30))


def _create_partitions(*topics: tuple[str, int]) -> Any:
    return cp_request.CreatePartitionsRequest(
        topics=tuple(
            cp_request.CreatePartitionsTopic(name=n, count=i32(c), assignments=None)
            for n, c in topics
        ),
        timeout=TIMEOUT,
        validate_only=False,
    )


def _results(frame: bytes) -> Any:
    """The CreatePartitions v3 response in ``frame``."""
    response = cp_response.CreatePartitionsResponse
    return read_response(frame, response.__api_key__, response.__version__)


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
                header, body = read_request(frame)
                if header.api_key == md_response.MetadataResponse.__api_key__:
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
                conn.sendall(encode_response(reply, header.correlation_id))

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


def test_strict_create_partitions_forwards_the_accepted_topics_and_merges_in_order() -> None:
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
    plugin = RecordingPlugin(clock=monotonic_ms, background=True)
    try:
        with (
            run_proxy(upstream.address, 0, plugin, mutation=manager) as proxy,
            socket.create_connection(proxy.server.address, timeout=30) as client,
            socket.create_connection(proxy.server.address, timeout=30) as other,
        ):
            client.sendall(encode_request(_create_partitions(*wanted), 77, client_id))
            answer = read_frame(client)
            assert answer is not None
            # The same client on a connection that is not muted, while the bucket is
            # still overdrawn: every topic refused, answered without the upstream.
            other.sendall(encode_request(_create_partitions(("a", 60)), 78, client_id))
            refused = read_frame(other)
            assert refused is not None
        assert upstream.received == [accepted]  # only the accepted topics went upstream
        body = _results(answer)
        assert response_correlation_id(answer) == 77
        assert [r.name for r in body.results] == [n for n, _ in wanted]  # request order
        assert [int(r.error_code) for r in body.results] == [
            0 if check.accepted else THROTTLING_QUOTA_EXCEEDED for check in checks
        ]
        throttle = round(body.throttle_time.total_seconds() * 1000)
        refusal = max(check.throttle_ms for check in checks if not check.accepted)
        assert 7 < throttle <= refusal  # the mutation throttle, above the broker's own
        body = _results(refused)
        assert response_correlation_id(refused) == 78
        assert [(r.name, int(r.error_code)) for r in body.results] == [
            ("a", THROTTLING_QUOTA_EXCEEDED)
        ]
        assert body.throttle_time > datetime.timedelta(0)
    finally:
        upstream.close()
