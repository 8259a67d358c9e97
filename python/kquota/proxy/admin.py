"""Kafka's quota administration (KIP-546) answered by the proxy from a quota store.

A :class:`~kquota.proxy.ProxyServer` given ``admin=StoreAdmin(store)`` answers
DescribeClientQuotas and AlterClientQuotas itself instead of forwarding them, so
``kafka-configs.sh --bootstrap-server <proxy> --alter --add-config producer_byte_rate=...``
and the Admin API's ``describeClientQuotas`` / ``alterClientQuotas`` read and change the
quotas the proxy enforces. ``kquota proxy --bootstrap`` (a gateway) does so with its
``--store``.

Before it touches the store, the data path applies the admin's :class:`AdminAccess`: by
default it asks the cluster behind the gateway, on the client's own connection, whether that
principal may (a ``validate_only`` alteration, or the same describe), and answers with the
cluster's refusal where it refuses (``CLUSTER_AUTHORIZATION_FAILED``); a list of principals
narrows it further, or replaces the question.

The data path checks each request as Kafka's controller does first (entity types and
their combinations, quota keys, values, filters; Kafka's error codes and messages), in the
Rust core; quota keys and values by the one rule :mod:`kquota.config.model` applies too,
which also refuses NaN and infinities. What passes comes here: kquota's own rules then
apply (an IP entity is an address literal, no name is ``<default>``), each refused change
answered with ``INVALID_REQUEST`` and kquota's message, and the accepted ones are written as
one change to the store, unless the request is ``validate_only``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from kquota import DEFAULT, Entity
from kquota.config.model import AnyEntity, IpEntity
from kquota.config.store import Alteration, ChangeSet, QuotaStore
from kquota.exceptions import InvalidConfigError, KquotaError

__all__ = ["AdminAccess", "EntityParts", "QuotaOp", "StoreAdmin"]

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


_PRINCIPAL_TYPE = "User:"


@dataclass(frozen=True)
class AdminAccess:
    """Who may read and change a gateway's quotas with Kafka's tools.

    ``ask_cluster``: the gateway asks the cluster first, on the client's own connection
    (authenticated as the client: the gateway relays SASL), and refuses whoever the
    cluster refuses, with the cluster's answer. Kafka allows AlterClientQuotas to
    principals with ALTER_CONFIGS on the cluster and DescribeClientQuotas to those with
    DESCRIBE_CONFIGS; a cluster without an authorizer allows everyone.

    ``principals``: only these Kafka principals (``User:NAME``; a connection without SASL
    is ``User:ANONYMOUS``), refused with Kafka's ``CLUSTER_AUTHORIZATION_FAILED`` otherwise;
    ``None`` for any. With both, a principal must pass both.
    """

    ask_cluster: bool = True
    principals: frozenset[str] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.ask_cluster, bool):
            raise InvalidConfigError(
                f"invalid ask_cluster {self.ask_cluster!r}: expected True or False"
            )
        if self.principals is not None:
            if isinstance(self.principals, str) or not isinstance(self.principals, Iterable):
                raise InvalidConfigError(
                    f"invalid principals {self.principals!r}: expected a set of 'User:NAME'"
                )
            principals = frozenset(self.principals)
            for principal in principals:
                _check_principal(principal)
            object.__setattr__(self, "principals", principals)

    @classmethod
    def parse(cls, text: str, what: str = "quota admins") -> AdminAccess:
        """The access ``kquota proxy --quota-admins`` gives: ``cluster`` (whoever the
        cluster allows), principals ``User:alice,User:ops`` (only they), both
        (``cluster,User:ops``: a listed principal the cluster allows), ``anyone`` or
        ``nobody``. ``what`` names the value in an error."""
        items = [item.strip() for item in text.split(",")]
        if not text.strip() or any(not item for item in items):
            raise InvalidConfigError(
                f"invalid {what} {text!r}: expected cluster, User:NAME[,User:NAME...],"
                " cluster,User:NAME..., anyone or nobody"
            )
        words = {"anyone", "nobody"} & set(items)
        if words:
            if len(items) > 1:
                raise InvalidConfigError(
                    f"invalid {what} {text!r}: {sorted(words)[0]} stands alone"
                )
            if items == ["anyone"]:
                return cls(ask_cluster=False)
            return cls(ask_cluster=False, principals=frozenset())
        principals = [item for item in items if item != "cluster"]
        for principal in principals:
            _check_principal(principal, f"in {what} {text!r}")
        return cls(
            ask_cluster="cluster" in items,
            principals=frozenset(principals) if principals else None,
        )

    @property
    def open(self) -> bool:
        """Whether anyone who reaches the gateway may administer its quotas."""
        return not self.ask_cluster and self.principals is None

    @property
    def users(self) -> list[str] | None:
        """The user names of :attr:`principals` (what the data path compares), sorted."""
        if self.principals is None:
            return None
        return sorted(p[len(_PRINCIPAL_TYPE) :] for p in self.principals)

    def describe(self) -> str:
        """Who may administer the quotas, in a sentence for the log."""
        listed = ", ".join(sorted(self.principals or ()))
        if self.principals is not None and not self.principals:
            return "nobody may read or change the quotas with Kafka's tools"
        if self.ask_cluster and self.principals is None:
            return (
                "Kafka's tools may change the quotas where the cluster allows the client's"
                " principal ALTER_CONFIGS on the cluster, and read them where it allows"
                " DESCRIBE_CONFIGS (asked on the client's own connection; a cluster without"
                " an authorizer allows everyone)"
            )
        if self.ask_cluster:
            return (
                f"Kafka's tools may read and change the quotas as {listed}, where the cluster"
                " allows that principal too (ALTER_CONFIGS or DESCRIBE_CONFIGS on the"
                " cluster, asked on the client's own connection)"
            )
        if self.principals is None:
            return (
                "anyone who reaches the gateway may read and change the quotas with Kafka's tools"
            )
        return f"Kafka's tools may read and change the quotas as {listed} only"


def _check_principal(principal: object, where: str = "for quota admins") -> None:
    if (
        not isinstance(principal, str)
        or not principal.startswith(_PRINCIPAL_TYPE)
        or len(principal) == len(_PRINCIPAL_TYPE)
    ):
        raise InvalidConfigError(
            f"invalid principal {principal!r} {where}: expected User:NAME, Kafka's"
            " principal of a SASL user (User:ANONYMOUS without SASL)"
        )


class StoreAdmin:
    """Answers a proxy's quota administration from and into ``store``, for the principals
    ``access`` admits (default: whoever the cluster allows, :class:`AdminAccess`).

    ``on_change`` is called after every write (the command line's proxy refreshes its
    :class:`~kquota.config.live.LiveQuotas` with it, so a change applies at once); an
    error it raises is logged (the change is written, and a follower applies it later). Called
    by the data path on threads of its own; a store is safe to use from several threads.
    """

    def __init__(
        self,
        store: QuotaStore,
        *,
        on_change: Callable[[], object] | None = None,
        access: AdminAccess | None = None,
    ):
        if not isinstance(store, QuotaStore):
            raise KquotaError(f"invalid store {store!r}: expected a kquota QuotaStore")
        if access is not None and not isinstance(access, AdminAccess):
            raise InvalidConfigError(f"invalid access {access!r}: expected an AdminAccess")
        self._store = store
        self._on_change = on_change
        self._access = access if access is not None else AdminAccess()

    @property
    def store(self) -> QuotaStore:
        """The store administered."""
        return self._store

    @property
    def access(self) -> AdminAccess:
        """Who may administer it."""
        return self._access

    def __repr__(self) -> str:
        return f"StoreAdmin({self._store.describe()}, access={self._access!r})"

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
