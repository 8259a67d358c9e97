"""The proxy's sockets: asyncio protocols read as frames, or forwarded as they arrive.

``asyncio.StreamReader`` copies every byte twice on its way through (into its buffer, then
out of it) and a request must be read whole before it goes upstream. A :class:`Peer` keeps
the chunks the socket gave it as they are and hands over a frame that arrived in one chunk
without copying it; and :meth:`Peer.forward` passes the rest of a request to the upstream
transport chunk by chunk as it arrives, the way a byte relay does, while the request is
still being read (cut-through).

Reading stops (the transport is paused) while more than ``limit`` bytes wait unread, so a
connection the proxy is not reading from (a request in flight, a KIP-219 mute) is left in
the kernel's buffers as a broker leaves it, and while the transport a request is forwarded
to cannot take more (its peer's socket buffer is full).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable
from typing import Final

__all__ = ["Peer"]

_WRITE_HIGH_WATER: Final = 256 * 1024
"""Bytes queued in a transport before its writer waits (asyncio's default is 64 KiB)."""


class Peer(asyncio.Protocol):
    """One socket of the proxy: a client's or the upstream's connection."""

    def __init__(self, limit: int, on_made: Callable[[Peer], None] | None = None) -> None:
        self.limit = limit
        self._on_made = on_made
        self.transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._chunks: collections.deque[bytes] = collections.deque()
        self._offset = 0  # into the first chunk
        self._buffered = 0
        self._eof = False
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._want = 0  # bytes a reader waits for
        self._forward_to: Peer | None = None
        self._forward_left = 0
        self._held_by: set[str] = set()  # why reading is paused
        self._write_paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._feeding: Peer | None = None  # a peer forwarding into this one

    # -- the protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER)
        if self._on_made is not None:
            self._on_made(self)

    def data_received(self, data: bytes) -> None:
        left = self._forward_left
        if left:
            target = self._forward_to
            assert target is not None and target.transport is not None
            if len(data) <= left:
                target.transport.write(data)
                self._forward_left = left - len(data)
                if not self._forward_left:
                    self._wake()
                return
            target.transport.write(data[:left])
            self._forward_left = 0
            self._wake()
            data = data[left:]
        self._chunks.append(data)
        self._buffered += len(data)
        if self._buffered >= self._want:
            self._wake()
        if self._buffered > max(self.limit, self._want):  # a reader waiting for more reads on
            self._hold("buffer")

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return True  # a half-closed client still gets its responses

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._error = exc or ConnectionResetError("connection lost")
        self._wake()
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_exception(self._error)
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._write_paused = True
        if self._feeding is not None:
            self._feeding._hold("upstream")

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)
        if self._feeding is not None:
            self._feeding._release("upstream")

    # -- reading --------------------------------------------------------------------

    async def read_exactly(self, n: int) -> bytes:
        """The next ``n`` bytes; :class:`asyncio.IncompleteReadError` at an early end."""
        while self._buffered < n:
            if self._eof:
                raise asyncio.IncompleteReadError(self._take(self._buffered), n)
            await self._wait(n)
        return self._take(n)

    async def forward(self, n: int, to: Peer) -> None:
        """Write the next ``n`` bytes to ``to`` as they arrive (those already here first)."""
        assert to.transport is not None and self.transport is not None
        while self._buffered and n:
            chunk = self._take(min(n, len(self._chunks[0]) - self._offset))
            to.transport.write(chunk)
            n -= len(chunk)
        if not n:
            return
        if self._eof:
            raise asyncio.IncompleteReadError(b"", n)
        self._forward_to, self._forward_left = to, n
        to._feeding = self
        if to._write_paused:
            self._hold("upstream")
        self._release("buffer")
        try:
            await self._wait(1)  # woken when the last byte went on, or at the end
        finally:
            to._feeding = None
            self._release("upstream")
            left, self._forward_left, self._forward_to = self._forward_left, 0, None
        if left:
            raise asyncio.IncompleteReadError(b"", left)

    def _take(self, n: int) -> bytes:
        """``n`` buffered bytes (there are that many): the chunk itself when it is exactly
        those bytes, else one copy."""
        if not n:
            return b""
        first = self._chunks[0]
        if self._offset == 0 and len(first) == n:
            self._chunks.popleft()
            out = first
        elif len(first) - self._offset >= n:
            out = first[self._offset : self._offset + n]
            self._offset += n
            if self._offset == len(first):
                self._chunks.popleft()
                self._offset = 0
        else:
            parts = []
            need = n
            while need:
                chunk = self._chunks[0]
                piece = chunk[self._offset : self._offset + need]
                parts.append(piece)
                need -= len(piece)
                self._offset += len(piece)
                if self._offset == len(chunk):
                    self._chunks.popleft()
                    self._offset = 0
            out = b"".join(parts)
        self._buffered -= n
        if self._buffered <= self.limit:
            self._release("buffer")
        return out

    async def _wait(self, want: int) -> None:
        self._want = want
        self._release("buffer")
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._waiter = None
            self._want = 0

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _hold(self, reason: str) -> None:
        if not self._held_by and self.transport is not None:
            self.transport.pause_reading()
        self._held_by.add(reason)

    def _release(self, reason: str) -> None:
        if reason in self._held_by:
            self._held_by.discard(reason)
            if not self._held_by and self.transport is not None and not self._eof:
                self.transport.resume_reading()

    # -- writing --------------------------------------------------------------------

    def write(self, parts: list[bytes | memoryview] | tuple[bytes | memoryview, ...]) -> None:
        """Queue ``parts`` on the socket (in one system call when it can take them)."""
        assert self.transport is not None
        self.transport.writelines(parts)

    async def drain(self) -> None:
        """Return once the socket's queue is below its high-water mark."""
        if self._error is not None:
            raise self._error
        if not self._write_paused:
            return
        waiter = self._drain_waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter
        finally:
            self._drain_waiter = None

    async def close(self) -> None:
        """Close the socket and wait until it is."""
        if self.transport is not None:
            self.transport.close()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(self.closed)
