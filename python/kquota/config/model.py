"""The quota configuration in Kafka's vocabulary, and the quota file format.

A configuration is a window (``quota.window.num`` samples of ``quota.window.size.seconds``)
and a list of entities, each with some of the three client-quota properties::

    {"window": {"num_samples": 11, "window_ms": 1000},
     "quotas": [
      {"entity": {"user": "alice"}, "config": {"producer_byte_rate": 1048576}},
      {"entity": {"user": "<default>"}, "config": {"consumer_byte_rate": 2097152}},
      {"entity": {"user": "bob", "client-id": "app-1"}, "config": {"request_percentage": 50}}
     ]}

This file format is what ``kquota configs --import/--export`` reads and writes and what
``kquota backtest --quotas`` takes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from kquota import DEFAULT, Entity, QuotaManager, SampledRate
from kquota.exceptions import KquotaError, QuotaFileError

QuotaType = Literal["produce", "fetch", "request"]

PROPERTIES: Final[dict[str, QuotaType]] = {
    "producer_byte_rate": "produce",
    "consumer_byte_rate": "fetch",
    "request_percentage": "request",
}
"""Kafka's client-quota properties and the quota type each one sets."""

PROPERTY_OF: Final[dict[QuotaType, str]] = {v: k for k, v in PROPERTIES.items()}
"""The property that sets each quota type."""

ENTITY_KEYS: Final = ("user", "client-id")
"""Entity keys of the file format (Kafka's entity types ``users`` and ``clients``)."""


def check_property(name: str) -> str:
    """``name`` if it is one of :data:`PROPERTIES`, else a :class:`QuotaFileError`."""
    if name not in PROPERTIES:
        known = ", ".join(PROPERTIES)
        raise QuotaFileError(f"unknown quota property {name!r}: expected one of {known}")
    return name


def check_value(name: str, value: object) -> float:
    """A quota value as Kafka's controller accepts it: a finite number greater than 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise QuotaFileError(f"invalid value {value!r} for {name}: expected a number")
    try:
        number = float(value)
    except OverflowError:  # an int beyond the largest double
        number = math.inf
    if not math.isfinite(number) or number <= 0:
        raise QuotaFileError(
            f"invalid value {value!r} for {name}: a quota must be a finite number greater than 0"
        )
    return number


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
            raise QuotaFileError(
                f"invalid value {text!r} for {name}: a quota must be a finite number greater than 0"
            )
        raise QuotaFileError(
            f"invalid value {text!r} for {name}: expected a decimal number such as 1048576"
        )
    number = float(stripped)
    if not math.isfinite(number) or number <= 0:
        raise QuotaFileError(
            f"invalid value {text!r} for {name}: a quota must be a finite number greater than 0"
        )
    return number


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


def describe_entity(entity: Entity) -> str:
    """An entity in ``kafka-configs --describe`` wording, e.g.
    ``user-principal 'bob', the default client-id``."""
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
        if self.window_ms % 1000:
            raise QuotaFileError(
                f"invalid window_ms {self.window_ms}: quota windows are whole seconds "
                "(quota.window.size.seconds), e.g. 1000"
            )
        try:  # the core's limits (num_samples up to 65535, the horizon within an i64)
            SampledRate(self.num_samples, self.window_ms)
        except KquotaError as exc:
            raise QuotaFileError(str(exc)) from None
        except OverflowError:
            raise QuotaFileError(
                f"invalid window {self.num_samples} x {self.window_ms} ms: too large"
            ) from None


@dataclass(frozen=True)
class QuotaEntry:
    """One entity and the quota properties set on it."""

    entity: Entity
    config: Mapping[str, float]

    def __post_init__(self) -> None:
        for name, value in self.config.items():
            check_property(name)
            check_value(name, value)


@dataclass(frozen=True)
class QuotaConfig:
    """A whole quota configuration: the window and every entity's properties."""

    window: Window = field(default_factory=Window)
    entries: tuple[QuotaEntry, ...] = ()

    @classmethod
    def from_entities(
        cls, entities: Mapping[Entity, Mapping[str, float]], window: Window | None = None
    ) -> QuotaConfig:
        """A configuration from ``{entity: {property: value}}``; entities without
        properties are left out."""
        return cls(
            window or Window(),
            tuple(QuotaEntry(e, dict(c)) for e, c in entities.items() if c),
        )

    def by_entity(self) -> dict[Entity, dict[str, float]]:
        """``{entity: {property: value}}``, a fresh dict the caller may change."""
        return {e.entity: dict(e.config) for e in self.entries}

    def quotas(self, quota_type: QuotaType) -> list[tuple[Entity, float]]:
        """The overrides of one quota type."""
        prop = PROPERTY_OF[quota_type]
        return [(e.entity, e.config[prop]) for e in self.entries if prop in e.config]

    def manager(self, quota_type: QuotaType, **kwargs: Any) -> QuotaManager:
        """A new :class:`~kquota.QuotaManager` of ``quota_type`` with this configuration."""
        manager = QuotaManager(
            quota_type,
            num_samples=self.window.num_samples,
            window_ms=self.window.window_ms,
            **kwargs,
        )
        for entity, value in self.quotas(quota_type):
            manager.set_quota(entity, value)
        return manager

    def scaled(self, factor: float) -> QuotaConfig:
        """The same configuration with every quota multiplied by ``factor`` (> 0)."""
        check_value("scale", factor)
        return QuotaConfig(
            self.window,
            tuple(
                QuotaEntry(e.entity, {k: v * factor for k, v in e.config.items()})
                for e in self.entries
            ),
        )

    # -- the file format -------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The file format as a JSON-ready dict (entities in a stable order)."""
        return {
            "window": {"num_samples": self.window.num_samples, "window_ms": self.window.window_ms},
            "quotas": [
                {"entity": entity_to_json(e.entity), "config": dict(sorted(e.config.items()))}
                for e in sorted(self.entries, key=lambda e: entity_sort_key(e.entity))
            ],
        }

    @classmethod
    def from_json(cls, data: object, source: str = "quota file") -> QuotaConfig:
        """Parse and validate the file format; errors name ``source`` and the bad part."""
        try:
            return _parse(data)
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


