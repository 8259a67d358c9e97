"""The columns the replay reads and writes, and the array types of its functions.

The traffic columns are kquota's traffic schema (:mod:`kquota.traffic_schema`, re-exported
here); the rest are the back-test's own: the tie-breaking input positions, the kinds of
request, and the result columns a replay adds to each request.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from kquota import _core, quota_types
from kquota.quota_types import QuotaType
from kquota.traffic_schema import (
    API,
    BROKER,
    BYTES,
    CLIENT,
    MUTATION_APIS,
    PARTITIONS,
    STRICT,
    THREAD,
    TOPIC_PARTITIONS,
    TS,
    USER,
)

__all__ = [
    "ADDED_LATENCY",
    "API",
    "BROKER",
    "BYTES",
    "CLIENT",
    "FETCH_THROTTLE",
    "KIND_FETCH",
    "KIND_OTHER",
    "KIND_PRODUCE",
    "MUTATION_APIS",
    "MUTATION_RESULTS",
    "MUTATION_THROTTLE",
    "NANOS_TO_PERCENT",
    "PARTITIONS",
    "PRODUCE_THROTTLE",
    "QUOTA_TYPES",
    "REFUSED_PARTITIONS",
    "REQUEST_THROTTLE",
    "SENT",
    "SEQ_COLUMNS",
    "SERVED",
    "STRICT",
    "THREAD",
    "THROTTLE",
    "THROTTLE_OF",
    "TOPIC_PARTITIONS",
    "TS",
    "UNSERVED",
    "UNSERVED_BUFFER_FULL",
    "UNSERVED_TIMED_OUT",
    "USER",
    "BoolArray",
    "FloatArray",
    "Int32Array",
    "Int64Array",
]

# -- the traffic table as the replay reads it ----------------------------------------

SEQ_COLUMNS: Final = ("_kq_seq_file", "_kq_seq_row")
"""Tie-breakers for requests with the same :data:`TS`: the row's position in the input."""

KIND_PRODUCE: Final = "produce"
KIND_FETCH: Final = "fetch"
KIND_OTHER: Final = "other"

QUOTA_TYPES: Final = quota_types.QUOTA_TYPES
"""The three client-quota types, in the order the results list them (the core's)."""

NANOS_TO_PERCENT: Final = _core.NANOS_TO_PERCENT
"""Request-time usage unit: thread nanoseconds to percent of one thread (the core's)."""
# -- results -----------------------------------------------------------------------------------

PRODUCE_THROTTLE: Final = "produce_throttle_ms"
FETCH_THROTTLE: Final = "fetch_throttle_ms"
REQUEST_THROTTLE: Final = "request_throttle_ms"
THROTTLE: Final = "throttle_ms"
SENT: Final = "sent_ms"
ADDED_LATENCY: Final = "added_latency_ms"
UNSERVED: Final = "unserved"
"""Whether the request reached the broker: :data:`SERVED`, or why its bounded client gave it
up (:data:`UNSERVED_BUFFER_FULL`, :data:`UNSERVED_TIMED_OUT`; closed loop with
:class:`~kquota.backtest.frames.ClientLimits` only). An unserved request carries no
throttle, is recorded on no sensor, and its :data:`SENT` is when the client gave it up."""
SERVED: Final = 0
UNSERVED_BUFFER_FULL: Final = 1
"""A produce request found its client's buffer (``buffer.memory``) full."""
UNSERVED_TIMED_OUT: Final = 2
"""A request was still waiting in its client when its timeout ran out
(``delivery.timeout.ms`` for a produce, ``default.api.timeout.ms`` for others but a fetch,
which waits)."""
MUTATION_THROTTLE: Final = "mutation_throttle_ms"
"""The controller-mutation quota's throttle of a mutation request (0 otherwise); the applied
:data:`THROTTLE` is the larger of it and the request quota's, ties to the request quota."""
REFUSED_PARTITIONS: Final = "refused_partitions"
"""The partitions of a strict mutation refused (THROTTLING_QUOTA_EXCEEDED); 0 otherwise."""
MUTATION_RESULTS: Final = (MUTATION_THROTTLE, REFUSED_PARTITIONS)
"""The result columns a replay adds when the traffic has :data:`PARTITIONS`."""
THROTTLE_OF: Final[dict[QuotaType, str]] = {
    "produce": PRODUCE_THROTTLE,
    "fetch": FETCH_THROTTLE,
    "request": REQUEST_THROTTLE,
}
"""The per-request throttle column of each quota type."""

Int32Array = npt.NDArray[np.int32]
Int64Array = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
