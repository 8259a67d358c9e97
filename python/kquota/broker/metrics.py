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

``labels`` adds constant labels to every family of a collector (the ``queue_size`` gauges
included), for metrics of several brokers in one scrape. :class:`PerBrokerQuotaCollector`
does this for the brokers a gateway serves: each broker's families with a ``broker``
label, its node id, merged into one family per name.

Two more collectors follow the same rules for the quotas of KIP-599 and KIP-612:

* :class:`MutationQuotaCollector` reads a :class:`kquota.ControllerMutationQuotaManager`:
  Kafka's ``kafka.server:type=ControllerMutation,user=<u>,client-id=<c>`` attributes
  ``tokens`` and ``throttle-time``, and ``queue-size``, as
  ``kafka_server_controllermutation_<name>``.
* :class:`ConnectionQuotaCollector` reads a :class:`kquota.ConnectionQuotas`: Kafka's
  ``kafka.server:type=socket-server-metrics`` attributes ``broker-connection-accept-rate``
  (no tag), ``connection-accept-rate`` (tag ``listener``, or ``ip`` for a per-IP sensor),
  ``connection-accept-throttle-time`` and ``ip-connection-accept-throttle-time`` (tag
  ``listener``), as ``kafka_server_socket_server_metrics_<name>``. The per-listener and
  per-IP rates share one family with the labels ``listener`` and ``ip``, the one a sample
  does not have being empty (as JMX leaves it out). ``ip`` is Kafka's tag:
  ``InetAddress.getHostAddress()``, so an IPv6 address has eight uncompressed groups.
