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
    UNLIMITED_CONNECTION_RATE,
    Check,
    ConnectionDecision,
    ConnectionQuotas,
    ControllerMutationQuotaManager,
    Entity,
    MutationCheck,
    MutationRequestQuota,
    QuotaManager,
    ReplayKernel,
    RequestOutcome,
    RequestPath,
    SampledRate,
    SensorReading,
    TokenBucket,
    __version__,
    monotonic_ms,
    mutation_is_strict,
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
    "UNLIMITED_CONNECTION_RATE",
    "ChannelError",
    "Check",
    "ConnectionDecision",
    "ConnectionQuotas",
    "ControllerMutationQuotaManager",
    "Entity",
    "InvalidConfigError",
    "InvalidQuotaError",
    "InvalidUsageError",
    "InvalidValueError",
    "KquotaError",
    "MetricsServerError",
    "MutationCheck",
    "MutationRequestQuota",
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
    "TokenBucket",
    "TrafficError",
    "__version__",
    "monotonic_ms",
    "mutation_is_strict",
    "sanitize_user",
]
