"""CreateTopics, CreatePartitions and DeleteTopics under the controller-mutation quota (KIP-599).

What the proxy needs of these three requests, with kio's codec: the topics of a request
and the partitions each one creates or deletes (as Kafka's controller counts them), the
request rewritten without the topics a strict quota refused, and the response merged
back in the request's topic order with ``THROTTLING_QUOTA_EXCEEDED`` for those topics.

How Kafka counts (``ReplicationControlManager`` at the pinned commit):

* CreateTopics: the number of replica assignments when there are any, else
  ``num_partitions``, or the broker's ``num.partitions`` when it is -1. A topic with an
  invalid count (0, or below -1) fails validation before the quota: not counted.
* CreatePartitions: the partitions added, ``count`` minus the topic's partitions now; a
  topic that does not exist or does not grow fails before the quota: not counted.
* DeleteTopics: the topic's partitions now; an unknown topic is not counted.

The partitions a topic has now come from a Metadata request the proxy sends upstream
(:func:`metadata_request`) before the mutation request, on the same connection.
Validate-only requests count as the others: Kafka's controller records them too.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32

from kquota.exceptions import ProxyError
from kquota.proxy import codec

__all__ = [
    "CREATE_PARTITIONS",
    "CREATE_TOPICS",
    "DELETE_TOPICS",
    "METADATA_VERSION",
    "MUTATION_APIS",
    "THROTTLED_MESSAGE",
    "THROTTLING_QUOTA_EXCEEDED",
    "MutationRequest",
    "Topic",
    "metadata_request",
    "partition_counts",
    "throttled_response",
]

CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
CREATE_PARTITIONS: Final = 37

MUTATION_APIS: Final[Mapping[int, str]] = {
    CREATE_TOPICS: "create_topics",
    DELETE_TOPICS: "delete_topics",
    CREATE_PARTITIONS: "create_partitions",
}
"""The API keys under the controller-mutation quota, with the core's names of them."""

THROTTLING_QUOTA_EXCEEDED: Final = 89
THROTTLED_MESSAGE: Final = "The throttling quota has been exceeded."
"""Kafka's message for error 89 (``Errors.THROTTLING_QUOTA_EXCEEDED``), which its strict
quota puts in the topic's result."""

METADATA: Final = 3
METADATA_VERSION: Final = 12
"""The Metadata version the proxy asks the upstream for partition counts with (topic ids
in the response; Kafka 3.1 and later, Tansu)."""

_ZERO_UUID: Final = uuid.UUID(int=0)

_RESULTS_FIELD: Final[Mapping[int, str]] = {
    CREATE_TOPICS: "topics",
    DELETE_TOPICS: "responses",
    CREATE_PARTITIONS: "results",
}


@dataclasses.dataclass(slots=True)
class Topic:
    """One topic of a mutation request."""

    name: str | None
    topic_id: uuid.UUID | None
    permits: int | None
    """Partitions it creates or deletes; ``None``: the controller refuses it before the
    quota (or it is unknown), so it is not counted."""
    throttled: bool = False
    """Refused by a strict quota: not forwarded, answered with error 89."""

    def key(self) -> tuple[str | None, uuid.UUID | None]:
        """What a result is matched to its topic by: the name, else the id."""
        return (self.name, None) if self.name is not None else (None, self.topic_id)


