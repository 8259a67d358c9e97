"""What the broker tests share: a simulated clock and the check that no maintenance thread
outlives its test. Import ``no_thread_left_behind`` into a test module to apply it there
(it is autouse)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

THREAD_JOIN_S = 30.0  # bounds a join that would otherwise hang; never a measurement


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
