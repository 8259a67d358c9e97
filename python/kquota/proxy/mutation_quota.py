"""The controller-mutation quota (KIP-599) on CreateTopics, CreatePartitions and
DeleteTopics passing through the proxy.

The partitions of each topic are counted as Kafka's controller counts them (the topics'
partitions now come from a Metadata request the proxy sends upstream first) and recorded
in request order. At strict versions (CreateTopics v6+, CreatePartitions v3+, DeleteTopics
v5+) the topics a quota refuses are taken out of the request and answered with
``THROTTLING_QUOTA_EXCEEDED``, merged with the broker's results in the request's order (no
request goes upstream when every topic is refused); at older versions every topic is
forwarded and recorded. The response carries the larger of the mutation and request
throttles. How the messages are read and rewritten: :mod:`kquota.proxy.mutation`.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from kquota import ControllerMutationQuotaManager, MutationRequestQuota, mutation_is_strict
from kquota.broker import QuotaOutcome, QuotaPlugin
from kquota.exceptions import ProxyError
from kquota.proxy import codec
from kquota.proxy import mutation as mutations
from kquota.proxy.pipeline import Connection, Pending
from kquota.proxy.rewrite import with_throttle
from kquota.proxy.stream import Peer

__all__ = ["OWN_CORRELATION_IDS", "MutationQuota", "RecordedMutation"]

OWN_CORRELATION_IDS: Final = 0x7F000000
"""Where the correlation ids of the proxy's own Metadata requests start."""


@dataclass(slots=True, eq=False)
class RecordedMutation:
    """A mutation request under the controller-mutation quota, as recorded."""

    request: mutations.MutationRequest
    quota: MutationRequestQuota
    rewritten: bool
    """Some topics were refused: the response is merged by the proxy."""
    local: bool
    """Every topic was refused: nothing went upstream."""
    permits: int
    """Partitions recorded (accepted)."""


class MutationQuota:
    """``manager``'s quotas applied to the mutation requests of the proxy's connections;
    ``default_num_partitions`` is the broker's ``num.partitions`` (what a CreateTopics topic
    with -1 partitions gets). ``read_response`` reads the upstream's next response."""

    def __init__(
        self,
        manager: ControllerMutationQuotaManager,
        plugin: QuotaPlugin,
        default_num_partitions: int,
        read_response: Callable[[Peer], Awaitable[bytes]],
    ) -> None:
        self.manager = manager
        self.plugin = plugin
        self.default_num_partitions = default_num_partitions
        self._read_response = read_response
        self._own_ids = itertools.count(OWN_CORRELATION_IDS)

    @property
    def enabled(self) -> bool:
        """Whether the manager's quotas are enabled (read live)."""
        return self.manager.enabled

    async def record(
        self,
        connection: Connection,
        spec: codec.Api,
        frame: bytes,
        header: codec.RequestHeader,
    ) -> RecordedMutation:
        """Count a mutation request's partitions per topic and record them in the
        client's controller-mutation quota, in request order; a strict quota refuses the
        topics once the bucket is overdrawn (Kafka's ``StrictControllerMutationQuota``)."""
        request = mutations.parse(spec, frame, header)
        names = None if request.needs_all_topics else request.names
        counts = await self._partition_counts(connection, header.client_id, names)
        if request.needs_partition_counts:
            request.count(counts)
        else:
            mutations.count_created(request, self.default_num_partitions)
            for topic in request.topics:
                if topic.name in counts:
                    topic.permits = None  # TOPIC_ALREADY_EXISTS, before the quota
        strict = mutation_is_strict(request.api, spec.version)  # type: ignore[arg-type]
        now = self.plugin.channels.now_ms()
        quota = self.manager.request_quota(connection.user, header.client_id, strict, now)
        permits = 0
        for topic in request.topics:
            if topic.permits is None:
                continue
            if quota.record(float(topic.permits), now).accepted:
                permits += topic.permits
            else:
                topic.throttled = True
        rewritten = any(topic.throttled for topic in request.topics)
        return RecordedMutation(
            request, quota, rewritten, rewritten and not request.forwarded, permits
        )

    async def _partition_counts(
        self, connection: Connection, client_id: str, names: list[str] | None
    ) -> dict[str | uuid.UUID, int]:
        """Partitions per topic (name and id) now, from a Metadata request on the
        connection's upstream (idle: every earlier request is answered)."""
        upstream = connection.upstream
        assert upstream is not None and not connection.pending
        correlation_id = next(self._own_ids) & 0x7FFFFFFF
        upstream.write((mutations.metadata_request(correlation_id, client_id, names),))
        await upstream.drain()
        response = await self._read_response(upstream)
        answered = codec.response_correlation_id(response)
        if answered != correlation_id:
            raise ProxyError(
                f"upstream answered correlation id {answered} to the proxy's Metadata"
                f" request {correlation_id}"
            )
        return mutations.partition_counts(response)

    def outcome(
        self, connection: Connection, entry: Pending, thread_ns: int, now: int
    ) -> QuotaOutcome:
        """The mutation and request throttles of an answered mutation request (the larger
        one applied, and the connection muted for it, as Kafka does)."""
        state = entry.mutation
        assert state is not None
        return self.plugin.on_mutation(
            entry.user,
            entry.header.client_id,
            thread_ns,
            state.quota.throttle_time(now),
            self.manager,
            channel=connection.channel,
            now_ms=now,
        )

    def response(
        self, entry: Pending, response: bytes | None, outcome: QuotaOutcome
    ) -> list[bytes | memoryview]:
        """The response frame the client gets: the upstream's results merged with the
        refused topics' errors (or those alone), with the applied throttle in it."""
        state = entry.mutation
        assert state is not None
        header = entry.header
        if state.rewritten:
            return [
                mutations.throttled_response(
                    state.request, header.correlation_id, response, outcome.throttle_time_ms
                )
            ]
        assert response is not None
        return with_throttle(header.api, response, outcome)
