"""Python ``QuotaManager.record`` against its peers, for one entity and across 10 000.

Contenders (the pytest-benchmark group is ``record_one_entity`` or ``record_10k_entities``;
``extra_info["role"]`` names the contender):

* ``kquota``: ``QuotaManager.record(user, client_id, value, now_ms)``, which records the
  value and returns the throttle time: Kafka's record-and-check.
* ``floor``: ``kquota._core._bench_noop_record(user, client_id, value, now_ms)``, a
  module-level function taking the same arguments. It is in the same extension and parses
  them the same way, then does nothing: what CPython charges for the call. Nothing can be
  faster than this from Python.
* ``model``: the pure-Python reference model of the same semantics
  (tests/support/reference_model.py).
* ``limits_moving_window`` and ``limits_sliding_window_counter``: the ``limits`` package's
  ``MovingWindowRateLimiter`` and ``SlidingWindowCounterRateLimiter`` over
  ``limits.storage.MemoryStorage``, called as ``hit(item, user, client_id)`` with a limit
  of 10^12 per second, so every hit is allowed and counted (record-and-check). A hit
  costs 1: the moving window keeps one entry per unit of cost, so charging bytes would be
  unfair to it.
* ``token_bucket``: ``token_bucket.Limiter.consume(key, 100)`` over
  ``token_bucket.MemoryStorage``, with a bucket that no run empties.

Fairness. Every contender runs in the same lean loop: a list of its own argument tuples,
built before the round (untimed), and its bound method (the floor: its function) called
directly with them, as in ``for u, c, v, t in args: f(u, c, v, t)``; nothing is wrapped. A
timed round is ``CALLS`` calls. Every sensor, key and bucket exists before timing starts,
and in the 10 000-entity groups every round goes through all 10 000 keys in turn. kquota
and the model are given the time: ``now_ms`` advances by 1 ms every 64 calls over the whole
run. ``limits`` and ``token-bucket`` take no time argument; they read the wall clock
(``time.time``, ``time.monotonic``) on every call themselves, and that is part of what they
cost. The loop's own cost (about what the floor shows) is in every number.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kquota
import limits
import pytest
import reference_model
import token_bucket
from kquota._core import _bench_noop_record
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter, SlidingWindowCounterRateLimiter
from quick import pick

KEYS = 10_000
CALLS = 10_000
"""Calls per timed round: the 10 000-entity groups visit every key once a round."""
TICK = 64
"""Calls per millisecond of ``now_ms`` for kquota and the model."""
USER = "alice"
VALUE = 100.0
LIMIT = limits.RateLimitItemPerSecond(10**12)

Args = list[tuple[Any, ...]]
# (the bound method to time, a function from the first call's index to a round's arguments)
Contender = tuple[Callable[..., Any], Callable[[int], Args]]


def loop4(f: Callable[..., Any], args: Args) -> None:
    for a, b, c, d in args:
        f(a, b, c, d)


def loop3(f: Callable[..., Any], args: Args) -> None:
    for a, b, c in args:
        f(a, b, c)


def loop2(f: Callable[..., Any], args: Args) -> None:
    for a, b in args:
        f(a, b)


LOOPS = {4: loop4, 3: loop3, 2: loop2}


def timed_args(clients: list[str]) -> Callable[[int], Args]:
    """``(user, client_id, value, now_ms)`` for calls ``start .. start + CALLS``."""
    n = len(clients)

    def make(start: int) -> Args:
        return [(USER, clients[k % n], VALUE, k // TICK) for k in range(start, start + CALLS)]

    return make


def fixed_args(per_key: list[tuple[Any, ...]]) -> Callable[[int], Args]:
    """The same key tuples, cycled, for contenders that read the clock themselves."""
    n = len(per_key)

    def make(start: int) -> Args:
        return [per_key[k % n] for k in range(start, start + CALLS)]

    return make


def manager(backend: Any, clients: list[str]) -> Any:
    m = backend.QuotaManager("produce")
    m.set_quota(backend.Entity(client_id=backend.DEFAULT), 1e12)
    for c in clients:  # every sensor exists before timing starts
        assert m.record(USER, c, VALUE, 0) == 0
    return m


def kquota_record(clients: list[str]) -> Contender:
    return manager(kquota, clients).record, timed_args(clients)


def floor(clients: list[str]) -> Contender:
    assert _bench_noop_record(USER, clients[0], VALUE, 0) == 0
    return _bench_noop_record, timed_args(clients)


def model(clients: list[str]) -> Contender:
    return manager(reference_model, clients).record, timed_args(clients)


def limits_with(strategy: type[limits.strategies.RateLimiter]) -> Callable[[list[str]], Contender]:
    def make(clients: list[str]) -> Contender:
        limiter = strategy(MemoryStorage())
        per_key = [(LIMIT, USER, c) for c in clients]
        for item, user, client in per_key:  # every key exists before timing starts
            assert limiter.hit(item, user, client)
        return limiter.hit, fixed_args(per_key)

    return make


def token_buckets(clients: list[str]) -> Contender:
    limiter = token_bucket.Limiter(1e15, 10**18, token_bucket.MemoryStorage())
    per_key = [(f"{USER}/{c}", int(VALUE)) for c in clients]
    for key, tokens in per_key:  # every bucket exists before timing starts
        assert limiter.consume(key, tokens)
    return limiter.consume, fixed_args(per_key)


# role -> (contender, rounds in a full run, rounds in a quick run); about 0.3 s to 4 s each
CONTENDERS: dict[str, tuple[Callable[[list[str]], Contender], int, int]] = {
    "kquota": (kquota_record, 200, 40),
    "floor": (floor, 200, 40),
    "model": (model, 20, 5),
    "limits_moving_window": (limits_with(MovingWindowRateLimiter), 20, 5),
    "limits_sliding_window_counter": (limits_with(SlidingWindowCounterRateLimiter), 20, 5),
    "token_bucket": (token_buckets, 50, 10),
}


def run_benchmark(benchmark: Any, group: str, role: str, clients: list[str]) -> None:
    make, full_rounds, quick_rounds = CONTENDERS[role]
    f, round_args = make(clients)
    width = len(round_args(0)[0])
    loop = LOOPS[width]
    rounds = pick(full_rounds, quick_rounds)
    benchmark.group = group
    benchmark.extra_info.update(role=role, calls=CALLS, keys=len(clients), rounds=rounds)
    starts = iter(range(0, 10**12, CALLS))

    def setup() -> tuple[tuple[Callable[..., Any], Args], dict[str, Any]]:
        return (f, round_args(next(starts))), {}

    benchmark.pedantic(loop, setup=setup, rounds=rounds, warmup_rounds=pick(2, 1))
    # After the run: kquota and the model still throttle nothing, the peers still allow.
    result = f(*round_args(next(starts))[-1])
    assert result is True if width < 4 else result == 0


@pytest.mark.parametrize("role", list(CONTENDERS))
def test_record_one_entity(benchmark: Any, role: str) -> None:
    run_benchmark(benchmark, "record_one_entity", role, ["app-1"])


@pytest.mark.parametrize("role", list(CONTENDERS))
def test_record_10k_entities(benchmark: Any, role: str) -> None:
    run_benchmark(benchmark, "record_10k_entities", role, [f"client-{i}" for i in range(KEYS)])
