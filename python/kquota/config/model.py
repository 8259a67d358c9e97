"""The quota configuration in Kafka's vocabulary, and the quota file format.

A configuration is a window (``quota.window.num`` samples of ``quota.window.size.seconds``)
and a list of entities, each with some of Kafka's client-quota properties::

    {"window": {"num_samples": 11, "window_ms": 1000},
     "quotas": [
      {"entity": {"user": "alice"}, "config": {"producer_byte_rate": 1048576}},
      {"entity": {"user": "<default>"}, "config": {"consumer_byte_rate": 2097152}},
      {"entity": {"user": "bob", "client-id": "app-1"}, "config": {"request_percentage": 50}},
      {"entity": {"client-id": "admin"}, "config": {"controller_mutation_rate": 10}},
      {"entity": {"ip": "10.0.0.1"}, "config": {"connection_creation_rate": 20}},
      {"entity": {"ip": "<default>"}, "config": {"connection_creation_rate": 100}}
     ]}

Which entities take which properties, and which values, is Kafka's rule, checked in one
place, the core (:func:`kquota._core.check_quota_value`), by every way a quota is set: the
quota file, ``kquota configs``, AlterClientQuotas through the gateway and this API:

* ``user``, ``client-id`` or both (each a name or ``"<default>"``) take
  ``producer_byte_rate`` and ``consumer_byte_rate`` (Kafka's LONGs: whole bytes per
  second), ``request_percentage`` and ``controller_mutation_rate`` (KIP-599: partitions
  created or deleted per second; DOUBLEs).
* ``ip`` (an IP address or ``"<default>"``) takes only ``connection_creation_rate``
  (KIP-612: connections accepted per second from that address; an INT, at most
  2147483647), and cannot be combined with ``user`` or ``client-id``.
* Every value is greater than 0; a LONG or INT is whole (Kafka's controller tolerates a
  fraction up to 1e-6, which the broker then truncates; so does kquota). kquota also
  refuses NaN and infinities, which Kafka lets through. A refusal carries Kafka's message
  (``consumer_byte_rate cannot be a fractional value.``), then the value given.
* An IP must be an IPv4 or IPv6 address literal. Kafka also accepts a host name and
  resolves it (``InetAddress.getByName``) when the broker applies the quota; kquota does
  not resolve names, so a quota cannot depend on what a resolver answers at that moment.
  The address is stored in its canonical form (``::1``, not ``0:0:0:0:0:0:0:1``); an
  IPv4-mapped IPv6 address is the IPv4 address, as Java's ``InetAddress`` makes it.

This file format is what ``kquota configs --import/--export`` reads and writes and what
``kquota backtest --quotas`` takes (the back-test replays the produce, fetch and request
quotas; it ignores the other two).
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeAlias

from kquota import (
    DEFAULT,
    ConnectionQuotas,
    ControllerMutationQuotaManager,
    Entity,
    QuotaManager,
    SampledRate,
)
from kquota._core import (
    CLIENT_QUOTA_KEYS,
    IP_QUOTA_KEYS,
    canonical_ip,
    check_quota,
    check_quota_key,
    check_quota_value,
    check_window_seconds,
)
from kquota.exceptions import InvalidQuotaError, InvalidUsageError, KquotaError, QuotaFileError
from kquota.quota_types import QuotaType

PROPERTIES: Final[dict[str, QuotaType]] = {
    "producer_byte_rate": "produce",
    "consumer_byte_rate": "fetch",
    "request_percentage": "request",
}
"""Kafka's client-quota properties and the quota type each one sets."""

PROPERTY_OF: Final[dict[QuotaType, str]] = {v: k for k, v in PROPERTIES.items()}
"""The property that sets each quota type."""

CONTROLLER_MUTATION_RATE: Final = "controller_mutation_rate"
"""KIP-599's property on users and clients: partitions created or deleted per second."""

CONNECTION_CREATION_RATE: Final = "connection_creation_rate"
"""KIP-612's property on IPs: connections accepted per second (a whole number)."""

CLIENT_PROPERTIES: Final[tuple[str, ...]] = CLIENT_QUOTA_KEYS
"""The properties of ``user`` / ``client-id`` entities (Kafka's user-and-client configs)."""

