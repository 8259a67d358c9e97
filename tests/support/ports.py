"""Free TCP ports of 127.0.0.1 for the servers the tests start.

A port handed out here is bound later, by another process or thread (a broker, a proxy, a
gateway's door when a response first names its broker). Ports from the kernel's ephemeral
range can be taken in between as the local end of any outgoing connection (the brokers and
clients of the tests make many), so the ports come from below that range, where only an
explicit bind takes one. Each port goes out once per process, from a random start, so two
test runs on one machine rarely probe the same ones.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

_LOWEST = 10_000
_lock = threading.Lock()
_next: int | None = None


def _ephemeral_low() -> int:
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32_768  # Linux's default
    return max(low, _LOWEST + 1_000)


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> tuple[int, int]:
    """``count`` consecutive ports of 127.0.0.1 that nothing holds now and that no
    outgoing connection can take: ``(first, last)``."""
    global _next
    if count < 1:
        raise ValueError(f"free_ports: count must be at least 1, not {count}")
    high = _ephemeral_low()
    with _lock:
        if _next is None:
            _next = random.SystemRandom().randrange(_LOWEST, high - count)
        for _ in range(high - _LOWEST):
            first = _next if _next + count <= high else _LOWEST
            _next = first + count
            if all(_bindable(p) for p in range(first, first + count)):
                return first, first + count - 1
    raise RuntimeError(f"no {count} consecutive free ports from {_LOWEST} to {high - 1}")


def free_port() -> int:
    """One port of 127.0.0.1 that nothing holds now and no outgoing connection can take."""
    return free_ports(1)[0]
