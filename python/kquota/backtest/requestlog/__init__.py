"""Kafka's request log (``kafka.request.logger``) as back-test traffic.

A broker with ``kafka.request.logger`` at DEBUG writes one ``Completed request:`` line per
request into ``kafka-request.log`` (rolled hourly, often gzip-compressed afterwards). This
module reads those files into kquota's traffic schema (:mod:`kquota.backtest.synthetic`),
one row per usable line: Spark reads the text, the core's reader (``kquota_core::
requestlog``) classifies, parses and sizes the lines a batch at a time (``mapInArrow``):
no Python runs per line.

What a row holds (``../shared/docs/kafka-request-log.md``, section 5):

* ``ts_ms``: when Kafka records quota usage, ``end - responseQueueTimeMs - sendTimeMs``
  rounded down to the millisecond, the end being the line's timestamp read in
  :attr:`LogOptions.timezone`;
* ``broker`` (from the file's path or :attr:`LogOptions.broker_id`), ``user`` (the
  principal's name), ``client_id`` (a ``null`` client id, printed before Kafka 3.1, is the
  empty one), ``api`` (``produce``, ``fetch``, ``metadata``...);
* ``bytes``: for Produce the request size Kafka records (header + body, rebuilt from the
  logged fields with the message schema of the logged version); for a consumer Fetch that
  was not throttled, 4 + the response body size as Kafka sizes it for the quota (without
  the ``nodeEndpoints`` of v16+, with ``"records":null`` partitions as empty ones, from
  the fetch keys of 3.0+ or of 2.8); 0 for a throttled Fetch (Kafka un-records it and sends
  an empty response), for ShareFetch (its size is not logged: counted in
  :attr:`LogSummary.share_fetches`) and for every other API;
* ``thread_time_ns``: handler-thread time (``localTimeMs``) plus an estimate of the
  network threads' time, which Kafka also charges and the log does not show
  (``kquota._core.REQUEST_LOG_NETWORK_TIME``); null for Produce with ``acks=0`` (Kafka
  records both on the exempt sensor, not the request quota);
* extra columns carried through the back-test: :data:`ACKS`, :data:`KAFKA_THROTTLE`
  (what Kafka applied: the line's ``throttleTimeMs``, and for CreateTopics,
  CreatePartitions and DeleteTopics the larger of it and the logged response's, which
  holds the controller-mutation throttle of a forwarded request), :data:`API_VERSION`,
  :data:`CORRELATION_ID`;
* when the log has CreateTopics, CreatePartitions or DeleteTopics lines,
  :data:`~kquota.backtest.frames.PARTITIONS`, :data:`~kquota.backtest.frames.STRICT` and
  :data:`~kquota.backtest.frames.TOPIC_PARTITIONS` (:func:`mutation_partitions`: topic
  partition counts tracked over the log in time order, the total and each topic's in request
  order; a request with a topic of unknown count has neither, counted in
  :attr:`LogSummary.unknown_counts`).

Lines that give no row are counted by reason (:data:`REASONS`) with up to five examples
each: lines of other loggers and ``RequestChannel$`` TRACE lines, the pre-2.8 text format,
truncated or corrupt JSON, invalid UTF-8, and the requests Kafka keeps outside client
quotas (follower fetches, lines forwarded to the controller, inter-broker APIs answered
on the exempt path). They never fail a run; a non-empty file with no usable line does.

One module per step, their public names re-exported here:

* :mod:`~kquota.backtest.requestlog.files`: the files a path names, the broker of each,
  :class:`LogOptions` (no Spark);
* :mod:`~kquota.backtest.requestlog.lines`: :func:`read`, each line's row or the reason
  it has none (Kafka's request and response sizes are rebuilt in the core);
* :mod:`~kquota.backtest.requestlog.summary`: :class:`LogSummary`, what a pass found;
* :mod:`~kquota.backtest.requestlog.import_job`: :func:`import_log` and
  :func:`mutation_partitions`;
* :mod:`~kquota.backtest.requestlog.description`: :func:`describe`.
"""

from kquota.backtest.requestlog.description import (
    Description,
    describe,
)
from kquota.backtest.requestlog.files import (
    DEFAULT_BROKER_ID_FROM,
    DEFAULT_NUM_PARTITIONS,
    FILE_PREFIX,
    FORMAT,
    LogFiles,
    LogOptions,
    broker_of,
    check_timezone,
    is_request_log,
    log_files,
)
from kquota.backtest.requestlog.import_job import (
    import_log,
    mutation_partitions,
)
from kquota.backtest.requestlog.lines import (
    BAD_TIME,
    CORRUPT,
    EXAMPLE_CHARS,
    EXEMPT,
    EXEMPT_API_KEYS,
    FOLLOWER,
    FORWARDED,
    MAX_LINE_BYTES,
    NO_BODY,
    NOT_UTF8,
    OLD_FORMAT,
    OTHER_LINE,
    REASONS,
    SHARE_FETCH,
    STRICT_SINCE,
    TOO_LONG,
    TRACE_LINE,
    UNKNOWN_VERSION,
    read,
)
from kquota.backtest.requestlog.summary import (
    EXAMPLES,
    SHARE_FETCH_BYTES,
    UNKNOWN_COUNT,
    LogSummary,
)
from kquota.traffic_schema import (
    ACKS,
    API_VERSION,
    COLUMNS,
    CORRELATION_ID,
    EXTRA_COLUMNS,
    KAFKA_THROTTLE,
)

__all__ = [
    "ACKS",
    "API_VERSION",
    "BAD_TIME",
    "COLUMNS",
    "CORRELATION_ID",
    "CORRUPT",
    "DEFAULT_BROKER_ID_FROM",
    "DEFAULT_NUM_PARTITIONS",
    "EXAMPLES",
    "EXAMPLE_CHARS",
    "EXEMPT",
    "EXEMPT_API_KEYS",
    "EXTRA_COLUMNS",
    "FILE_PREFIX",
    "FOLLOWER",
    "FORMAT",
    "FORWARDED",
    "KAFKA_THROTTLE",
    "MAX_LINE_BYTES",
    "NOT_UTF8",
    "NO_BODY",
    "OLD_FORMAT",
    "OTHER_LINE",
    "REASONS",
    "SHARE_FETCH",
    "SHARE_FETCH_BYTES",
    "STRICT_SINCE",
    "TOO_LONG",
    "TRACE_LINE",
    "UNKNOWN_COUNT",
    "UNKNOWN_VERSION",
    "Description",
    "LogFiles",
    "LogOptions",
    "LogSummary",
    "broker_of",
    "check_timezone",
    "describe",
    "import_log",
    "is_request_log",
    "log_files",
    "mutation_partitions",
    "read",
]
