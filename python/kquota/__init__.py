"""kquota: Apache Kafka's client quotas (KIP-13, KIP-124, KIP-219) with a Rust core.

>>> import kquota
>>> produce = kquota.QuotaManager("produce")
>>> produce.set_quota(kquota.Entity(user="alice"), 1_048_576)
>>> produce.record("alice", "app-1", 4096, now_ms=0)
0
"""

from kquota._core import (
    DEFAULT,
    UNLIMITED,
    Check,
    Entity,
    QuotaManager,
    ReplayKernel,
    RequestOutcome,
    RequestPath,
    SampledRate,
    SensorReading,
    __version__,
    monotonic_ms,
    sanitize_user,
)
from kquota.exceptions import (
    ChannelError,
    InvalidConfigError,
    InvalidQuotaError,
    InvalidUsageError,
    InvalidValueError,
    KquotaError,
    MetricsServerError,
    OutputError,
    ProxyError,
    QuotaFileError,
    ScenarioError,
    StoreError,
    TrafficError,
)

__all__ = [
    "DEFAULT",
    "UNLIMITED",
    "ChannelError",
    "Check",
    "Entity",
    "InvalidConfigError",
    "InvalidQuotaError",
    "InvalidUsageError",
    "InvalidValueError",
    "KquotaError",
    "MetricsServerError",
    "OutputError",
    "ProxyError",
    "QuotaFileError",
    "QuotaManager",
    "ReplayKernel",
    "RequestOutcome",
    "RequestPath",
    "SampledRate",
    "ScenarioError",
    "SensorReading",
    "StoreError",
    "TrafficError",
    "__version__",
    "monotonic_ms",
    "sanitize_user",
]
