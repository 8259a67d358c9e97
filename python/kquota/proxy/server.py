"""The proxy: Kafka's client quotas in front of a Kafka-protocol broker.

:class:`ProxyServer` runs the Rust data path (:class:`kquota._core.ProxyDataPath`, the
``kquota-proxy`` crate) on threads of its own and keeps the control plane in Python: the
managers' quotas (which a :class:`~kquota.config.live.LiveQuotas` updates live), the
capture, fed from the data path's decisions in batches, and a quota callback, asked (taking
the GIL) only when a client is resolved and when a Metadata response shows the brokers or
partition leaders changed. No Python runs on a request's way.

Like a Kafka broker's socket server, each connection's requests are handled one at a time
and in order: its responder takes each response in turn, checks the quotas at that moment
(the core's request path: produce, fetch and request quotas, the larger throttle wins),
writes the throttle into the response and sends it; a KIP-219 mute then holds the
connection (nothing more is read from it) until it ends. The one liberty taken: a Produce
request may be forwarded while earlier Produce requests of the same connection still wait
for their responses (at most eight, and never while the connection is muted), as a client
pipelines them; its quota is still checked in its turn, after the mute its predecessor's
response may have started, so only the broker's append can come earlier.

Per API:

* Produce: the request's size against the produce quota; ``acks=0`` has no response but
  still mutes the connection when throttled.
* Fetch (from consumers): the request's ``max_bytes`` capped by the fetch quota window;
  the response's size against the fetch quota; a throttled fetch is answered with an
  empty fetch response carrying the throttle (its bytes are unrecorded). A replica's
  fetch gets the request quota only.
* ApiVersions: versions capped to those the data path reads, then as any other API.
* SaslHandshake / SaslAuthenticate: never throttled (Kafka handles them in the network
  layer); the user name of PLAIN and SCRAM is taken once the broker accepts it.
* CreateTopics, CreatePartitions, DeleteTopics, with a ``mutation`` manager whose quotas
  are enabled: the controller-mutation quota (KIP-599). The partitions of each topic are
  counted as Kafka's controller counts them (from a Metadata request the proxy sends
  upstream first) and recorded in request order. At strict versions (CreateTopics v6+,
  CreatePartitions v3+, DeleteTopics v5+) the topics a quota refuses are taken out of the
  request and answered with ``THROTTLING_QUOTA_EXCEEDED``, merged with the broker's results
  in the request's order; at older versions every topic is forwarded and recorded. The
  response carries the larger of the mutation and request throttles.
* Every API: the request quota, charged with the proxy's own time and, for the APIs Kafka
  answers at once, an estimate of the broker's handler time (per kind of request, from
  the low percentiles of its round trips; the proxy guide says how); Kafka charges those
  it parks or forwards to its controller only up to its handler's return, which the
  proxy cannot see.

With ``connection_quotas`` (KIP-612), each new connection is first held to the broker's
and the listener's ``max.connection.creation.rate`` (accepting waits, one connection at a
time, as Kafka's acceptor does), then to its IP's ``connection_creation_rate``: a
connection over it is accepted, read nothing from, and closed after the throttle time. A
gateway counts each port's connections apart, as each broker counts its own.

Every response with a ``throttle_time_ms`` field carries the applied throttle (the
broker's own value is kept when it is larger). Bad input (a malformed or oversized frame,
an unknown API key or version, a response that does not match) or a dead upstream closes
that one connection with one log line on the ``kquota.proxy`` logger.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

from prometheus_client.registry import Collector

from kquota import ConnectionQuotas, ControllerMutationQuotaManager, QuotaManager
from kquota._core import ProxyDataPath, ProxyDecision, check_proxy_options
from kquota.broker import QuotaPlugin
from kquota.broker.metrics import (
    ConnectionQuotaCollector,
    MutationQuotaCollector,
    PerBrokerQuotaCollector,
    QuotaCollector,
)
from kquota.callback import QuotaCallback
from kquota.exceptions import InvalidConfigError, ProxyError
from kquota.proxy.admin import StoreAdmin
from kquota.proxy.capture import TrafficCapture, flush_every_second

__all__ = [
    "BOOTSTRAP_NODE_ID",
    "DEFAULT_CONNECTIONS_MAX_IDLE",
    "DEFAULT_LISTENER",
    "DEFAULT_UPSTREAM_TIMEOUT",
    "MAX_REQUEST_BYTES",
    "BrokerManagers",
    "GatewayBroker",
    "ProxyDecision",
    "ProxyServer",
]

log = logging.getLogger("kquota.proxy")

DEFAULT_UPSTREAM_TIMEOUT: Final = 300.0
"""Seconds to wait for the upstream's response to one request before giving up on it."""
DEFAULT_CONNECTIONS_MAX_IDLE: Final = 600.0
"""Kafka's ``connections.max.idle.ms`` default (10 minutes), in seconds."""

