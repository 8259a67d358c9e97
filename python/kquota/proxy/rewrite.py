"""What the proxy reads from, and writes into, the messages it passes on.

Requests are never re-encoded: a consumer fetch's ``max_bytes`` is patched in place when
the fetch quota caps it (as Kafka caps it). Responses carry the applied throttle in their
``throttle_time_ms`` (the upstream's own value kept when it is larger), spliced into the
frame; a throttled fetch is answered with an empty fetch response carrying the throttle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kquota.broker import QuotaOutcome
from kquota.exceptions import ProxyError
from kquota.proxy import codec

__all__ = [
    "cap_fetch_request",
    "read_request_field",
    "read_response_field",
    "throttled_fetch_response",
    "with_throttle",
]


def read_request_field(
    spec: codec.Api, frame: bytes, header: codec.RequestHeader, name: str
) -> dict[str, Any]:
    """The field ``name`` of a request (``{name: value}``, empty when its version lacks it);
    :class:`~kquota.exceptions.ProxyError` when the request is malformed."""
    try:
        return spec.read_request(frame, header.body_offset, name)
    except Exception as exc:
        raise ProxyError(f"malformed {spec.name} v{spec.version} request: {exc}") from None


def read_response_field(spec: codec.Api, response: bytes, body_offset: int, name: str) -> int:
    """The int field ``name`` of a response; :class:`~kquota.exceptions.ProxyError` when the
    response is malformed."""
    try:
        found = codec._finder(spec.response_type, (name,)).read(response, body_offset)
    except Exception as exc:
        raise ProxyError(f"malformed {spec.name} v{spec.version} response: {exc}") from None
    value: Any = found[name][0]
    return int(value)


def cap_fetch_request(
    spec: codec.Api,
    frame: bytes,
    header: codec.RequestHeader,
    fetch_max_bytes: Callable[[int], int],
) -> tuple[bytes, dict[str, object]]:
    """A consumer fetch's ``max_bytes`` capped to ``fetch_max_bytes(max_bytes)`` (the fetch
    quota's cap, as Kafka caps it), and what the proxy needs of the request later:
    ``consumer`` (not a replica's fetch), ``session_id`` and ``session_epoch``."""
    try:
        found = spec.read_request_offsets(
            frame,
            header.body_offset,
            "replica_id",
            "max_bytes",
            "session_id",
            "session_epoch",
        )
    except Exception as exc:
        raise ProxyError(f"malformed fetch v{spec.version} request: {exc}") from None
    values: dict[str, object] = {name: value for name, (value, _) in found.items()}
    replica = found.get("replica_id")
    if replica is None and spec.version >= 15:  # the replica id moved to a tagged field
        request = codec.read_fields(frame, header.body_offset, spec.request_type)
        replica_id = int(request.replica_state.replica_id)
    else:
        replica_id = int(replica[0]) if replica is not None else -1  # type: ignore[call-overload]
    values["consumer"] = replica_id < 0
    if replica_id >= 0 or "max_bytes" not in found:
        return frame, values
    requested, offset = found["max_bytes"]
    assert isinstance(requested, int)
    capped = fetch_max_bytes(requested)
    if capped < requested:
        patched = bytearray(frame)
        codec.patch_throttle(patched, offset, capped)
        return bytes(patched), values
    return frame, values


def with_throttle(
    spec: codec.Api, response: bytes, outcome: QuotaOutcome, body_offset: int | None = None
) -> list[bytes | memoryview]:
    """A response's frame (size, then the response) with the applied throttle in it, when
    ``outcome`` throttled and the upstream's own value is smaller. ``body_offset`` is where
    the response's body starts (read from its header when not given)."""
    parts: list[bytes | memoryview] = [codec.int32(len(response)), response]
    if not outcome.throttled:
        return parts
    if body_offset is None:
        _, body_offset = spec.response_header(response)
    offset = spec.throttle_offset(response, body_offset)
    if offset is None or codec.read_int32(response, offset) >= outcome.throttle_time_ms:
        return parts
    view = memoryview(response)
    return [
        parts[0],
        view[:offset],
        codec.int32(outcome.throttle_time_ms),
        view[offset + 4 :],
    ]


def throttled_fetch_response(
    spec: codec.Api, header: codec.RequestHeader, fetch: dict[str, object], throttle_ms: int
) -> bytes:
    """The empty fetch response Kafka sends a throttled consumer (its bytes unrecorded),
    with its session id when the fetch was an incremental one."""
    session_id = fetch.get("session_id", 0)
    epoch = fetch.get("session_epoch", -1)
    incremental = isinstance(epoch, int) and epoch > 0
    return codec.empty_fetch_response(
        spec,
        header.correlation_id,
        throttle_ms,
        int(session_id) if incremental and isinstance(session_id, int) else 0,
    )
