"""Apache Kafka's own quotas against ``kquota proxy`` on one real Kafka 4.1 broker, side by
side: what the clients saw and what each costs per request.

The workloads and the broker are those of tests/proxy/test_kafka_side_by_side.py (shared in
tests/support/side_by_side_support.py): a greedy librdkafka producer under a
``producer_byte_rate`` and a librdkafka consumer group reading a filled topic under a
``consumer_byte_rate``, both 256 KiB/s, each run 20 s (A) straight to Kafka with the quota
set by ``kafka-configs`` and (B) through ``kquota proxy`` (its own process) with the same
quota set by ``kquota configs``, one run after the other on the same broker.

A third workload, ``small``, is there for the CPU per request: a greedy producer of one
1000-byte message a request under a 1 MiB/s ``producer_byte_rate``, ~1,000 requests a
second (the other two make ~10, so that their CPU per request is mostly the processes'
idle CPU, however carefully it is taken out). A fourth, ``metadata``, is a Metadata storm
(one connection, one request after the other, throttles ignored) under
``request_percentage=1`` for 12 s: its rate is in requests per second.

Groups, per workload (``producer``, ``consumer``, ``small``, ``metadata``), ``kquota``
being run B and ``kafka`` run A:

* ``kafka_side_by_side_<w>_rate``: the clients' bytes per second over the run, in
  multiples of the quota (ratio 1: the same);
* ``..._throttle_mean``, ``_p50``, ``_p99``: the mean and percentiles of the throttles (ms)
  of the responses of the run that carried one, from Kafka's request log (A) and the
  proxy's capture (B). A greedy producer's throttles come in two kinds, ~110 ms (one
  request's worth) and ~1,110 ms, about half each: its p50 falls on either from run to
  run, on either side (the mean does not);
* ``small_cpu_per_request``, ``metadata_cpu_per_request``: CPU time per request (ns) of
  the proxy process in B against the
  broker JVM in A (``kafka``) and against the same broker serving B's requests without a
  quota (``kafka_unquoted``), from ``/proc/PID/stat`` over the run, less each process's CPU
  time while idle (measured for ``IDLE_S`` before the run), divided by the requests of the
  run's client that its side wrote down. Ratio above 1: the proxy spends less CPU per
  request than the broker does.

About 4 minutes; ``make bench-quick`` skips it (Kafka's windows do not shrink, so a
quicker run would measure something else).

pytest-benchmark times only functions it calls; the runs here are measured by a module
fixture and given to each benchmark as its one round (``_record``, as benches/test_proxy.py
does).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from quick import QUICK  # benches/quick.py, next to this file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from side_by_side_runs import Run, percentile
from side_by_side_support import (
    SideBySideBroker,
    greedy_librdkafka_producer,
    librdkafka_consumer,
    measure,
    metadata_storm,
    prefill,
)

pytestmark = [
    pytest.mark.filterwarnings(
        # kafka-python 3.0.12 loads its schemas with importlib.resources' legacy API
        "ignore:(open_text|read_text) is deprecated:DeprecationWarning",
    ),
    # Kafka's windows do not shrink: a shorter run would measure something else
    pytest.mark.skipif(QUICK, reason="about 4 minutes of real Kafka: make bench only"),
]

QUOTA = 256 * 1024
SMALL_QUOTA = 1024 * 1024
"""The quota of the ``small`` producer: one 1000-byte message a request, ~1,000 requests a
second on average, enough that CPU per request is not lost in the processes' idle CPU."""
RUN_S = 20.0
IDLE_S = 5.0
STORM_S = 12.0
WORKLOADS = ("producer", "consumer", "small", "metadata")
API = {"producer": "produce", "consumer": "fetch", "small": "produce", "metadata": "metadata"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SideBySideBroker]:
    from kafka_support import KafkaNotInstalled

    node = SideBySideBroker(tmp_path_factory.mktemp("side-by-side-kafka"))
    try:
        node.start()
    except KafkaNotInstalled as missing:
        pytest.skip(str(missing))
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="module")
def runs(
    broker: SideBySideBroker, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, dict[str, Run]]:
    """``{workload: {"kafka": run A, "kquota": run B}}``."""
    from confluent_kafka.admin import AdminClient, NewTopic

    topics = ["filled", "producer-kafka", "producer-kquota", "small-kafka", "small-kquota"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(60)
    prefill(broker.bootstrap, "filled", int(3 * QUOTA * (RUN_S + 10)))
    folder = tmp_path_factory.mktemp("side-by-side")
    made = {
        "producer": (
            f"producer_byte_rate={QUOTA}",
            QUOTA,
            lambda topic: greedy_librdkafka_producer(topic, RUN_S, cap_bytes=4 * QUOTA * 20),
        ),
        "consumer": (
            f"consumer_byte_rate={QUOTA}",
            QUOTA,
            lambda _c: librdkafka_consumer("filled", RUN_S),
        ),
        "small": (
            f"producer_byte_rate={SMALL_QUOTA}",
            SMALL_QUOTA,
            lambda topic: greedy_librdkafka_producer(
                topic, RUN_S, value_bytes=1000, batch_bytes=1024, cap_bytes=4 * SMALL_QUOTA * 20
            ),
        ),
        # its data are answers: with 1.0 as the unit, its rate is requests per second
        "metadata": ("request_percentage=1", 1.0, lambda _c: metadata_storm(STORM_S)),
    }
    found: dict[str, dict[str, Run]] = {}
    for workload, (config, unit, make) in made.items():
        for side in ("kafka", "kquota"):
            client_id = f"{workload}-{side}"
            run = measure(
                side,
                broker,
                folder / client_id,
                client_id,
                config,
                unit,
                make(client_id),
                idle_s=IDLE_S,
            )
            assert run.failures == [], run.failures[:3]
            found.setdefault(workload, {})[side] = run
    return found


def _record(benchmark: Any, value: float) -> None:
    """Give ``benchmark`` the value measured by the fixture as its one round (as
    pytest-benchmark's own ``pedantic`` does with the times it measures)."""
    benchmark._mode = "measured side by side by benches/test_kafka_side_by_side.py"
    benchmark._make_stats(1).update(value)


def _value(run: Run, what: str, api: str) -> float:
    throttles = run.logged_throttles(api)
    if what == "rate":
        return run.rate
    if what == "mean":
        return sum(throttles) / len(throttles) if throttles else 0.0
    return float(percentile(throttles, int(what[1:])))


UNITS = {"rate": "x quota", "mean": "ms", "p50": "ms", "p99": "ms"}


@pytest.mark.parametrize("role", ["kquota", "kafka"])
@pytest.mark.parametrize("what", list(UNITS))
@pytest.mark.parametrize("workload", WORKLOADS)
def test_what_the_clients_saw(
    benchmark: Any, runs: dict[str, dict[str, Run]], workload: str, what: str, role: str
) -> None:
    name = what if what == "rate" else f"throttle_{what}"
    benchmark.group = f"kafka_side_by_side_{workload}_{name}"
    unit = "requests/s" if workload == "metadata" and what == "rate" else UNITS[what]
    benchmark.extra_info.update(role=role, unit=unit)
    run = runs[workload][role]
    benchmark.extra_info["summary"] = run.summary(API[workload])
    _record(benchmark, _value(run, what, API[workload]))


@pytest.mark.parametrize("role", ["kquota", "kafka", "kafka_unquoted"])
@pytest.mark.parametrize("workload", ["small", "metadata"])
def test_cpu_per_request(
    benchmark: Any, runs: dict[str, dict[str, Run]], workload: str, role: str
) -> None:
    benchmark.group = f"kafka_side_by_side_{workload}_cpu_per_request"
    benchmark.extra_info.update(role=role, unit="ns/request")
    a, b = runs[workload]["kafka"], runs[workload]["kquota"]
    run, process = {
        "kquota": (b, "proxy"),
        "kafka": (a, "broker"),
        "kafka_unquoted": (b, "broker"),
    }[role]
    benchmark.extra_info["requests"] = len(run.responses)
    benchmark.extra_info["idle_cpu_per_s"] = run.idle_cpu_per_s
    _record(benchmark, run.cpu_per_request_us()[process] * 1e3)