IP_PROPERTIES: Final[tuple[str, ...]] = IP_QUOTA_KEYS
"""The properties of ``ip`` entities (Kafka's IP configs)."""

ALL_PROPERTIES: Final = (*CLIENT_PROPERTIES, *IP_PROPERTIES)
"""Every quota property a configuration may hold."""

ENTITY_KEYS: Final = ("user", "client-id")
"""Entity keys of the file format for clients (Kafka's entity types ``users`` and
``clients``); an IP entity has the key :data:`IP_KEY` alone."""

IP_KEY: Final = "ip"
"""The entity key of the file format for IPs (Kafka's entity type ``ips``)."""


def check_property(name: str) -> str:
    """``name`` if it is one of :data:`ALL_PROPERTIES`, else a :class:`QuotaFileError`."""
    try:
        check_quota_key(name)
    except InvalidQuotaError as exc:
        raise QuotaFileError(str(exc)) from None
    return name


def check_value(name: str, value: object) -> float:
    """A value of property ``name`` as Kafka's controller accepts it (the core's rule, see
    the module documentation), else a :class:`QuotaFileError`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise QuotaFileError(f"invalid value {value!r} for {name}: expected a number")
    try:
        number = float(value)
    except OverflowError:  # an int beyond the largest double: too large for any type
        number = math.inf
    try:
        return check_quota_value(name, number)
    except InvalidQuotaError as exc:
        raise QuotaFileError(str(exc)) from None


def check_bound(name: str, value: object) -> float:
    """A value of property ``name`` that kquota already holds (see
    :meth:`QuotaEntry.bounds`): a finite number greater than 0, what every manager takes."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise QuotaFileError(f"invalid value {value!r} for {name}: expected a number")
    try:
        return check_quota(float(value))
    except (InvalidQuotaError, OverflowError):
        raise QuotaFileError(
            f"invalid value {value!r} for {name}: a quota must be a finite number greater than 0"
        ) from None


def connection_rate(value: float) -> int:
    """The whole ``connection_creation_rate`` a broker applies: Java's ``toInt``
    (truncation) of a value :func:`check_value` accepted."""
    return int(value)


def check_ip(text: str, what: str = "ip") -> str:
    """An IP entity name in canonical form, or :data:`~kquota.DEFAULT` unchanged.

    IPv4 or IPv6 address literals only (see the module documentation); an IPv4-mapped
    IPv6 address becomes its IPv4 address. Raises a :class:`QuotaFileError` naming
    ``text``.
    """
    if text == DEFAULT:
        return text
    check_name(text, what)
    try:
        return canonical_ip(text)  # the core's rule, which the connection quota keys by
    except InvalidUsageError:
        raise QuotaFileError(
            f"invalid {what} {text!r}: expected an IPv4 or IPv6 address such as 192.168.0.1 "
            "or 2001:db8::1 (host names are not resolved)"
        ) from None


_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def parse_value(name: str, text: str) -> float:
    """A quota value written as text (``--add-config``, a properties file), checked as
    :func:`check_value`: a plain decimal number such as ``1048576`` or ``2.5e6``."""
    stripped = text.strip()
    if _DECIMAL.fullmatch(stripped) is None:
        try:
            spelled_out = not math.isfinite(float(stripped))  # "nan", "inf", "-Infinity"
        except ValueError:
            spelled_out = False
        if spelled_out:
            return check_value(name, float(stripped))
        raise QuotaFileError(
            f"invalid value {text!r} for {name}: expected a decimal number such as 1048576"
        )
    return check_value(name, float(stripped))


