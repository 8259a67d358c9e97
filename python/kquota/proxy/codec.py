"""Kafka messages, as far as quotas need them, with kio's codec generated from Kafka's schemas.

Nothing here knows a byte offset by heart. Each message type's layout comes from kio's
generated dataclasses: their fields in wire order, with kio's reader for each. To find a
field, :class:`_FieldFinder` reads the fields that come before it (for every response
that has records, ``throttle_time_ms`` comes before them) and returns its value and
position. The throttle is then written into the response frame in place of the broker's
value, without decoding or copying the rest of the message.

Only three messages are ever re-encoded: the small ApiVersions response (versions capped
to the ones this codec knows), the empty response to a throttled fetch, and nothing else.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
from collections.abc import Callable, Mapping
from typing import Any, Final

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.serial._parse import get_field_reader  # kio's per-field reader (pinned kio version)
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32, i32Timedelta
from kio.static.protocol import Entity

from kquota.exceptions import ProxyError

Buffer = bytes | bytearray | memoryview
"""What the codec reads from: a frame, or a view of one."""

__all__ = [
    "API_VERSIONS",
    "FETCH",
    "MAX_REQUEST_BYTES",
    "PRODUCE",
    "SASL_AUTHENTICATE",
    "SASL_HANDSHAKE",
    "Api",
    "RequestHeader",
    "api",
    "cap_api_versions",
    "empty_fetch_response",
    "encode",
    "parse_request_header",
    "read_fields",
    "response_correlation_id",
    "supported_versions",
    "throttle_value",
]

PRODUCE: Final = 0
FETCH: Final = 1
SASL_HANDSHAKE: Final = 17
API_VERSIONS: Final = 18
SASL_AUTHENTICATE: Final = 36

MAX_REQUEST_BYTES: Final = 104_857_600
"""Kafka's default ``socket.request.max.bytes`` (100 MiB)."""

THROTTLE_FIELD: Final = "throttle_time"
"""kio's name of Kafka's ``ThrottleTimeMs`` field."""

_INT16: Final = struct.Struct(">h")
_HEADER_START: Final = struct.Struct(">hhi")  # api key, api version, correlation id
_INT32: Final = struct.Struct(">i")


def _decode_error(what: str, exc: Exception) -> ProxyError:
    return ProxyError(f"malformed {what}: {type(exc).__name__}: {exc}")


class _FieldFinder:
    """Reads a message's fields in wire order up to the last wanted one.

    Tagged fields sit at the end of a flexible message and are not looked at. A wanted
    field that the message type does not have (e.g. ``session_id`` of Fetch v4) is
    simply absent from the result.
    """

    def __init__(self, entity_type: type[Entity], wanted: tuple[str, ...]) -> None:
        fields = [f for f in dataclasses.fields(entity_type) if "tag" not in f.metadata]
        names = [f.name for f in fields]
        present = [names.index(name) for name in wanted if name in names]
        last = max(present, default=-1)
        self._wanted = frozenset(wanted)
        self._steps: list[tuple[str, Callable[[Buffer, int], tuple[object, int]]]] = [
            (f.name, get_field_reader(entity_type, f, False, False)) for f in fields[: last + 1]
        ]

    def read(self, buffer: Buffer, offset: int) -> dict[str, tuple[object, int]]:
        """``{field: (value, offset)}`` of the wanted fields of the message at ``offset``."""
        found: dict[str, tuple[object, int]] = {}
        for name, reader in self._steps:
            value, size = reader(buffer, offset)
            if name in self._wanted:
                found[name] = (value, offset)
            offset += size
        return found


@dataclasses.dataclass(frozen=True, slots=True)
class Api:
    """One API version's message types and what the proxy reads of them."""

    key: int
    version: int
    name: str
    request_type: type[Entity]
    response_type: type[Entity]
    has_throttle_field: bool
    request_header_version: int
    """0: no client id; 1: a client id; 2: a client id and tagged fields."""
    response_header_version: int
    """0: the correlation id; 1: and tagged fields (ApiVersions keeps 0, as Kafka)."""
    _throttle: _FieldFinder | None

    def throttle_offset(self, frame: Buffer, body_offset: int) -> int | None:
        """Where the response body at ``body_offset`` of ``frame`` holds ``throttle_time_ms``."""
        if self._throttle is None:
            return None
        try:
            return self._throttle.read(frame, body_offset)[THROTTLE_FIELD][1]
        except Exception as exc:
            raise _decode_error(f"{self.name} v{self.version} response", exc) from None

    def response_header(self, frame: Buffer) -> tuple[int, int]:
        """``(correlation_id, header size)`` of a response frame of this API version.

        Tagged fields in the header are skipped, whatever their tags: Kafka's protocol
        lets a newer peer send ones this codec does not know.
        """
        view = memoryview(frame)
        if len(view) < 4:
            raise ProxyError(f"malformed {self.name} v{self.version} response header: truncated")
        size = 4
        if self.response_header_version >= 1:
            size = _skip_tagged_fields(view, size, f"{self.name} v{self.version} response header")
        return int(_INT32.unpack_from(view, 0)[0]), size

    def read_request(self, frame: Buffer, body_offset: int, *names: str) -> dict[str, Any]:
        """The values of ``names`` (absent ones left out) in this request's body."""
        return {
            name: value
            for name, (value, _) in _finder(self.request_type, names)
            .read(frame, body_offset)
            .items()
        }

    def read_request_offsets(
        self, frame: Buffer, body_offset: int, *names: str
    ) -> dict[str, tuple[object, int]]:
        """``{name: (value, offset)}`` for ``names`` in this request's body."""
        return _finder(self.request_type, names).read(frame, body_offset)