DEFAULT_LISTENER: Final = "PLAINTEXT"
"""The listener connections are counted under (Kafka's listener name), for KIP-612."""

MAX_REQUEST_BYTES: Final = 104_857_600
"""Kafka's default ``socket.request.max.bytes``: the largest request (and, by default,
response) frame the proxy takes."""

_DRAIN_INTERVAL_S: Final = 0.1
"""How often the data path's decisions are moved into a capture."""

_PRODUCE: Final = 0

BOOTSTRAP_NODE_ID: Final = -1
"""The node id a gateway gives its bootstrap port's own managers, in
:meth:`ProxyServer.broker_managers` and the metrics (as in :attr:`ProxyDecision.broker`)."""


class GatewayBroker(NamedTuple):
    """A broker a gateway serves (:attr:`ProxyServer.brokers`)."""

    node_id: int
    upstream: tuple[str, int]
    """The broker's own address, as the cluster advertises it."""
    port: int
    """Its port on the gateway, which clients are told instead."""


class BrokerManagers(NamedTuple):
    """One broker's quota managers in a gateway (:meth:`ProxyServer.broker_managers`)."""

    produce: QuotaManager
    fetch: QuotaManager
    request: QuotaManager
    mutation: ControllerMutationQuotaManager | None
    """The controller-mutation manager, when the proxy has a ``mutation`` manager."""
    connections: ConnectionQuotas | None = None
    """The connection-creation rates, when the proxy has ``connection_quotas``."""


