"""Broker-side integration: KIP-219 throttled channels, Kafka's request-path quota logic
and Prometheus metrics.

>>> from kquota.broker import QuotaPlugin
>>> with QuotaPlugin() as plugin:
...     plugin.on_produce("alice", "app-1", size_bytes=4096, thread_time_ns=50_000)
QuotaOutcome(throttle_time_ms=0, empty_response=False, throttled_by=None, muted_until_ms=None)
"""

from kquota.broker.channels import MAX_THROTTLE_MS, SENSOR_EXPIRY_INTERVAL_MS, ThrottledChannels
from kquota.broker.metrics import (
    CONNECTION_METRIC_NAMES,
    MUTATION_METRIC_NAMES,
    QUOTA_VALUE_METRIC_CONFIG,
    ConnectionQuotaCollector,
    MetricsServer,
    MetricsServerError,
    MutationQuotaCollector,
    PerBrokerQuotaCollector,
    QuotaCollector,
    metric_names,
    serve_metrics,
)
from kquota.broker.plugin import QuotaOutcome, QuotaPlugin, QuotaType

__all__ = [
    "CONNECTION_METRIC_NAMES",
    "MAX_THROTTLE_MS",
    "MUTATION_METRIC_NAMES",
    "QUOTA_VALUE_METRIC_CONFIG",
    "SENSOR_EXPIRY_INTERVAL_MS",
    "ConnectionQuotaCollector",
    "MetricsServer",
    "MetricsServerError",
    "MutationQuotaCollector",
    "PerBrokerQuotaCollector",
    "QuotaCollector",
    "QuotaOutcome",
    "QuotaPlugin",
    "QuotaType",
    "ThrottledChannels",
    "metric_names",
    "serve_metrics",
]