@functools.cache
def _finder(entity_type: type[Entity], names: tuple[str, ...]) -> _FieldFinder:
    return _FieldFinder(entity_type, names)


@functools.cache
def api(key: int, version: int) -> Api:
    """The :class:`Api` of ``key`` at ``version``; :class:`ProxyError` if the codec lacks it."""
    try:
        request_type: type[Entity] = load_request_schema(key, version)
        response_type: type[Entity] = load_response_schema(key, version)
    except UnknownAPIKey:
        raise ProxyError(f"unknown API key {key}") from None
    except UnknownEntity:
        low, high = supported_versions().get(key, (None, None))
        raise ProxyError(
            f"unsupported version {version} of API {key} ({api_key_map[key]}):"
            f" expected {low} to {high}"
        ) from None
    names = {f.name for f in dataclasses.fields(response_type) if "tag" not in f.metadata}
    has_throttle = THROTTLE_FIELD in names
    return Api(
        key=key,
        version=version,
        name=api_key_map[key],
        request_type=request_type,
        response_type=response_type,
        has_throttle_field=has_throttle,
        request_header_version=_header_version(request_type),
        response_header_version=_header_version(response_type),
        _throttle=_FieldFinder(response_type, (THROTTLE_FIELD,)) if has_throttle else None,
    )


def _header_version(entity_type: type[Entity]) -> int:
    """The version of the header kio's schema gives ``entity_type`` (its module is
    ``kio.schema.request_header.vN.header`` or ``kio.schema.response_header.vN.header``)."""
    module: str = entity_type.__header_schema__.__module__  # type: ignore[attr-defined]
    return int(module.split(".")[-2].removeprefix("v"))


def _uvarint(view: memoryview, offset: int, what: str) -> tuple[int, int]:
    """An unsigned varint at ``offset``: ``(value, offset after it)``."""
    value = shift = 0
    while True:
        if offset >= len(view):
            raise ProxyError(f"malformed {what}: truncated varint")
        byte = view[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7
        if shift > 28:
            raise ProxyError(f"malformed {what}: varint longer than 5 bytes")


def _skip_tagged_fields(view: memoryview, offset: int, what: str) -> int:
    """The offset after the tagged-field section at ``offset``, every field skipped."""
    count, offset = _uvarint(view, offset, what)
    for _ in range(count):
        _, offset = _uvarint(view, offset, what)
        size, offset = _uvarint(view, offset, what)
        offset += size
        if offset > len(view):
            raise ProxyError(f"malformed {what}: a tagged field overruns the frame")
    return offset


@functools.cache
def supported_versions() -> Mapping[int, tuple[int, int]]:
    """``{api_key: (min_version, max_version)}`` this codec can read."""
    versions: dict[int, tuple[int, int]] = {}
    for key, name in api_key_map.items():
        known = [
            v
            for v, types in schema_name_map[name].items()
            if EntityType.request in types and EntityType.response in types
        ]
        if known:
            versions[key] = (min(known), max(known))
    return versions


@dataclasses.dataclass(frozen=True, slots=True)
class RequestHeader:
    """What the proxy reads of every request: the header, and where the body starts."""

    api: Api
    correlation_id: int
    client_id: str
    body_offset: int


def parse_request_header(frame: Buffer) -> RequestHeader:
    """The header of a request frame (the bytes after its size prefix).

    An unknown API key or version, or a header that does not decode, raises
    :class:`ProxyError`.
    """
    view = memoryview(frame)
    if len(view) < 8:
        raise ProxyError(f"malformed request: a frame of {len(view)} bytes has no header")
    key, version, correlation_id = _HEADER_START.unpack_from(view, 0)
    spec = api(key, version)
    what = f"{spec.name} v{version} request header"
    offset, client_id = 8, ""
    if spec.request_header_version >= 1:  # a nullable string, int16 length
        if len(view) < 10:
            raise ProxyError(f"malformed {what}: truncated client id")
        length = _INT16.unpack_from(view, 8)[0]
        offset = 10 + max(length, 0)
        if length < -1 or offset > len(view):
            raise ProxyError(f"malformed {what}: client id of {length} bytes")
        try:
            client_id = str(view[10:offset], "utf-8")
        except UnicodeDecodeError:
            raise ProxyError(f"malformed {what}: client id is not UTF-8") from None
    if spec.request_header_version >= 2:  # tagged fields: none known, all skipped
        offset = _skip_tagged_fields(view, offset, what)
    return RequestHeader(spec, int(correlation_id), client_id, offset)


def read_fields(frame: Buffer, offset: int, entity_type: type[Entity]) -> Any:
    """Decode one whole (small) message of ``entity_type`` at ``offset``."""
    try:
        return entity_reader(entity_type)(frame, offset)[0]
    except Exception as exc:
        raise _decode_error(entity_type.__name__, exc) from None


def response_correlation_id(frame: Buffer) -> int:
    """The correlation id of any response frame (the first field of every header)."""
    if len(memoryview(frame)) < 4:
        raise ProxyError("malformed response: shorter than its correlation id")
    return int(_INT32.unpack_from(frame, 0)[0])


def encode(header: Any, body: Any) -> bytes:
    """A message frame (size prefix included) of a kio header and body."""
    out = io.BytesIO()
    out.write(b"\0\0\0\0")
    entity_writer(type(header))(out, header)
    entity_writer(type(body))(out, body)
    data = out.getbuffer()
    _INT32.pack_into(data, 0, len(data) - 4)
    del data
    return out.getvalue()


def throttle_value(throttle_ms: int) -> i32Timedelta:
    """``throttle_ms`` as kio's value of a ``throttle_time_ms`` field."""
    return i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_ms))


