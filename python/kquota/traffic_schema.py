"""kquota's traffic schema: the columns of one row per request that ``kquota backtest``
replays.

Three writers produce it and one reader consumes it: ``kquota traffic import`` (Kafka's
request log, :mod:`kquota.backtest.requestlog`), ``kquota proxy --capture``
(:class:`kquota.proxy.TrafficCapture`), ``kquota gen-traffic``
(:mod:`kquota.backtest.synthetic`), and the back-test's reader
(:mod:`kquota.backtest.inputs`). The names live here, apart from both, so that the proxy
imports them without Spark or pandas: this module imports nothing.

The back-test requires :data:`TS`, :data:`USER`, :data:`CLIENT`, :data:`API` and
:data:`BYTES`; the other columns are optional, and :data:`EXTRA_COLUMNS` are carried
through the back-test as they are (what the broker or the proxy did, beside what the
replay does).
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ACKS",
    "API",
    "API_VERSION",
    "BROKER",
    "BYTES",
    "CLIENT",
    "COLUMNS",
    "CORRELATION_ID",
    "EXTRA_COLUMNS",
    "KAFKA_THROTTLE",
    "MUTATION_APIS",
    "PARTITIONS",
    "STRICT",
    "THREAD",
    "TOPIC_PARTITIONS",
    "TS",
    "USER",
]

TS: Final = "ts_ms"
"""Request time, epoch milliseconds (int64)."""
BROKER: Final = "broker"
"""The broker that handled the request (string; optional, one broker when absent)."""
USER: Final = "user"
"""The principal name, unsanitized (string, may be empty)."""
CLIENT: Final = "client_id"
"""The client id (string, may be empty)."""
API: Final = "api"
"""The Kafka API name: ``produce``, ``fetch`` or any other (compared case-insensitively)."""
BYTES: Final = "bytes"
"""Produce request size or fetch response size in bytes (int64 >= 0)."""
THREAD: Final = "thread_time_ns"
"""Time charged to request quotas in nanoseconds: the handler thread's, plus the network
threads' where known (a request log's import estimates it) (int64 >= 0; optional, null =
unknown)."""
PARTITIONS: Final = "partitions"
"""Partitions created or deleted by a CreateTopics, CreatePartitions or DeleteTopics request
(int >= 0; optional, null = not replayed as a controller mutation): its permits on the
``controller_mutation_rate`` quota (KIP-599)."""
STRICT: Final = "strict"
"""Whether the mutation request's version is enforced strictly (CreateTopics >= v6,
CreatePartitions >= v3, DeleteTopics >= v5): topics over the quota are refused; otherwise
accepted and throttled (bool; required on a row with :data:`PARTITIONS`)."""
TOPIC_PARTITIONS: Final = "topic_partitions"
"""The partitions of each topic of a mutation request, in request order (array of int >= 0;
optional, null = one topic of :data:`PARTITIONS`, which stays the total and must equal their
sum). Kafka's controller records a request topic by topic: a strict request's topics are
refused (THROTTLING_QUOTA_EXCEEDED) once an earlier topic overdrew the bucket, so the
back-test's ``refused_partitions`` counts the partitions of the refused topics."""
MUTATION_APIS: Final = frozenset({"createtopics", "createpartitions", "deletetopics"})
"""The APIs the controller-mutation quota applies to (as :data:`API` is compared: lower case,
without underscores: ``CreateTopics`` or the request log's ``create_topics``)."""

ACKS: Final = "acks"
"""Produce ``acks`` (-1, 0, 1); null for other APIs."""
KAFKA_THROTTLE: Final = "kafka_throttle_ms"
"""The throttle the broker applied to the request (``throttleTimeMs``), or the proxy."""
API_VERSION: Final = "api_version"
CORRELATION_ID: Final = "correlation_id"
EXTRA_COLUMNS: Final = (ACKS, KAFKA_THROTTLE, API_VERSION, CORRELATION_ID)
"""Columns the request log and the capture add, carried through the back-test."""
COLUMNS: Final = (TS, BROKER, USER, CLIENT, API, BYTES, THREAD, *EXTRA_COLUMNS)
"""The columns of imported or captured traffic, in order."""
