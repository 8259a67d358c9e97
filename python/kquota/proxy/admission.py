"""KIP-612 at the proxy's door: each new connection held to the connection-creation rates.

A new connection first waits out the broker's and the listener's
``max.connection.creation.rate`` (one connection at a time, as Kafka's acceptor thread
accepts them), then is checked against its IP's ``connection_creation_rate``: a connection
over it is accepted and closed after the throttle time, unread. Nothing here reads Kafka
messages, so it imports without the proxy extra.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Final

from kquota import ConnectionQuotas
from kquota.proxy.stream import Peer

__all__ = ["DEFAULT_LISTENER", "ConnectionAdmission"]

log = logging.getLogger("kquota.proxy")

DEFAULT_LISTENER: Final = "PLAINTEXT"
"""The listener name the proxy's connections count under in the connection quotas."""


class ConnectionAdmission:
    """The connection-creation rates of ``quotas`` applied to new connections, counted
    under ``listener``; ``clock`` is the quotas' clock (the plugin's, in ms).

    :meth:`start` (in the event loop) adds ``listener`` to ``quotas`` if they lack it.
    """

    def __init__(self, quotas: ConnectionQuotas, listener: str, clock: Callable[[], int]) -> None:
        self.quotas = quotas
        self.listener = listener
        self._clock = clock
        self._acceptor: asyncio.Lock | None = None
        self._waiting: set[asyncio.Task[None]] = set()
        self.ip_throttled = 0
        """Connections closed unread because their IP was over its rate."""

    def start(self) -> None:
        """Ready to admit connections: called by the running event loop before the first."""
        self._acceptor = asyncio.Lock()
        if self.listener not in dict(self.quotas.listeners()):
            self.quotas.add_listener(self.listener)

    def cancel_waiting(self) -> None:
        """Cancel every connection still waiting to be admitted or closed (a shutdown)."""
        for waiting in list(self._waiting):
            waiting.cancel()

    async def admit(self, client: Peer, ip: str, peer: str, closing: Callable[[], bool]) -> bool:
        """Wait out the broker and listener rates, then check the IP's rate; a connection
        over it is closed after the throttle time, unread (``False``). A shutdown
        (``closing()`` true once the wait is cancelled) closes the connection at once
        (``False``)."""
        quotas = self.quotas
        assert self._acceptor is not None
        clock = self._clock
        task = asyncio.current_task()
        assert task is not None
        self._waiting.add(task)  # cancelled by a shutdown
        try:
            async with self._acceptor:
                delay = quotas.accept_delay(self.listener, clock())
                if delay > 0:
                    log.debug("delaying connection from %s by %d ms", peer, delay)
                    await asyncio.sleep(delay / 1000)
                throttle = quotas.admit_ip(self.listener, ip, clock())
            if throttle > 0:
                self.ip_throttled += 1
                log.debug("connection from %s over its IP's rate: closing in %d ms", peer, throttle)
                await asyncio.sleep(throttle / 1000)
        except asyncio.CancelledError:
            if not closing():
                raise
            throttle = 1
        finally:
            self._waiting.discard(task)
        if throttle > 0 or closing():
            await client.close()
            return False
        return True
