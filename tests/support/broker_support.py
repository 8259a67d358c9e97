"""What the broker tests share: a simulated clock, a plugin with some traffic recorded, and
the check that no maintenance thread outlives its test. Import ``no_thread_left_behind``
into a test module to apply it there (it is autouse)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import kquota
import pytest
from kquota.broker import QuotaPlugin

THREAD_JOIN_S = 30.0  # bounds a join that would otherwise hang; never a measurement
HANG_S = 60.0  # bounds a wait that would otherwise hang; never a measurement


class SimClock:
    """A simulated clock: time moves only when the test says so."""

    def __init__(self, now: int = 0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def background_threads() -> set[threading.Thread]:
    """The maintenance threads of ``ThrottledChannels`` alive now."""
    return {t for t in threading.enumerate() if t.name == "kquota-channels"}


@pytest.fixture(autouse=True)
def no_thread_left_behind() -> Iterator[None]:
    """Every maintenance thread a test starts is gone once its objects are."""
    before = background_threads()
    yield
    gc.collect()
    for thread in background_threads() - before:
        thread.join(THREAD_JOIN_S)
        assert not thread.is_alive(), "a kquota-channels thread outlived its test"


def traffic() -> QuotaPlugin:
    """alice (user quota, throttled), bob (user+client quota), carol (no quota at all)."""
    plugin = QuotaPlugin(clock=lambda: 1000)  # simulated: the requests give their times
    plugin.produce.set_quota(kquota.Entity(user="alice"), 100.0)
    plugin.produce.set_quota(kquota.Entity(user="bob", client_id="app"), 1000.0)
    plugin.fetch.set_quota(kquota.Entity(client_id=kquota.DEFAULT), 500.0)
    plugin.request.set_quota(kquota.Entity(user="alice"), 1.0)
    ch = plugin.channels.open()
    plugin.on_produce("alice", "app-1", 2000, 5_000_000_000, channel=ch, now_ms=1000)
    plugin.on_produce("bob", "app", 300, 1000, now_ms=1200)
    plugin.on_produce("carol", "x", 300, 1000, now_ms=1300)
    plugin.on_fetch("bob", "consumer", 400, 1000, now_ms=1400)
    return plugin
