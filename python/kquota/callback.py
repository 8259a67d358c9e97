"""Custom quota callbacks (KIP-257, Kafka's ``ClientQuotaCallback``).

A quota callback replaces Kafka's built-in quota precedence: it maps a request's
``(user principal, client id)`` to the metric tags of the sensor it records into (clients
with equal tags share one quota) and those tags to a quota limit. It is told when quotas
are set or removed and when the cluster metadata changes, and asked whether limits must
be reset. Build a :class:`~kquota.QuotaManager` with ``callback=``; the plugin, the proxy
(``kquota proxy --quota-callback module:factory``) and the back-test
(``kquota backtest --quota-callback module:factory``) take one too.

The manager asks the callback only when it resolves a client to its sensors (the first
request of a client, and the first one after a reset or an expiry) and when it resets the
limits (after every quota change, after :meth:`QuotaCallback.update_cluster_metadata`
returned true, and when :meth:`QuotaCallback.quota_reset_required` returns true); a record
for a client already resolved never calls Python. Anything the callback raises, or a value
of the wrong type or range it returns, raises :class:`~kquota.QuotaCallbackError` naming the
callback, the method and the value, and leaves no sensor half-created.

Example: every user's ``<user>`` quota divided by two
(``tests/support/callbacks/half_user_quota.py`` is this class)::

    class HalfUserQuota:
        def __init__(self):
            self.quotas = {}

        def quota_metric_tags(self, quota_type, user, client_id):
            return {"user": kquota.sanitize_user(user), "client-id": ""}

        def quota_limit(self, quota_type, tags):
            quota = self.quotas.get((quota_type, tags["user"]))
            return None if quota is None else quota / 2

        def update_quota(self, quota_type, entity, value):
            if entity.client_id is None and entity.user is not None:
                self.quotas[(quota_type, kquota.sanitize_user(entity.user))] = value

        def remove_quota(self, quota_type, entity):
            if entity.client_id is None and entity.user is not None:
                self.quotas.pop((quota_type, kquota.sanitize_user(entity.user)), None)

        def quota_reset_required(self, quota_type):
            return False

        def update_cluster_metadata(self, metadata):
            return False

        def close(self):
            pass
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Protocol, runtime_checkable

from kquota._core import QUOTA_CALLBACK_METHODS, ClusterMetadata, Entity
from kquota.exceptions import InvalidConfigError, QuotaCallbackError

__all__ = ["QuotaCallback", "load_callback"]


@runtime_checkable
class QuotaCallback(Protocol):
    """What a custom quota callback implements (Kafka's ``ClientQuotaCallback``).

    ``quota_type`` is ``"produce"``, ``"fetch"`` or ``"request"`` in every method. One
    callback usually serves the three managers of a broker.
    """

    def quota_metric_tags(self, quota_type: str, user: str, client_id: str) -> Mapping[str, str]:
        """The tags of the sensor a request of principal ``user`` (as the client
        authenticated, not sanitized) with ``client_id`` records into: a mapping with the keys
        ``"user"`` and ``"client-id"`` (an absent key is an empty tag, a dimension the sensor
        does not have). Clients with equal tags share one quota."""
        ...

    def quota_limit(self, quota_type: str, tags: Mapping[str, str]) -> float | None:
        """The quota of the sensor with ``tags`` (bytes/s, or percent of one thread for
        ``request``): a finite number > 0, or ``None`` for no quota."""
        ...

    def update_quota(self, quota_type: str, entity: Entity, value: float) -> None:
        """A quota was set for ``entity`` (``kafka-configs --add-config``, a live config)."""
        ...

    def remove_quota(self, quota_type: str, entity: Entity) -> None:
        """The quota of ``entity`` was removed."""
        ...

    def quota_reset_required(self, quota_type: str) -> bool:
        """Whether limits may have changed since the last call, other than through the
        calls above (which always reset). Asked when a client is resolved and by
        :meth:`~kquota.QuotaManager.reset_if_required`."""
        ...

    def update_cluster_metadata(self, metadata: ClusterMetadata) -> bool:
        """The brokers or partition leaders changed; true if quotas changed and every
        limit must be asked again."""
        ...

    def close(self) -> None:
        """Called once by the plugin, proxy or back-test that owns the callback when it
        shuts down."""
        ...


def load_callback(spec: str) -> QuotaCallback:
    """The callback ``module:factory`` names: ``factory()`` called once, e.g.
    ``"tests.callbacks.half_user_quota:HalfUserQuota"``. A spec that is not of that form,
    a module that cannot be imported or a missing attribute raise
    :class:`~kquota.InvalidConfigError`; a factory that raises, or returns an object
    without the methods of :class:`QuotaCallback`, raises
    :class:`~kquota.QuotaCallbackError`."""
    if not isinstance(spec, str):
        raise InvalidConfigError(
            f"invalid quota callback {spec!r}: expected 'module:factory', e.g."
            " 'mypackage.quotas:make_callback'"
        )
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise InvalidConfigError(
            f"invalid quota callback {spec!r}: expected 'module:factory', e.g."
            " 'mypackage.quotas:make_callback'"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as e:  # an ImportError, or whatever the module raised on import
        raise InvalidConfigError(
            f"invalid quota callback {spec!r}: cannot import module {module_name!r}:"
            f" {type(e).__name__}: {e}"
        ) from e
    target: object = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise InvalidConfigError(
                f"invalid quota callback {spec!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    if not callable(target):
        raise InvalidConfigError(
            f"invalid quota callback {spec!r}: {attr!r} is a {type(target).__name__},"
            " not a factory (a class or function that returns the callback)"
        )
    try:
        callback = target()
    except Exception as e:
        raise QuotaCallbackError(
            f"quota callback factory {spec!r} raised {type(e).__name__}: {e}"
        ) from e
    missing = [
        name for name in QUOTA_CALLBACK_METHODS if not callable(getattr(callback, name, None))
    ]
    if missing:
        raise QuotaCallbackError(
            f"quota callback factory {spec!r} returned {callback!r}, which has no method"
            f" {', '.join(missing)} (see kquota.QuotaCallback)"
        )
    return callback  # type: ignore[no-any-return]
