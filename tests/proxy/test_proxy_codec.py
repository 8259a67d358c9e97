"""The proxy's codec against kio's own encoder: where the throttle lies in every response
type, the empty fetch response, the capped ApiVersions, headers, bad bytes, SASL names."""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i16, i32
from kquota.exceptions import ProxyError
from kquota.proxy import codec
from kquota.proxy.sasl import principal_from_auth_bytes

# kio registers strategies for its primitives but not for record batches (raw bytes here)
st.register_type_strategy(Records, st.binary(max_size=64).map(Records.parse))

THROTTLED_APIS = sorted(
    (key, version)
    for key, (low, high) in codec.supported_versions().items()
    for version in range(low, high + 1)
    if codec.api(key, version).has_throttle_field
)


def _encode(entity: Any) -> bytes:
    out = io.BytesIO()
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def _ms(delta: datetime.timedelta) -> int:
    return delta // datetime.timedelta(milliseconds=1)


def test_most_responses_have_a_throttle_field() -> None:
    assert len(THROTTLED_APIS) > 250
    assert (0, 3) in THROTTLED_APIS and (1, 18) in THROTTLED_APIS
    assert not codec.api(17, 1).has_throttle_field  # SaslHandshake has none


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), which=st.sampled_from(THROTTLED_APIS))
def test_throttle_offset_is_where_kio_wrote_the_throttle(data: Any, which: Any) -> None:
    spec = codec.api(*which)
    response = data.draw(st.from_type(spec.response_type))
    header = spec.response_type.__header_schema__(correlation_id=i32(77))  # type: ignore[attr-defined]
    frame = _encode(header) + _encode(response)
    correlation_id, body = spec.response_header(frame)
    assert correlation_id == 77
    offset = spec.throttle_offset(frame, body)
    assert offset is not None
    assert codec.read_int32(frame, offset) == _ms(response.throttle_time)
    # patching there changes the throttle and nothing else
    patched = bytearray(frame)
    codec.patch_throttle(patched, offset, 12345)
    decoded = entity_reader(spec.response_type)(bytes(patched), body)[0]
    assert _ms(decoded.throttle_time) == 12345
    assert dataclasses.replace(decoded, throttle_time=response.throttle_time) == response


@pytest.mark.parametrize("version", range(4, 19))
def test_empty_fetch_response_is_what_kafka_sends(version: int) -> None:
    spec = codec.api(1, version)
    frame = codec.empty_fetch_response(spec, 99, 1500, 42)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    correlation_id, body = spec.response_header(frame[4:])
    assert correlation_id == 99
    response = entity_reader(spec.response_type)(frame[4:], body)[0]
    assert _ms(response.throttle_time) == 1500
    assert response.responses == ()
    if version >= 7:
        assert response.error_code == ErrorCode.none
        assert response.session_id == 42


def test_api_versions_are_capped_to_the_codec(tmp_path: Any) -> None:
    from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
    from kio.schema.response_header.v0.header import ResponseHeader

    response = ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=(
            ApiVersion(api_key=i16(0), min_version=i16(0), max_version=i16(20)),
            ApiVersion(api_key=i16(1), min_version=i16(0), max_version=i16(7)),
            ApiVersion(api_key=i16(7), min_version=i16(0), max_version=i16(3)),  # unknown
            ApiVersion(api_key=i16(3), min_version=i16(99), max_version=i16(99)),  # none common
        ),
        throttle_time=datetime.timedelta(0),  # type: ignore[arg-type]
    )
    frame = _encode(ResponseHeader(correlation_id=i32(5))) + _encode(response)
    spec = codec.api(18, 3)
    capped = codec.cap_api_versions(spec, frame, 4, 250)
    assert capped is not None
    decoded = entity_reader(ApiVersionsResponse)(capped[4:], 4)[0]
    produce_low, produce_high = codec.supported_versions()[0]
    assert [(e.api_key, e.min_version, e.max_version) for e in decoded.api_keys] == [
        (0, produce_low, produce_high),
        (1, codec.supported_versions()[1][0], 7),
    ]
    assert _ms(decoded.throttle_time) == 250
    # an error response (possibly in the v0 layout) passes unchanged
    error = _encode(ResponseHeader(correlation_id=i32(5))) + struct.pack(">hi", 35, 0)
    assert codec.cap_api_versions(spec, error, 4, None) is None


