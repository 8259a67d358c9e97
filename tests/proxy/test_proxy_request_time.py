"""What the proxy charges to the request quota (``request_percentage``): for an API Kafka
answers from its handler before it returns, an estimate of the broker's handler time, the
round trip (request written to response read) less the floor of the broker's path; for
one Kafka parks until its replicas or data are there, only the proxy's own time, as Kafka
charges only its handler's time up to its return. (The estimate's arithmetic is unit-tested
in ``kquota_proxy::broker_time``.)

The broker is a stand-in (``ScriptedBroker``) that answers an ApiVersions request at once,
which makes the floor, and holds each answer after it for :data:`HOLD_S`: a real broker's
time cannot be chosen, and a lower bound on what is charged needs no clock of the test's
own beyond the ApiVersions exchange, which bounds the floor.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from kquota.proxy import ProxyDecision
from ports import free_port
from proxy_support import (
    SCRIPT_HANG_S,
    RecordingPlugin,
    ScriptedBroker,
    api_versions_request,
    metadata_request,
    produce_request,
    read_frame,
    run_proxy,
)

HOLD_S = 0.3
"""How long the broker holds each answer."""


class _KeepingPlugin(RecordingPlugin):
    """Keeps the data path's decisions as they are taken."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.decisions: list[ProxyDecision] = []

    def add_decisions(self, decisions: list[ProxyDecision]) -> None:
        self.decisions.extend(decisions)
        super().add_decisions(decisions)


def test_the_brokers_time_is_charged_only_for_apis_kafka_answers_at_once() -> None:
    requests = {
        2: (3, metadata_request(2, "timed")),  # answered at once by Kafka
        3: (0, produce_request(3, "timed", 100, acks=1)),  # appended, then answered
        4: (0, produce_request(4, "timed", 100, acks=-1)),  # parked until replicated
    }
    plugin = _KeepingPlugin()
    broker = ScriptedBroker()
    try:
        with (
            run_proxy(("127.0.0.1", broker.port), free_port(), plugin) as proxy,
            socket.create_connection(proxy.server.address, timeout=SCRIPT_HANG_S) as client,
        ):
            # answered at once: the floor, one round trip within this exchange
            began_ns = time.perf_counter_ns()
            client.sendall(api_versions_request(1, "timed"))
            assert broker.exchange(18) == 1
            assert read_frame(client) is not None
            floor_ns = time.perf_counter_ns() - began_ns
            for correlation_id, (api_key, frame) in requests.items():
                client.sendall(frame)
                assert broker.next_request() == (correlation_id, api_key)
                time.sleep(HOLD_S)
                broker.answer(correlation_id, api_key)
                assert read_frame(client) is not None
    finally:
        broker.close()
    charged = {d.correlation_id: d.thread_ns for d in plugin.decisions}
    assert sorted(charged) == [1, 2, 3, 4]
    hold_ns = HOLD_S * 1e9
    # the hold less at most the floor (each its own kind: a first round trip is typical)
    assert charged[2] >= hold_ns - floor_ns, (charged, floor_ns)
    assert charged[3] >= hold_ns - floor_ns, (charged, floor_ns)
    # the proxy's own microseconds: none of the broker's hold
    assert 0 < charged[4] < hold_ns - floor_ns, (charged, floor_ns)
