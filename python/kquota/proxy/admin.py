"""Kafka's quota administration (KIP-546) answered by the proxy from a quota store.

A :class:`~kquota.proxy.ProxyServer` given ``admin=StoreAdmin(store)`` answers
DescribeClientQuotas and AlterClientQuotas itself instead of forwarding them, so
``kafka-configs.sh --bootstrap-server <proxy> --alter --add-config producer_byte_rate=...``
and the Admin API's ``describeClientQuotas`` / ``alterClientQuotas`` read and change the
quotas the proxy enforces. ``kquota proxy --bootstrap`` (a gateway) does so with its
``--store``.

The data path checks each request as Kafka's controller does first (entity types and
their combinations, quota keys, values, filters; Kafka's error codes and messages), in the
Rust core. What passes comes here: kquota's own rules then apply (an IP entity is an address
literal, a quota a finite number), each refused change answered with
``INVALID_REQUEST`` and kquota's message, and the accepted ones are written as one change
to the store, unless the request is ``validate_only``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeAlias

from kquota import DEFAULT, Entity
from kquota.config.model import AnyEntity, IpEntity
from kquota.config.store import Alteration, ChangeSet, QuotaStore
from kquota.exceptions import KquotaError

__all__ = ["EntityParts", "QuotaOp", "StoreAdmin"]

EntityParts: TypeAlias = list[tuple[str, str | None]]
"""An entity as KIP-546 names it: ``(entity type, name)`` pairs, the types ``user``,
``client-id`` and ``ip``; a ``None`` name is the type's default entity."""

log = logging.getLogger("kquota.proxy")

QuotaOp: TypeAlias = tuple[str, float | None]
"""A quota key and its new value, or ``None`` to remove it."""

_USER = "user"
_CLIENT_ID = "client-id"
_IP = "ip"


def entity_parts(entity: AnyEntity) -> EntityParts:
    """``entity`` as KIP-546 names it."""
    if isinstance(entity, IpEntity):
        return [(_IP, None if entity.is_default else entity.ip)]
    parts: EntityParts = []
    for kind, name in ((_USER, entity.user), (_CLIENT_ID, entity.client_id)):
        if name is not None:
            parts.append((kind, None if name == DEFAULT else name))
    return parts


def _name(kind: str, name: str | None) -> str:
    if name is None:
        return DEFAULT
    if name == DEFAULT:
        raise KquotaError(
            f"{kind} {name!r} cannot have quotas of its own: kquota keeps the default "
            f"{kind}'s quotas under that name"
        )
    return name


def parts_entity(parts: Sequence[tuple[str, str | None]]) -> AnyEntity:
    """The kquota entity of a KIP-546 entity the core has checked (``user`` and
    ``client-id``, or ``ip`` alone). Raises :class:`~kquota.exceptions.KquotaError`
    for a name kquota cannot keep."""
    named = dict(parts)
    if _IP in named:
        return IpEntity(_name(_IP, named[_IP]))
    user = _name(_USER, named[_USER]) if _USER in named else None
    client_id = _name(_CLIENT_ID, named[_CLIENT_ID]) if _CLIENT_ID in named else None
    return Entity(user=user, client_id=client_id)


class StoreAdmin:
    """Answers a proxy's quota administration from and into ``store``.

    ``on_change`` is called after every write (the command line's proxy refreshes its
    :class:`~kquota.config.live.LiveQuotas` with it, so a change applies at once); an
    error it raises is logged (the change is written, and a follower applies it later). Called
    by the data path on threads of its own; a store is safe to use from several threads.
    """

    def __init__(self, store: QuotaStore, *, on_change: Callable[[], object] | None = None):
        if not isinstance(store, QuotaStore):
            raise KquotaError(f"invalid store {store!r}: expected a kquota QuotaStore")
        self._store = store
        self._on_change = on_change

    @property
    def store(self) -> QuotaStore:
        """The store administered."""
        return self._store

    def __repr__(self) -> str:
        return f"StoreAdmin({self._store.describe()})"

    def describe(self) -> list[tuple[EntityParts, list[tuple[str, float]]]]:
        """Every entity with a quota in the store, with its quotas."""
        config = self._store.read().config
        return [
            (entity_parts(entity), [(key, float(value)) for key, value in props.items()])
            for entity, props in config.by_entity().items()
            if props
        ]

    def alter(
        self,
        changes: Sequence[tuple[Sequence[tuple[str, str | None]], Sequence[QuotaOp]]],
        validate_only: bool,
    ) -> list[str | None]:
        """Applies ``changes`` (entity, ``(key, value or None to remove)`` ops) as one
        write, or only checks them when ``validate_only``. Returns, per change, ``None``
        or why kquota refuses it; the others are still written. A store that cannot be
        written raises (the request is then answered with ``UNKNOWN_SERVER_ERROR``)."""
        refusals: list[str | None] = []
        alterations = []
        for parts, ops in changes:
            try:
                entity = parts_entity(parts)
                add = {key: value for key, value in ops if value is not None}
                delete = frozenset(key for key, value in ops if value is None)
                if add or delete:
                    alterations.append(Alteration(entity, add, delete, missing_ok=True))
            except KquotaError as exc:
                refusals.append(str(exc))
            else:
                refusals.append(None)
        if alterations and not validate_only:
            self._store.apply(ChangeSet(tuple(alterations)))
            if self._on_change is not None:
                try:
                    self._on_change()
                except Exception:  # written: the client hears so; the follower retries
                    log.exception("quota change written to %s, not applied yet", self._store)
        return refusals