def check_name(name: str, what: str) -> str:
    """``name`` if it is Unicode text (no lone surrogate, as undecodable bytes of a command
    line or a JSON ``\\ud800`` escape give), else a :class:`QuotaFileError`."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise QuotaFileError(
            f"invalid {what} {name!r}: not valid Unicode text ({exc.reason} at {exc.start})"
        ) from None
    return name


@dataclass(frozen=True)
class IpEntity:
    """A quota entity of Kafka's entity type ``ips``: one address, or the default IP.

    ``ip`` is an address literal, stored canonical (see :func:`check_ip`), or
    :data:`~kquota.DEFAULT` for the ``<default>`` IP. Immutable and hashable.
    """

    ip: str

    def __post_init__(self) -> None:
        if not isinstance(self.ip, str):
            raise QuotaFileError(
                f"invalid ip {self.ip!r}: expected an IP address or {DEFAULT!r} as a string"
            )
        object.__setattr__(self, "ip", check_ip(self.ip))

    @property
    def is_default(self) -> bool:
        """Whether this is the ``<default>`` IP."""
        return self.ip == DEFAULT


AnyEntity: TypeAlias = Entity | IpEntity
"""A quota entity of either kind: a user / client-id :class:`~kquota.Entity` or an
:class:`IpEntity`."""


def allowed_properties(entity: AnyEntity) -> tuple[str, ...]:
    """The properties ``entity`` may have: :data:`IP_PROPERTIES` on an IP, else
    :data:`CLIENT_PROPERTIES`."""
    return IP_PROPERTIES if isinstance(entity, IpEntity) else CLIENT_PROPERTIES


def check_property_of(entity: AnyEntity, name: str) -> str:
    """``name`` if it is a property of ``entity``'s kind, else a :class:`QuotaFileError`
    naming both, with Kafka's message."""
    try:
        check_quota_key(name, ip=isinstance(entity, IpEntity))
    except InvalidQuotaError as exc:
        raise QuotaFileError(f"{describe_entity(entity)}: {exc}") from None
    return name


def describe_entity(entity: AnyEntity) -> str:
    """An entity in ``kafka-configs --describe`` wording, e.g.
    ``user-principal 'bob', the default client-id`` or ``ip '10.0.0.1'``."""
    if isinstance(entity, IpEntity):
        return "the default ip" if entity.is_default else f"ip '{entity.ip}'"
    parts = []
    for kind, name in (("user-principal", entity.user), ("client-id", entity.client_id)):
        if name == DEFAULT:
            parts.append(f"the default {kind}")
        elif name is not None:
            parts.append(f"{kind} '{name}'")
    return ", ".join(parts)


