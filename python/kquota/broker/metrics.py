"""Prometheus metrics of the quota managers, read from the core at scrape time.

:class:`QuotaCollector` is a ``prometheus_client`` collector. On every scrape it calls
:meth:`kquota.QuotaManager.snapshot` on each manager and turns the live sensors into
metric families; it keeps no state of its own, so nothing is added to the request path
and a sensor that expired is simply no longer there. Like a JMX read in Kafka, a scrape
measures the rates, which purges obsolete samples.

Names follow what the common JMX-exporter rules make of Kafka's quota MBeans
(``kafka.server:type=<Type>,user=<u>,client-id=<c>``, attribute ``<name>``):
``kafka_server_<type>_<name>`` with dashes turned into underscores, ``<type>`` one of
``produce``, ``fetch``, ``request``.

Labels: every per-client family has exactly the two labels ``user`` and ``client_id``.
A tag that is empty in Kafka (a user-level sensor has an empty ``client-id``) is an empty
label value. In Prometheus an empty label is the same as an absent one, so this matches
JMX, which leaves such a tag out of the MBean name, while every family keeps one label
set. ``user`` is the sanitized principal, as in Kafka's tags (``CN%3Da%20b``).

Throttle time with no throttle in its window is NaN, as Kafka reports it; a client whose
throttle-time sensor expired has no sample.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable, Iterable, Mapping
from wsgiref.simple_server import WSGIServer

from prometheus_client.exposition import start_wsgi_server
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample

from kquota._core import UNLIMITED, QuotaManager
from kquota.exceptions import InvalidConfigError, MetricsServerError

__all__ = [
    "QUOTA_VALUE_METRIC_CONFIG",
    "MetricsServer",
    "MetricsServerError",
    "QuotaCollector",
    "metric_names",
    "serve_metrics",
]

QUOTA_VALUE_METRIC_CONFIG = "client.quota.value.metric.enable"
"""The broker config that switches the per-entity quota-value gauge on (KAFKA-13395)."""

_LABELS = ("user", "client_id")
_RATE_NAME = {"produce": "byte_rate", "fetch": "byte_rate", "request": "request_time"}
_RATE_HELP = {
    "produce": "Produce bytes per second of the client's quota sensor",
    "fetch": "Fetch bytes per second of the client's quota sensor",
    "request": "Request-handler and network thread time, percent of one thread",
}


def metric_names(quota_type: str, *, quota_value_metric: bool = False) -> list[str]:
    """The names of the families one manager of ``quota_type`` exposes, in scrape order."""
    if quota_type not in _RATE_NAME:
        raise InvalidConfigError(
            f"unknown quota type {quota_type!r}: expected 'produce', 'fetch' or 'request'"
        )
    prefix = f"kafka_server_{quota_type}"
    names = [
        f"{prefix}_{_RATE_NAME[quota_type]}",
        f"{prefix}_throttle_time",
        f"{prefix}_queue_size",
        f"{prefix}_utilization",
    ]
    if quota_value_metric:
        names.append(f"{prefix}_quota_value")
    return names


class QuotaCollector(Collector):
    """A Prometheus collector over quota managers (at most one per quota type).

    Per manager of type ``<type>``:

    * ``kafka_server_produce_byte_rate`` / ``kafka_server_fetch_byte_rate`` /
      ``kafka_server_request_request_time``: the rate of each live quota sensor;
    * ``kafka_server_<type>_throttle_time``: the throttle-time average (ms; NaN when
      there was no throttle in its window);
    * ``kafka_server_<type>_queue_size``: channels waiting in the delay queue;
    * ``kafka_server_<type>_utilization``: rate / quota, for sensors with a quota;
    * ``kafka_server_<type>_quota_value``: the quota the sensor enforces, only when
      ``quota_value_metric`` is true (``client.quota.value.metric.enable``) and only
      for sensors with a quota.

    ``clock`` gives the scrape time in ms; by default the core's clock is used (the
    clock the managers use when ``now_ms`` is omitted).
    """

    def __init__(
        self,
        *managers: QuotaManager,
        quota_value_metric: bool = False,
        clock: Callable[[], int] | None = None,
    ) -> None:
        seen: set[str] = set()
        for manager in managers:
            if manager.quota_type in seen:
                raise InvalidConfigError(
                    f"two {manager.quota_type!r} managers: their metric names would collide;"
                    " expected at most one manager per quota type"
                )
            seen.add(manager.quota_type)
        self._managers = managers
        self._quota_value_metric = bool(quota_value_metric)
        self._clock = clock

    @classmethod
    def from_config(
        cls,
        *managers: QuotaManager,
        config: Mapping[str, object],
        clock: Callable[[], int] | None = None,
    ) -> QuotaCollector:
        """A collector whose quota-value gauge follows ``client.quota.value.metric.enable``.

        The value may be a bool or, as in a Kafka properties file, ``"true"`` or
        ``"false"`` (any case); it defaults to false.
        """
        raw = config.get(QUOTA_VALUE_METRIC_CONFIG, False)
        if isinstance(raw, bool):
            enabled = raw
        elif isinstance(raw, str) and raw.strip().lower() in ("true", "false"):
            enabled = raw.strip().lower() == "true"
        else:
            raise InvalidConfigError(
                f"invalid {QUOTA_VALUE_METRIC_CONFIG} {raw!r}: expected true or false"
            )
        return cls(*managers, quota_value_metric=enabled, clock=clock)

    @property
    def quota_value_metric(self) -> bool:
        """Whether the ``..._quota_value`` gauges are exposed."""
        return self._quota_value_metric

    @property
    def managers(self) -> tuple[QuotaManager, ...]:
        """The managers this collector reads."""
        return self._managers

    def describe(self) -> Iterable[Metric]:
        """The families, without samples (so registering does not read the sensors)."""
        for manager in self._managers:
            yield from self._families(manager.quota_type)

    def collect(self) -> Iterable[Metric]:
        """Read every manager's sensors now and return their families."""
        now = None if self._clock is None else self._clock()
        for manager in self._managers:
            readings = manager.snapshot(now_ms=now)
            families = self._families(manager.quota_type)
            rate, throttle, queue, utilization, *quota = families
            rates, throttles, utilizations = rate.samples, throttle.samples, utilization.samples
            quotas = quota[0].samples if quota else None
            names = [f.name for f in families]
            for r in readings:
                # Built directly (not with add_metric): a scrape may hold 100 000s of
                # entities, and the families can share one labels dict per entity.
                labels = {"user": r.user, "client_id": r.client_id}
                value = r.rate
                rates.append(Sample(names[0], labels, value))
                average = r.throttle_time_avg
                if average is not None:
                    throttles.append(Sample(names[1], labels, average))
                bound = r.bound
                if bound < UNLIMITED:
                    utilizations.append(Sample(names[3], labels, value / bound))
                    if quotas is not None:
                        quotas.append(Sample(names[4], labels, bound))
            queue.add_metric((), float(manager.queue_size()))
            yield from families

    def _families(self, quota_type: str) -> list[GaugeMetricFamily]:
        names = metric_names(quota_type, quota_value_metric=self._quota_value_metric)
        families = [
            GaugeMetricFamily(names[0], _RATE_HELP[quota_type], labels=_LABELS),
            GaugeMetricFamily(
                names[1],
                f"Average {quota_type} throttle time in ms (NaN with no recent throttle)",
                labels=_LABELS,
            ),
            GaugeMetricFamily(
                names[2], f"Throttled channels waiting to be unmuted ({quota_type} quota)"
            ),
            GaugeMetricFamily(
                names[3],
                f"Measured rate divided by the {quota_type} quota (1 is the throttling point)",
                labels=_LABELS,
            ),
        ]
        if self._quota_value_metric:
            families.append(
                GaugeMetricFamily(
                    names[4], f"The {quota_type} quota the client's sensor enforces", labels=_LABELS
                )
            )
        return families


