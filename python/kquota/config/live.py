"""Live quota updates: quota managers that follow a store, without a restart.

:class:`LiveQuotas` binds one or more :class:`~kquota.QuotaManager` (produce, fetch,
request), and optionally a :class:`~kquota.ControllerMutationQuotaManager`
(``controller_mutation_rate``) and a :class:`~kquota.ConnectionQuotas`
(``connection_creation_rate`` of IP entities), to a
:class:`~kquota.config.store.QuotaStore`. A daemon thread reads the store's
version every ``interval`` seconds (0.5 s by default) and, when it changed, reads the
configuration and applies the difference to each manager: new and changed overrides are
set, deleted ones removed, unchanged ones left alone. A change committed by any process
(``kquota configs --alter``) therefore reaches every process bound to that store within
``interval`` plus one store read: under 1 s by default, unless the store stays locked.

As in Kafka, a change affects existing sensors at once and keeps their samples: only the
bound moves. The store owns the overrides of the bound managers: an override that is
not in the store (or in ``defaults``) is removed, which restores Kafka's behaviour without
it: the next quota in precedence, or no limit (for an IP, the ``<default>`` IP's rate, and
without one 2147483647 connections per second, Kafka's "unlimited").

Each override is set or removed atomically; a change set that touches several entities is
applied one entity at a time (new and changed ones first, then removals), as Kafka's
brokers apply quota records one by one.

The store must exist: binding to one that does not (a typo in a path) raises
:class:`~kquota.exceptions.StoreError` naming it at once, instead of serving no quotas.
Only writes create a store.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterable
from typing import Final, Self

from kquota import (
    UNLIMITED_CONNECTION_RATE,
    ConnectionQuotas,
    ControllerMutationQuotaManager,
    QuotaManager,
)
from kquota.config.model import (
    CONTROLLER_MUTATION_RATE,
    PROPERTY_OF,
    QuotaConfig,
    Window,
    check_ip,
)
from kquota.config.store import QuotaStore, StoreSnapshot
from kquota.exceptions import InvalidConfigError
from kquota.quota_types import QuotaType

DEFAULT_INTERVAL: Final = 0.5
"""Seconds between two reads of the store's version."""

log = logging.getLogger(__name__)


def merge(defaults: QuotaConfig | None, config: QuotaConfig) -> QuotaConfig:
    """``config`` over ``defaults``: a property set in ``config`` wins for its entity.

    The window is ``config``'s.
    """
    if defaults is None:
        return config
    entities = defaults.by_entity()
    for entity, properties in config.by_entity().items():
        entities.setdefault(entity, {}).update(properties)
    return QuotaConfig.from_entities(entities, config.window, bounds=True)


def apply_config(
    manager: QuotaManager | ControllerMutationQuotaManager, config: QuotaConfig
) -> int:
    """Make ``manager``'s overrides equal ``config``'s for its quota type (its property:
    ``controller_mutation_rate`` for a :class:`~kquota.ControllerMutationQuotaManager`),
    changing only the difference; return how many overrides were set or removed."""
    prop = (
        CONTROLLER_MUTATION_RATE
        if isinstance(manager, ControllerMutationQuotaManager)
        else PROPERTY_OF[manager.quota_type]
    )
    wanted = dict(config.client_quotas(prop))
    current = dict(manager.quotas())
    changed = 0
    for entity, value in wanted.items():
        if current.get(entity) != value:
            manager.set_quota(entity, value)
            changed += 1
    for entity in current:
        if entity not in wanted:
            manager.remove_quota(entity)
            changed += 1
    return changed


def apply_ip_config(quotas: ConnectionQuotas, config: QuotaConfig) -> int:
    """Make ``quotas``' per-IP rates equal ``config``'s ``connection_creation_rate`` of IP
    entities (whole numbers, as the broker applies them), changing only the difference;
    return how many IP quotas were set or removed. The ``<default>`` IP without a rate is
    unlimited (2147483647), as in Kafka."""
    wanted = dict(config.ip_quotas())
    wanted_default = wanted.pop(None, UNLIMITED_CONNECTION_RATE)
    listed, default = quotas.ip_quotas()
    current = {check_ip(ip): rate for ip, rate in listed}
    changed = 0
    for ip, rate in wanted.items():
        assert ip is not None  # popped above
        if current.get(ip) != rate:
            quotas.set_ip_quota(ip, rate)
            changed += 1
    for ip in current:
        if ip not in wanted:
            quotas.set_ip_quota(ip, None)
            changed += 1
    if wanted_default != (UNLIMITED_CONNECTION_RATE if default is None else default):
        unlimited = wanted_default == UNLIMITED_CONNECTION_RATE
        quotas.set_ip_quota(None, None if unlimited else wanted_default)
        changed += 1
    return changed


