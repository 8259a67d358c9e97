"""Apache Kafka's own quotas against ``kquota proxy`` on one real Kafka 4.1 broker, side by
side: what the clients saw and what each costs per request.

The workloads and the broker are those of tests/test_kafka_side_by_side.py (shared in
tests/side_by_side_support.py): a greedy librdkafka producer under a
``producer_byte_rate`` and a librdkafka consumer group reading a filled topic under a
``consumer_byte_rate``, both 256 KiB/s, each run 20 s (A) straight to Kafka with the quota
set by ``kafka-configs`` and (B) through ``kquota proxy`` (its own process) with the same
quota set by ``kquota configs``, one run after the other on the same broker.

Groups, per workload (``producer``, ``consumer``), ``kquota`` being run B and ``kafka`` run A:

* ``kafka_side_by_side_<w>_rate``: the clients' bytes per second over the run, in
  multiples of the quota (ratio 1: the same);
* ``..._throttle_p50``, ``_p90``, ``_p99``: percentiles of the throttles (ms) of the
  responses of the run that carried one, from Kafka's request log (A) and the proxy's
  capture (B);
* ``..._cpu_per_request``: CPU time per request (ns) of the proxy process in B against the
  broker JVM in A (``kafka``) and against the same broker serving B's requests without a
  quota (``kafka_unquoted``), from ``/proc/PID/stat`` over the run, less each process's CPU
  time while idle (measured for ``IDLE_S`` before the run), divided by the requests of the
  run's client that its side wrote down. Ratio above 1: the proxy spends less CPU per
  request than the broker does.

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

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from side_by_side_support import (
    Run,
    SideBySideBroker,
    greedy_librdkafka_producer,
    librdkafka_consumer,
    measure,
    percentile,
    prefill,
)

pytestmark = pytest.mark.filterwarnings(
    # kafka-python 3.0.12 loads its schemas with importlib.resources' legacy API
    "ignore:(open_text|read_text) is deprecated:DeprecationWarning",
)

QUOTA = 256 * 1024
RUN_S = 20.0
IDLE_S = 3.0
CAP = int(4 * QUOTA * RUN_S)
WORKLOADS = ("producer", "consumer")
API = {"producer": "produce", "consumer": "fetch"}


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

    topics = ["filled", "producer-kafka", "producer-kquota"]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic(t, 1, 1) for t in topics]).values():
        future.result(60)
    prefill(broker.bootstrap, "filled", int(3 * QUOTA * (RUN_S + 10)))
    folder = tmp_path_factory.mktemp("side-by-side")
    made = {
        "producer": (
            "producer_byte_rate",
            lambda topic: greedy_librdkafka_producer(topic, RUN_S, cap_bytes=CAP),
        ),
        "consumer": ("consumer_byte_rate", lambda _c: librdkafka_consumer("filled", RUN_S)),
    }
    found: dict[str, dict[str, Run]] = {}
    for workload, (config, make) in made.items():
        for side in ("kafka", "kquota"):
            client_id = f"{workload}-{side}"
            run = measure(
                side,
                broker,
                folder / client_id,
                client_id,
                f"{config}={QUOTA}",
                QUOTA,
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
    if what == "rate":
        return run.rate
    return float(percentile(run.logged_throttles(api), int(what[1:])))


UNITS = {"rate": "x quota", "p50": "ms", "p90": "ms", "p99": "ms"}


@pytest.mark.parametrize("role", ["kquota", "kafka"])
@pytest.mark.parametrize("what", list(UNITS))
@pytest.mark.parametrize("workload", WORKLOADS)
def test_what_the_clients_saw(
    benchmark: Any, runs: dict[str, dict[str, Run]], workload: str, what: str, role: str
) -> None:
    name = what if what == "rate" else f"throttle_{what}"
    benchmark.group = f"kafka_side_by_side_{workload}_{name}"
    benchmark.extra_info.update(role=role, unit=UNITS[what])
    run = runs[workload][role]
    benchmark.extra_info["summary"] = run.summary(API[workload])
    _record(benchmark, _value(run, what, API[workload]))


@pytest.mark.parametrize("role", ["kquota", "kafka", "kafka_unquoted"])
@pytest.mark.parametrize("workload", WORKLOADS)
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