class MetricsServer:
    """A running HTTP endpoint serving the Prometheus text format at every path.

    Returned by :func:`serve_metrics`; :meth:`close` (or leaving a ``with`` block) stops
    it and frees the port.
    """

    def __init__(self, httpd: WSGIServer, thread: threading.Thread) -> None:
        self._httpd = httpd
        self._thread = thread
        self._closed = False

    @property
    def host(self) -> str:
        """The address the endpoint is bound to."""
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        """The port the endpoint listens on (the chosen one when 0 was asked for)."""
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """``http://host:port/metrics``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving and close the socket (a second call does nothing)."""
        if self._closed:
            return
        self._closed = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_metrics(
    *collectors: Collector,
    port: int = 0,
    host: str = "127.0.0.1",
    registry: CollectorRegistry | None = None,
) -> MetricsServer:
    """Serve ``collectors`` over HTTP on ``host:port`` (loopback by default) in a daemon thread.

    ``port=0`` picks a free port (read it from :attr:`MetricsServer.port`). The
    collectors are registered in ``registry``, or in a new registry when none is given
    (not in ``prometheus_client``'s global one). A port in use or an address that cannot
    be bound raises :class:`MetricsServerError` naming it.
    """
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise InvalidConfigError(f"invalid metrics port {port!r}: expected an int from 0 to 65535")
    if registry is None:
        registry = CollectorRegistry(auto_describe=True)
    for collector in collectors:
        registry.register(collector)
    try:
        httpd, thread = start_wsgi_server(port, addr=host, registry=registry)
    except OSError as e:
        for collector in collectors:
            registry.unregister(collector)
        reason = "address already in use" if e.errno == errno.EADDRINUSE else str(e)
        raise MetricsServerError(
            e.errno,
            f"cannot serve metrics on {host}:{port}: {reason};"
            " choose another port, or 0 for any free port",
        ) from e
    return MetricsServer(httpd, thread)