class LiveQuotas:
    """Quota managers that follow a store; see the module documentation.

    ``defaults`` (e.g. from :func:`~kquota.config.static.load_static_defaults`) apply
    under the store: a property the store sets for the same entity wins. Use it as a
    context manager, or call :meth:`start` and :meth:`stop`; :meth:`refresh` applies
    the store's current state synchronously. The store is asked for its version once
    here, so a store that does not exist or cannot be used raises
    :class:`~kquota.exceptions.StoreError` at construction::

        store = SQLiteStore("/var/lib/kquota/quotas.sqlite")
        with LiveQuotas.for_store(store) as live:
            produce = live.manager("produce")
            ...  # record as usual; quota changes arrive within ~0.5 s
    """

    def __init__(
        self,
        store: QuotaStore,
        *managers: QuotaManager,
        mutation: ControllerMutationQuotaManager | None = None,
        connections: ConnectionQuotas | None = None,
        interval: float = DEFAULT_INTERVAL,
        defaults: QuotaConfig | None = None,
    ) -> None:
        if not isinstance(store, QuotaStore):
            raise InvalidConfigError(f"expected a QuotaStore, got {type(store).__name__}")
        for m in managers:
            if not isinstance(m, QuotaManager):
                raise InvalidConfigError(
                    f"LiveQuotas needs one or more QuotaManager instances as positional "
                    f"arguments, got {m!r} (a ControllerMutationQuotaManager goes as "
                    "mutation=, a ConnectionQuotas as connections=)"
                )
        if mutation is not None and not isinstance(mutation, ControllerMutationQuotaManager):
            raise InvalidConfigError(
                f"invalid mutation {mutation!r}: expected a ControllerMutationQuotaManager"
            )
        if connections is not None and not isinstance(connections, ConnectionQuotas):
            raise InvalidConfigError(
                f"invalid connections {connections!r}: expected a ConnectionQuotas"
            )
        if not managers and mutation is None and connections is None:
            raise InvalidConfigError(
                "LiveQuotas needs one or more QuotaManager instances, a mutation manager or "
                "connection quotas"
            )
        if (
            isinstance(interval, bool)
            or not isinstance(interval, int | float)
            or not math.isfinite(interval)
            or interval <= 0
        ):
            raise InvalidConfigError(
                f"invalid interval {interval!r}: expected seconds > 0, e.g. {DEFAULT_INTERVAL}"
            )
        if defaults is not None and not isinstance(defaults, QuotaConfig):
            raise InvalidConfigError(f"invalid defaults {defaults!r}: expected a QuotaConfig")
        store.version()  # fail now, naming the store, if it is not there or not usable
        self.store = store
        """The store followed."""
        self.interval = float(interval)
        """Seconds between two reads of the store's version."""
        self.defaults = defaults
        """Quotas applied under the store's (static defaults), or ``None``."""
        self._managers = tuple(managers)
        self._mutation = mutation
        self._connections = connections
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._version: int | None = None
        self._warned_window: Window | None = None
        self._last_error: Exception | None = None

    @classmethod
    def for_store(
        cls,
        store: QuotaStore,
        quota_types: Iterable[QuotaType] = ("produce", "fetch", "request"),
        *,
        interval: float = DEFAULT_INTERVAL,
        defaults: QuotaConfig | None = None,
        sensor_expiry_ms: int = 3_600_000,
        controller_mutation: bool = False,
        connection_quotas: bool = False,
    ) -> LiveQuotas:
        """New managers of ``quota_types`` with the store's window, bound to ``store``.

        ``controller_mutation=True`` adds a :class:`~kquota.ControllerMutationQuotaManager`
        (:attr:`mutation_manager`) and ``connection_quotas=True`` a
        :class:`~kquota.ConnectionQuotas` (:attr:`connection_quotas`; add its listeners and
        broker-wide limit yourself), both with the store's window too.

        The window is read once: a store never written uses ``defaults``' window, or
        Kafka's 11 x 1 s. A store that does not exist raises
        :class:`~kquota.exceptions.StoreError` naming it. Windows are fixed for a manager's life (as
        ``quota.window.*`` are static broker settings): changing the store's window
        needs new managers.
        """
        snapshot = store.read()
        window = (
            defaults.window
            if snapshot.version == 0 and defaults is not None
            else snapshot.config.window
        )
        managers = [
            QuotaManager(
                quota_type,
                num_samples=window.num_samples,
                window_ms=window.window_ms,
                sensor_expiry_ms=sensor_expiry_ms,
            )
            for quota_type in quota_types
        ]
        mutation = (
            ControllerMutationQuotaManager(
                num_samples=window.num_samples,
                window_ms=window.window_ms,
                sensor_expiry_ms=sensor_expiry_ms,
            )
            if controller_mutation
            else None
        )
        connections = (
            ConnectionQuotas(num_samples=window.num_samples, window_ms=window.window_ms)
            if connection_quotas
            else None
        )
        live = cls(
            store,
            *managers,
            mutation=mutation,
            connections=connections,
            interval=interval,
            defaults=defaults,
        )
        live._apply(snapshot)
        return live

    @property
    def managers(self) -> tuple[QuotaManager, ...]:
        """The bound managers."""
        return self._managers

    @property
    def mutation_manager(self) -> ControllerMutationQuotaManager | None:
        """The bound controller-mutation manager (``controller_mutation_rate``), if any."""
        return self._mutation

    @property
    def connection_quotas(self) -> ConnectionQuotas | None:
        """The bound connection quotas (``connection_creation_rate`` of IPs), if any."""
        return self._connections

    def manager(self, quota_type: QuotaType) -> QuotaManager:
        """The (first) bound manager of ``quota_type``."""
        for manager in self._managers:
            if manager.quota_type == quota_type:
                return manager
        bound = ", ".join(m.quota_type for m in self._managers) or "none"
        raise InvalidConfigError(f"no {quota_type!r} manager is bound (bound: {bound})")

    @property
    def version(self) -> int | None:
        """The store version last applied, ``None`` before the first."""
        return self._version

    @property
    def last_error(self) -> Exception | None:
        """The error of the background thread's last failed refresh (``None`` once one
        succeeds). The managers keep the last configuration applied meanwhile."""
        return self._last_error

    @property
    def running(self) -> bool:
        """Whether the background thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def refresh(self) -> bool:
        """Apply the store's state now if its version changed; return whether it did.

        Raises what the store raises (:class:`~kquota.exceptions.StoreError`); the
        managers then keep their overrides.
        """
        with self._lock:
            if self._version is not None and self.store.version() == self._version:
                return False
            snapshot = self.store.read()
            if snapshot.version == self._version:
                return False
            self._apply(snapshot)
            return True

    def _apply(self, snapshot: StoreSnapshot) -> None:
        config = merge(self.defaults, snapshot.config)
        changed = sum(apply_config(manager, config) for manager in self._managers)
        if self._mutation is not None:
            changed += apply_config(self._mutation, config)
        if self._connections is not None:
            changed += apply_ip_config(self._connections, config)
        if snapshot.version > 0 and snapshot.config.window != self._warned_window:
            window = snapshot.config.window
            windows: list[tuple[str, int, int]] = [
                (m.quota_type, m.num_samples, m.window_ms) for m in self._managers
            ]
            if self._mutation is not None:
                m = self._mutation
                windows.append(("controller-mutation", m.num_samples, m.window_ms))
            if self._connections is not None:
                c = self._connections
                windows.append(("connection", c.num_samples, c.window_ms))
            differing = [
                name
                for name, num_samples, window_ms in windows
                if (num_samples, window_ms) != (window.num_samples, window.window_ms)
            ]
            if differing:
                log.warning(
                    "%s has window %d x %d ms; the %s manager(s) keep their own window "
                    "until they are recreated",
                    self.store.describe(),
                    window.num_samples,
                    window.window_ms,
                    ", ".join(differing),
                )
            self._warned_window = window
        log.debug(
            "applied version %d of %s: %d override(s) changed",
            snapshot.version,
            self.store.describe(),
            changed,
        )
        self._version = snapshot.version

    def start(self) -> Self:
        """Apply the store's state now (raising if the store is unusable), then follow
        it in a daemon thread. Returns ``self``."""
        if self.running:
            return self
        self.refresh()
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._follow, name=f"kquota-live({self.store.describe()})", daemon=True
        )
        self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop the background thread and wait for it (at most ``timeout`` seconds)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _follow(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.refresh()
            except Exception as exc:  # keep following: the store may come back
                if self._last_error is None or str(exc) != str(self._last_error):
                    log.warning("cannot refresh quotas from %s: %s", self.store.describe(), exc)
                self._last_error = exc
            else:
                if self._last_error is not None:
                    log.info("quotas from %s are followed again", self.store.describe())
                self._last_error = None
