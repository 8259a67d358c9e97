"""``kio`` message structures (Kafka's message schemas, generated; the ``proxy`` extra) as
the JSON Kafka's ``RequestConvertToJson`` writes in a request log: camelCase keys, only the
fields of the logged version, tagged fields only when not at their default, UUIDs in
base64url, records as ``<field>SizeInBytes``; and the structures themselves, built with a
zero value for every required field not given. ``requestlog_gen.py`` writes the lines.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import enum
import importlib
import types
import typing
import uuid
from typing import Any


def _camel(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part[:1].upper() + part[1:] for part in rest)


def _value(value: Any) -> Any:
    if value is None or isinstance(value, bool | str):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return kafka_json(value)
    if isinstance(value, tuple):
        return [_value(v) for v in value]
    if isinstance(value, enum.Enum):
        return _value(value.value)
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    raise TypeError(f"no JSON for {type(value).__name__}")


def kafka_json(entity: Any) -> dict[str, Any]:
    """A kio dataclass as Kafka's generated ``*JsonConverter`` writes it (records as sizes)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        kafka_type = f.metadata.get("kafka_type")
        if "tag" in f.metadata:
            default = f.default if f.default is not dataclasses.MISSING else None
            if value == default:
                continue
        name = _camel(f.name)
        if kafka_type == "records":
            if value is None:
                out[name] = None
            else:
                out[f"{name}SizeInBytes"] = len(value)
            continue
        if kafka_type in ("timedelta_i32", "timedelta_i64", "datetime_i64"):
            name += "Ms"
            if value is None:
                out[name] = -1
                continue
        out[name] = _value(value)
    return out


def legacy_fields(api_key: int, version: int) -> tuple[set[str], set[str], set[str]]:
    """For Produce v0-2 and Fetch v0-3 (no kio schema): the keys their v3/v4 structures'
    JSON has that the old version lacks, as (request keys, response keys, response
    partition keys)."""
    if api_key == 0 and version < 3:
        return {"transactionalId"}, set(), set()
    if api_key == 1 and version < 4:
        request = {"isolationLevel"} | ({"maxBytes"} if version < 3 else set())
        response = {"throttleTimeMs"} if version < 1 else set()
        return request, response, {"lastStableOffset", "abortedTransactions"}
    return set(), set(), set()


def schema_version(api_key: int, version: int) -> int:
    """The kio schema a version is built with (the oldest kio has, for older ones)."""
    if api_key == 0:
        return max(version, 3)
    if api_key == 1:
        return max(version, 4)
    return version


def message_module(api_key: int, version: int, kind: str) -> Any:
    name = {
        0: "produce",
        1: "fetch",
        3: "metadata",
        12: "heartbeat",
        18: "api_versions",
        27: "write_txn_markers",
        56: "alter_partition",
    }[api_key]
    return importlib.import_module(f"kio.schema.{name}.v{version}.{kind}")


def _zero(hint: Any, kafka_type: str | None) -> Any:
    """A value for a required field kio has no default for."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        return None
    if origin is tuple:
        return ()
    if dataclasses.is_dataclass(hint):
        return make_message(hint)
    if kafka_type in ("string",):
        return ""
    if kafka_type == "bool":
        return False
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "error_code":
        from kio.schema.errors import ErrorCode

        return ErrorCode.none
    if isinstance(hint, type) and issubclass(hint, int):
        return hint(0)
    return 0


def make_message(cls: Any, **values: Any) -> Any:
    """``cls`` with the ``values`` that are its fields (others ignored), the remaining
    required fields at a zero value."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in values:
            kwargs[f.name] = values[f.name]
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = _zero(hints[f.name], f.metadata.get("kafka_type"))
    return cls(**kwargs)
