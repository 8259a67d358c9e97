"""A token-bucket front: a tooth of the side-by-side comparison (side_by_side_support.py).

A small proxy of its own, in Python, that holds each client's produce bytes to its quota
with a token bucket instead of Kafka's sampled rate: ``kquota.TokenBucket`` at the
client's ``producer_byte_rate`` from the store (followed live), whose burst is Kafka's own
for KIP-599 (``num_samples * window`` of quota) and which starts full. A produce request
that overdraws it is answered at once with the time the bucket needs to refill to zero
(``token_bucket_throttle_time``) in ``throttle_time_ms``, and the connection is not read
for that long, as Kafka mutes a channel. Every other request is relayed as it is. It writes
the same capture as ``kquota proxy --capture``, so a run through it is read like one through
the proxy; only the quota arithmetic differs.

One request at a time per connection, and produce with ``acks=0`` is not supported: the
workloads it serves produce with ``acks=all``.

``python tests/support/token_bucket_front.py --listen H:P --upstream H:P --store FILE
--capture DIR`` prints ``kquota proxy: listening on H:P`` once it listens, and on SIGTERM
completes the capture and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import signal
import struct
import sys
import time
from pathlib import Path
from typing import Any

SUPPORT = Path(__file__).resolve().parent
if str(SUPPORT) not in sys.path:  # run as a script
    sys.path.insert(0, str(SUPPORT))

import kafka_wire  # noqa: E402
from kquota.proxy import ANONYMOUS  # noqa: E402

PRODUCE = 0
_SIZE = struct.Struct(">i")
USER = ANONYMOUS
"""The principal of a connection without SASL (the fronted listener has none)."""


@dataclasses.dataclass
class _Front:
    upstream: tuple[str, int]
    produce: Any  # kquota.QuotaManager: the store's quotas, followed live
    capture: Any  # kquota.proxy.capture.TrafficCapture
    buckets: dict[str, tuple[Any, float]] = dataclasses.field(default_factory=dict)

    def throttle_ms(self, client_id: str, size: int, now_ms: int) -> int:
        """Takes ``size`` bytes from the client's bucket; the throttle if overdrawn."""
        from kquota import TokenBucket, token_bucket_throttle_time

        quota = self.produce.quota_for(USER, client_id)
        if quota is None:
            return 0
        bucket, bucket_quota = self.buckets.get(client_id, (None, None))
        if bucket is None or bucket_quota != quota:
            bucket = TokenBucket(
                quota, num_samples=self.produce.num_samples, window_ms=self.produce.window_ms
            )
            self.buckets[client_id] = (bucket, quota)
        bucket.record(float(size), now_ms)
        return max(0, int(token_bucket_throttle_time(bucket.measure(now_ms), quota)))


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    try:
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        return None


def _with_throttle(response: bytes, api_version: int, throttle_ms: int) -> bytes:
    """A produce response (a whole frame) carrying ``throttle_ms`` when larger than the
    broker's."""
    import datetime

    from kio.static.primitive import i32Timedelta

    correlation_id = kafka_wire.response_correlation_id(response)
    body = kafka_wire.read_response(response, PRODUCE, api_version)
    broker_ms = body.throttle_time.total_seconds() * 1000
    if broker_ms >= throttle_ms:
        return _SIZE.pack(len(response)) + response
    throttle = i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_ms))
    return kafka_wire.encode_response(
        dataclasses.replace(body, throttle_time=throttle), correlation_id
    )


async def _serve(
    front: _Front, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter
) -> None:
    peer = "{}:{}".format(*client_w.get_extra_info("peername")[:2])
    try:
        upstream_r, upstream_w = await asyncio.open_connection(*front.upstream)
    except OSError:
        client_w.close()
        return
    try:
        while (request := await _read_frame(client_r)) is not None:
            header = kafka_wire.request_header(request)
            upstream_w.write(_SIZE.pack(len(request)) + request)
            await upstream_w.drain()
            response = await _read_frame(upstream_r)
            if response is None:
                break
            if header.api_key != PRODUCE:
                client_w.write(_SIZE.pack(len(response)) + response)
                await client_w.drain()
                continue
            client_id = header.client_id or ""
            now_ms = time.monotonic_ns() // 1_000_000
            throttle = front.throttle_ms(client_id, len(request), now_ms)
            _, body = kafka_wire.read_request(request)
            front.capture.add(
                now_ms, USER, client_id, "produce", len(request), 0, int(body.acks),
                throttle, header.api_version, header.correlation_id, peer,
            )  # fmt: skip
            client_w.write(_with_throttle(response, header.api_version, throttle))
            await client_w.drain()
            if throttle:
                await asyncio.sleep(throttle / 1000)  # the connection's mute
    except (OSError, asyncio.CancelledError):
        pass
    except Exception as exc:  # a bug here: said on stderr, which the test's log keeps
        print(f"token bucket front: {peer}: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        upstream_w.close()
        client_w.close()


async def _run(front: _Front, listen: tuple[str, int]) -> None:
    server = await asyncio.start_server(lambda r, w: _serve(front, r, w), listen[0], listen[1])
    print(f"kquota proxy: listening on {listen[0]}:{listen[1]} (a token bucket)", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with server:
        flushing = asyncio.create_task(_flush_every_second(front.capture))
        await stop.wait()
        flushing.cancel()
        server.close()


async def _flush_every_second(capture: Any) -> None:
    while True:
        await asyncio.sleep(1)
        capture.flush_due()


def _address(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="token_bucket_front")
    parser.add_argument("--listen", type=_address, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--capture", required=True)
    parser.add_argument("--log-level", default="WARNING")  # as kquota proxy takes it
    args = parser.parse_args(argv)

    from kquota import QuotaManager
    from kquota.config import open_store
    from kquota.config.live import LiveQuotas
    from kquota.proxy.capture import TrafficCapture

    managers = [QuotaManager(kind) for kind in ("produce", "fetch", "request")]
    capture = TrafficCapture(args.capture, args.upstream)
    capture.align(time.monotonic_ns() // 1_000_000)
    live = LiveQuotas(open_store(args.store), *managers).start()
    try:
        front = _Front(_address(args.upstream), managers[0], capture)
        asyncio.run(_run(front, args.listen))
    finally:
        live.stop()
        with contextlib.suppress(Exception):
            capture.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