@pytest.mark.parametrize("client_id", ["app-1", "", None, "ünïcode"])
@pytest.mark.parametrize("version", [3, 12])  # header v1 and v2
def test_request_header(client_id: str | None, version: int) -> None:
    spec = codec.api(3, version)
    header = spec.request_type.__header_schema__(  # type: ignore[attr-defined]
        request_api_key=i16(3),
        request_api_version=i16(version),
        correlation_id=i32(-7),
        client_id=client_id,
    )
    frame = _encode(header) + b"body"
    parsed = codec.parse_request_header(frame)
    assert parsed.api is spec
    assert parsed.correlation_id == -7
    assert parsed.client_id == (client_id or "")
    assert frame[parsed.body_offset :] == b"body"


def _tagged(*fields: tuple[int, bytes]) -> bytes:
    """A tagged-field section (each tag and size fit one varint byte here)."""
    return bytes([len(fields)]) + b"".join(bytes([tag, len(data)]) + data for tag, data in fields)


def test_unknown_tagged_fields_in_headers_are_skipped() -> None:
    """Kafka's protocol lets a newer peer add tagged fields: a broker skips the ones it
    does not know, and so must the proxy (kio's reader refuses them)."""
    fixed = struct.pack(">hhih", 3, 12, 41, 3) + b"app"  # Metadata v12: header v2
    frame = fixed + _tagged((7, b"\xaa\xbb"), (120, b"")) + b"body"
    parsed = codec.parse_request_header(frame)
    assert (parsed.correlation_id, parsed.client_id) == (41, "app")
    assert frame[parsed.body_offset :] == b"body"
    produce = codec.api(0, 9)  # response header v1
    response = struct.pack(">i", 41) + _tagged((3, b"\x01\x02\x03")) + b"body"
    assert produce.response_header(response) == (41, len(response) - 4)
    assert codec.api(18, 3).response_header(struct.pack(">i", 41) + b"\x00") == (41, 4)  # v0
    for bad in (fixed, fixed + b"\x01\x07", fixed + b"\x01\x07\x09ab", fixed + b"\xff" * 6):
        with pytest.raises(ProxyError, match="malformed metadata v12 request header"):
            codec.parse_request_header(bad)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_bad_bytes_raise_only_proxy_error(frame: bytes) -> None:
    try:
        header = codec.parse_request_header(frame)
    except ProxyError:
        return
    assert 0 < header.body_offset <= len(frame)


def test_unknown_api_and_version_are_named() -> None:
    with pytest.raises(ProxyError, match="unknown API key 999"):
        codec.parse_request_header(struct.pack(">hhih", 999, 0, 1, -1))
    with pytest.raises(ProxyError, match=r"unsupported version 2 of API 0 \(produce\)"):
        codec.parse_request_header(struct.pack(">hhih", 0, 2, 1, -1))


@pytest.mark.parametrize(
    ("mechanism", "message", "principal"),
    [
        ("PLAIN", b"\0alice\0secret", "alice"),
        ("PLAIN", b"alice\0alice\0secret", "alice"),
        ("PLAIN", b"\0\0secret", None),
        ("PLAIN", b"no separators", None),
        ("SCRAM-SHA-256", b"n,,n=bob,r=abc123", "bob"),
        ("SCRAM-SHA-512", b"n,a=bob,n=b=2Co=3Db,r=xyz", "b,o=b"),
        ("SCRAM-SHA-256", b"garbage", None),
        ("PLAIN", b"\0\xff\xfe\0pw", None),
        ("OAUTHBEARER", b"n,,\x01auth=Bearer x\x01\x01", None),
    ],
)
def test_sasl_principal(mechanism: str, message: bytes, principal: str | None) -> None:
    assert principal_from_auth_bytes(mechanism, message) == principal