def empty_fetch_response(
    spec: Api, correlation_id: int, throttle_ms: int, session_id: int
) -> bytes:
    """The whole frame (size prefix included) of an empty fetch response with a throttle.

    As Kafka's ``getThrottledResponse``: no error, no topics, ``session_id`` kept.
    """
    response_type: Any = spec.response_type
    names = {f.name for f in dataclasses.fields(response_type)}
    values: dict[str, Any] = {"responses": ()}
    if THROTTLE_FIELD in names:
        values[THROTTLE_FIELD] = throttle_value(throttle_ms)
    if "error_code" in names:
        values["error_code"] = ErrorCode.none
    if "session_id" in names:
        values["session_id"] = i32(session_id)
    header = response_type.__header_schema__(correlation_id=i32(correlation_id))
    return encode(header, response_type(**values))


def cap_api_versions(
    spec: Api, frame: Buffer, body_offset: int, throttle_ms: int | None
) -> bytes | None:
    """An ApiVersions response frame (size prefix included) listing only versions this
    codec can read, with ``throttle_ms`` set if given; ``None`` for an error response
    (it may be in the v0 layout whatever the version asked: pass it on unchanged)."""
    view = memoryview(frame)
    if len(view) < body_offset + 2:
        raise ProxyError("malformed api_versions response: no error code")
    if _INT16.unpack_from(view, body_offset)[0] != ErrorCode.none:
        return None
    response = read_fields(view, body_offset, spec.response_type)
    header = read_fields(view, 0, spec.response_type.__header_schema__)  # type: ignore[attr-defined]
    known = supported_versions()
    entries = []
    for entry in response.api_keys:
        if entry.api_key not in known:
            continue
        low = max(int(entry.min_version), known[entry.api_key][0])
        high = min(int(entry.max_version), known[entry.api_key][1])
        if low <= high:
            entries.append(dataclasses.replace(entry, min_version=i16(low), max_version=i16(high)))
    changes: dict[str, Any] = {"api_keys": tuple(entries)}
    if throttle_ms is not None and spec.has_throttle_field:
        changes[THROTTLE_FIELD] = throttle_value(throttle_ms)
    return encode(header, dataclasses.replace(response, **changes))


def patch_throttle(frame: bytearray | memoryview, offset: int, throttle_ms: int) -> None:
    """Write ``throttle_ms`` as the int32 at ``offset`` of a frame."""
    _INT32.pack_into(frame, offset, throttle_ms)


def int32(value: int) -> bytes:
    """``value`` as a big-endian int32 (a frame's size prefix, a throttle)."""
    return _INT32.pack(value)


def read_int32(frame: Buffer, offset: int) -> int:
    """The big-endian int32 at ``offset``."""
    return int(_INT32.unpack_from(frame, offset)[0])
