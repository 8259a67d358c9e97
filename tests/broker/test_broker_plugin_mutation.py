"""``QuotaPlugin.on_mutation``: Kafka's ``sendResponseMaybeThrottleWithControllerQuota``
(the larger of the controller-mutation and request throttles, applied through its own
manager), and the mutation manager's delay queue drained by ``ThrottledChannels``."""

from __future__ import annotations

import kquota
import pytest
from broker_support import SimClock, no_thread_left_behind  # noqa: F401 (autouse fixture)
from kquota.broker import QuotaOutcome, QuotaPlugin
from kquota.exceptions import ChannelError, InvalidConfigError, InvalidUsageError

USER = kquota.Entity(user="u")


def _plugin(
    request: float | None = None,
) -> tuple[QuotaPlugin, kquota.ControllerMutationQuotaManager]:
    plugin = QuotaPlugin(clock=SimClock())
    if request is not None:
        plugin.request.set_quota(USER, request)
    mutation = kquota.ControllerMutationQuotaManager()
    mutation.set_quota(USER, 10.0)
    return plugin, mutation


def test_a_larger_mutation_throttle_mutes_through_the_mutation_manager() -> None:
    plugin, mutation = _plugin(request=1000.0)
    ch = plugin.channels.open()
    outcome = plugin.on_mutation("u", "c", 1000, 2500, mutation, channel=ch, now_ms=0)
    assert outcome == QuotaOutcome(2500, False, "controller_mutation", 2500)
    assert plugin.channels.muted_until(ch, now_ms=0) == 2500
    assert mutation.queue_size == 1 and plugin.request.queue_size() == 0
    assert mutation.next_unmute_ms() == 2500
    assert mutation.throttle_time_avg("u", "c", now_ms=0) == 2500.0
    assert plugin.channels.queue_size() == 1
    assert plugin.channels.reap(now_ms=2500) == [ch]
    assert mutation.queue_size == 0 and mutation.next_unmute_ms() is None


def test_the_request_throttle_wins_when_larger_and_on_ties() -> None:
    # Request quota 1 %: 5 s of handler time is capped at one window, 1000 ms.
    for mutation_ms in (0, 400, 1000):
        plugin, mutation = _plugin(request=1.0)
        ch = plugin.channels.open()
        outcome = plugin.on_mutation(
            "u", "c", 5_000_000_000, mutation_ms, mutation, channel=ch, now_ms=0
        )
        assert outcome == QuotaOutcome(1000, False, "request", 1000), mutation_ms
        assert plugin.request.queue_size() == 1 and mutation.queue_size == 0


def test_no_throttle_and_no_channel() -> None:
    plugin, mutation = _plugin()
    assert plugin.on_mutation("u", "c", 10, 0, mutation, now_ms=0) == QuotaOutcome()
    # Without a channel the throttle is accounted, nothing queued.
    outcome = plugin.on_mutation("u", "c", 10, 300, mutation, now_ms=0)
    assert outcome == QuotaOutcome(300, False, "controller_mutation", 300)
    assert mutation.queue_size == 0
    assert mutation.throttle_time_avg("u", "c", now_ms=0) == 300.0


def test_bad_input_names_the_value_and_records_nothing() -> None:
    plugin, mutation = _plugin(request=1.0)
    with pytest.raises(InvalidConfigError, match="invalid mutation"):
        plugin.on_mutation("u", "c", 10, 0, plugin.request, now_ms=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidUsageError, match=r"invalid mutation_throttle_ms 1\.5"):
        plugin.on_mutation("u", "c", 10, 1.5, mutation, now_ms=0)  # type: ignore[arg-type]
    with pytest.raises(InvalidUsageError, match="thread_time_ns"):
        plugin.on_mutation("u", "c", -1, 0, mutation, now_ms=0)
    with pytest.raises(ChannelError, match="unknown channel 99"):
        plugin.on_mutation("u", "c", 10, 5, mutation, channel=99, now_ms=0)
    assert plugin.request.measure("u", "c", now_ms=0) is None
    assert mutation.queue_size == 0


def test_a_mutation_throttle_beyond_kafkas_int_is_refused_before_recording() -> None:
    # The core decides on Kafka's 32-bit throttles: a larger one is a bad value, named,
    # and the request quota is not recorded.
    plugin, mutation = _plugin(request=1.0)
    for bad in (2**31, -(2**31) - 1):
        with pytest.raises(InvalidUsageError, match=rf"invalid mutation_throttle_ms {bad}"):
            plugin.on_mutation("u", "c", 10, bad, mutation, now_ms=0)
    assert plugin.request.measure("u", "c", now_ms=0) is None
    # the largest int is a throttle like any other
    outcome = plugin.on_mutation("u", "c", 10, 2**31 - 1, mutation, now_ms=0)
    assert outcome == QuotaOutcome(2**31 - 1, False, "controller_mutation", 2**31 - 1)