def entity_to_json(entity: Entity) -> dict[str, str]:
    """``{"user": ..., "client-id": ...}`` with absent dimensions left out."""
    out = {}
    if entity.user is not None:
        out["user"] = entity.user
    if entity.client_id is not None:
        out["client-id"] = entity.client_id
    return out


def entity_sort_key(entity: Entity) -> tuple[str, str, str, str]:
    """Users first, then clients; defaults before names."""

    def part(v: str | None) -> tuple[str, str]:
        return ("0" if v is None else "1" if v == DEFAULT else "2", v or "")

    return (*part(entity.user), *part(entity.client_id))


def _reject_constant(name: str) -> float:
    raise QuotaFileError(f"{name} is not a valid quota value")


def _parse(data: object) -> QuotaConfig:
    if not isinstance(data, dict):
        raise QuotaFileError("expected a JSON object with 'window' and 'quotas'")
    unknown = set(data) - {"window", "quotas"}
    if unknown:
        raise QuotaFileError(f"unknown key(s) {sorted(unknown)}: expected 'window' and 'quotas'")
    window_data = data.get("window", {})
    if not isinstance(window_data, dict) or set(window_data) - {"num_samples", "window_ms"}:
        raise QuotaFileError(
            f"invalid window {window_data!r}: expected {{'num_samples': N, 'window_ms': W}}"
        )
    window = Window(**window_data)
    quotas = data.get("quotas", [])
    if not isinstance(quotas, list):
        raise QuotaFileError(f"invalid quotas {quotas!r}: expected a list")
    return QuotaConfig(window, tuple(_parse_entries(quotas)))


def _parse_entries(quotas: Iterable[object]) -> Iterable[QuotaEntry]:
    seen: set[Entity] = set()
    for i, item in enumerate(quotas):
        where = f"quotas[{i}]"
        if not isinstance(item, dict) or set(item) != {"entity", "config"}:
            raise QuotaFileError(f"{where}: expected {{'entity': {{...}}, 'config': {{...}}}}")
        raw_entity, raw_config = item["entity"], item["config"]
        if (
            not isinstance(raw_entity, dict)
            or not raw_entity
            or set(raw_entity) - set(ENTITY_KEYS)
            or not all(isinstance(v, str) for v in raw_entity.values())
        ):
            raise QuotaFileError(
                f"{where}: invalid entity {raw_entity!r}: expected 'user' and/or 'client-id' "
                'names ("<default>" for the default entity)'
            )
        try:
            for key, name in raw_entity.items():
                check_name(name, key)
        except QuotaFileError as exc:
            raise QuotaFileError(f"{where}: {exc}") from None
        entity = Entity(user=raw_entity.get("user"), client_id=raw_entity.get("client-id"))
        if entity in seen:
            raise QuotaFileError(f"{where}: entity {raw_entity!r} appears twice")
        seen.add(entity)
        if not isinstance(raw_config, dict) or not raw_config:
            raise QuotaFileError(f"{where}: invalid config {raw_config!r}: expected properties")
        try:
            config = {check_property(k): check_value(k, v) for k, v in raw_config.items()}
        except QuotaFileError as exc:
            raise QuotaFileError(f"{where}: {exc}") from None
        yield QuotaEntry(entity, config)