"""

from __future__ import annotations

import errno
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from urllib.parse import unquote
from wsgiref.simple_server import WSGIServer

from prometheus_client.exposition import start_wsgi_server
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.samples import Sample

from kquota._core import (
    UNLIMITED,
    ConnectionQuotas,
    ControllerMutationQuotaManager,
    QuotaManager,
)
from kquota.exceptions import InvalidConfigError, MetricsServerError

__all__ = [
    "CONNECTION_METRIC_NAMES",
    "MUTATION_METRIC_NAMES",
    "QUOTA_VALUE_METRIC_CONFIG",
    "ConnectionQuotaCollector",
    "MetricsServer",
    "MetricsServerError",
    "MutationQuotaCollector",
    "PerBrokerQuotaCollector",
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


_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def _constant_labels(
    labels: Mapping[str, str] | None, own: tuple[str, ...] = _LABELS
) -> dict[str, str]:
    """``labels`` checked: Prometheus label names other than the families' ``own``, str
    values."""
    if labels is None:
        return {}
    if not isinstance(labels, Mapping):
        raise InvalidConfigError(
            f"invalid labels {labels!r}: expected a mapping of label names to str values"
        )
    checked = {}
    for name, value in labels.items():
        if (
            not isinstance(name, str)
            or not _LABEL_NAME.fullmatch(name)
            or name.startswith("__")
            or name in own
        ):
            raise InvalidConfigError(
                f"invalid label name {name!r}: expected a Prometheus label name"
                " ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __) other than"
                f" {' and '.join(map(repr, own))}"
            )
        if not isinstance(value, str):
            raise InvalidConfigError(f"invalid value {value!r} of label {name!r}: expected a str")
        checked[name] = value
    return checked


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
    clock the managers use when ``now_ms`` is omitted). ``labels`` (name to value) are
    added to every sample of every family, after ``user`` and ``client_id``; the queue-size
    gauges then have them as their only labels.
    """

    def __init__(
        self,
        *managers: QuotaManager,
        quota_value_metric: bool = False,
        clock: Callable[[], int] | None = None,
        labels: Mapping[str, str] | None = None,
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
        self._labels = _constant_labels(labels)

    @classmethod
    def from_config(
        cls,
        *managers: QuotaManager,
        config: Mapping[str, object],
        clock: Callable[[], int] | None = None,
        labels: Mapping[str, str] | None = None,
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
        return cls(*managers, quota_value_metric=enabled, clock=clock, labels=labels)

    @property
    def quota_value_metric(self) -> bool:
        """Whether the ``..._quota_value`` gauges are exposed."""
        return self._quota_value_metric

    @property
    def managers(self) -> tuple[QuotaManager, ...]:
        """The managers this collector reads."""
        return self._managers

    @property
    def labels(self) -> dict[str, str]:
        """The constant labels of every sample (empty by default)."""
        return dict(self._labels)

    def describe(self) -> Iterable[Metric]:
        """The families, without samples (so registering does not read the sensors)."""
        for manager in self._managers:
            yield from self._families(manager.quota_type)

    def collect(self) -> Iterable[Metric]:
        """Read every manager's sensors now and return their families."""
        now = None if self._clock is None else self._clock()
        constant = self._labels
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
                if constant:
                    labels.update(constant)
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
            queue.add_metric(tuple(constant.values()), float(manager.queue_size()))
            yield from families

    def _families(self, quota_type: str) -> list[GaugeMetricFamily]:
        names = metric_names(quota_type, quota_value_metric=self._quota_value_metric)
        constant = tuple(self._labels)
        labels = _LABELS + constant
        families = [
            GaugeMetricFamily(names[0], _RATE_HELP[quota_type], labels=labels),
            GaugeMetricFamily(
                names[1],
                f"Average {quota_type} throttle time in ms (NaN with no recent throttle)",
                labels=labels,
            ),
            GaugeMetricFamily(
                names[2],
                f"Throttled channels waiting to be unmuted ({quota_type} quota)",
                labels=constant,
            ),
            GaugeMetricFamily(
                names[3],
                f"Measured rate divided by the {quota_type} quota (1 is the throttling point)",
                labels=labels,
            ),
        ]
        if self._quota_value_metric:
            families.append(
                GaugeMetricFamily(
                    names[4], f"The {quota_type} quota the client's sensor enforces", labels=labels
                )
            )
        return families


class PerBrokerQuotaCollector(Collector):
    """A Prometheus collector over the quota managers of several brokers, such as the
    brokers a gateway serves (:meth:`kquota.proxy.ProxyServer.metrics_collectors`).

    ``brokers`` is called at every scrape (and by :meth:`describe`) and gives each broker's
    managers by node id: :class:`kquota.QuotaManager` objects (at most one per quota type),
    at most one :class:`kquota.ControllerMutationQuotaManager` and at most one
    :class:`kquota.ConnectionQuotas` (``None`` entries are skipped). Each broker's managers
    are read as :class:`QuotaCollector`, :class:`MutationQuotaCollector` and
    :class:`ConnectionQuotaCollector` read them, with one more label, ``broker``: the node
    id as a string. The brokers' families are merged, one family per name, so a dashboard
    sums or splits them by ``broker``, and a broker that ``brokers`` lists later appears
    from the next scrape on. Every broker is read at the same time, ``clock``'s one reading
    per scrape (by default, the core's clock).
    """

    def __init__(
        self,
        brokers: Callable[
            [],
            Mapping[
                int,
                Sequence[QuotaManager | ControllerMutationQuotaManager | ConnectionQuotas | None],
            ],
        ],
        *,
        quota_value_metric: bool = False,
        clock: Callable[[], int] | None = None,
    ) -> None:
        if not callable(brokers):
            raise InvalidConfigError(
                f"invalid brokers {brokers!r}: expected a callable returning each broker's"
                " managers by node id"
            )
        self._brokers = brokers
        self._quota_value_metric = bool(quota_value_metric)
        self._clock = clock

    @property
    def quota_value_metric(self) -> bool:
        """Whether the ``..._quota_value`` gauges are exposed."""
        return self._quota_value_metric

    def describe(self) -> Iterable[Metric]:
        """The families of the brokers listed now, without samples."""
        return _merged(c.describe() for c in self._collectors(None))

    def collect(self) -> Iterable[Metric]:
        """Read every broker's sensors now and return the merged families."""
        now = None if self._clock is None else self._clock()
        clock = None if now is None else (lambda: now)
        return _merged(c.collect() for c in self._collectors(clock))

    def _collectors(
        self, clock: Callable[[], int] | None
    ) -> Iterable[QuotaCollector | MutationQuotaCollector | ConnectionQuotaCollector]:
        brokers = self._brokers()
        if not isinstance(brokers, Mapping):
            raise InvalidConfigError(
                f"invalid brokers {brokers!r}: expected a mapping of node ids to managers"
            )
        for node_id in brokers:
            if isinstance(node_id, bool) or not isinstance(node_id, int):
                raise InvalidConfigError(f"invalid broker node id {node_id!r}: expected an int")
        for node_id in sorted(brokers):
            managers = brokers[node_id]
            quota = [m for m in managers if isinstance(m, QuotaManager)]
            mutation = [m for m in managers if isinstance(m, ControllerMutationQuotaManager)]
            connections = [m for m in managers if isinstance(m, ConnectionQuotas)]
            if (
                len(quota) + len(mutation) + len(connections)
                != sum(m is not None for m in managers)
                or max(len(mutation), len(connections)) > 1
            ):
                raise InvalidConfigError(
                    f"invalid managers of broker {node_id}: {managers!r}; expected QuotaManager"
                    " objects, at most one ControllerMutationQuotaManager and at most one"
                    " ConnectionQuotas"
                )
            labels = {"broker": str(node_id)}
            yield QuotaCollector(
                *quota, quota_value_metric=self._quota_value_metric, clock=clock, labels=labels
            )
            for manager in mutation:
                yield MutationQuotaCollector(manager, clock=clock, labels=labels)
            for quotas in connections:
                yield ConnectionQuotaCollector(quotas, clock=clock, labels=labels)


def _merged(collected: Iterable[Iterable[Metric]]) -> list[Metric]:
    """The families of several collectors, one per name: the samples of a name's later
    families added to its first, which keeps its place."""
    merged: dict[str, Metric] = {}
    for families in collected:
        for family in families:
            first = merged.setdefault(family.name, family)
            if first is not family:
                first.samples.extend(family.samples)
    return list(merged.values())


_MUTATION_PREFIX = "kafka_server_controllermutation"
MUTATION_METRIC_NAMES = (
    f"{_MUTATION_PREFIX}_tokens",
    f"{_MUTATION_PREFIX}_mutation_rate",
    f"{_MUTATION_PREFIX}_throttle_time",
    f"{_MUTATION_PREFIX}_queue_size",
)
"""The families of :class:`MutationQuotaCollector`, in scrape order."""

_BUCKET_SENSOR = "ControllerMutation-"
_MUTATION_THROTTLE_SENSOR = "ControllerMutationThrottleTime-"


def _sensor_tags(rest: str) -> tuple[str, str]:
    """``(user tag, client-id tag)`` of a quota sensor name's ``<user>:<client-id>`` part
    (the user tag is sanitized, so it holds no colon; the client id may)."""
    user, _, client_id = rest.partition(":")
    return user, client_id


class MutationQuotaCollector(Collector):
    """A Prometheus collector over a :class:`kquota.ControllerMutationQuotaManager`.

    * ``kafka_server_controllermutation_tokens``: the tokens left in each client's bucket
      (negative when overdrawn), read as a JMX read does (the bucket refills to now);
    * ``kafka_server_controllermutation_throttle_time``: the throttle-time average (ms; NaN
      with no throttle in its window);
    * ``kafka_server_controllermutation_queue_size``: channels waiting in the delay queue.

    * ``kafka_server_controllermutation_mutation_rate``: partitions mutated per second
      (Kafka's ``mutation-rate``: a ``Rate`` over the broker's metrics windows, 2 x 30 s).

    Each sensor is read by its metric tags, so
    a sensor whose tags no longer resolve to it (the quotas changed since its last record)
    is skipped until it records again or expires. ``clock`` and ``labels`` as for
    :class:`QuotaCollector`.
    """

    def __init__(
        self,
        manager: ControllerMutationQuotaManager,
        *,
        clock: Callable[[], int] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(manager, ControllerMutationQuotaManager):
            raise InvalidConfigError(
                f"expected a ControllerMutationQuotaManager, got {type(manager).__name__}"
            )
        self._manager = manager
        self._clock = clock
        self._labels = _constant_labels(labels)

    @property
    def manager(self) -> ControllerMutationQuotaManager:
        """The manager this collector reads."""
        return self._manager

    def describe(self) -> Iterable[Metric]:
        """The families, without samples."""
        return self._families()

    def collect(self) -> Iterable[Metric]:
        """Read the manager's sensors now and return their families."""
        now = None if self._clock is None else self._clock()
        manager = self._manager
        tokens, rate, throttle, queue = families = self._families()
        for name in manager.sensor_names():
            readings: list[tuple[GaugeMetricFamily, float | None]]
            if name.startswith(_MUTATION_THROTTLE_SENSOR):
                user, client_id = _sensor_tags(name[len(_MUTATION_THROTTLE_SENSOR) :])
                readings = [
                    (throttle, manager.throttle_time_avg(unquote(user), client_id, now_ms=now))
                ]
            elif name.startswith(_BUCKET_SENSOR):  # one sensor, two stats (as Kafka's)
                user, client_id = _sensor_tags(name[len(_BUCKET_SENSOR) :])
                readings = [
                    (tokens, manager.tokens(unquote(user), client_id, now_ms=now)),
                    (rate, manager.mutation_rate(unquote(user), client_id, now_ms=now)),
                ]
            else:  # pragma: no cover (the core names no other sensor)
                continue
            for family, value in readings:
                if value is not None:
                    labels = {"user": user, "client_id": client_id, **self._labels}
                    family.samples.append(Sample(family.name, labels, value))
        queue.add_metric(tuple(self._labels.values()), float(manager.queue_size))
        return families

    @property
    def labels(self) -> dict[str, str]:
        """The constant labels of every sample (empty by default)."""
        return dict(self._labels)

    def _families(self) -> list[GaugeMetricFamily]:
        tokens, rate, throttle, queue = MUTATION_METRIC_NAMES
        constant = tuple(self._labels)
        labels = _LABELS + constant
        return [
            GaugeMetricFamily(
                tokens,
                "Tokens left in the client's controller-mutation bucket (partitions)",
                labels=labels,
            ),
            GaugeMetricFamily(
                rate,
                "Partitions created or deleted per second (controller-mutation quota)",
                labels=labels,
            ),
            GaugeMetricFamily(
                throttle,
                "Average controller-mutation throttle time in ms (NaN with no recent throttle)",
                labels=labels,
            ),
            GaugeMetricFamily(
                queue,
                "Throttled channels waiting to be unmuted (controller-mutation quota)",
                labels=constant,
            ),
        ]


_SOCKET_PREFIX = "kafka_server_socket_server_metrics"
CONNECTION_METRIC_NAMES = (
    f"{_SOCKET_PREFIX}_broker_connection_accept_rate",
    f"{_SOCKET_PREFIX}_connection_accept_rate",
    f"{_SOCKET_PREFIX}_connection_accept_throttle_time",
    f"{_SOCKET_PREFIX}_ip_connection_accept_throttle_time",
)
"""The families of :class:`ConnectionQuotaCollector`, in scrape order."""

_IP_SENSOR = "Connection-Accept-Rate-"


class ConnectionQuotaCollector(Collector):
    """A Prometheus collector over a :class:`kquota.ConnectionQuotas` (KIP-612).

    * ``kafka_server_socket_server_metrics_broker_connection_accept_rate``: new connections
      per second on the whole broker;
    * ``kafka_server_socket_server_metrics_connection_accept_rate``: per listener
      (``listener`` label) and per IP with a live sensor (``ip`` label);
    * ``kafka_server_socket_server_metrics_connection_accept_throttle_time``: per listener,
      the average accept delay of the broker and listener rates (ms, NaN with none);
    * ``kafka_server_socket_server_metrics_ip_connection_accept_throttle_time``: per
      listener, the average IP throttle (ms, NaN with none).

    ``clock`` and ``labels`` as for :class:`QuotaCollector` (the families' own labels here
    are ``listener`` and ``ip``).
    """

    def __init__(
        self,
        quotas: ConnectionQuotas,
        *,
        clock: Callable[[], int] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> None:
        if not isinstance(quotas, ConnectionQuotas):
            raise InvalidConfigError(f"expected a ConnectionQuotas, got {type(quotas).__name__}")
        self._quotas = quotas
        self._clock = clock
        self._labels = _constant_labels(labels, own=("listener", "ip"))

    @property
    def labels(self) -> dict[str, str]:
        """The constant labels of every sample (empty by default)."""
        return dict(self._labels)

    @property
    def quotas(self) -> ConnectionQuotas:
        """The connection quotas this collector reads."""
        return self._quotas

    def describe(self) -> Iterable[Metric]:
        """The families, without samples."""
        return self._families()

    def collect(self) -> Iterable[Metric]:
        """Read the rates now and return their families."""
        now = None if self._clock is None else self._clock()
        quotas = self._quotas
        constant = tuple(self._labels.values())
        broker, rate, throttle, ip_throttle = families = self._families()
        broker.add_metric(constant, quotas.broker_rate(now_ms=now))
        for listener, _ in quotas.listeners():
            rate.add_metric((listener, "", *constant), quotas.listener_rate(listener, now_ms=now))
            delay, ip_delay = quotas.listener_throttle_avgs(listener, now_ms=now)
            throttle.add_metric((listener, *constant), delay)
            ip_throttle.add_metric((listener, *constant), ip_delay)
        for name in quotas.ip_sensor_names():
            if not name.startswith(_IP_SENSOR):  # pragma: no cover (the core's names)
                continue
            ip = name[len(_IP_SENSOR) :]
            value = quotas.ip_rate(ip, now_ms=now)
            if value is not None:  # expired since it was listed
                rate.add_metric(("", ip, *constant), value)
        return families

    def _families(self) -> list[GaugeMetricFamily]:
        broker, rate, throttle, ip_throttle = CONNECTION_METRIC_NAMES
        constant = tuple(self._labels)
        return [
            GaugeMetricFamily(
                broker, "New connections accepted per second by the broker", labels=constant
            ),
            GaugeMetricFamily(
                rate,
                "New connections accepted per second, per listener or per IP",
                labels=("listener", "ip", *constant),
            ),
            GaugeMetricFamily(
                throttle,
                "Average accept delay in ms from the broker and listener connection rates "
                "(NaN with none)",
                labels=("listener", *constant),
            ),
            GaugeMetricFamily(
                ip_throttle,
                "Average throttle in ms from the per-IP connection rates (NaN with none)",
                labels=("listener", *constant),
            ),
        ]


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