class ProxyServer:
    """A Kafka-protocol proxy that applies ``plugin``'s quotas in front of ``upstream``.

    As a sidecar (the default), ``upstream`` is ``(host, port)`` of one broker, which must
    advertise the proxy's address (Metadata and FindCoordinator responses pass through
    unchanged). As a gateway (``broker_ports=(first, last)``), ``upstream`` is the
    cluster's bootstrap address (or a list of them, tried in turn): the proxy listens on
    its own address as the bootstrap, gives broker ``n`` the port ``first + n`` (on the
    same IP) the first time a response names it, and rewrites every broker address in
    the responses to ``advertised_host`` (default: the listen address's IP) and that
    port, so clients connect only through it. Each broker's traffic is measured on
    sensors of its own, with the plugin's quotas, as each Kafka broker measures its own,
    and so are the connections to each port with ``connection_quotas`` (the bootstrap
    port's on sensors of its own: a connection is admitted before the gateway knows which
    broker it reaches). A gateway whose plugin has a quota callback needs
    ``callback_factory`` (no argument, returning a new callback, as ``load_callback``'s
    ``module:factory`` does): each broker gets an instance of its own, as each Kafka
    broker has, told every quota and the cluster metadata as that broker; the bootstrap
    port keeps the plugin's. The proxy closes the instances it made at :meth:`shutdown`.
    ``max_request_bytes`` is Kafka's ``socket.request.max.bytes``: a request announcing
    more closes its connection unanswered, as Kafka closes it; responses larger than
    ``max_response_bytes`` close the connection too. ``connections_max_idle`` is Kafka's
    ``connections.max.idle.ms``, in seconds: a client connection that neither sends nor
    receives for that long, with no request at the broker and no mute running, is closed
    (a client that stopped in the middle of a request holds only its own connection, and
    only that long). With ``capture``, every request whose
    quota the proxy checks is added to it, as it was checked (``kquota proxy --capture``).

    With ``admin`` (a :class:`~kquota.proxy.StoreAdmin`), the proxy answers Kafka's quota
    administration itself (KIP-546: ``kafka-configs.sh --bootstrap-server``, the Admin
    API's ``describeClientQuotas`` / ``alterClientQuotas``) from and into its store, for
    the principals its :class:`~kquota.proxy.AdminAccess` admits (by default, whoever the
    cluster itself allows, asked on the client's own connection; the proxy logs who that
    is when it starts); without it, those requests go to the broker like any other.

    ``mutation`` enables the controller-mutation quota of CreateTopics, CreatePartitions
    and DeleteTopics (``default_num_partitions`` is the broker's ``num.partitions``, what
    a CreateTopics topic with -1 partitions gets); ``connection_quotas`` the connection
    creation rates, counted under ``listener`` (added to them at :meth:`start` if they
    lack it). Both are read live: a :class:`~kquota.config.live.LiveQuotas` may update
    them while the proxy runs. Their times are the plugin's clock: the default,
    :func:`kquota.monotonic_ms` (as ``kquota proxy`` uses), starts at the wall-clock time,
    so a new token bucket is full at its first use as on a broker.

    The connections are served on ``threads`` threads of the data path's own, which reads
    the plugin's managers directly and keeps its quota decisions for :meth:`take_decisions`
    when ``keep_decisions`` is set. It applies Kafka's rules from the core, so methods a
    :class:`~kquota.broker.QuotaPlugin` subclass overrides (``on_produce``, ...) are not
    called; the plugin's managers, quotas and callback are what count.

    An option outside its rule raises :class:`~kquota.exceptions.InvalidConfigError`
    naming it, when the server is made: the data path's own rules
    (``kquota._core.check_proxy_options``), which it applies again at :meth:`start`,
    where it also resolves the host names.
    """

    def __init__(
        self,
        upstream: tuple[str, int] | Sequence[tuple[str, int]],
        plugin: QuotaPlugin,
        *,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        max_response_bytes: int = MAX_REQUEST_BYTES,
        connect_timeout: float = 10.0,
        upstream_timeout: float = DEFAULT_UPSTREAM_TIMEOUT,
        connections_max_idle: float = DEFAULT_CONNECTIONS_MAX_IDLE,
        capture: TrafficCapture | None = None,
        mutation: ControllerMutationQuotaManager | None = None,
        connection_quotas: ConnectionQuotas | None = None,
        listener: str = DEFAULT_LISTENER,
        default_num_partitions: int = 1,
        threads: int = 2,
        keep_decisions: bool = False,
        broker_ports: tuple[int, int] | None = None,
        advertised_host: str | None = None,
        admin: StoreAdmin | None = None,
        callback_factory: Callable[[], QuotaCallback] | None = None,
    ) -> None:
        addresses = _addresses(upstream)
        # What only Python can judge: the shapes of Python values and the Python objects
        # given. The rules on the values are the data path's (check_proxy_options), the
        # same it starts with, applied here too so that a bad option fails now.
        if broker_ports is not None and not (
            isinstance(broker_ports, tuple)
            and len(broker_ports) == 2
            and all(isinstance(p, int) and not isinstance(p, bool) for p in broker_ports)
        ):
            raise InvalidConfigError(
                f"invalid broker_ports {broker_ports!r}: expected (first, last) ports"
            )
        if admin is not None and not isinstance(admin, StoreAdmin):
            raise InvalidConfigError(f"invalid admin {admin!r}: expected a StoreAdmin")
        if callback_factory is not None and not callable(callback_factory):
            raise InvalidConfigError(
                f"invalid callback_factory {callback_factory!r}: expected a callable"
                " returning a new quota callback"
            )
        with_callback = any(m.callback is not None for m in plugin.managers)
        if broker_ports is None and callback_factory is not None:
            raise InvalidConfigError(
                "callback_factory needs broker_ports (gateway mode): a sidecar's broker"
                " has the plugin's callback"
            )
        if broker_ports is not None and with_callback and callback_factory is None:
            raise InvalidConfigError(
                "a gateway whose plugin has a quota callback needs callback_factory:"
                " each broker has a callback instance of its own"
            )
        if mutation is not None and not isinstance(mutation, ControllerMutationQuotaManager):
            raise InvalidConfigError(
                f"invalid mutation {mutation!r}: expected a ControllerMutationQuotaManager"
            )
        if connection_quotas is not None and not isinstance(connection_quotas, ConnectionQuotas):
            raise InvalidConfigError(
                f"invalid connection_quotas {connection_quotas!r}: expected a ConnectionQuotas"
            )
        check_proxy_options(
            _upstream_text(addresses),
            max_request_bytes=max_request_bytes,
            max_response_bytes=max_response_bytes,
            connect_timeout=connect_timeout,
            upstream_timeout=upstream_timeout,
            connections_max_idle=connections_max_idle,
            default_num_partitions=default_num_partitions,
            listener=listener,
            threads=threads,
            broker_ports=broker_ports,
            advertised_host=advertised_host,
        )
        self.upstream = addresses[0]
        self.bootstrap = addresses
        self.broker_ports = broker_ports
        self.advertised_host = advertised_host
        self.admin = admin
        self.plugin = plugin
        self.max_request_bytes = max_request_bytes
        self.max_response_bytes = max_response_bytes
        self.connect_timeout = connect_timeout
        self.upstream_timeout = upstream_timeout
        self.connections_max_idle = connections_max_idle
        self.capture = capture
        self.mutation = mutation
        self.connection_quotas = connection_quotas
        self.listener = listener
        self.default_num_partitions = default_num_partitions
        if mutation is not None:
            plugin.channels.add_manager(mutation)  # its delay queue and sensors kept
        self.threads = threads
        self.keep_decisions = keep_decisions
        self.callback_factory = callback_factory if with_callback else None
        self._made_callbacks: list[QuotaCallback] = []
        self._data_path: ProxyDataPath | None = None
        self._capture_ticker: asyncio.Task[None] | None = None

    # -- life cycle -----------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Listen on ``host:port`` (``port=0``: any free port, see :attr:`address`)."""
        plugin = self.plugin
        self._data_path = ProxyDataPath(
            _upstream_text(self.bootstrap),
            plugin.produce,
            plugin.fetch,
            plugin.request,
            mutation=self.mutation,
            default_num_partitions=self.default_num_partitions,
            connection_quotas=self.connection_quotas,
            listener=self.listener,
            listen=f"{host}:{port}",
            max_request_bytes=self.max_request_bytes,
            max_response_bytes=self.max_response_bytes,
            connect_timeout=self.connect_timeout,
            upstream_timeout=self.upstream_timeout,
            connections_max_idle=self.connections_max_idle,
            threads=self.threads,
            keep_decisions=self.keep_decisions or self.capture is not None,
            broker_ports=self.broker_ports,
            advertised_host=self.advertised_host,
            admin=self.admin,
            admin_ask_cluster=self.admin is None or self.admin.access.ask_cluster,
            admin_users=None if self.admin is None else self.admin.access.users,
            callback_factory=None if self.callback_factory is None else self._new_callback,
        )
        if self.admin is not None:
            access = self.admin.access
            level = logging.WARNING if access.open else logging.INFO
            log.log(level, "quota administration: %s", access.describe())
        if self.capture is not None:
            self.capture.align(plugin.channels.now_ms())
            loop = asyncio.get_running_loop()
            self._capture_ticker = loop.create_task(self._capture_decisions(self.capture))

    def _new_callback(self) -> QuotaCallback:
        """A new broker's callback, kept to be closed at shutdown."""
        assert self.callback_factory is not None
        callback = self.callback_factory()
        self._made_callbacks.append(callback)
        return callback

    def take_decisions(self) -> list[ProxyDecision]:
        """The quota decisions since the last call, oldest first (with ``keep_decisions``;
        a capture takes them itself), as the data path made them."""
        if self._data_path is None:
            return []
        return self._data_path.take_decisions()

    async def _capture_decisions(self, capture: TrafficCapture) -> None:
        flusher = asyncio.get_running_loop().create_task(flush_every_second(capture))
        try:
            while True:
                self._capture_taken(capture)
                await asyncio.sleep(_DRAIN_INTERVAL_S)
        finally:
            await _stop(flusher)

    def _capture_taken(self, capture: TrafficCapture) -> None:
        for d in self.take_decisions():
            silent = d.api_key == _PRODUCE and d.acks == 0
            outcome = d.outcome
            capture.add(
                d.at_ms,
                d.user,
                d.client_id,
                d.api,
                int(d.size),
                None if silent else int(d.thread_ns),
                d.acks if d.api_key == _PRODUCE else None,
                outcome.throttle_ms if outcome.throttled else 0,
                d.api_version,
                d.correlation_id,
                d.peer,
                None if self.broker_ports is None else str(d.broker),
            )

    @property
    def address(self) -> tuple[str, int]:
        """The ``(host, port)`` the proxy listens on."""
        if self._data_path is None:
            raise ProxyError("the proxy is not listening: call start() first")
        return self._data_path.address

    @property
    def brokers(self) -> dict[int, GatewayBroker]:
        """A gateway's brokers, by node id: each one a response has named so far (empty
        for a sidecar)."""
        if self._data_path is None:
            return {}
        served = {}
        for node_id, upstream, port in self._data_path.brokers:
            host, _, upstream_port = upstream.rpartition(":")
            served[node_id] = GatewayBroker(node_id, (host, int(upstream_port)), port)
        return served

    def broker_managers(self) -> dict[int, BrokerManagers]:
        """A gateway's quota managers, by node id (empty for a sidecar).

        :data:`BOOTSTRAP_NODE_ID` (-1) has the bootstrap port's own: the plugin's managers,
        ``mutation`` and ``connection_quotas``; the managers measure a bootstrap connection
        until a response names the broker it reached. Then each broker a response has named
        so far: new handles on the managers its port's connections record on (not copies),
        so reading them reads that broker's sensors, and a quota set on them is set on
        every broker (they share the plugin's quotas and ``connection_quotas``'
        configuration). With a quota callback, a broker's managers' ``callback`` is that
        broker's own instance.
        """
        if self.broker_ports is None:
            return {}
        plugin = self.plugin
        managers = {
            BOOTSTRAP_NODE_ID: BrokerManagers(
                plugin.produce, plugin.fetch, plugin.request, self.mutation, self.connection_quotas
            )
        }
        if self._data_path is not None:
            for node_id, each in self._data_path.broker_managers().items():
                managers[node_id] = BrokerManagers(*each)
        return managers

    def metrics_collectors(
        self, *, quota_value_metric: bool = False, clock: Callable[[], int] | None = None
    ) -> list[Collector]:
        """The Prometheus collectors of this proxy's quotas, for
        :func:`~kquota.broker.serve_metrics` (``kquota proxy --metrics-port``).

        A sidecar's: a :class:`~kquota.broker.QuotaCollector` of the plugin's managers,
        then a :class:`~kquota.broker.ConnectionQuotaCollector` with ``connection_quotas``
        and a :class:`~kquota.broker.MutationQuotaCollector` with ``mutation``. A
        gateway's: one :class:`~kquota.broker.PerBrokerQuotaCollector` over
        :meth:`broker_managers`, so each broker's sensors (connection rates included) have
        a ``broker`` label (-1 for the bootstrap port's own) and a broker appears from the
        first scrape after a response names it. ``quota_value_metric`` and ``clock`` as
        for the :class:`~kquota.broker.QuotaCollector`.
        """
        if self.broker_ports is not None:
            return [
                PerBrokerQuotaCollector(
                    self.broker_managers, quota_value_metric=quota_value_metric, clock=clock
                )
            ]
        collectors: list[Collector] = [
            QuotaCollector(
                *self.plugin.managers, quota_value_metric=quota_value_metric, clock=clock
            )
        ]
        if self.connection_quotas is not None:
            collectors.append(ConnectionQuotaCollector(self.connection_quotas, clock=clock))
        if self.mutation is not None:
            collectors.append(MutationQuotaCollector(self.mutation, clock=clock))
        return collectors

    @property
    def connections(self) -> int:
        """Client connections open now."""
        return 0 if self._data_path is None else self._data_path.connections

    @property
    def ip_throttled_connections(self) -> int:
        """Connections closed unread since :meth:`start` because their IP was over its
        ``connection_creation_rate`` (on every port of a gateway)."""
        return 0 if self._data_path is None else self._data_path.ip_throttled_connections

    async def shutdown(self, timeout: float = 30.0) -> None:
        """Stop accepting, answer the requests in flight, then close every connection.

        Connections waiting for their next request (or for their mute to end, or for
        their turn to forward one: it is dropped unread, as a muted broker leaves it) are
        closed at once; those with requests in flight (being forwarded, or forwarded and
        not yet answered) finish them first, for at most ``timeout`` seconds.
        """
        loop = asyncio.get_running_loop()
        if self._data_path is not None:
            await loop.run_in_executor(None, self._data_path.shutdown, timeout)
        if self._capture_ticker is not None:
            await _stop(self._capture_ticker)
        if self.capture is not None:
            self._capture_taken(self.capture)  # the decisions of the last requests
            await loop.run_in_executor(None, self.capture.close)
        made, self._made_callbacks = self._made_callbacks, []
        for callback in made:
            callback.close()


def _addresses(upstream: object) -> list[tuple[str, int]]:
    """``(host, port)`` or a list of them, as Python values (the data path judges the
    addresses themselves)."""
    single = isinstance(upstream, tuple) and bool(upstream) and isinstance(upstream[0], str)
    items = [upstream] if single else upstream
    if isinstance(items, (list, tuple)) and items:
        checked = []
        for item in items:
            if not (
                isinstance(item, tuple)
                and len(item) == 2
                and isinstance(item[0], str)
                and isinstance(item[1], int)
                and not isinstance(item[1], bool)
            ):
                break
            checked.append((item[0], item[1]))
        else:
            return checked
    raise InvalidConfigError(
        f"invalid upstream {upstream!r}: expected (HOST, PORT) or a list of them"
    )


def _upstream_text(addresses: Sequence[tuple[str, int]]) -> str:
    """The data path's ``upstream``: ``HOST:PORT``, comma-separated."""
    return ",".join(f"{host}:{port}" for host, port in addresses)


async def _stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