@dataclasses.dataclass(slots=True)
class MutationRequest:
    """A decoded CreateTopics, CreatePartitions or DeleteTopics request."""

    spec: codec.Api
    header: Any
    body: Any
    topics: list[Topic]
    _field: str
    _entries: tuple[Any, ...]

    @property
    def api(self) -> str:
        """The core's name of the API (``create_topics``, ...)."""
        return MUTATION_APIS[self.spec.key]

    @property
    def needs_partition_counts(self) -> bool:
        """Whether counting needs the partitions the topics have now (not CreateTopics)."""
        return self.spec.key != CREATE_TOPICS

    @property
    def needs_all_topics(self) -> bool:
        """Whether some topic is named only by its id (ask Metadata for every topic)."""
        return any(t.name is None for t in self.topics)

    @property
    def names(self) -> list[str]:
        """The named topics, in request order."""
        return [t.name for t in self.topics if t.name is not None]

    @property
    def forwarded(self) -> list[Topic]:
        """The topics the upstream gets."""
        return [t for t in self.topics if not t.throttled]

    def count(self, current: Mapping[str | uuid.UUID, int]) -> None:
        """Set each topic's permits from ``current`` (partitions per topic name and id now,
        from :func:`partition_counts`): DeleteTopics and CreatePartitions."""
        for topic, entry in zip(self.topics, self._entries, strict=True):
            now = current.get(topic.name) if topic.name is not None else None
            if now is None and topic.topic_id is not None and topic.topic_id != _ZERO_UUID:
                now = current.get(topic.topic_id)
            if now is None:
                topic.permits = None
            elif self.spec.key == DELETE_TOPICS:
                topic.permits = now
            else:
                added = int(entry.count) - now
                topic.permits = added if added > 0 else None

    def rewritten(self) -> bytes:
        """The request frame (without its size) with only the forwarded topics."""
        kept = tuple(e for e, t in zip(self._entries, self.topics, strict=True) if not t.throttled)
        body = dataclasses.replace(self.body, **{self._field: kept})
        return codec.encode(self.header, body)[4:]


def parse(spec: codec.Api, frame: codec.Buffer, header: codec.RequestHeader) -> MutationRequest:
    """Decode a mutation request; counts CreateTopics' partitions with ``num.partitions``
    left to :func:`count_created` (call it next)."""
    if spec.key not in MUTATION_APIS:
        raise ProxyError(f"API {spec.key} ({spec.name}) is not a controller mutation")
    head = codec.read_fields(frame, 0, spec.request_type.__header_schema__)  # type: ignore[attr-defined]
    body = codec.read_fields(frame, header.body_offset, spec.request_type)
    topics: list[Topic] = []
    if spec.key == DELETE_TOPICS and hasattr(body, "topic_names"):
        field, entries = "topic_names", tuple(body.topic_names)
        topics = [Topic(str(name), None, None) for name in entries]
    else:
        field = "topics"
        entries = tuple(body.topics)
        for entry in entries:
            name = entry.name
            topic_id = getattr(entry, "topic_id", None)
            topics.append(Topic(None if name is None else str(name), topic_id, None))
    return MutationRequest(spec, head, body, topics, field, entries)


def count_created(request: MutationRequest, default_num_partitions: int) -> None:
    """CreateTopics: each topic's partitions as Kafka's controller counts them."""
    for topic, entry in zip(request.topics, request._entries, strict=True):
        if entry.assignments:
            topic.permits = len(entry.assignments)
        elif entry.num_partitions == -1:
            topic.permits = default_num_partitions
        elif entry.num_partitions > 0:
            topic.permits = int(entry.num_partitions)
        else:
            topic.permits = None