@dataclass(frozen=True)
class Window:
    """``num_samples`` windows of ``window_ms`` (a whole number of seconds)."""

    num_samples: int = 11
    window_ms: int = 1000

    def __post_init__(self) -> None:
        for name in ("num_samples", "window_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise QuotaFileError(f"invalid {name} {value!r}: expected a whole number >= 1")
        try:  # whole seconds, then the core's limits (num_samples up to 65535, the horizon
            # within an i64)
            check_window_seconds(self.window_ms)
            SampledRate(self.num_samples, self.window_ms)
        except KquotaError as exc:
            raise QuotaFileError(str(exc)) from None
        except OverflowError:
            raise QuotaFileError(
                f"invalid window {self.num_samples} x {self.window_ms} ms: too large"
            ) from None


@dataclass(frozen=True)
class QuotaEntry:
    """One entity and the quota properties set on it (properties of its kind only)."""

    entity: AnyEntity
    config: Mapping[str, float]

    def __post_init__(self) -> None:
        _check_entity(self.entity)
        for name, value in self.config.items():
            check_property_of(self.entity, name)
            check_value(name, value)

    @classmethod
    def bounds(cls, entity: AnyEntity, config: Mapping[str, float]) -> QuotaEntry:
        """An entry whose values are bounds kquota already holds, not new settings: read
        back from a store, or derived (:meth:`QuotaConfig.scaled`). Its keys are checked
        as always; each value only as every manager takes it (finite, greater than 0),
        since a store written by an older kquota may hold a fractional byte rate and a
        scaled one need not be whole; a store that refused to open could not be fixed."""
        _check_entity(entity)
        checked = {check_property_of(entity, k): check_bound(k, v) for k, v in config.items()}
        entry = object.__new__(cls)  # without __post_init__'s check of a Kafka setting
        object.__setattr__(entry, "entity", entity)
        object.__setattr__(entry, "config", checked)
        return entry


def _check_entity(entity: object) -> None:
    if not isinstance(entity, Entity | IpEntity):
        raise QuotaFileError(f"invalid entity {entity!r}: expected a kquota.Entity or an IpEntity")


@dataclass(frozen=True)
class QuotaConfig:
    """A whole quota configuration: the window and every entity's properties, optionally a
    custom quota callback (``"module:factory"``, see :mod:`kquota.callback`) that the
    managers it builds resolve through, and optionally the Kafka release whose rules they
    follow (``kafka_version``, e.g. ``"4.4"``; Kafka 4.1's when absent)."""

    window: Window = field(default_factory=Window)
    entries: tuple[QuotaEntry, ...] = ()
    quota_callback: str | None = None
    kafka_version: str | None = None

    def __post_init__(self) -> None:
        if self.kafka_version is not None:
            # the core names the release it follows ("4.4.0" -> "4.4") or refuses it
            release = QuotaManager("produce", kafka_version=self.kafka_version).kafka_version
            object.__setattr__(self, "kafka_version", release)

    @classmethod
    def from_entities(
        cls,
        entities: Mapping[AnyEntity, Mapping[str, float]],
        window: Window | None = None,
        *,
        bounds: bool = False,
    ) -> QuotaConfig:
        """A configuration from ``{entity: {property: value}}``; entities without
        properties are left out. ``bounds``: values kquota already holds, checked as
        :meth:`QuotaEntry.bounds` checks them."""
        entry = QuotaEntry.bounds if bounds else QuotaEntry
        return cls(
            window or Window(),
            tuple(entry(e, dict(c)) for e, c in entities.items() if c),
        )

    def by_entity(self) -> dict[AnyEntity, dict[str, float]]:
        """``{entity: {property: value}}``, a fresh dict the caller may change."""
        return {e.entity: dict(e.config) for e in self.entries}

    def quotas(self, quota_type: QuotaType) -> list[tuple[Entity, float]]:
        """The overrides of one quota type."""
        return self.client_quotas(PROPERTY_OF[quota_type])

    def client_quotas(self, prop: str) -> list[tuple[Entity, float]]:
        """The user / client-id overrides of one property (e.g. ``controller_mutation_rate``)."""
        return [
            (e.entity, e.config[prop])
            for e in self.entries
            if prop in e.config and isinstance(e.entity, Entity)
        ]

    def mutation_quotas(self) -> list[tuple[Entity, float]]:
        """The ``controller_mutation_rate`` overrides."""
        return self.client_quotas(CONTROLLER_MUTATION_RATE)

    def ip_quotas(self) -> list[tuple[str | None, int]]:
        """The ``connection_creation_rate`` of each IP entity as the broker applies it
        (a whole number); ``None`` stands for the ``<default>`` IP, as in
        :meth:`kquota.ConnectionQuotas.set_ip_quota`."""
        return [
            (None if e.entity.is_default else e.entity.ip, connection_rate(value))
            for e in self.entries
            if isinstance(e.entity, IpEntity)
            and (value := e.config.get(CONNECTION_CREATION_RATE)) is not None
        ]

    def manager(self, quota_type: QuotaType, **kwargs: Any) -> QuotaManager:
        """A new :class:`~kquota.QuotaManager` of ``quota_type`` with this configuration
        (with a ``quota_callback``: built with a new instance of it, told of every quota)."""
        if self.quota_callback is not None and "callback" not in kwargs:
            from kquota.callback import load_callback

            kwargs["callback"] = load_callback(self.quota_callback)
        kwargs.setdefault("kafka_version", self.kafka_version)
        manager = QuotaManager(
            quota_type,
            num_samples=self.window.num_samples,
            window_ms=self.window.window_ms,
            **kwargs,
        )
        for entity, value in self.quotas(quota_type):
            manager.set_quota(entity, value)
        return manager

    def mutation_manager(self, **kwargs: Any) -> ControllerMutationQuotaManager:
        """A new :class:`~kquota.ControllerMutationQuotaManager` with this window and the
        ``controller_mutation_rate`` overrides (``kwargs``: e.g. ``sensor_expiry_ms``).

        Kafka gives this quota its own window settings (``controller.quota.window.num`` and
        ``controller.quota.window.size.seconds``, with the same defaults); a configuration
        has one window, used for both.
        """
        kwargs.setdefault("kafka_version", self.kafka_version)
        manager = ControllerMutationQuotaManager(
            num_samples=self.window.num_samples, window_ms=self.window.window_ms, **kwargs
        )
        for entity, value in self.mutation_quotas():
            manager.set_quota(entity, value)
        return manager

    def connection_quotas(self, **kwargs: Any) -> ConnectionQuotas:
        """A new :class:`~kquota.ConnectionQuotas` with this window and the
        ``connection_creation_rate`` of every IP entity (``kwargs``: e.g.
        ``max_connection_creation_rate``, ``inter_broker_listener``)."""
        quotas = ConnectionQuotas(
            num_samples=self.window.num_samples, window_ms=self.window.window_ms, **kwargs
        )
        for ip, rate in self.ip_quotas():
            quotas.set_ip_quota(ip, rate)
        return quotas

    def scaled(self, factor: float) -> QuotaConfig:
        """The same configuration with every produce, fetch, request and
        ``controller_mutation_rate`` quota multiplied by ``factor`` (> 0): the quotas a
        back-test replays. ``connection_creation_rate`` is kept as it is.

        These are bounds a manager enforces, not settings: a scaled byte rate need not be
        a whole number, so this configuration may hold what Kafka (and a quota file)
        would refuse; each value is still finite and greater than 0."""
        if isinstance(factor, bool) or not isinstance(factor, int | float):
            raise QuotaFileError(f"invalid scale {factor!r}: expected a number")
        try:
            check_quota(factor)
        except InvalidQuotaError:
            raise QuotaFileError(
                f"invalid scale {factor!r}: expected a finite number greater than 0"
            ) from None
        entries = tuple(
            QuotaEntry.bounds(
                e.entity,
                {k: v * factor if k in CLIENT_PROPERTIES else v for k, v in e.config.items()},
            )
            for e in self.entries
        )
        return QuotaConfig(self.window, entries, self.quota_callback, self.kafka_version)

    # -- the file format -------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The file format as a JSON-ready dict (entities in a stable order)."""
        out: dict[str, Any] = {
            "window": {"num_samples": self.window.num_samples, "window_ms": self.window.window_ms},
            "quotas": [
                {"entity": entity_to_json(e.entity), "config": _config_to_json(e.config)}
                for e in sorted(self.entries, key=lambda e: entity_sort_key(e.entity))
            ],
        }
        if self.quota_callback is not None:
            out["quota_callback"] = self.quota_callback
        if self.kafka_version is not None:
            out["kafka_version"] = self.kafka_version
        return out

    @classmethod
    def from_json(
        cls, data: object, source: str = "quota file", *, bounds: bool = False
    ) -> QuotaConfig:
        """Parse and validate the file format; errors name ``source`` and the bad part.
        ``bounds``: kquota's own text (a store's record, a scaled configuration), its values
        checked as :meth:`QuotaEntry.bounds` checks them."""
        try:
            return _parse(data, bounds)
        except QuotaFileError as exc:
            raise QuotaFileError(f"{source}: {exc}") from None

    @classmethod
    def load(cls, path: str | Path) -> QuotaConfig:
        """Read a quota file."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise QuotaFileError(f"cannot read quota file {str(path)!r}: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise QuotaFileError(
                f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None
        try:
            data = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:  # also too many digits, too deep
            raise QuotaFileError(f"{path}: not valid JSON: {exc}") from None
        return cls.from_json(data, str(path))

    def dumps(self) -> str:
        """The file format as text."""
        return json.dumps(self.to_json(), indent=2) + "\n"


def entity_to_json(entity: AnyEntity) -> dict[str, str]:
    """``{"user": ..., "client-id": ...}`` with absent dimensions left out, or ``{"ip": ...}``."""
    if isinstance(entity, IpEntity):
        return {IP_KEY: entity.ip}
    out = {}
    if entity.user is not None:
        out["user"] = entity.user
    if entity.client_id is not None:
        out["client-id"] = entity.client_id
    return out


def _config_to_json(config: Mapping[str, float]) -> dict[str, float | int]:
    """Properties sorted by name; a whole ``connection_creation_rate`` as a JSON integer."""
    out: dict[str, float | int] = {}
    for name, value in sorted(config.items()):
        whole = name == CONNECTION_CREATION_RATE and value.is_integer()
        out[name] = int(value) if whole else value
    return out


def entity_sort_key(entity: AnyEntity) -> tuple[str, ...]:
    """Users first, then clients, then IPs (the default IP first, then addresses in
    numeric order); defaults before names."""
    if isinstance(entity, IpEntity):
        if entity.is_default:
            return ("3", "0")
        address = ipaddress.ip_address(entity.ip)
        return ("3", "1", str(address.version), f"{int(address):040x}")

    def part(v: str | None) -> tuple[str, str]:
        return ("0" if v is None else "1" if v == DEFAULT else "2", v or "")

    return (*part(entity.user), *part(entity.client_id))


def _reject_constant(name: str) -> float:
    raise QuotaFileError(f"{name} is not a valid quota value")


def _parse(data: object, bounds: bool) -> QuotaConfig:
    if not isinstance(data, dict):
        raise QuotaFileError("expected a JSON object with 'window' and 'quotas'")
    unknown = set(data) - {"window", "quotas", "quota_callback", "kafka_version"}
    if unknown:
        raise QuotaFileError(
            f"unknown key(s) {sorted(unknown)}: expected 'window', 'quotas' and optionally"
            " 'quota_callback' and 'kafka_version'"
        )
    release = data.get("kafka_version")
    if release is not None and not isinstance(release, str):
        raise QuotaFileError(
            f'invalid kafka_version {release!r}: expected a Kafka release such as "4.4" (a string)'
        )
    callback = data.get("quota_callback")
    if callback is not None and not isinstance(callback, str):
        raise QuotaFileError(
            f"invalid quota_callback {callback!r}: expected 'module:factory' (a string)"
        )
    window_data = data.get("window", {})
    if not isinstance(window_data, dict) or set(window_data) - {"num_samples", "window_ms"}:
        raise QuotaFileError(
            f"invalid window {window_data!r}: expected {{'num_samples': N, 'window_ms': W}}"
        )
    window = Window(**window_data)
    quotas = data.get("quotas", [])
    if not isinstance(quotas, list):
        raise QuotaFileError(f"invalid quotas {quotas!r}: expected a list")
    entries = tuple(_parse_entries(quotas, bounds))
    try:
        return QuotaConfig(window, entries, callback, release)
    except KquotaError as exc:  # the release, by the core's words
        raise QuotaFileError(str(exc)) from None


def _parse_entries(quotas: Iterable[object], bounds: bool) -> Iterable[QuotaEntry]:
    seen: set[AnyEntity] = set()
    for i, item in enumerate(quotas):
        where = f"quotas[{i}]"
        if not isinstance(item, dict) or set(item) != {"entity", "config"}:
            raise QuotaFileError(f"{where}: expected {{'entity': {{...}}, 'config': {{...}}}}")
        raw_entity, raw_config = item["entity"], item["config"]
        if (
            not isinstance(raw_entity, dict)
            or not raw_entity
            or set(raw_entity) - {*ENTITY_KEYS, IP_KEY}
            or not all(isinstance(v, str) for v in raw_entity.values())
        ):
            raise QuotaFileError(
                f"{where}: invalid entity {raw_entity!r}: expected 'user' and/or 'client-id' "
                "names, or an 'ip' address "
                '("<default>" for the default entity)'
            )
        if IP_KEY in raw_entity and len(raw_entity) > 1:
            raise QuotaFileError(
                f"{where}: invalid entity {raw_entity!r}: an ip entity cannot be combined "
                "with user or client-id"
            )
        entity: AnyEntity
        try:
            for key, name in raw_entity.items():
                check_name(name, key)
            if IP_KEY in raw_entity:
                entity = IpEntity(raw_entity[IP_KEY])
            else:
                entity = Entity(user=raw_entity.get("user"), client_id=raw_entity.get("client-id"))
        except QuotaFileError as exc:
            raise QuotaFileError(f"{where}: {exc}") from None
        if entity in seen:
            raise QuotaFileError(f"{where}: entity {raw_entity!r} appears twice")
        seen.add(entity)
        if not isinstance(raw_config, dict) or not raw_config:
            raise QuotaFileError(f"{where}: invalid config {raw_config!r}: expected properties")
        check = check_bound if bounds else check_value
        try:
            config = {check_property_of(entity, k): check(k, v) for k, v in raw_config.items()}
        except QuotaFileError as exc:
            raise QuotaFileError(f"{where}: {exc}") from None
        yield QuotaEntry.bounds(entity, config) if bounds else QuotaEntry(entity, config)
