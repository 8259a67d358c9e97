"""Kafka frames for the tests, read and written with kio (Kafka's schemas as dataclasses).

The tests check what went over the wire with this, a codec of their own, independent of
the proxy's (the ``kafka-protocol`` crate's, in Rust). A frame here is a message without its size
prefix (what ``proxy_support.read_frame`` returns), except what the ``encode`` functions
return: whole frames, ready to send.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32
from kio.static.protocol import Entity

Frame = bytes | bytearray | memoryview

# Kafka's error 89 and its message (org.apache.kafka.common.protocol.Errors
# THROTTLING_QUOTA_EXCEEDED): what a strict controller-mutation quota puts in the result of
# each topic it refuses.
THROTTLING_QUOTA_EXCEEDED: Final = 89
THROTTLED_MESSAGE: Final = "The throttling quota has been exceeded."

_KEY_AND_VERSION: Final = struct.Struct(">hh")
_INT32: Final = struct.Struct(">i")
_MS: Final = datetime.timedelta(milliseconds=1)


@dataclasses.dataclass(frozen=True, slots=True)
class RequestHeader:
    """The header of a request frame, and where its body starts."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body_offset: int


def encode(header: Entity, body: Entity) -> bytes:
    """A whole frame (size prefix included) of a kio header and body."""
    out = io.BytesIO()
    entity_writer(type(header))(out, header)
    entity_writer(type(body))(out, body)
    data = out.getvalue()
    return _INT32.pack(len(data)) + data


def encode_request(body: Any, correlation_id: int, client_id: str | None) -> bytes:
    """A whole request frame of kio request ``body``, with the header its API and version
    use."""
    header = body.__header_schema__(
        request_api_key=i16(body.__api_key__),
        request_api_version=i16(body.__version__),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    return encode(header, body)


def encode_response(body: Any, correlation_id: int) -> bytes:
    """A whole response frame of kio response ``body``, with the header its API and
    version use."""
    return encode(body.__header_schema__(correlation_id=i32(correlation_id)), body)


def request_header(frame: Frame) -> RequestHeader:
    """The header of a request frame; kio's ``UnknownAPIKey`` or ``UnknownEntity`` if kio
    does not know its API or version."""
    api_key, api_version = _KEY_AND_VERSION.unpack_from(frame, 0)
    header_type = load_request_schema(api_key, api_version).__header_schema__
    header, size = entity_reader(header_type)(frame, 0)
    return RequestHeader(
        api_key=api_key,
        api_version=api_version,
        correlation_id=int(header.correlation_id),
        client_id=header.client_id,
        body_offset=size,
    )


def read_request(frame: Frame) -> tuple[RequestHeader, Any]:
    """The header and the decoded kio body of a request frame."""
    header = request_header(frame)
    request_type = load_request_schema(header.api_key, header.api_version)
    body, _ = entity_reader(request_type)(frame, header.body_offset)
    return header, body


def response_correlation_id(frame: Frame) -> int:
    """The correlation id of a response frame (the first field of every response header,
    so no API or version is needed)."""
    return int(_INT32.unpack_from(frame, 0)[0])


def read_response(frame: Frame, api_key: int, version: int) -> Any:
    """The decoded kio body of a response frame to a request of ``api_key`` at ``version``
    (a response does not name its API: the request it answers does)."""
    response_type = load_response_schema(api_key, version)
    header_type = response_type.__header_schema__
    _, body_offset = entity_reader(header_type)(frame, 0)
    body, _ = entity_reader(response_type)(frame, body_offset)
    return body


def throttle_ms(frame: Frame, api_key: int, version: int) -> int | None:
    """The ``throttle_time_ms`` of a response frame (as :func:`read_response`), or ``None``
    if that API version's response has no such field."""
    response_type = load_response_schema(api_key, version)
    if "throttle_time" not in {f.name for f in dataclasses.fields(response_type)}:
        return None
    throttle: datetime.timedelta = read_response(frame, api_key, version).throttle_time
    return throttle // _MS