def metadata_request(correlation_id: int, client_id: str, names: Sequence[str] | None) -> bytes:
    """A Metadata request frame (size prefix included) for ``names`` (``None``: every
    topic), never creating a topic."""
    spec = codec.api(METADATA, METADATA_VERSION)
    request_type: Any = spec.request_type
    topic_type = _item_type(request_type, "topics")
    header = request_type.__header_schema__(
        request_api_key=i16(METADATA),
        request_api_version=i16(METADATA_VERSION),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    topics = None if names is None else tuple(topic_type(topic_id=None, name=n) for n in names)
    body = request_type(
        topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    return codec.encode(header, body)


def partition_counts(response: bytes) -> dict[str | uuid.UUID, int]:
    """Partitions per topic name and per topic id in a Metadata response frame (without
    its size) of :data:`METADATA_VERSION`; topics with an error are left out."""
    spec = codec.api(METADATA, METADATA_VERSION)
    _, offset = spec.response_header(response)
    body = codec.read_fields(response, offset, spec.response_type)
    counts: dict[str | uuid.UUID, int] = {}
    for topic in body.topics:
        if topic.error_code != ErrorCode.none:
            continue
        if topic.name is not None:
            counts[str(topic.name)] = len(topic.partitions)
        if topic.topic_id is not None and topic.topic_id != _ZERO_UUID:
            counts[topic.topic_id] = len(topic.partitions)
    return counts


def throttled_response(
    request: MutationRequest,
    correlation_id: int,
    upstream: bytes | None,
    throttle_ms: int,
) -> bytes:
    """The response frame (size prefix included) for ``request``: the upstream's results
    for the forwarded topics (``upstream``, a response frame without its size, or ``None``
    when nothing was forwarded) and error 89 for the throttled ones, in the request's
    order, with ``throttle_time_ms`` the larger of ``throttle_ms`` and the upstream's."""
    spec = request.spec
    response_type: Any = spec.response_type
    field = _RESULTS_FIELD[spec.key]
    result_type = _item_type(response_type, field)
    if upstream is None:
        header = response_type.__header_schema__(correlation_id=i32(correlation_id))
        values: dict[str, Any] = {field: ()}
        if codec.THROTTLE_FIELD in _field_names(response_type):
            values[codec.THROTTLE_FIELD] = codec.throttle_value(0)
        body = response_type(**values)
    else:
        _, offset = spec.response_header(upstream)
        header = codec.read_fields(upstream, 0, response_type.__header_schema__)
        body = codec.read_fields(upstream, offset, response_type)
    # The upstream's results, matched to the forwarded topics by name (or id).
    answered: dict[tuple[str | None, uuid.UUID | None], list[Any]] = {}
    for result in getattr(body, field):
        name = getattr(result, "name", None)
        key = (str(name), None) if name is not None else (None, getattr(result, "topic_id", None))
        answered.setdefault(key, []).append(result)
    merged: list[Any] = []
    for topic in request.topics:
        if topic.throttled:
            merged.append(_throttled_result(result_type, topic))
            continue
        found = answered.get(topic.key())
        if found:
            merged.append(found.pop(0))
    merged.extend(r for rest in answered.values() for r in rest)  # nothing is dropped
    changes: dict[str, Any] = {field: tuple(merged)}
    if hasattr(body, codec.THROTTLE_FIELD):
        theirs = int(getattr(body, codec.THROTTLE_FIELD).total_seconds() * 1000)
        changes[codec.THROTTLE_FIELD] = codec.throttle_value(max(theirs, throttle_ms))
    return codec.encode(header, dataclasses.replace(body, **changes))


def _throttled_result(result_type: Any, topic: Topic) -> Any:
    """Kafka's result of a topic its strict quota refused: error 89 and its message, every
    other field at its default (no topic id, -1 partitions and replication factor, no
    configs)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(result_type):
        if f.name == "name":
            values["name"] = topic.name
        elif f.name == "topic_id":
            values["topic_id"] = topic.topic_id if topic.topic_id is not None else _ZERO_UUID
        elif f.name == "error_code":
            values["error_code"] = ErrorCode.throttling_quota_exceeded
        elif f.name == "error_message":
            values["error_message"] = THROTTLED_MESSAGE
        elif f.name == "configs":
            values["configs"] = ()
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ProxyError(f"no default for {result_type.__name__}.{f.name}")
    return result_type(**values)


@functools.cache
def _field_names(entity_type: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(entity_type))


@functools.cache
def _item_type(entity_type: type, field: str) -> Any:
    """The element type of the array field ``field`` of a kio entity type."""
    hint = typing.get_type_hints(entity_type)[field]
    for arg in typing.get_args(hint):  # `tuple[X, ...] | None`
        inner = typing.get_args(arg)
        if inner:
            return inner[0]
    return typing.get_args(hint)[0]
